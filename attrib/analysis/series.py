"""Per-step series of a phase (the analysis' `per_step`): what compare, slope and the plots read.

Columnar: one list per figure, one entry per step in time order; component times are per step in ms
(0 where a step ran no kernel of that component).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from attrib.analysis.model import StepSeries
from attrib.trace import grouped
from attrib.steps.spans import merge

BUSY_GAP_MS = 0.02  # kernel gaps shorter than this join in the timeline's busy spans (20 us)
# the timeline plot's width in gaps it can show: it closes gaps under 1/TIMELINE_PIXELS of the
# time axis, so the busy spans need no finer ones (an eager decode has a span per kernel)
TIMELINE_PIXELS = 1500


def _col(df: pl.DataFrame, name: str, nd: int = 4) -> tuple[Any, ...]:
    if name not in df.columns:
        return (None,) * df.height
    s = df[name]
    return tuple(s.round(nd).to_list() if s.dtype.is_float() else s.to_list())


def _busy(k: pl.DataFrame, steps: list[int], t0_ns: int,
          gap_ms: float = BUSY_GAP_MS) -> tuple[tuple[tuple[float, float], ...], ...]:
    """Per step (in `steps` order), the union of its kernels' [start, end) in ms from t0_ns, gaps
    under gap_ms closed."""
    k = k.select("step", "start_ns", "dur_ns").filter(pl.col("step").is_not_null())
    k = k.sort("step")  # each step's kernels one slice of three arrays (not a frame a step)
    ids = k["step"].to_numpy()
    starts = k["start_ns"].to_numpy().astype(np.int64)
    ends = starts + k["dur_ns"].to_numpy().astype(np.int64)
    firsts = np.r_[0, np.flatnonzero(np.diff(ids)) + 1] if len(ids) else np.zeros(0, int)
    lasts = np.r_[firsts[1:], len(ids)]
    bounds = dict(zip(ids[firsts].tolist(), zip(firsts.tolist(), lasts.tolist())))
    out: list[tuple[tuple[float, float], ...]] = []
    gap = int(gap_ms * 1e6)
    for st in steps:
        if st not in bounds:
            out.append(())
            continue
        lo, hi = bounds[st]
        s, e = starts[lo:hi], ends[lo:hi]
        ms, me = merge(s, e + gap)
        out.append(tuple((round((a - t0_ns) / 1e6, 4), round((b - gap - t0_ns) / 1e6, 4))
                         for a, b in zip(ms.tolist(), me.tolist())))
    return tuple(out)


def step_series(steps: pl.DataFrame, k: pl.DataFrame, context: pl.DataFrame, t0_ns: int,
                components: list[str]) -> StepSeries:
    """steps (one phase), its kernels, step -> context; t0_ns: the trace's first step start."""
    s = steps.sort("window_start").join(context, on="step", how="left")
    timed = k.select("step", "component", "dur_ns").filter(
        pl.col("step").is_not_null() & pl.col("component").is_in(components))
    per = grouped(timed, ["step", "component"], (pl.col("dur_ns").sum() / 1e6).round(4),
                  any_order=True)
    ms = dict(zip(zip(per["step"].to_list(), per["component"].to_list()), per["dur_ns"].to_list()))
    order = s["step"].to_list()
    # one query, not one a component
    comp = {c: tuple(ms.get((st, c), 0.0) for st in order) for c in components}
    s = s.with_columns(((pl.col("window_start") - t0_ns) / 1e6).alias("start_ms"))
    return StepSeries(
        step=tuple(s["step"].to_list()), start_ms=_col(s, "start_ms", 3),
        step_ms=_col(s, "step_ms"), kernel_ms=_col(s, "kernel_ms"),
        idle_ms=_col(s, "idle_ms"), kernels=_col(s, "n_kernels"),
        tokens=_col(s, "tokens"), context=_col(s, "context"), components=comp,
        busy_ms=_busy(k, s["step"].to_list(), t0_ns, _gap_ms(s)))


def _gap_ms(s: pl.DataFrame) -> float:
    """The gap the busy spans close: BUSY_GAP_MS, or a pixel of the phase's own time axis where
    that is wider (the timeline's axis, of every phase, is at least as long)."""
    ends = (s["start_ms"].round(3) + s["step_ms"].round(4)).drop_nulls()  # as the plot reads
    end = float(ends.max()) if ends.len() else 0.0
    return max(BUSY_GAP_MS, end / TIMELINE_PIXELS)
