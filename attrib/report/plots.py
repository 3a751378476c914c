"""The report's plots as SVG text (matplotlib, the `plot` extra): roofline, per-step stack,
timeline, and compare's per-component deltas and slope's time against context.

Each function takes the typed Analysis, one of its phases, or a Comparison/Slope (never the trace)
and returns SVG markup, or None when there is nothing to plot. `available()` says whether
matplotlib is installed; without it the reports say the plots are omitted. Only component, phase
and cause names (a fixed vocabulary) and numbers are drawn as text; kernel names never reach a plot
(top kernels are numbered k1.. in the order of the report's top-kernel table). Point labels are
placed with a collision check (`labels.place`): no two texts of a plot overlap.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from typing import Any

from attrib.analysis.model import Analysis, Phase
from attrib.analysis.series import TIMELINE_PIXELS
from attrib.cost.dtypes import PEAK_KEY
from attrib.multi.compare import CHANGED, PhaseComparison
from attrib.report.labels import LEADER, Box, place
from attrib.multi.slope import Slope
from attrib.steps.phases import TOKEN_PHASES

MISSING = "plots omitted: matplotlib is not installed (pip install 'attrib[plot]')"
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac", "#86bcb6", "#d37295")
IDLE = "#d9d9d9"
# the ledger's causes of a step's non-kernel time: hatched, in hues apart from the
# components' palette
CAUSE_COLORS = {"copy": "#17becf", "outside": "#393b79", "sync": "#d62728", "host": "#8c6d31",
                "launch": "#bcbd22", "profiler": "#e7cb94"}
CAUSE_HATCH = "////"
SLOWER, FASTER, SAME_C = "#c62828", "#2e7d32", "#9e9e9e"
FONT = 7  # points: labels and legends
RC = {"svg.fonttype": "none", "svg.hashsalt": "attrib", "font.size": 9, "axes.spines.top": False,
      "axes.spines.right": False, "svg.image_inline": True}
MAX_TICKS = 16  # step numbers labelled on a per-step bar plot


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figure(w: float, h: float, right: float = 0.97, left: float = 0.1,
            bottom: float | None = None) -> Any:
    """A figure with fixed margins (constrained layout costs seconds on log axes)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h))
    fig.subplots_adjust(left=left, right=right, top=1 - 0.35 / h,
                        bottom=bottom if bottom is not None else 0.5 / h)
    return fig


def _plain_log(ax: Any) -> None:
    """Log axes with plain major tick labels (1, 10, 0.1), no minor labels (they collide)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    fmt = FuncFormatter(lambda v, _: f"{v:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(fmt)
        axis.set_minor_formatter(NullFormatter())


def _svg(fig: Any) -> str:
    from matplotlib import rc_context
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    buf = io.StringIO()
    with rc_context(RC):
        FigureCanvasSVG(fig).print_svg(buf, metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    # drop the XML prolog and DOCTYPE
    return re.sub(r"^.*?(<svg\b)", r"\1", text, count=1, flags=re.S)


def _colors(names: list[str]) -> dict[str, str]:
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}


def _component_colors(ph: Phase) -> dict[str, str]:
    """One colour per component of a phase, the same in its roofline and its step stack: in the
    order of its component table (largest time first)."""
    names = [c.component for c in ph.component_rows]
    return _colors(names + sorted(set(ph.per_step.components) - set(names)))


def _peak_tflops(an: Analysis, ph: Phase) -> tuple[float | None, str | None]:
    dtypes = [c.dtype for c in ph.component_rows if c.dtype]
    for d in dtypes + ["bf16", "fp16"]:
        peak = an.device.matrix_peak(d)
        if peak:
            return peak, PEAK_KEY.get(d, d)
    return None, None


def _to_points(fig: Any, ax: Any, x: float, y: float) -> tuple[float, float]:
    """Data (x, y) in points from the figure's lower left (the unit label boxes are in)."""
    px, py = ax.transData.transform((x, y))
    k = 72.0 / fig.dpi
    return float(px) * k, float(py) * k


def _axes_box(fig: Any, ax: Any) -> Box:
    b = ax.get_position()
    w, h = fig.get_size_inches() * 72
    return Box(b.x0 * w, b.y0 * h, b.x1 * w, b.y1 * h)


def _label_points(fig: Any, ax: Any, pts: Sequence[tuple[float, float, str]]) -> int:
    """Write each point's label where it collides with no other label or marker; the count
    placed."""
    anchors = [_to_points(fig, ax, x, y) for x, y, _ in pts]
    spots = place(anchors, [t for _, _, t in pts], FONT, _axes_box(fig, ax))
    for (x, y, text), spot in zip(pts, spots):
        if spot is None:
            continue
        dx, dy, ha, va = spot
        far = max(abs(dx), abs(dy)) >= LEADER
        ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=FONT,
                    ha=ha, va=va, color="#222",
                    arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "#777"} if far else None)
    return sum(s is not None for s in spots)


def _roofs(ax: Any, an: Analysis, peak: float | None, dt: str | None, lo: float, hi: float) -> None:
    dev = an.device
    grid = [lo * (hi / lo) ** (i / 64) for i in range(65)]
    for bw, label, style in ((dev.peak_bw_gbs, "peak", "-"),
                             (dev.sustained_bw_gbs, "sustained", "--")):
        if bw:
            ys = [bw * x / 1e3 for x in grid]
            ys = [min(y, peak) for y in ys] if peak else ys
            ax.plot(grid, ys, style, color="#444", lw=1, label=f"{label} {bw:g} GB/s")
    if peak:
        ax.axhline(peak, color="#999", lw=0.8, ls=":", label=f"{dt} matrix peak {peak:g} TFLOP/s")
    measured, basis = dev.matrix_roof(dt) if dt else (None, "peak")
    if measured and basis == "measured":
        ax.axhline(measured, color="#999", lw=0.8, ls="-.",
                   label=f"{dt} measured {measured:g} TFLOP/s")


def roofline(an: Analysis, ph: Phase) -> str | None:
    """Arithmetic intensity (FLOP/byte) vs achieved TFLOP/s: one numbered point per component (the
    legend names them) and one k-numbered cross per top kernel, the peak and sustained bandwidth
    roofs and the matrix peak of the phase's dtype."""
    comps = [(r.intensity or 0.0, r.achieved_tflops or 0.0, r.component) for r in ph.component_rows
             if (r.intensity or 0) > 0 and (r.achieved_tflops or 0) > 0]
    kerns = [(r.intensity or 0.0, r.achieved_tflops or 0.0, f"k{i + 1}", r.component)
             for i, r in enumerate(ph.kernel_rows)
             if (r.intensity or 0) > 0 and (r.achieved_tflops or 0) > 0]
    if not comps and not kerns:
        return None
    xs = [p[0] for p in comps] + [p[0] for p in kerns]
    ys = [p[1] for p in comps] + [p[1] for p in kerns]
    lo, hi = min(xs) / 3, max(xs) * 3
    peak, dt = _peak_tflops(an, ph)
    entries = len(comps) + 4
    h = max(4.0, 0.75 + 0.145 * entries)
    fig = _figure(7.2, h, right=0.64, left=0.09)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log(ax)
    _roofs(ax, an, peak, dt, lo, hi)
    top = max([*ys, peak or 0.0]) * 3
    ax.set_xlim(lo, hi)
    ax.set_ylim(min(ys) / 4, top)
    colors = _component_colors(ph)
    for i, (x, y, c) in enumerate(comps):
        ax.scatter([x], [y], s=36, color=colors.get(c, "#333"), edgecolor="black", lw=0.5, zorder=3,
                   label=f"{i + 1}  {c}")
    if kerns:
        ax.scatter([p[0] for p in kerns], [p[1] for p in kerns], marker="x", s=28,
                   c=[colors.get(str(p[3]), "#333") for p in kerns], zorder=3,
                   label="k1.. top kernels, as in the table")
    labels = [(x, y, str(i + 1)) for i, (x, y, _) in enumerate(comps)]
    _label_points(fig, ax, labels + [(x, y, k) for x, y, k, _ in kerns])
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"{ph.phase}: roofline ({an.device.name or 'unknown device'})", fontsize=9)
    ax.legend(fontsize=FONT, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False,
              borderaxespad=0, handletextpad=0.4)
    ax.grid(True, which="major", lw=0.3, alpha=0.5)
    return _svg(fig)


def _tick_steps(ax: Any, steps: Sequence[int]) -> None:
    n = len(steps)
    every = max(1, -(-n // MAX_TICKS))
    idx = list(range(0, n, every))
    ax.set_xticks(idx, [str(steps[i]) for i in idx], fontsize=FONT)


def _stack_layers(ph: Phase, top: int) -> list[tuple[str, Sequence[float], str, str | None]]:
    """(name, per-step ms, colour, hatch): the `top` components, the rest, then idle by cause."""
    ser = ph.per_step
    comps = ser.components
    order = sorted(comps, key=lambda c: -sum(comps[c]))
    shown, rest = order[:top], order[top:]
    n = len(ser.step)
    colors = _component_colors(ph)
    layers: list[tuple[str, Sequence[float], str, str | None]] = [
        (c, comps[c], colors[c], None) for c in shown]
    if rest:
        layers.append(("other components", [sum(comps[c][i] for c in rest) for i in range(n)],
                       "#8c8c8c", None))
    if not ser.ledger:
        return layers + [("GPU idle", [x or 0.0 for x in ser.idle_ms], IDLE, None)]
    for cause, color in CAUSE_COLORS.items():
        per_step = [sum(r.ms_per_step for r in rows if r.cause == cause) for rows in ser.ledger]
        if any(per_step):
            layers.append((f"idle: {cause}", per_step, color, CAUSE_HATCH))
    return layers


def step_stack(ph: Phase, top: int = 8) -> str | None:
    """Per step: component kernel time stacked (the `top` largest, the rest together), then the
    step's non-kernel time by its ledger cause (hatched), each in its own colour."""
    ser = ph.per_step
    if not ser.step:
        return None
    layers = _stack_layers(ph, top)
    n = len(ser.step)
    fig = _figure(7.2, 3.6, right=0.76, left=0.08)
    ax = fig.add_subplot()
    x = list(range(n))
    base = [0.0] * n
    for name, vals, color, hatch in layers:
        ax.bar(x, vals, bottom=base, color=color, label=name, width=0.8, hatch=hatch,
               edgecolor="white", lw=0.3)
        base = [b + v for b, v in zip(base, vals)]
    _tick_steps(ax, ser.step)
    ax.set_xlabel("step")
    ax.set_ylabel("ms")
    ax.set_title(f"{ph.phase}: each step's time: kernels by component, then idle by cause",
                 fontsize=9)
    ax.legend(fontsize=FONT, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    return _svg(fig)


def _merged(spans: Sequence[tuple[float, float]], gap: float) -> list[tuple[float, float]]:
    """Spans (sorted) with gaps under `gap` closed, as (start, width) for broken_barh."""
    out: list[list[float]] = []
    for s, e in spans:
        if out and s - out[-1][1] < gap:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e - s) for s, e in out]


def busy_idle(ph: Phase) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """The phase's busy/idle band as (start, width) spans in ms: per step its kernel-busy time
    (step ms less GPU idle ms, at true width) from the step's start, then its idle time."""
    busy, idle = [], []
    ser = ph.per_step
    for s, d, i in zip(ser.start_ms, ser.step_ms, ser.idle_ms):
        if s is None or not d:
            continue
        b = min(max(d - (i or 0.0), 0.0), d)
        busy.append((s, b))
        idle.append((s + b, d - b))
    return busy, idle


def timeline(an: Analysis) -> str | None:
    """Every step of every phase on the trace's time axis, two lanes a phase: above, when its
    kernels ran (the union of kernel intervals; gaps under a pixel closed, so a phase of many thin
    kernels reads denser than it is); below, the busy/idle band: each step's kernel-busy time at
    true width from its start, then its GPU idle time (grey), the phase's idle share labelled."""
    phases = [ph for ph in an.phases if any(
        s is not None and d for s, d in zip(ph.per_step.start_ms, ph.per_step.step_ms))]
    if not phases:
        return None
    ends = [s + d for ph in phases for s, d in zip(ph.per_step.start_ms, ph.per_step.step_ms)
            if s is not None and d]
    gap = max(ends) / TIMELINE_PIXELS  # narrower than a pixel or so: closed
    colors = _colors([ph.phase for ph in an.phases])
    h = 1.0 + 0.6 * len(phases)
    fig = _figure(7.2, h, left=0.2, right=0.98, bottom=0.6 / h)
    ax = fig.add_subplot()
    labels = []
    for i, ph in enumerate(phases):
        ser = ph.per_step
        spans = [(s, d) for s, d in zip(ser.start_ms, ser.step_ms) if s is not None and d]
        ax.broken_barh(spans, (i - 0.4, 0.8), facecolors="none", edgecolor=colors[ph.phase],
                       lw=0.6).set_gid(f"timeline-steps-{ph.phase}")
        ran = _merged(sorted(b for step in ser.busy_ms for b in step), gap)
        ax.broken_barh(ran, (i - 0.3, 0.12), facecolors=colors[ph.phase], lw=0,
                       alpha=0.6).set_gid(f"timeline-ran-{ph.phase}")
        busy, idle = busy_idle(ph)
        ax.broken_barh(idle, (i - 0.1, 0.4), facecolors=IDLE, lw=0
                       ).set_gid(f"timeline-idle-{ph.phase}")
        ax.broken_barh(busy, (i - 0.1, 0.4), facecolors=colors[ph.phase], lw=0
                       ).set_gid(f"timeline-busy-{ph.phase}")
        total = sum(d for _, d in spans)
        share = 1 - sum(d for _, d in busy) / total if total else 0.0
        mean = ("" if ph.idle_fraction is None or len(spans) < 2
                else f"\n(mean step {ph.idle_fraction * 100:.1f}%)")
        labels.append(f"{ph.phase}\nGPU idle {share * 100:.1f}%{mean}")
    ax.set_yticks(range(len(phases)), labels, fontsize=FONT)
    ax.set_xlabel("ms from the first step. Per phase, the thin line: when kernels ran (gaps under "
                  "a pixel closed);\nthe band: each step's kernel-busy time at true width, then "
                  "its GPU idle time (grey); outline: the step", fontsize=FONT)
    ax.set_ylim(-0.55, len(phases) - 0.45)
    ax.invert_yaxis()
    return _svg(fig)


def report_plots(an: Analysis) -> dict[str, str]:
    """name -> SVG for the report: timeline, then per phase its roofline and (decode-like)
    step stack."""
    if not available():
        return {}
    out = {}
    tl = timeline(an)
    if tl:
        out["timeline"] = tl
    for ph in an.phases:
        r = roofline(an, ph)
        if r:
            out[f"{ph.phase}_roofline"] = r
        if ph.phase in TOKEN_PHASES or len(ph.per_step.step) > 1:
            st = step_stack(ph)
            if st:
                out[f"{ph.phase}_steps"] = st
    return out


def compare_delta(ph: PhaseComparison) -> str | None:
    """Per component (and the whole step, and the summed kernels): the change of the mean, ms per
    step, with its bootstrap 95% CI as an error bar; slower red, faster green, the rest grey."""
    rows = [("step", ph.step.stats), ("kernels", ph.kernels.stats)]
    rows += [(r.name, r.stats) for r in ph.components]
    rows = [(n, s) for n, s in rows if s.delta_ms is not None]
    if not rows:
        return None
    h = 0.9 + 0.2 * len(rows)
    fig = _figure(7.2, h, left=0.2, right=0.97, bottom=0.5 / h)
    ax = fig.add_subplot()
    y = list(range(len(rows)))
    deltas = [s.delta_ms or 0.0 for _, s in rows]
    col = [SLOWER if s.verdict == "slower" else FASTER if s.verdict == "faster" else SAME_C
           for _, s in rows]
    ax.barh(y, deltas, color=col, height=0.6)
    lo = [d - (s.ci_low_ms if s.ci_low_ms is not None else d) for d, (_, s) in zip(deltas, rows)]
    hi = [(s.ci_high_ms if s.ci_high_ms is not None else d) - d for d, (_, s) in zip(deltas, rows)]
    ax.errorbar(deltas, y, xerr=[[max(v, 0) for v in lo], [max(v, 0) for v in hi]], fmt="none",
                ecolor="#222", elinewidth=0.8, capsize=2)
    ax.axvline(0, color="#444", lw=0.6)
    ax.set_yticks(y, [n + ("  *" if s.verdict in CHANGED else "") for n, s in rows], fontsize=FONT)
    ax.invert_yaxis()
    ax.set_xlabel("candidate - base, mean ms per step (bar: bootstrap 95% CI; * significant)")
    ax.set_title(f"{ph.phase}: change per component (red slower, green faster, grey no verdict)",
                 fontsize=9)
    return _svg(fig)


def compare_plots(phases: Sequence[PhaseComparison]) -> dict[str, str]:
    """phase -> SVG of its delta bars ({} without matplotlib)."""
    if not available():
        return {}
    out = {}
    for ph in phases:
        svg = compare_delta(ph)
        if svg:
            out[ph.phase] = svg
    return out


def slope_plot(s: Slope, top: int = 8) -> str | None:
    """Time per step against context, per component (the `top` with the largest time) and the
    step: the measured steps as dots and the fitted line t = a + b*L."""
    rows = [r for r in s.rows if r.fit.points]
    if not rows:
        return None
    comps = [r for r in rows if r.component not in ("step", "kernels")]
    comps = sorted(comps, key=lambda r: -sum(y for _, y in r.fit.points))[:top]
    shown = [r for r in rows if r.component == "step"] + comps
    colors = _colors([r.component for r in shown])
    fig = _figure(7.2, 3.8, right=0.74, left=0.09)
    ax = fig.add_subplot()
    for r in shown:
        xs = [p[0] for p in r.fit.points]
        ys = [p[1] for p in r.fit.points]
        c = colors[r.component]
        ax.scatter(xs, ys, s=6, color=c, alpha=0.6, lw=0)
        x0, x1 = min(xs), max(xs)
        line = [(r.fit.intercept_us + r.fit.slope_us_per_1k * x / 1e3) / 1e3 for x in (x0, x1)]
        ax.plot([x0, x1], line, color=c, lw=1.2,
                label=f"{r.component}: {r.fit.slope_us_per_1k:+.1f} us/1k")
    ax.set_yscale("log")
    _plain_log(ax)
    ax.set_xlabel("context (K/V positions per sequence)")
    ax.set_ylabel("ms per step")
    ax.set_title(f"{s.phase}: time per step against context (dots: steps; lines: fit)", fontsize=9)
    ax.legend(fontsize=FONT, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    return _svg(fig)


def slope_plots(s: Slope) -> dict[str, str]:
    if not available():
        return {}
    svg = slope_plot(s)
    return {"slope": svg} if svg else {}
