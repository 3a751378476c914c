"""Ranks of one run merged: step times side by side, collectives aligned, wait vs transfer, skew.

Pure tables over the attributed kernels and steps of each rank. Times are put on one clock by
the caller (a per-rank offset in ns; Kineto: `baseTimeNanoseconds` + ts, the host's wall clock).

A collective is a `communication` kernel; the n-th collective kernel of every rank is the same
collective (NCCL issues one process group's collectives in the same order on every rank; one
process group is assumed). For each collective, the latest start over the ranks is when the last
rank arrived: a rank's `wait` = latest start - own start, bounded by its duration; `transfer` =
its bus bytes (the cost model's nccl-tests bus bytes) at the interconnect's bandwidth, bounded by
what is left; `latency` = the rest (protocol, synchronisation, launch inside the kernel).
"""

from __future__ import annotations

import polars as pl

from attrib.steps.excluded import counted

COMMUNICATION = "communication"
_COLLS = {"rank": pl.Int64, "seq": pl.Int64, "name": pl.Utf8, "step": pl.Int64,
          "start_ns": pl.Int64, "dur_ns": pl.Int64, "bytes": pl.Float64}


def collectives(kernels: pl.DataFrame, rank: int, offset_ns: int = 0) -> pl.DataFrame:
    """One rank's collective kernels in issue order: rank, seq, name, step, start_ns (shifted by
    offset_ns onto the shared clock), dur_ns, bytes (bus bytes; null where unpriced)."""
    k = kernels.filter(pl.col("component") == COMMUNICATION).sort("start_ns")
    return k.select(
        pl.lit(rank, pl.Int64).alias("rank"),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("seq"),
        "name", pl.col("step").cast(pl.Int64),
        (pl.col("start_ns") + offset_ns).alias("start_ns"),
        "dur_ns", pl.col("bytes").cast(pl.Float64))


def split(colls: pl.DataFrame, link_gbs: float | None) -> pl.DataFrame:
    """Collectives present on every rank, each split into wait, transfer and latency (ns).

    Adds latest_ns (the last rank's start), wait_ns, transfer_ns (null without bytes or a
    bandwidth), latency_ns and same_name (every rank ran the same kernel name at this seq)."""
    ranks = colls["rank"].n_unique()
    per = pl.len().over("seq")
    c = colls.filter(per == ranks).with_columns(
        pl.col("start_ns").max().over("seq").alias("latest_ns"),
        (pl.col("name").n_unique().over("seq") == 1).alias("same_name"))
    end = pl.col("start_ns") + pl.col("dur_ns")
    wait = pl.min_horizontal(pl.col("latest_ns"), end) - pl.col("start_ns")
    c = c.with_columns(wait.alias("wait_ns"))
    left = pl.col("dur_ns") - pl.col("wait_ns")
    ideal = pl.col("bytes") / link_gbs if link_gbs else pl.lit(None, pl.Float64)
    bounded = pl.when(ideal.is_null()).then(None).otherwise(pl.min_horizontal(ideal, left))
    c = c.with_columns(bounded.alias("transfer_ns"))
    rest = left - pl.col("transfer_ns").fill_null(0)
    return c.with_columns(rest.alias("latency_ns")).sort("seq", "rank")


def step_times(steps: pl.DataFrame, rank: int, offset_ns: int = 0) -> pl.DataFrame:
    """One rank's steps: rank, index (its order in the run), step, phase, start_ns (the window's
    start on the shared clock), step_ms, excluded."""
    s = steps.sort("window_start")
    excl = pl.col("excluded") if "excluded" in s.columns else pl.lit(None, pl.Utf8)
    return s.select(
        pl.lit(rank, pl.Int64).alias("rank"),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("index"),
        "step", "phase", (pl.col("window_start") + offset_ns).alias("start_ns"),
        "step_ms", excl.alias("excluded"))


def _comm_per_step(coll: pl.DataFrame) -> pl.DataFrame:
    ms = [(pl.col(c).sum() / 1e6).alias(c.replace("_ns", "_ms"))
          for c in ("dur_ns", "wait_ns", "transfer_ns", "latency_ns")]
    out = coll.filter(pl.col("step").is_not_null()).group_by("rank", "step").agg(
        *ms, pl.len().alias("collectives"), pl.col("bytes").sum().alias("comm_bytes"))
    return out.rename({"dur_ms": "comm_ms"})


def by_step(steps: pl.DataFrame, coll: pl.DataFrame) -> pl.DataFrame:
    """Per step index and rank: step_ms, start skew (ms after the earliest rank's start), the
    collectives' ms split (comm, wait, transfer, latency), slowest (this rank's step is the
    longest of the index). Steps align by their order in each rank's run; an index some rank
    lacks is left out."""
    ranks = steps["rank"].n_unique()
    s = steps.filter(pl.len().over("index") == ranks)
    first = pl.col("start_ns").min().over("index")
    s = s.with_columns(((pl.col("start_ns") - first) / 1e6).alias("skew_ms"),
                       (pl.col("step_ms") == pl.col("step_ms").max().over("index"))
                       .alias("slowest"))
    cols = ["comm_ms", "wait_ms", "transfer_ms", "latency_ms", "collectives", "comm_bytes"]
    s = s.join(_comm_per_step(coll), on=["rank", "step"], how="left")
    fill = [pl.col(c).fill_null(0) for c in cols if c not in ("transfer_ms",)]
    return s.with_columns(*fill).sort("index", "rank")


def by_phase(table: pl.DataFrame) -> pl.DataFrame:
    """Per phase and rank, medians over its counted steps (the by_step table): step_ms, skew_ms,
    comm_ms, wait_ms, transfer_ms, latency_ms; steps counted and how often the rank was slowest."""
    t = table.filter(pl.col("phase").is_not_null(), *counted(table))
    med = [pl.col(c).median().alias(c) for c in
           ("step_ms", "skew_ms", "comm_ms", "wait_ms", "transfer_ms", "latency_ms")]
    out = t.group_by("phase", "rank").agg(
        pl.len().alias("steps"), pl.col("slowest").sum().alias("slowest_steps"), *med,
        pl.col("index").min().alias("_first"))
    return out.sort("_first", "rank").drop("_first")
