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


def _relaxed(s: pl.Series, name: str) -> pl.Series:
    """s as a column of the event table, where it met a null Int64 column (vertical_relaxed)."""
    none = pl.Series(name, [], pl.Int64).to_frame()
    return pl.concat([none, s.alias(name).to_frame()], how="vertical_relaxed")[name]


def _narrow(intervals: pl.DataFrame, points: pl.DataFrame | None,
            by: list[str]) -> tuple[pl.DataFrame, pl.DataFrame] | None:
    """What `_levels` and the points' rows of `_stream` would give, without the wide event table:
    only the one sort key and its stable order are built over starts, ends and points (rows
    0..n-1 the starts, n..2n-1 the ends, then the points), and each output column is gathered
    from its source by row. None where `_sorted` would not use its one-key sort."""
    n = intervals.height
    parts = [intervals.select(by)]
    if points is not None:
        parts.append(points.select(by))
    groups = pl.concat(parts, how="vertical_relaxed")
    del parts
    if any(groups[c].null_count() for c in by):
        return None
    end = pl.col("start_ns") + pl.col("dur_ns")
    keys = [intervals.select(pl.col("start_ns") * 2 + 1).to_series(),
            intervals.select(end * 2 + (pl.col("dur_ns") <= 0).cast(pl.Int64)).to_series()]
    if points is not None:
        keys.append(points.select(pl.col("t_ns") * 2 + 1).to_series())
    key = pl.concat([k.to_frame("key") for k in keys], how="vertical_relaxed")["key"]
    del keys
    if key.null_count():
        return None
    lo, span = cast(int, key.min()), cast(int, key.max()) - cast(int, key.min())
    rank = groups.select(pl.struct(by).rank("dense").cast(pl.Int64) - 1).to_series()
    key_bits = int(span).bit_length() + 2
    if key_bits + int(cast(int, rank.max())).bit_length() > 62:
        return None
    m = key.len() - 2 * n
    group = pl.concat([rank.head(n), rank.head(n), rank.tail(m)]) if m else pl.concat([rank, rank])
    del rank
    order = pl.concat([pl.repeat(0, n, dtype=pl.Int64, eager=True), pl.repeat(2, n, dtype=pl.Int64, eager=True),
                       pl.repeat(1, m, dtype=pl.Int64, eager=True)])
    one = group * (1 << key_bits) + (key - lo) * 4 + order
    del group, order
    row = (pl.DataFrame({"one": one}).with_row_index("row")
           .sort("one", maintain_order=True)["row"].cast(pl.Int64))
    del one
    delta = (pl.when(row < n).then(pl.lit(1)).when(row < 2 * n).then(pl.lit(-1)).otherwise(pl.lit(0)))
    depth = pl.DataFrame({"row": row}).select(delta.cum_sum() - 1).to_series().alias("depth")
    is_start = row < n
    start_row = row.filter(is_start)
    iid = _relaxed(intervals["id"].gather(start_row), "iid")
    lv = groups[start_row].with_columns(key.gather(start_row), iid, depth.filter(is_start)).sort("key")
    if points is None:
        return lv, lv.clear()  # no points
    is_point = row >= 2 * n
    point_row = row.filter(is_point)
    pts = groups[point_row - n].with_columns(
        key.gather(point_row), _relaxed(points["pid_"].gather(point_row - 2 * n), "pid_"),
        depth.filter(is_point))
    return lv, pts.sort("key")


def _levels(ev: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    return (ev.filter(pl.col("iid").is_not_null())
            .select(*by, "key", "iid", (pl.col("open") - 1).alias("depth")).sort("key"))


def parents(intervals: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """For intervals (id, start_ns, dur_ns, *by): columns id, depth, parent (null at top level)."""
    if intervals.height == 0:
        return pl.DataFrame(schema={"id": pl.Int64, "depth": pl.Int64, "parent": pl.Int64})
    got = _narrow(intervals, None, by)
    lv = got[0] if got else _levels(_stream(intervals, None, by), by)
    up = lv.select(*by, "key", pl.col("iid").alias("parent"), (pl.col("depth") + 1).alias("depth"))
    out = lv.join_asof(up, on="key", by=[*by, "depth"], strategy="backward", allow_exact_matches=False,
                       check_sortedness=False)
    return out.select(pl.col("iid").alias("id"), "depth", "parent")


def innermost(intervals: pl.DataFrame, points: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """For points (pid_, t_ns, *by): columns pid_, inner (innermost containing interval id or null)."""
    if points.height == 0 or intervals.height == 0:
        return points.select("pid_", pl.lit(None, pl.Int64).alias("inner"))
    got = _narrow(intervals, points, by)
    if got:
        lv, pts = got
    else:
        ev = _stream(intervals, points, by)
        lv = _levels(ev, by)
        pts = (ev.filter(pl.col("pid_").is_not_null())
               .select(*by, "key", "pid_", (pl.col("open") - 1).alias("depth")).sort("key"))
    out = pts.join_asof(lv.rename({"iid": "inner"}), on="key", by=[*by, "depth"], strategy="backward",
                        check_sortedness=False)
    return out.select("pid_", pl.when(pl.col("depth") >= 0).then(pl.col("inner")).alias("inner"))
