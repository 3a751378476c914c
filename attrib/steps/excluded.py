"""Steps that are not the workload: a compile or autotune inside the window, or a warm-up outlier.

A step whose window holds torch.compile / Inductor / Triton compile or autotune spans (ops, CPU
annotations or Python frames named in `COMPILE_SPANS`) is `excluded = "compile"`; a step of a phase
of at least `MIN_STEPS` steps with `OUTLIER` times the phase's median kernel count and step time,
or its first step with `OUTLIER` times the median step time (a one-off start: allocations, plan
builds, a cache's first growth), is `excluded = "warm-up"`. Excluded steps stay in the steps table
and are listed in the document with their time; the phase figures (means over the counted steps)
leave them out.
"""

from __future__ import annotations

import polars as pl

from attrib.components.patterns import COMPILE_SPANS
from attrib.reads import Reads
from attrib.trace import Trace
from attrib.steps.spans import points_in

OUTLIER = 3.0
MIN_STEPS = 4

READS = Reads(ops=(COMPILE_SPANS,), frames=(COMPILE_SPANS,))  # compile and autotune spans


def counted(steps: pl.DataFrame) -> list[pl.Expr]:
    """The filter of the steps the phase figures count (none excluded): none where it keeps every
    step (no `excluded` column, or no step excluded), so a caller runs no query for it."""
    some = "excluded" in steps.columns and steps["excluded"].null_count() < steps.height
    return [pl.col("excluded").is_null()] if some else []


def compile_events(trace: Trace) -> pl.DataFrame:
    """name, start_ns, dur_ns of the ops, CPU annotations and Python frames named in COMPILE_SPANS
    (in that order). The pattern runs once per distinct name: names repeat thousands of times."""
    return _compile_events(trace).collect(engine="in-memory")


def _compile_events(trace: Trace) -> pl.LazyFrame:
    """compile_events, lazy (the distinct names matched in one query)."""
    cols = ("name", "start_ns", "dur_ns")
    parts = [trace.ops.lazy().select(cols),
             trace.markers.lazy().filter(pl.col("side") == "cpu").select(cols),
             trace.frames.lazy().select(cols)]
    events = pl.concat(parts)
    names = events.select(pl.col("name").unique())
    hit = names.filter(pl.col("name").str.contains(COMPILE_SPANS)).collect(engine="in-memory")
    return events.filter(pl.col("name").is_in(pl.lit(hit.to_series()).implode()))


def compile_spans(trace: Trace) -> pl.DataFrame:
    """start_ns, end_ns of every compile/autotune span (ops, CPU annotations, Python frames)."""
    return _compile_events(trace).select(
        "start_ns", (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns")
    ).sort("start_ns").collect(engine="in-memory")


def inside(t: pl.Series, spans: pl.DataFrame) -> pl.Series:
    """For each time in t: whether a span of `spans` (start_ns, end_ns, sorted by start_ns) holds
    it: the furthest end of the spans started at or before it is after it."""
    if spans.height == 0:
        return pl.Series([False] * t.len(), dtype=pl.Boolean)
    tv, ends = pl.col("t").fill_null(-1), pl.lit(spans["end_ns"])
    j = pl.lit(spans["start_ns"]).search_sorted(tv, side="right").cast(pl.Int64) - 1
    # the furthest end so far; none from a span without an end on (it reaches nothing)
    furthest = pl.when(ends.is_null().cum_sum() == 0).then(ends.cum_max())
    reach = furthest.gather(j.clip(0))
    hit = (j >= 0) & (tv < reach) & pl.col("t").is_not_null()
    frame = pl.LazyFrame([t.alias("t")])
    return frame.select(hit.fill_null(False).alias("")).collect(engine="in-memory").to_series()


def mark_excluded(steps: pl.DataFrame, trace: Trace,
                  compiling: pl.DataFrame | None = None) -> pl.DataFrame:
    """steps (with window_start/end, step_ms, n_kernels) + `excluded`: "compile" | "warm-up" |
    null. compiling: the trace's compile_spans, where already found."""
    sp = compile_spans(trace) if compiling is None else compiling
    has_compile = pl.lit(False)
    if sp.height and steps.height:  # a span starts inside the window [window_start, window_end)
        has_compile = points_in(sp["start_ns"], pl.col("window_start"), pl.col("window_end")) > 0
    med = pl.col("n_kernels").median().over("phase"), pl.col("step_ms").median().over("phase")
    enough = pl.len().over("phase") >= MIN_STEPS
    first = pl.col("window_start") == pl.col("window_start").min().over("phase")
    outlier = (enough & (((pl.col("n_kernels") > OUTLIER * med[0])
                          & (pl.col("step_ms") > OUTLIER * med[1]))
                         | (first & (pl.col("step_ms") > OUTLIER * med[1])))).fill_null(False)
    return steps.with_columns(
        pl.when(has_compile).then(pl.lit("compile")).when(outlier).then(pl.lit("warm-up"))
        .otherwise(pl.lit(None, pl.Utf8)).alias("excluded"))
