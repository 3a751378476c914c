"""Containment of properly nested intervals, vectorized (no per-event Python loop).

Profiler ranges on one thread nest. Walk the start/end events of each group in time order and
keep a running depth: an interval's depth is the number of intervals open when it starts, and the
innermost interval that contains a point (or another interval) is the latest-starting interval one
level up. Both become `join_asof` calls.
"""

from __future__ import annotations

from typing import cast

import polars as pl


def _stream(intervals: pl.DataFrame, points: pl.DataFrame | None, by: list[str]) -> pl.DataFrame:
    # Keys are doubled times so that at equal times ends come before starts and points,
    # and a point at an interval's start is inside it.
    starts = intervals.select(*by, (pl.col("start_ns") * 2 + 1).alias("key"), pl.lit(0).alias("order"),
                              pl.lit(1).alias("delta"), pl.col("id").alias("iid"), pl.lit(None, pl.Int64).alias("pid_"))
    end = pl.col("start_ns") + pl.col("dur_ns")
    ends = intervals.select(*by, (end * 2 + (pl.col("dur_ns") <= 0).cast(pl.Int64)).alias("key"),
                            pl.lit(2).alias("order"), pl.lit(-1).alias("delta"), pl.lit(None, pl.Int64).alias("iid"),
                            pl.lit(None, pl.Int64).alias("pid_"))
    parts = [starts, ends]
    if points is not None:
        parts.append(points.select(*by, (pl.col("t_ns") * 2 + 1).alias("key"), pl.lit(1).alias("order"),
                                   pl.lit(0).alias("delta"), pl.lit(None, pl.Int64).alias("iid"),
                                   pl.col("pid_")))
    ev = _sorted(pl.concat(parts, how="vertical_relaxed"), by)
    # each group's deltas sum to 0 (every interval starts and ends in its group), so the running sum
    # over the sorted whole is each group's own: no per-group window needed
    return ev.with_columns(pl.col("delta").cum_sum().alias("open"))


def _sorted(ev: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """ev sorted by (*by, key, order). Where the groups, the key's span and the order fit in one
    Int64 (group rank, key - min, order: 62 bits), by that one column, stably: ~4x faster than
    four keys and the same rows in the same order (the four-key sort keeps equal rows' order too)."""
    four = [*by, "key", "order"]
    if ev.height == 0 or any(ev[c].null_count() for c in by) or ev["key"].null_count():
        return ev.sort(four)
    key = pl.col("key")
    lo, span = ev.select(key.min().alias("lo"), (key.max() - key.min()).alias("span")).row(0)
    group = ev.select(pl.struct(by).rank("dense").cast(pl.Int64) - 1).to_series()
    key_bits = int(span).bit_length() + 2
    if key_bits + int(cast(int, group.max())).bit_length() > 62:
        return ev.sort(four)
    one = pl.lit(group * (1 << key_bits)) + (pl.col("key") - lo) * 4 + pl.col("order")
    return ev.sort(one, maintain_order=True)


def _levels(ev: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    return (ev.filter(pl.col("iid").is_not_null())
            .select(*by, "key", "iid", (pl.col("open") - 1).alias("depth")).sort("key"))


def parents(intervals: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """For intervals (id, start_ns, dur_ns, *by): columns id, depth, parent (null at top level)."""
    if intervals.height == 0:
        return pl.DataFrame(schema={"id": pl.Int64, "depth": pl.Int64, "parent": pl.Int64})
    lv = _levels(_stream(intervals, None, by), by)
    up = lv.select(*by, "key", pl.col("iid").alias("parent"), (pl.col("depth") + 1).alias("depth"))
    out = lv.join_asof(up, on="key", by=[*by, "depth"], strategy="backward", allow_exact_matches=False,
                       check_sortedness=False)
    return out.select(pl.col("iid").alias("id"), "depth", "parent")


def innermost(intervals: pl.DataFrame, points: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """For points (pid_, t_ns, *by): columns pid_, inner (innermost containing interval id or null)."""
    if points.height == 0 or intervals.height == 0:
        return points.select("pid_", pl.lit(None, pl.Int64).alias("inner"))
    ev = _stream(intervals, points, by)
    lv = _levels(ev, by)
    pts = (ev.filter(pl.col("pid_").is_not_null())
           .select(*by, "key", "pid_", (pl.col("open") - 1).alias("depth")).sort("key"))
    out = pts.join_asof(lv.rename({"iid": "inner"}), on="key", by=[*by, "depth"], strategy="backward",
                        check_sortedness=False)
    return out.select("pid_", pl.when(pl.col("depth") >= 0).then(pl.col("inner")).alias("inner"))
