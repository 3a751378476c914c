"""Step windows: start and end, kernel time, GPU-busy time and idle per step."""

from __future__ import annotations

import polars as pl


def _busy_ns(k: pl.DataFrame) -> pl.DataFrame:
    """Per step: GPU-busy nanoseconds (union of kernel intervals, so overlap is not counted twice)."""
    end = pl.col("start_ns") + pl.col("dur_ns")
    k = k.sort("step", "start_ns").with_columns(end.alias("_end"))
    k = k.with_columns(pl.col("_end").cum_max().shift(1).over("step").alias("_prev"))
    k = k.with_columns((pl.col("_prev").is_null() | (pl.col("start_ns") > pl.col("_prev"))).cum_sum().over("step").alias("_seg"))
    seg = k.group_by("step", "_seg").agg((pl.col("_end").max() - pl.col("start_ns").min()).alias("busy"))
    return seg.group_by("step").agg(pl.col("busy").sum().alias("busy_ns"))


def windows(steps: pl.DataFrame, k: pl.DataFrame) -> pl.DataFrame:
    ks = k.filter(pl.col("step").is_not_null())
    agg = ks.group_by("step").agg(pl.col("start_ns").min().alias("k0"), (pl.col("start_ns") + pl.col("dur_ns")).max().alias("k1"),
                                  pl.col("dur_ns").sum().alias("kernel_ns"), pl.len().alias("n_kernels"))
    s = steps.join(agg, on="step", how="left").join(_busy_ns(ks), on="step", how="left")
    s = s.with_columns(pl.min_horizontal("cpu_start", "gpu_start", "k0").alias("window_start"),
                       pl.max_horizontal("cpu_end", "gpu_end", "k1").alias("window_end"))
    return s.with_columns(
        ((pl.col("window_end") - pl.col("window_start")) / 1e6).alias("step_ms"),
        (pl.col("kernel_ns").fill_null(0) / 1e6).alias("kernel_ms"),
        pl.when(pl.col("busy_ns").is_not_null()).then(
            ((pl.col("window_end") - pl.col("window_start") - pl.col("busy_ns")) / 1e6).clip(0)).alias("idle_ms"),
        # a step without kernels (a CPU-only trace) has no GPU to be idle: null, not 100 %
        pl.when(pl.col("busy_ns").is_not_null()).then(
            (1 - pl.col("busy_ns") / (pl.col("window_end") - pl.col("window_start"))).clip(0, 1)).alias("idle_fraction"))
