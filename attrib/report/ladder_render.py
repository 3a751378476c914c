"""Renderers of a Ladder: terminal table, markdown, HTML (with the cumulative speedup on a log
scale, drawn as inline SVG), JSON. Print, never compute."""

from __future__ import annotations

import math
from collections.abc import Callable

import orjson

from attrib.report.html import CSS, escape
from attrib.multi.ladder import Ladder, Rung
from attrib.report.markdown import esc, table as md_table
from attrib.report.table import Cut, grid, wrap

HEAD = ("#", "step", "vs", "decode x", "95% CI", "prefill x", "promoted", "why", "moved most")
DROP = ("vs", "prefill x", "95% CI")
CHART_W, CHART_H, PAD = 640, 240, 48  # px


def _x(r: Rung | None) -> str:
    return "-" if r is None or r.multiplier is None else f"x{r.multiplier:.3f}"


def _ci(r: Rung | None) -> str:
    if r is None or r.ci_low is None or r.ci_high is None:
        return "-"
    return f"[{r.ci_low:.3f}, {r.ci_high:.3f}]"


def rows(lad: Ladder) -> list[tuple[str, ...]]:
    return [(str(i), s.name, s.against or "-", _x(s.rung("decode")), _ci(s.rung("decode")),
             _x(s.rung("prefill")), "yes" if s.promoted else "no",
             s.why if s.promoted else f"{s.why}; stay at {s.against}",
             ", ".join(s.moved) or "-")
            for i, s in enumerate(lad.steps)]


def head_lines(lad: Ladder) -> list[str]:
    """The campaign's result first: the cumulative multiplier and where it stands."""
    last = next((s.name for s in reversed(lad.steps) if s.promoted), lad.steps[0].name)
    n = sum(s.promoted for s in lad.steps[1:])
    return [f"ladder: x{lad.cumulative:.3f} decode tok/s from {lad.steps[0].name} to {last} "
            f"({n} of {len(lad.steps) - 1} steps promoted)",
            "a step is promoted when decode per token is faster beyond noise (compare's "
            f"verdict, |change| >= {lad.min_effect_pct:g}%), its outputs are not known to differ "
            "and the stamps say a matched baseline; x: the last promoted step's ms per token "
            "over this one's"]


def output_lines(lad: Ladder) -> list[str]:
    """Each step's outputs check against the step it was compared with (one line when all say
    the same)."""
    said = [(s.name, s.outputs) for s in lad.steps if s.outputs]
    if said and len({o for _, o in said}) == 1:
        return [f"every step: {said[0][1]}"]
    return [f"{name}: {o}" for name, o in said]


def render_table(lad: Ladder, width: int | None = None) -> str:
    cut = Cut()
    lines = [x for line in head_lines(lad) for x in wrap(line, width)] + [""]
    lines += grid(HEAD, rows(lad), width, DROP, "moved most", cut=cut, table="ladder",
                  sentence=True)
    lines += [x for line in output_lines(lad) for x in wrap(line, width)]
    return "\n".join(lines + cut.footer(width, ", or `--format md`")) + "\n"


def render_markdown(lad: Ladder) -> str:
    out = ["# attrib ladder", ""] + [f"**{esc(x)}**  " for x in head_lines(lad)[:1]]
    out += ["", esc(head_lines(lad)[1]), ""] + md_table(HEAD, rows(lad))
    out += [""] + [f"- {esc(x)}" for x in output_lines(lad)]
    return "\n".join(out) + "\n"


def _points(lad: Ladder) -> list[tuple[str, float, bool]]:
    """(step, the cumulative multiplier after it, promoted) per step."""
    out, acc = [], 1.0
    for s in lad.steps:
        if s.promoted and s.multiplier:
            acc *= s.multiplier
        out.append((s.name, acc, s.promoted))
    return out


def chart(lad: Ladder) -> str:
    """The cumulative decode multiplier per step on a log scale, as inline SVG."""
    pts = _points(lad)
    logs = [math.log10(v) for _, v, _ in pts]
    lo, hi = min(0.0, *logs), max(0.0, *logs)
    span = (hi - lo) or 1.0
    n = max(len(pts) - 1, 1)

    def xy(i: int, lv: float) -> tuple[float, float]:
        return (PAD + i * (CHART_W - 2 * PAD) / n,
                CHART_H - PAD - (lv - lo) / span * (CHART_H - 2 * PAD))

    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(i, lv) for i, lv in enumerate(logs)))
    marks = []
    for i, ((name, v, up), lv) in enumerate(zip(pts, logs)):
        x, y = xy(i, lv)
        fill = "#2e7d32" if up else "#9e9e9e"
        marks.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{fill}"/>'
                     f'<text x="{x:.1f}" y="{y - 8:.1f}" font-size="10" text-anchor="middle">'
                     f'x{v:.2f}</text><text x="{x:.1f}" y="{CHART_H - PAD + 16}" font-size="10" '
                     f'text-anchor="middle">{escape(name[:18])}</text>')
    y1 = xy(0, 0.0)[1]
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{CHART_W}" height="{CHART_H}" '
            f'role="img" aria-label="cumulative decode speedup per step, log scale">'
            f'<line x1="{PAD}" x2="{CHART_W - PAD}" y1="{y1:.1f}" y2="{y1:.1f}" stroke="#bbb"/>'
            f'<polyline points="{path}" fill="none" stroke="#4e79a7" stroke-width="2"/>'
            + "".join(marks)
            + f'<text x="{PAD}" y="16" font-size="11">cumulative decode tok/s multiplier '
            f'(log scale; green: promoted)</text></svg>')


def render_html(lad: Ladder) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in HEAD)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>"
                   for r in rows(lad))
    head = "".join(f"<p><b>{escape(x)}</b></p>" if i == 0 else f"<p>{escape(x)}</p>"
                   for i, x in enumerate(head_lines(lad)))
    outs = "".join(f"<p class=muted>{escape(x)}</p>" for x in output_lines(lad))
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>attrib ladder</title>"
            f"<style>{CSS}</style></head><body><main><h1>attrib ladder</h1>{head}"
            f'<div class="plot">{chart(lad)}</div>'
            f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>{outs}"
            "</main></body></html>\n")


def render_json(lad: Ladder) -> str:
    return orjson.dumps(lad.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n"


FORMATS: dict[str, Callable[[Ladder], str]] = {
    "table": render_table, "json": render_json, "md": render_markdown, "html": render_html}

