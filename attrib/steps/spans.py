"""Interval arithmetic on nanosecond spans [start, end), as polars Int64 Series: unions, the
time they cover, the stretches they leave, the points inside. The one home; rules read it through
rules.intervals.

Polars, not numpy: `attrib analyze` imports no numpy (its import took ~45 ms of a 0.3 s start).
Each function is one query (or none) whatever the number of spans or windows.
"""

from __future__ import annotations

import polars as pl

# sorted or not, the starts and ends of a set of intervals
Spans = tuple[pl.Series, pl.Series]
_I64 = pl.Int64


def empty() -> Spans:
    """No intervals."""
    return pl.Series("s", [], _I64), pl.Series("e", [], _I64)


def _within(x: pl.Expr, keys: list[str]) -> pl.Expr:
    return x.over(keys) if keys else x


def unions(spans: pl.LazyFrame, by: list[str] | None = None) -> pl.LazyFrame:
    """The union of the intervals (s, e) of each group of `by` (all of them without): sorted
    disjoint intervals (by..., s, e), the groups sorted."""
    keys = by or []
    ordered = spans.select(*keys, pl.col("s").cast(_I64), pl.col("e").cast(_I64))
    ordered = ordered.sort(*keys, "s", maintain_order=True)
    ordered = ordered.with_columns(_within(pl.col("e").cum_max(), keys))
    new = pl.col("s") > _within(pl.col("e").shift(1), keys)
    runs = ordered.with_columns(new.fill_null(True).alias("_new"))
    # a union ends where the next starts (or its group's last interval does)
    end = _within(pl.col("_new").shift(-1), keys).fill_null(True)
    runs = runs.with_columns(end.alias("_end"))
    starts = runs.filter(pl.col("_new")).select(*keys, "s")
    finish = runs.filter(pl.col("_end")).select("e")
    return pl.concat([starts, finish], how="horizontal")


def merge(s: pl.Series, e: pl.Series) -> Spans:
    """Union of intervals [s, e) as sorted disjoint intervals."""
    if not s.len():
        return empty()
    got = unions(pl.LazyFrame([s.alias("s"), e.alias("e")])).collect(engine="in-memory")
    return got["s"], got["e"]


def _upto(x: pl.Expr, ms: pl.Series, me: pl.Series, cum: pl.Series) -> pl.Expr:
    """Nanoseconds of (ms, me) before each time x; cum: the lengths' running sum, 0 first."""
    j = pl.lit(ms).search_sorted(x, side="right").cast(_I64)
    prev = (j - 1).clip(0)
    s, e = pl.lit(ms).gather(prev), pl.lit(me).gather(prev)
    inside = (x - s).clip(0, e - s)
    return pl.when(j > 0).then(pl.lit(cum).gather(prev) + inside).otherwise(0)


def covered(a: pl.Series, b: pl.Series, ms: pl.Series, me: pl.Series) -> pl.Series:
    """Per interval [a_i, b_i): nanoseconds covered by the disjoint sorted intervals (ms, me)."""
    if not ms.len():
        return pl.Series("covered", [0] * a.len(), _I64)
    ms, me = ms.cast(_I64), me.cast(_I64)
    cum = pl.concat([pl.Series([0], dtype=_I64), (me - ms).cum_sum()])
    ab = pl.LazyFrame([a.cast(_I64).alias("a"), b.cast(_I64).alias("b")])
    got = ab.select(_upto(pl.col("b"), ms, me, cum) - _upto(pl.col("a"), ms, me, cum))
    return got.collect(engine="in-memory").to_series().alias("covered").cast(_I64)


def count_in(points: pl.Series, a: pl.Series, b: pl.Series) -> pl.Series:
    """Per interval [a_i, b_i): how many of the sorted `points` lie in it."""
    ab = pl.LazyFrame([a.cast(_I64).alias("a"), b.cast(_I64).alias("b")])
    at = pl.lit(points.cast(_I64))
    n = at.search_sorted(pl.col("b")).cast(_I64) - at.search_sorted(pl.col("a")).cast(_I64)
    return ab.select(n.alias("n")).collect(engine="in-memory").to_series()


def uncovered(ids: pl.Series, w0: pl.Series, w1: pl.Series, ms: pl.Series,
              me: pl.Series) -> pl.DataFrame:
    """Per window [w0_i, w1_i) (id ids_i), the stretches the disjoint sorted intervals (ms, me)
    leave uncovered, in order: step (the id), a, b."""
    windows = pl.LazyFrame([ids.cast(_I64).alias("step"), w0.cast(_I64).alias("w0"),
                            w1.cast(_I64).alias("w1")])
    if not ms.len():
        out = windows.select("step", pl.col("w0").alias("a"), pl.col("w1").alias("b"))
        return out.filter(pl.col("b") > pl.col("a")).collect(engine="in-memory")
    ms, me = ms.cast(_I64), me.cast(_I64)
    last = ms.len() - 1
    # the intervals inside window: i (the first ending after w0) up to j (the first starting at
    # or after w1), exclusive; the stretches are k = i..j, each between interval k-1 and k
    i = pl.lit(me).search_sorted(pl.col("w0"), side="right").cast(_I64)
    j = pl.lit(ms).search_sorted(pl.col("w1"), side="left").cast(_I64)
    k = windows.with_columns(i.alias("i"), j.alias("j"))
    k = k.with_columns(pl.int_ranges("i", pl.col("j") + 1).alias("k")).explode("k")
    after = pl.lit(me).gather((pl.col("k") - 1).clip(0, last)).clip(pl.col("w0"), pl.col("w1"))
    until = pl.lit(ms).gather(pl.col("k").clip(0, last)).clip(pl.col("w0"), pl.col("w1"))
    a = pl.when(pl.col("k") == pl.col("i")).then(pl.col("w0")).otherwise(after)
    b = pl.when(pl.col("k") == pl.col("j")).then(pl.col("w1")).otherwise(until)
    out = k.select("step", a.alias("a"), b.alias("b")).filter(pl.col("b") > pl.col("a"))
    return out.collect(engine="in-memory")
