"""The sweep table as a terminal table, markdown or HTML, with plots of each figure against each
key that varies (matplotlib, optional: attrib.report.plots) and the routing rule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from attrib.report import plots as plots_mod
from attrib.report.html import CSS, escape
from attrib.report.markdown import esc, table as md_table
from attrib.report.printable import printable
from attrib.report.sweep import FIGURES, KEYS, routing, varying

UNITS = {"achieved_tok_s": "tok/s achieved", "ceiling_tok_s": "tok/s ceiling",
         "gb_per_token": "GB/token", "step_ms": "step ms"}


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def _columns(df: pl.DataFrame) -> list[str]:
    """trace, phase, the keys that vary, the figures, the top cause."""
    return ["trace", "phase", *varying(df), *FIGURES, "top_cause"]


def _grid(df: pl.DataFrame, cols: Sequence[str]) -> list[tuple[str, ...]]:
    return [tuple(_cell(r[c]) for c in cols) for r in df.iter_rows(named=True)]


def _constant(df: pl.DataFrame) -> str:
    """The keys that do not vary, as `key=value` (what every row shares)."""
    same = [k for k in KEYS if k not in varying(df) and df.height and df[k][0] is not None]
    return ", ".join(f"{k}={df[k][0]}" for k in same) or "none"


def _routing_rows(r: pl.DataFrame) -> tuple[list[str], list[tuple[str, ...]]]:
    head = [c for c in r.columns if c != "trace"]
    return head, _grid(r, head)


def render_table(df: pl.DataFrame) -> str:
    """A fixed-width terminal table and the routing rule."""
    cols = _columns(df)
    grid = [tuple(cols), *_grid(df, cols)]
    lines = [f"attrib sweep: {df['trace'].n_unique()} traces, {df.height} rows; "
             f"every row: {_constant(df)}"]
    lines += _aligned(grid)
    head, rows = _routing_rows(routing(df))
    lines += ["", "routing rule (highest achieved tok/s per workload shape and phase):"]
    lines += _aligned([tuple(head), *rows])
    return "".join(printable(line) + "\n" for line in lines)


def _aligned(grid: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in grid) for i in range(len(grid[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in grid]


def plot_names(df: pl.DataFrame) -> list[tuple[str, str]]:
    """(figure, key) for each figure against each key that varies."""
    return [(f, k) for k in varying(df) for f in FIGURES]


def plots(df: pl.DataFrame) -> dict[str, str]:
    """{"figure-vs-key": svg} for each figure against each varying key; {} without matplotlib."""
    if not plots_mod.available():
        return {}
    out = {}
    for fig, key in plot_names(df):
        svg = _plot(df, fig, key)
        if svg is not None:
            out[f"{fig}-vs-{key}"] = svg
    return out


def _plot(df: pl.DataFrame, fig: str, key: str) -> str | None:
    """One figure against one key: a line per phase and combination of the other varying keys."""
    data = df.filter(pl.col(fig).is_not_null() & pl.col(key).is_not_null())
    if not data.height:
        return None
    others = [k for k in varying(df) if k != key]
    numeric = data.schema[key].is_numeric()
    ticks = sorted(data[key].unique().to_list())
    f = plots_mod._figure(6.4, 3.4, right=0.68)
    ax = f.add_subplot()
    series = data.group_by(["phase", *others], maintain_order=True)
    for i, (label, group) in enumerate(series):
        group = group.sort(key)
        xs = group[key].to_list()
        xs = xs if numeric else [ticks.index(x) for x in xs]
        name = ", ".join(f"{k}={v}" for k, v in zip(["phase", *others], label))
        color = plots_mod.PALETTE[i % len(plots_mod.PALETTE)]
        ax.plot(xs, group[fig].to_list(), marker="o", color=color, label=name)
    if not numeric:
        ax.set_xticks(range(len(ticks)), [str(t) for t in ticks])
    ax.set_xlabel(key)
    ax.set_ylabel(UNITS[fig])
    if fig.endswith("tok_s"):
        ax.set_yscale("log")
        plots_mod._plain_log(ax)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return plots_mod._svg(f)


def render_markdown(df: pl.DataFrame, images: Mapping[str, str] | None = None,
                    note: str | None = None) -> str:
    """The sweep report; images: {plot name: SVG file name beside the report}."""
    cols = _columns(df)
    out = [f"# attrib sweep: {df['trace'].n_unique()} traces", "",
           f"Every row: {esc(_constant(df))}.", "", "## Routing rule", "",
           "The configuration with the highest achieved tok/s for each workload shape "
           "and phase.", ""]
    head, rows = _routing_rows(routing(df))
    out += md_table(tuple(head), rows)
    out += ["", "## Table", ""] + md_table(tuple(cols), _grid(df, cols))
    if images:
        out += ["", "## Plots", ""]
        out += [f"![{esc(name)}]({esc(path)})" for name, path in images.items()]
    if note:
        out += ["", f"_{esc(note)}_"]
    return "\n".join(out) + "\n"


def _html_table(head: Sequence[str], rows: Sequence[tuple[str, ...]]) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def render_html(df: pl.DataFrame, svgs: Mapping[str, str] | None = None,
                note: str | None = None) -> str:
    """The sweep report as one self-contained HTML file (plots inline)."""
    cols = _columns(df)
    head, rows = _routing_rows(routing(df))
    parts = [f"<h1>attrib sweep: {df['trace'].n_unique()} traces</h1>",
             f"<p>Every row: {escape(_constant(df))}.</p>", "<h2>Routing rule</h2>",
             "<p>The configuration with the highest achieved tok/s for each workload shape "
             "and phase.</p>", _html_table(head, rows), "<h2>Table</h2>",
             _html_table(cols, _grid(df, cols))]
    if svgs:
        parts.append("<h2>Plots</h2>")
        parts += [f"<figure>{svg}<figcaption>{escape(n)}</figcaption></figure>"
                  for n, svg in svgs.items()]
    if note:
        parts.append(f"<p><em>{escape(note)}</em></p>")
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><title>attrib sweep</title>"
            f"<style>{CSS}</style></head><body><main>{''.join(parts)}</main></body></html>\n")
