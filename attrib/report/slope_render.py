"""Renderers of a Slope: terminal table, JSON and one self-contained HTML page. Print, never
compute."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import orjson

from attrib.report import fmt
from attrib.report.html import CSS, escape
from attrib.multi.slope import Slope
from attrib.report.table import Cut, grid, wrap

HEAD = ("component", "us/1k ctx", "95% CI", "intercept us", "r2", "n")


def _trace_lines(s: Slope, width: int | None = None) -> list[str]:
    """A line per trace; with `width`, its path shortened to keep the part where the paths
    differ (fmt.apart)."""
    rest = [f": {tr.steps} {s.phase} steps, context {tr.context_min}..{tr.context_max}"
            f" ({tr.context_from or 'unknown'})" for tr in s.traces]
    room = None if width is None else max(width - 2, 24)  # a path on its first line, whole
    paths = fmt.apart([str(tr.path) for tr in s.traces], room)
    return [p + r for p, r in zip(paths, rest)]


def body_rows(s: Slope) -> list[tuple[str, ...]]:
    return [(r.component, f"{r.fit.slope_us_per_1k:.3f}",
             f"[{r.fit.ci_low:.3f}, {r.fit.ci_high:.3f}]", f"{r.fit.intercept_us:.1f}",
             f"{r.fit.r2:.3f}", str(r.fit.n)) for r in s.rows]


def summary_lines(s: Slope) -> list[str]:
    """The weight-bound fit and the crossover, one line each."""
    out = []
    w, x = s.weight_fit, s.crossover
    if s.weight_bound:
        slope_ = "-" if w is None else f"{w.slope_us_per_1k}"
        icpt = "-" if w is None else f"{w.intercept_us}"
        out.append(f"weight-bound ({', '.join(s.weight_bound)}): {slope_} us/1k ctx, "
                   f"intercept {icpt} us")
    ctx = x.context if x.context is not None else "-"
    out.append(f"attention overtakes them at context: {ctx} ({x.why})")
    return out


# on a terminal too narrow for the table, its columns go in this order (then component names
# shorten in the middle)
DROP = ("intercept us", "n", "r2", "95% CI")


def render_table(s: Slope, width: int | None = None) -> str:
    """The terminal table; with `width`, every line fits it (paths shorten where they agree, prose
    wraps, columns drop in DROP's order with a footer naming them)."""
    cut = Cut()
    lines = [x for line in _trace_lines(s, width) for x in wrap(line, width, more="  ")]
    lines += [""] + wrap(f"== {s.phase} time per step against context: t = a + b*L", width)
    lines += grid(HEAD, body_rows(s), width, DROP, "component", cut=cut)
    lines += [x for line in summary_lines(s) + [f"note: {n}" for n in s.notes]
              for x in wrap(line, width)]
    lines += cut.footer(width, ", or `--format json`")
    return "\n".join(lines) + "\n"


def render_json(s: Slope) -> str:
    return orjson.dumps(s.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n"


def render_html(s: Slope, plots: Mapping[str, str] | None = None) -> str:
    """The slope as one page: the traces, the plot (plots["slope"]), the fits, the notes."""
    svg = (plots or {}).get("slope")
    th = "".join(f"<th>{escape(h)}</th>" for h in HEAD)
    trs = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" if i == 0 else
                                   f'<td class="n">{escape(c)}</td>' for i, c in enumerate(r))
                  + "</tr>" for r in body_rows(s))
    body = (f"<h1>attrib slope: {escape(s.phase)} time per step against context</h1>"
            + "<div class=stamp>" + "".join(f"<div>{escape(x)}</div>" for x in _trace_lines(s))
            + "</div>" + (f'<div class="plot">{svg}</div>' if svg else "")
            + "<h2>Fits: t = a + b*L</h2>"
            + f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"
            + "".join(f"<p><b>{escape(x)}</b></p>" for x in summary_lines(s))
            + "".join(f"<p class=muted>note: {escape(n)}</p>" for n in s.notes))
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>attrib slope</title>"
            f"<style>{CSS}</style></head><body><main>{body}</main></body></html>\n")


def _no_plots(render: Callable[[Slope], str]) -> Callable[[Slope, Mapping[str, str]], str]:
    return lambda s, plots: render(s)


# --format name -> render(slope, plots); only html draws the plot
FORMATS: dict[str, Callable[[Slope, Mapping[str, str]], str]] = {
    "table": _no_plots(render_table), "json": _no_plots(render_json), "html": render_html,
}
