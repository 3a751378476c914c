"""The report's plots as SVG text (matplotlib, the `plot` extra): roofline, per-step stack, timeline.

Each function takes the typed Analysis or one of its phases (never the trace) and returns SVG
markup, or None when the
document holds nothing to plot. `available()` says whether matplotlib is installed; without it the
reports say the plots are omitted. Only component and phase names (a fixed vocabulary) are drawn as
text; kernel names never reach a plot.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence

from attrib.analysis.model import Analysis, Phase
from attrib.steps.phases import TOKEN_PHASES

MISSING = "plots omitted: matplotlib is not installed (pip install 'attrib[plot]')"
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac", "#86bcb6", "#d37295")
IDLE = "#d9d9d9"
# the ledger's causes of a step's non-kernel time, in greys and browns apart from the components' palette
CAUSE_COLORS = {"copy": "#6b6b6b", "outside": "#3d3d3d", "sync": "#a0522d", "host": "#c9a27e",
                "launch": "#d9d9d9", "profiler": "#efe6d8"}
RC = {"svg.fonttype": "none", "svg.hashsalt": "attrib", "font.size": 9, "axes.spines.top": False,
      "axes.spines.right": False, "svg.image_inline": True}


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figure(w: float, h: float, right: float = 0.97, left: float = 0.1, bottom: float | None = None):
    """A figure with fixed margins (constrained layout costs seconds on log axes)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h))
    fig.subplots_adjust(left=left, right=right, top=1 - 0.35 / h, bottom=bottom if bottom is not None else 0.5 / h)
    return fig


def _plain_log(ax) -> None:
    """Log axes with plain tick labels (1, 10, 0.1) instead of mathtext powers, which are slow to lay out."""
    from matplotlib.ticker import FuncFormatter

    fmt = FuncFormatter(lambda v, _: f"{v:g}")
    ax.xaxis.set_major_formatter(fmt)
    ax.yaxis.set_major_formatter(fmt)


def _svg(fig) -> str:
    from matplotlib import rc_context
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    buf = io.StringIO()
    with rc_context(RC):
        FigureCanvasSVG(fig).print_svg(buf, metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    return re.sub(r"^.*?(<svg\b)", r"\1", text, count=1, flags=re.S)  # drop the XML prolog and DOCTYPE


def _colors(names: list[str]) -> dict[str, str]:
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}


def _peak_tflops(an: Analysis, ph: Phase) -> tuple[float | None, str | None]:
    peaks = an.device.matrix_tflops
    dtypes = [c.dtype for c in ph.component_rows if c.dtype]
    for d in dtypes + ["bf16", "fp16"]:
        key = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(d, d)
        if peaks.get(key):
            return float(peaks[key]), key
    return None, None


def roofline(an: Analysis, ph: Phase) -> str | None:
    """Arithmetic intensity (FLOP/byte) vs achieved TFLOP/s: one point per component and per top
    kernel, the peak and sustained bandwidth roofs and the matrix peak of the phase's dtype."""
    def pts(rows):
        return [(r.intensity, r.achieved_tflops, r.component) for r in rows
                if (r.intensity or 0) > 0 and (r.achieved_tflops or 0) > 0]
    comps, kerns = pts(ph.component_rows), pts(ph.kernel_rows)
    if not comps and not kerns:
        return None
    dev = an.device
    xs = [p[0] for p in comps + kerns]
    lo, hi = min(xs) / 3, max(xs) * 3
    fig = _figure(7.2, 4.0)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log(ax)
    peak, dt = _peak_tflops(an, ph)
    grid = [lo * (hi / lo) ** (i / 64) for i in range(65)]
    for bw, label, style in ((dev.peak_bw_gbs, "peak", "-"), (dev.sustained_bw_gbs, "sustained", "--")):
        if bw:
            ys = [bw * x / 1e3 for x in grid]
            ys = [min(y, peak) for y in ys] if peak else ys
            ax.plot(grid, ys, style, color="#444", lw=1, label=f"{label} {bw:g} GB/s")
    if peak:
        ax.axhline(peak, color="#999", lw=0.8, ls=":", label=f"{dt} matrix peak {peak:g} TFLOP/s")
    colors = _colors(sorted({p[2] for p in comps + kerns if p[2]}))
    for x, y, c in comps:
        ax.scatter([x], [y], s=36, color=colors.get(c, "#333"), edgecolor="black", lw=0.5, zorder=3)
        ax.annotate(c, (x, y), xytext=(4, 3), textcoords="offset points", fontsize=7)
    if kerns:
        ax.scatter([p[0] for p in kerns], [p[1] for p in kerns], marker="x", s=28,
                   c=[colors.get(p[2], "#333") for p in kerns], zorder=3, label="top kernels (x)")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"{ph.phase}: roofline ({dev.name or 'unknown device'})", fontsize=9)
    ax.legend(fontsize=7, loc="lower right", frameon=False)
    ax.grid(True, which="major", lw=0.3, alpha=0.5)
    return _svg(fig)


def step_stack(ph: Phase, top: int = 8) -> str | None:
    """Per step: component kernel time stacked (the `top` largest, the rest as "rest"), then idle."""
    ser = ph.per_step
    if not ser.step:
        return None
    comps = ser.components
    order = sorted(comps, key=lambda c: -sum(comps[c]))
    shown, rest = order[:top], order[top:]
    n = len(ser.step)
    layers: list[tuple[str, Sequence[float]]] = [(c, comps[c]) for c in shown]
    if rest:
        layers.append(("rest", [sum(comps[c][i] for c in rest) for i in range(n)]))
    colors = _colors(shown) | {"rest": "#8c8c8c", "GPU idle": IDLE}
    if ser.ledger:  # the step's non-kernel time by cause (the step-time ledger)
        for cause, color in CAUSE_COLORS.items():
            per_step = [sum(r.ms_per_step for r in rows if r.cause == cause) for rows in ser.ledger]
            if any(per_step):
                layers.append((cause, per_step))
                colors[cause] = color
    else:
        layers.append(("GPU idle", [x or 0.0 for x in ser.idle_ms]))
    fig = _figure(7.2, 3.6, right=0.8, left=0.08)
    ax = fig.add_subplot()
    x = list(range(n))
    base = [0.0] * n
    for name, vals in layers:
        ax.bar(x, vals, bottom=base, color=colors[name], label=name, width=0.8, edgecolor="white", lw=0.3)
        base = [b + v for b, v in zip(base, vals)]
    ax.set_xticks(x, [str(s) for s in ser.step], fontsize=7)
    ax.set_xlabel("step")
    ax.set_ylabel("ms")
    ax.set_title(f"{ph.phase}: each step's time: kernels by component, then idle by cause", fontsize=9)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    return _svg(fig)


def timeline(an: Analysis) -> str | None:
    """Every step of every phase on the trace's time axis: the step window, its kernel time inside."""
    rows = [(ph.phase, s, d, k) for ph in an.phases for s, d, k in
            zip(ph.per_step.start_ms, ph.per_step.step_ms, ph.per_step.kernel_ms)
            if s is not None and d]
    if not rows:
        return None
    phases = [ph.phase for ph in an.phases]
    colors = _colors(phases)
    h = 0.9 + 0.45 * len(phases)
    fig = _figure(7.2, h, left=0.1, bottom=0.55 / h)
    ax = fig.add_subplot()
    for i, p in enumerate(phases):
        spans = [(s, d) for q, s, d, _ in rows if q == p]
        busy = [(s, min(k or 0, d)) for q, s, d, k in rows if q == p]
        ax.broken_barh(spans, (i - 0.35, 0.7), facecolors=IDLE, edgecolor=colors[p], lw=0.6)
        ax.broken_barh(busy, (i - 0.2, 0.4), facecolors=colors[p])
    ax.set_yticks(range(len(phases)), phases)
    ax.set_xlabel("ms from the first step (outline: step window; fill: summed kernel time)")
    ax.set_ylim(-0.6, len(phases) - 0.4)
    ax.invert_yaxis()
    return _svg(fig)


def report_plots(an: Analysis) -> dict[str, str]:
    """name -> SVG for the report: timeline, then per phase its roofline and (decode-like) step stack."""
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
