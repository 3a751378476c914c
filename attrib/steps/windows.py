"""Step windows: start and end, kernel time, GPU-busy time and idle per step.

Windows never overlap. A step starts at its CPU range (or its first GPU work) and ends when the
later of its host range and its GPU work ends; a step that starts before the previous one ended
starts where that one ended. When the host runs ahead (graph replays without a per-step sync) a
step's first GPU op waits in the queue behind earlier work: the step then starts at that op, so
its time is its GPU span and the host time hidden under earlier GPU work is no cost.
"""

from __future__ import annotations

import polars as pl

from attrib.steps.spans import busy, covered

# a step's first GPU op that starts this long after its launch call waited behind earlier GPU work
QUEUED_NS = 100_000


def busy_ns(steps: pl.DataFrame, gpu: pl.DataFrame) -> pl.Series:
    """Per step window: nanoseconds in which any kernel, memcpy or memset of `gpu` (start_ns,
    dur_ns) ran, overlaps counted once, whichever step launched it (a kernel left over from the
    previous step keeps the GPU busy in this one)."""
    ms, me = busy(gpu)
    return covered(steps["window_start"], steps["window_end"], ms, me).alias("busy_ns")


def own_gpu_work(steps: pl.DataFrame, k: pl.DataFrame, copies: pl.DataFrame | None,
                 launches: pl.DataFrame | None) -> pl.LazyFrame:
    """step, start_ns, end_ns, launch_ns of each step's GPU work: its kernels, and the copies
    whose runtime call (same correlation id) was made in its CPU range."""
    no_launches = pl.DataFrame(schema={"id": pl.Int64, "start_ns": pl.Int64,
                                       "correlation": pl.Int64})
    la = (launches if launches is not None else no_launches).lazy()
    launch_id = pl.col("launch_id") if "launch_id" in k.columns else pl.lit(None, pl.Int64)
    # the columns first: a narrow copy
    kl = k.lazy().select("step", "start_ns", "dur_ns", launch_id.alias("launch_id"))
    kl = kl.filter(pl.col("step").is_not_null()).join(
        la.select(pl.col("id").alias("launch_id"), pl.col("start_ns").alias("launch_ns")),
        on="launch_id",
        how="left",
    )
    end_ns = (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns")
    parts = [kl.select("step", "start_ns", end_ns, pl.col("launch_ns").cast(pl.Int64))]
    if copies is not None and copies.height and launches is not None and launches.height:
        calls = (la.select("correlation", pl.col("start_ns").alias("launch_ns"))
                 .filter(pl.col("correlation").is_not_null()).unique("correlation"))
        c = (
            copies.lazy().join(calls, on="correlation", how="inner")
            .drop_nulls(["start_ns", "dur_ns"])
            .sort("launch_ns")
        )
        win = steps.lazy().filter(pl.col("cpu_start").is_not_null()).select(
            "step", pl.col("cpu_start").alias("launch_ns"), "cpu_end").sort("launch_ns")
        c = c.join_asof(win, on="launch_ns", strategy="backward").filter(
            pl.col("launch_ns") < pl.col("cpu_end")
        )
        parts.append(c.select("step", "start_ns", end_ns, "launch_ns"))
    return pl.concat(parts).cast({"step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64})


def _bounds(steps: pl.DataFrame, own: pl.LazyFrame) -> pl.LazyFrame:
    """Per step: its unclamped start and end (see the module docstring)."""
    first = own.sort("start_ns").group_by("step").agg(
        pl.col("start_ns").first().alias("g0"), pl.col("launch_ns").first().alias("_l0"),
        pl.col("end_ns").max().alias("g1"))
    s = steps.lazy().join(first, on="step", how="left")
    queued = (pl.col("g0") - pl.col("_l0") > QUEUED_NS).fill_null(False)
    start = pl.when(queued).then(pl.min_horizontal("gpu_start", "g0")).otherwise(
        pl.min_horizontal("cpu_start", "gpu_start", "g0"))
    end = pl.max_horizontal("cpu_end", "gpu_end", "g1")
    return s.with_columns(start.alias("_s"), end.alias("_e"))


def _clamp(starts: list[int | None], ends: list[int | None]
           ) -> tuple[list[int | None], list[int | None]]:
    """Sequential windows: each starts no earlier than the previous one ends."""
    w0: list[int | None] = []
    w1: list[int | None] = []
    last = None
    for s, e in zip(starts, ends):
        if s is None:
            w0.append(None)
            w1.append(None)
            continue
        s = s if last is None else max(s, last)
        e = max(e if e is not None else s, s)
        w0.append(s)
        w1.append(e)
        last = e
    return w0, w1


def windows(steps: pl.DataFrame, k: pl.DataFrame, copies: pl.DataFrame | None = None,
            launches: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per step: window_start/end, step_ms, kernel_ms (its own kernels), idle_ms and idle_fraction
    (the window less the time any kernel or copy ran in it)."""
    # the columns first: no copy of the rest
    ks = k.lazy().select("step", "dur_ns").filter(pl.col("step").is_not_null())
    agg = ks.group_by("step").agg(pl.col("dur_ns").sum().alias("kernel_ns"),
                                  pl.len().alias("n_kernels"))
    bounds = _bounds(steps, own_gpu_work(steps, k, copies, launches))
    s = (bounds.join(agg, on="step", how="left").sort("_s", "step", nulls_last=True)
         .collect(engine="in-memory"))
    w0, w1 = _clamp(s["_s"].to_list(), s["_e"].to_list())
    w0_, w1_ = pl.Series("window_start", w0, pl.Int64), pl.Series("window_end", w1, pl.Int64)
    copy_spans = [copies[["start_ns", "dur_ns"]]] if copies is not None else []
    gpu = pl.concat([k[["start_ns", "dur_ns"]], *copy_spans])
    busy = busy_ns(pl.DataFrame([w0_, w1_]), gpu)  # in the windows' order, as s is until its sort
    ran = pl.col("n_kernels").is_not_null() & pl.col("window_start").is_not_null()
    by_step = (s.lazy().with_columns(w0_, w1_)
               .with_columns(pl.when(ran).then(busy).alias("busy_ns"))
               .drop("g0", "_l0", "g1", "_s", "_e").sort("step"))
    span = pl.col("window_end") - pl.col("window_start")
    return by_step.with_columns(
        (span / 1e6).alias("step_ms"),
        (pl.col("kernel_ns").fill_null(0) / 1e6).alias("kernel_ms"),
        pl.when(pl.col("busy_ns").is_not_null())
        .then(((span - pl.col("busy_ns")) / 1e6).clip(0))
        .alias("idle_ms"),
        # a step without kernels (a CPU-only trace) has no GPU to be idle: null, not 100 %
        pl.when(pl.col("busy_ns").is_not_null() & (span > 0))
        .then((1 - pl.col("busy_ns") / span).clip(0, 1))
        .alias("idle_fraction"),
    ).collect(engine="in-memory")
