"""Per-step series of a phase (the analysis' `per_step`): what compare, slope and the plots read.

Columnar: one list per figure, one entry per step in time order; component times are per step in ms
(0 where a step ran no kernel of that component).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from attrib.analysis.model import StepSeries
from attrib.trace import grouped_plan
from attrib.steps.spans import of_events, unions

BUSY_GAP_MS = 0.02  # kernel gaps shorter than this join in the timeline's busy spans (20 us)
# the timeline plot's width in gaps it can show: it closes gaps under 1/TIMELINE_PIXELS of the
# time axis, so the busy spans need no finer ones (an eager decode has a span per kernel)
TIMELINE_PIXELS = 1500


# the series' figures of a step (a column of its steps or context) and the decimals a float keeps
_FIGURES = {"start_ms": 3, "step_ms": 4, "kernel_ms": 4, "idle_ms": 4, "n_kernels": 4, "tokens": 4,
            "context": 4}


def _col(df: pl.DataFrame, name: str) -> tuple[Any, ...]:
    return tuple(df[name].to_list()) if name in df.columns else (None,) * df.height


def _busy(k: pl.DataFrame, steps: list[int], t0_ns: int,
          gap_ms: float = BUSY_GAP_MS) -> tuple[tuple[tuple[float, float], ...], ...]:
    """Per step (in `steps` order), the union of its kernels' [start, end) in ms from t0_ns, gaps
    under gap_ms closed."""
    gap = int(gap_ms * 1e6)
    s, e = of_events()
    # every step's union in one query: each end pushed gap_ms on, so shorter gaps close
    spans = k.lazy().filter(pl.col("step").is_not_null()).select("step", s, (e + gap).alias("e"))
    u = unions(spans, by=["step"]).collect(engine="in-memory")
    by_step: dict[int, list[tuple[float, float]]] = {}
    for st, a, b in zip(u["step"].to_list(), u["s"].to_list(), u["e"].to_list()):
        by_step.setdefault(st, []).append(
            (round((a - t0_ns) / 1e6, 4), round((b - gap - t0_ns) / 1e6, 4)))
    return tuple(tuple(by_step.get(st, ())) for st in steps)


def step_series(steps: pl.DataFrame, k: pl.DataFrame, context: pl.DataFrame, t0_ns: int,
                components: list[str]) -> StepSeries:
    """steps (one phase), its kernels, step -> context; t0_ns: the trace's first step start."""
    joined = (steps.lazy().sort("window_start").join(context.lazy(), on="step", how="left")
              .with_columns(((pl.col("window_start") - t0_ns) / 1e6).alias("start_ms")))
    schema = joined.collect_schema()
    # the figures rounded as the document gives them, in one query
    figures = [pl.col(c).round(nd) if schema[c].is_float() else pl.col(c)
               for c, nd in _FIGURES.items() if c in schema]
    s = joined.select("step", *figures).collect(engine="in-memory")
    # every (step, component)'s time, those of the phase's components kept: one query
    per = (grouped_plan(k, ["step", "component"], (pl.col("dur_ns").sum() / 1e6).round(4),
                        any_order=True)
           .filter(pl.col("step").is_not_null() & pl.col("component").is_in(components))
           .collect(engine="in-memory"))
    ms = dict(zip(zip(per["step"].to_list(), per["component"].to_list()), per["dur_ns"].to_list()))
    order = s["step"].to_list()
    # one query, not one a component
    comp = {c: tuple(ms.get((st, c), 0.0) for st in order) for c in components}
    return StepSeries(
        step=tuple(s["step"].to_list()), start_ms=_col(s, "start_ms"),
        step_ms=_col(s, "step_ms"), kernel_ms=_col(s, "kernel_ms"),
        idle_ms=_col(s, "idle_ms"), kernels=_col(s, "n_kernels"),
        tokens=_col(s, "tokens"), context=_col(s, "context"), components=comp,
        busy_ms=_busy(k, s["step"].to_list(), t0_ns, _gap_ms(s)))


def _gap_ms(s: pl.DataFrame) -> float:
    """The gap the busy spans close: BUSY_GAP_MS, or a pixel of the phase's own time axis where
    that is wider (the timeline's axis, of every phase, is at least as long)."""
    ends = s["start_ms"] + s["step_ms"]  # rounded as the plot reads them
    end = float(ends.max()) if ends.null_count() < ends.len() else 0.0
    return max(BUSY_GAP_MS, end / TIMELINE_PIXELS)
