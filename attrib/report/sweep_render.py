"""The sweep table as a terminal table, markdown or HTML, with plots of each figure against each
key that varies (matplotlib, optional: attrib.report.plots), the routing rule and the rows that
are not comparable (attrib.multi.host_check), each with why."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from attrib.multi import host_check
from attrib.report import fmt
from attrib.report import plots as plots_mod
from attrib.report.html import CSS, escape
from attrib.report.markdown import esc, table as md_table
from attrib.report.printable import printable
from attrib.multi.sweep import FIGURES, INT_KEYS, KEYS, reference, routing, varying
from attrib.report.table import Cut, grid, wrap

UNITS = {"achieved_tok_s": "tok/s achieved", "ceiling_tok_s": "tok/s ceiling",
         "gb_per_token": "GB/token", "step_ms": "step ms"}


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def _columns(df: pl.DataFrame) -> list[str]:
    """trace, phase, the keys that vary, the figures, the host check, the top cause."""
    return ["trace", "phase", *varying(df), *FIGURES, "gap_us", "comparable", "top_cause"]


def host_notes(df: pl.DataFrame, names: Sequence[str] | None = None) -> list[str]:
    """What `comparable` means here (per phase, the common host) and, per row that is not, why;
    names: the table's trace cells, row by row (default the traces)."""
    names = list(names) if names is not None else df["trace"].to_list()
    out = [f"comparable (rows marked{MARK} are not): a host-bound row (host-side rows > "
           f"{host_check.HOST_SHARE:.0%} of the "
           f"step) whose median launch gap (gap_us) lies within {host_check.BOUND:g}x of most "
           f"rows' (phases of {host_check.MIN_STEPS}+ steps), on a host not declared loaded "
           "nor descheduled"]
    for phase in df["phase"].unique(maintain_order=True).to_list():
        ref = reference(df, phase)
        if ref is not None:
            out.append(f"{phase}: most rows' launch gaps: {ref.low:.0f}-{ref.high:.0f} us "
                       f"({ref.rows} of {ref.of} rows)")
    for name, r in zip(names, df.iter_rows(named=True)):
        if r["not_comparable"]:
            out.append(f"! not comparable: {name} {r['phase']}: {r['not_comparable']}")
    return out


def _grid(df: pl.DataFrame, cols: Sequence[str]) -> list[tuple[str, ...]]:
    return [tuple(_cell(r[c]) for c in cols) for r in df.iter_rows(named=True)]


def _constant(df: pl.DataFrame) -> str:
    """The keys that do not vary, as `key=value` (what every row shares)."""
    same = [k for k in KEYS if k not in varying(df) and df.height and df[k][0] is not None]
    return ", ".join(f"{k}={df[k][0]}" for k in same) or "none"


def _routing_rows(r: pl.DataFrame) -> tuple[list[str], list[tuple[str, ...]]]:
    head = [c for c in r.columns if c != "trace"]
    return head, _grid(r, head)


# on a terminal too narrow for the table, its columns go in this order (then the trace names
# shorten, keeping the part where they differ); the keys that vary stay: they tell the rows apart
DROP = ("top_cause", "gap_us", "ceiling_tok_s", "gb_per_token", "micro_batch", "context",
        "step_ms")
ROUTING_DROP = ("configurations", "runner_up_tok_s", "context", "not_comparable")
MARK = " !"   # after the phase of a row that is not comparable (terminal table)
NO_WINNER = ("routing: no winner where a shape's rows are not comparable (their host, not "
             "their configuration, set the step) unless two or more comparable ones are left")


def render_table(df: pl.DataFrame, width: int | None = None) -> str:
    """A terminal table and the routing rule; with `width`, every line fits it (prose wraps,
    columns drop in DROP's order with a footer naming them, trace names shorten)."""
    # the terminal marks a row that is not comparable in its phase cell ("decode !"): a column
    # would cost the trace names their width; the notes under the table say why
    cols = [c for c in _columns(df) if c != "comparable"]
    cut = Cut()
    traces = df["trace"].unique(maintain_order=True).to_list()
    lines = wrap(f"attrib sweep: {len(traces)} traces, {df.height} rows; "
                 f"every row: {_constant(df)}", width)
    marks = [MARK if c not in (None, "yes") else "" for c in df["comparable"]]
    at = cols.index("phase")
    rows = [(*r[:at], r[at] + m, *r[at + 1:]) for r, m in zip(_grid(df, cols), marks)]
    pre, suf = fmt._common(traces) if len(traces) > 1 and width is not None else (0, 0)
    if pre + suf and width is not None and _need(cols, rows) > width:
        # the trace names' shared start and end said once; each row keeps what differs
        lines += wrap(f"trace: {traces[0][:pre]}…{traces[0][len(traces[0]) - suf:]}", width)
        rows = [("…" * bool(pre) + r[0][pre:len(r[0]) - suf] + "…" * bool(suf), *r[1:])
                for r in rows]
    table = grid(tuple(cols), rows, width, DROP, "trace", "", cut=cut, table="table",
                 left=("phase", *(k for k in KEYS if k not in INT_KEYS)), apart=True)
    lines += table
    names = [r[0] for r in rows]
    lines += [x for n in host_notes(df, names) for x in wrap(n, width, "", "    ")]
    rule = routing(df)
    head, rrows = _routing_rows(rule)
    lines += ["", *wrap("routing rule (highest achieved tok/s per workload shape and phase, "
                        "comparable rows only):", width)]
    lines += grid(tuple(head), rrows, width, ROUTING_DROP, "winner", "", cut=cut,
                  table="routing rule", left=("phase",))
    if rule["not_comparable"].sum():
        lines += wrap(NO_WINNER, width)
    lines += cut.footer(width, ", or `--format md`")
    return "".join(printable(line) + "\n" for line in lines)


def _need(cols: Sequence[str], rows: Sequence[tuple[str, ...]]) -> int:
    return sum(max(len(r[i]) for r in [tuple(cols), *rows]) for i in range(len(cols))) \
        + 2 * (len(cols) - 1)


def plot_keys(df: pl.DataFrame) -> list[str]:
    """The varying keys a plot is drawn against: a key that only follows an earlier one (one value
    of it per value of the other and back: micro_batch with batch, context with prompt) is left
    out, its plot would repeat the other's."""
    out: list[str] = []
    for k in varying(df):
        if not any(df.select(k, o).unique().height == df[k].n_unique() == df[o].n_unique()
                   for o in out):
            out.append(k)
    return out


def plot_names(df: pl.DataFrame) -> list[str]:
    """A plot per key a plot is drawn against (its four figures as panels)."""
    return [f"vs-{k}" for k in plot_keys(df)]


def plots(df: pl.DataFrame) -> dict[str, str]:
    """{"vs-key": svg}: per varying key (plot_keys) one plot, the four figures as its panels; {}
    without matplotlib."""
    if not plots_mod.available():
        return {}
    out = {}
    for key in plot_keys(df):
        svg = _plot(df, key, [k for k in plot_keys(df) if k != key])
        if svg is not None:
            out[f"vs-{key}"] = svg
    return out


def _plot(df: pl.DataFrame, key: str, others: list[str]) -> str | None:
    """The four figures against one key, a panel each: a line per phase (decode solid, the others
    dashed) and combination of the other plotted keys (a colour each), one legend below."""
    data = df.filter(pl.col(key).is_not_null())
    if not data.height:
        return None
    numeric = data.schema[key].is_numeric()
    ticks = sorted(data[key].unique().to_list())
    combos = data.select(others).unique(maintain_order=True).rows() if others else [()]
    colors = {c: plots_mod.PALETTE[i % len(plots_mod.PALETTE)] for i, c in enumerate(combos)}
    series = list(data.group_by(["phase", *others], maintain_order=True))
    rows = -(-len(series) // 2)
    legend_h = 0.3 + 0.16 * rows
    f = plots_mod._figure(7.2, 4.6 + legend_h, left=0.1, right=0.98,
                          bottom=(legend_h + 0.45) / (4.6 + legend_h))
    f.subplots_adjust(hspace=0.45, wspace=0.28)
    for n, fig in enumerate(FIGURES):
        ax = f.add_subplot(2, 2, n + 1)
        for (phase, *values), group in series:
            group = group.filter(pl.col(fig).is_not_null()).sort(key)
            if not group.height:
                continue
            xs = group[key].to_list()
            xs = xs if numeric else [ticks.index(x) for x in xs]
            name = ", ".join([str(phase), *(f"{k}={v}" for k, v in zip(others, values))])
            ax.plot(xs, group[fig].to_list(), marker="o", ms=3, lw=1.1,
                    color=colors[tuple(values)], ls="-" if phase == "decode" else "--",
                    label=name if n == 0 else None)
        if not numeric:
            ax.set_xticks(range(len(ticks)), [str(t) for t in ticks], fontsize=plots_mod.FONT)
            ax.margins(x=0.3)  # a category's label centred on its tick stays inside the panel
        elif len(ticks) <= 8:
            ax.set_xticks(ticks, [str(t) for t in ticks], fontsize=plots_mod.FONT)
        ax.tick_params(labelsize=plots_mod.FONT)
        ax.set_xlabel(key, fontsize=plots_mod.FONT)
        ax.set_title(UNITS[fig], fontsize=8)
        if fig.endswith("tok_s"):
            from matplotlib.ticker import FuncFormatter, NullFormatter

            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, lw=0.3, alpha=0.5)
    f.legend(loc="lower center", ncol=2, fontsize=plots_mod.FONT, frameon=False,
             bbox_to_anchor=(0.5, 0.0))
    return plots_mod._svg(f)


def render_markdown(df: pl.DataFrame, images: Mapping[str, str] | None = None,
                    note: str | None = None) -> str:
    """The sweep report; images: {plot name: SVG file name beside the report}."""
    cols = _columns(df)
    out = [f"# attrib sweep: {df['trace'].n_unique()} traces", "",
           f"Every row: {esc(_constant(df))}.", "", "## Routing rule", "",
           "The configuration with the highest achieved tok/s for each workload shape "
           "and phase, from comparable rows only.", ""]
    rule = routing(df)
    head, rows = _routing_rows(rule)
    out += md_table(tuple(head), rows)
    if rule["not_comparable"].sum():
        out += ["", esc(NO_WINNER) + "."]
    out += ["", "## Table", ""] + md_table(tuple(cols), _grid(df, cols))
    out += ["", "## Comparable rows", ""] + [f"- {esc(n)}" for n in host_notes(df)]
    if images:
        out += ["", "## Plots", ""]
        out += [f"![{esc(name)}]({esc(path)})" for name, path in images.items()]
    if note:
        out += ["", f"_{esc(note)}_"]
    return "\n".join(out) + "\n"


def _html_table(head: Sequence[str], rows: Sequence[tuple[str, ...]],
                titles: Sequence[str] | None = None) -> str:
    """A table; `titles`: per row, the whole text of its first cell (shown on hover)."""
    # a column name may break after an underscore (achieved_<wbr>tok_s)
    th = "".join(f"<th>{escape(h).replace('_', '_<wbr>')}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join((f'<td class=t title="{escape(titles[i])}">' if titles and j == 0
                          else "<td>")
                         + f"{escape(c)}</td>" for j, c in enumerate(r)) + "</tr>"
        for i, r in enumerate(rows))
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


# the sweep page: trace cells cut to what differs stay on one line; the plots as wide as the page
SWEEP_CSS = ("td.t{white-space:nowrap}figure{margin:12px 0}"
             "figure svg{width:100%;max-width:960px;height:auto}")


def _traces_apart(df: pl.DataFrame, rows: list[tuple[str, ...]]
                  ) -> tuple[str | None, list[tuple[str, ...]]]:
    """The trace names' shared start and end said once ("dir/sweep_…" + ".pt.trace.json.gz") and
    each row's trace cut to what differs; (None, rows) for one trace."""
    traces = df["trace"].unique(maintain_order=True).to_list()
    if len(traces) < 2:
        return None, rows
    pre, suf = fmt._common(traces)
    if not pre + suf:
        return None, rows
    t = traces[0]
    cut = [("…" * bool(pre) + r[0][pre:len(r[0]) - suf] + "…" * bool(suf), *r[1:]) for r in rows]
    return f"{t[:pre]}…{t[len(t) - suf:]}", cut


def render_html(df: pl.DataFrame, svgs: Mapping[str, str] | None = None,
                note: str | None = None) -> str:
    """The sweep report as one self-contained HTML file (plots inline)."""
    cols = _columns(df)
    rule = routing(df)
    head, rows = _routing_rows(rule)
    common, table = _traces_apart(df, _grid(df, cols))
    notes = host_notes(df, [r[0] for r in table])
    parts = [f"<h1>attrib sweep: {df['trace'].n_unique()} traces</h1>",
             f"<p>Every row: {escape(_constant(df))}.</p>", "<h2>Routing rule</h2>",
             "<p>The configuration with the highest achieved tok/s for each workload shape "
             "and phase, from comparable rows only.</p>", _html_table(head, rows),
             f"<p>{escape(NO_WINNER)}.</p>" if rule["not_comparable"].sum() else "",
             "<h2>Table</h2>",
             f"<p>trace: <code>{escape(common)}</code> (each row: the part that differs; "
             "the whole name on hover)</p>" if common else "",
             _html_table(cols, table, df["trace"].to_list()),
             "<ul class=host>" + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>"]
    if svgs:
        parts.append("<h2>Plots</h2>")
        parts += [f"<figure>{svg}<figcaption>{escape(n)}</figcaption></figure>"
                  for n, svg in svgs.items()]
    if note:
        parts.append(f"<p><em>{escape(note)}</em></p>")
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><title>attrib sweep</title>"
            f"<style>{CSS}{SWEEP_CSS}</style></head><body><main>{''.join(parts)}</main>"
            "</body></html>\n")
