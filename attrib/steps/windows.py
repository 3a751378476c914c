"""Step windows: start and end, kernel time, GPU-busy time and idle per step."""

from __future__ import annotations

import numpy as np
import polars as pl


def _covered(intervals: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The union of (start_ns, dur_ns) intervals as sorted disjoint segments (starts, ends) and the
    busy time before each segment."""
    iv = intervals.select("start_ns", (pl.col("start_ns") + pl.col("dur_ns")).alias("end")).drop_nulls().sort("start_ns")
    if iv.height == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    iv = iv.with_columns(pl.col("end").cum_max().shift(1).alias("_prev"))
    iv = iv.with_columns((pl.col("_prev").is_null() | (pl.col("start_ns") > pl.col("_prev"))).cum_sum().alias("_seg"))
    seg = iv.group_by("_seg").agg(pl.col("start_ns").min().alias("s"), pl.col("end").max().alias("e")).sort("s")
    starts, ends = seg["s"].to_numpy(), seg["e"].to_numpy()
    before = np.concatenate([[0], np.cumsum(ends - starts)[:-1]])
    return starts, ends, before


def _busy_until(t: np.ndarray, starts: np.ndarray, ends: np.ndarray, before: np.ndarray) -> np.ndarray:
    """GPU-busy nanoseconds from the start of the trace up to each time in t."""
    if len(starts) == 0:
        return np.zeros(len(t))
    j = np.searchsorted(starts, t, side="right") - 1
    jj = np.clip(j, 0, None)
    inside = np.clip(np.minimum(t, ends[jj]) - starts[jj], 0, None)
    return np.where(j < 0, 0, before[jj] + inside)


def busy_ns(steps: pl.DataFrame, gpu: pl.DataFrame) -> pl.Series:
    """Per step window: nanoseconds in which any kernel, memcpy or memset of `gpu` (start_ns, dur_ns)
    ran, overlaps counted once, whichever step launched it (a kernel left over from the previous
    step keeps the GPU busy in this one)."""
    seg = _covered(gpu)
    w0, w1 = steps["window_start"].to_numpy(), steps["window_end"].to_numpy()
    return pl.Series("busy_ns", _busy_until(w1, *seg) - _busy_until(w0, *seg), dtype=pl.Int64)


def windows(steps: pl.DataFrame, k: pl.DataFrame, copies: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per step: window_start/end, step_ms, kernel_ms (its own kernels), idle_ms and idle_fraction
    (the window less the time any kernel or copy ran in it)."""
    ks = k.filter(pl.col("step").is_not_null())
    agg = ks.group_by("step").agg(pl.col("start_ns").min().alias("k0"), (pl.col("start_ns") + pl.col("dur_ns")).max().alias("k1"),
                                  pl.col("dur_ns").sum().alias("kernel_ns"), pl.len().alias("n_kernels"))
    s = steps.join(agg, on="step", how="left")
    s = s.with_columns(pl.min_horizontal("cpu_start", "gpu_start", "k0").alias("window_start"),
                       pl.max_horizontal("cpu_end", "gpu_end", "k1").alias("window_end"))
    gpu = pl.concat([k.select("start_ns", "dur_ns")] + ([copies.select("start_ns", "dur_ns")] if copies is not None else []))
    s = s.with_columns(pl.when(pl.col("n_kernels").is_not_null()).then(busy_ns(s, gpu)).alias("busy_ns"))
    return s.with_columns(
        ((pl.col("window_end") - pl.col("window_start")) / 1e6).alias("step_ms"),
        (pl.col("kernel_ns").fill_null(0) / 1e6).alias("kernel_ms"),
        pl.when(pl.col("busy_ns").is_not_null()).then(
            ((pl.col("window_end") - pl.col("window_start") - pl.col("busy_ns")) / 1e6).clip(0)).alias("idle_ms"),
        # a step without kernels (a CPU-only trace) has no GPU to be idle: null, not 100 %
        pl.when(pl.col("busy_ns").is_not_null()).then(
            (1 - pl.col("busy_ns") / (pl.col("window_end") - pl.col("window_start"))).clip(0, 1)).alias("idle_fraction"))
