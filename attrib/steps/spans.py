"""Interval arithmetic on nanosecond spans [start, end), as polars Int64 Series: unions, the
time they cover, the stretches they leave, the points inside. The one home; rules read it through
rules.intervals.

Polars, not numpy: `attrib analyze` imports no numpy (its import took ~45 ms of a 0.3 s start).
Each function makes a fixed number of queries (most one), whatever the number of spans or windows.
"""

from __future__ import annotations

import polars as pl

# sorted or not, the starts and ends of a set of intervals
Spans = tuple[pl.Series, pl.Series]
_I64 = pl.Int64


def of_events() -> tuple[pl.Expr, pl.Expr]:
    """A table's events (start_ns, dur_ns) as spans: (s, e) expressions, Int64 ns; a null
    duration is a span of no length."""
    s = pl.col("start_ns").cast(_I64)
    return s.alias("s"), (s + pl.col("dur_ns").fill_null(0).cast(_I64)).alias("e")


def empty() -> Spans:
    """No intervals."""
    return pl.Series("s", [], _I64), pl.Series("e", [], _I64)


def unions(spans: pl.LazyFrame, by: list[str] | None = None) -> pl.LazyFrame:
    """The union of the intervals (s, e) of each group of `by` (all of them without): sorted
    disjoint intervals (by..., s, e), the groups sorted."""
    keys = by or []
    ordered = spans.select(*keys, pl.col("s").cast(_I64), pl.col("e").cast(_I64))
    ordered = ordered.sort(*keys, "s", maintain_order=True)
    reach = pl.col("e").cum_max()  # the latest end so far, in the group
    ordered = ordered.with_columns(reach.over(keys) if keys else reach)
    # a union starts where the reach before falls short of it, or a group starts
    new = pl.col("s") > pl.col("e").shift(1)
    for key in keys:
        new = new | (pl.col(key) != pl.col(key).shift(1))
    runs = ordered.with_columns(new.fill_null(True).alias("_new"))
    end = pl.col("_new").shift(-1).fill_null(True)  # it ends where the next one starts
    return runs.select(pl.col(*keys, "s").filter(pl.col("_new")), pl.col("e").filter(end))


def merge(s: pl.Series, e: pl.Series) -> Spans:
    """Union of intervals [s, e) as sorted disjoint intervals."""
    if not s.len():
        return empty()
    got = unions(pl.LazyFrame([s.alias("s"), e.alias("e")])).collect(engine="in-memory")
    return got["s"], got["e"]


def busy(*tables: pl.DataFrame) -> Spans:
    """The union of the events' spans (start_ns, dur_ns) of `tables`, an event without a start or
    a duration left out: the time one of them runs, as sorted disjoint intervals."""
    parts = [t.lazy().select("start_ns", "dur_ns").drop_nulls().select(*of_events())
             for t in tables]
    got = unions(pl.concat(parts)).collect(engine="in-memory")
    return got["s"], got["e"]


def _upto(x: pl.Expr, ms: pl.Series, me: pl.Series, cum: pl.Series) -> pl.Expr:
    """Nanoseconds of (ms, me) before each time x; cum: the lengths' running sum, 0 first."""
    j = pl.lit(ms).search_sorted(x, side="right").cast(_I64)
    prev = (j - 1).clip(0)
    s, e = pl.lit(ms).gather(prev), pl.lit(me).gather(prev)
    inside = (x - s).clip(0, e - s)
    return pl.when(j > 0).then(pl.lit(cum).gather(prev) + inside).otherwise(0)


def covered(a: pl.Series, b: pl.Series, ms: pl.Series, me: pl.Series) -> pl.Series:
    """Per interval [a_i, b_i): nanoseconds covered by the disjoint sorted intervals (ms, me);
    null where a_i or b_i is."""
    ab = pl.LazyFrame([a.cast(_I64).alias("a"), b.cast(_I64).alias("b")])
    ns = pl.lit(0, _I64)
    if ms.len():
        ms, me = ms.cast(_I64), me.cast(_I64)
        cum = pl.concat([pl.Series([0], dtype=_I64), (me - ms).cum_sum()])
        ns = _upto(pl.col("b"), ms, me, cum) - _upto(pl.col("a"), ms, me, cum)
    unknown = pl.col("a").is_null() | pl.col("b").is_null()  # an interval without an end
    got = ab.select(pl.when(unknown).then(None).otherwise(ns).cast(_I64).alias("covered"))
    return got.collect(engine="in-memory").to_series()


def points_in(points: pl.Series, a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """Per row, how many of the sorted `points` lie in [a, b) (an expression of a query)."""
    at = pl.lit(points.cast(_I64))

    def before(x: pl.Expr) -> pl.Expr:  # the points before each x
        return at.search_sorted(x.cast(_I64), side="left").cast(_I64)

    return before(b) - before(a)


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


# labels one round of first_cover takes: a bit each of an Int64 mask, bit 0 for what came before
_LABELS = 62


def first_cover(windows: pl.DataFrame, spans: pl.DataFrame) -> tuple[pl.DataFrame, Spans]:
    """Each instant of each window [w0, w1) (id `step`) to the lowest label g (>= 0) whose spans
    (g, s, e) cover it: per (step, g) that covers some of it, ns (its time there) and n (its
    spans starting in the window); and the union of all spans. That is, for every label at once,
    covered(union of labels <= g) - covered(union of labels < g): the ledger's busy rows."""
    win = windows.lazy().select(pl.col("step").cast(_I64), pl.col("w0").cast(_I64),
                                pl.col("w1").cast(_I64))
    # one chunk a column: a query over pieces of a column (a concat's) took 3x as long
    given = spans.select(pl.col("g").cast(_I64), pl.col("s").cast(_I64),
                         pl.col("e").cast(_I64)).rechunk()
    labels = sorted(given["g"].unique().to_list())
    union, parts = empty(), [pl.LazyFrame(schema={"step": _I64, "g": _I64, "ns": _I64})]
    for at in range(0, len(labels), _LABELS - 1):  # one round for up to 61 labels
        mine = given.filter(pl.col("g").is_in(labels[at:at + _LABELS - 1]))
        segments, union = _segments(mine, union)
        parts.append(_within_windows(win, segments).filter(pl.col("g") != -1))
    owned = pl.concat(parts).join(_starts_in(win, given), on=["step", "g"], how="left")
    owned = owned.with_columns(pl.col("n").fill_null(0))
    return owned.collect(engine="in-memory"), union


def _segments(spans: pl.DataFrame, before: Spans) -> tuple[pl.DataFrame, Spans]:
    """The time `before` and `spans` cover, cut where the lowest label covering it changes: s, e
    and g (-1 where `before` covers it); and the union of both."""
    # a bit a label, bit 0 `before`'s: a group's union has one interval open at a time, so the
    # running sum of +bit at its starts and -bit at its ends is the set of labels covering
    weights = {-1: 1, **{g: 2 << i for i, g in enumerate(sorted(spans["g"].unique()))}}
    prior = pl.LazyFrame([before[0].alias("s"), before[1].alias("e")])
    prior = prior.select(pl.lit(-1, _I64).alias("g"), "s", "e")
    both = pl.concat([prior, spans.lazy()], rechunk=True)
    each = unions(both, ["g"]).collect(engine="in-memory").lazy()
    weight = pl.col("g").replace_strict(weights, return_dtype=_I64)
    edges = pl.concat([each.select(pl.col("s").alias("t"), weight.alias("d")),
                       each.select(pl.col("e").alias("t"), (-weight).alias("d"))])
    edges = edges.group_by("t").agg(pl.col("d").sum()).sort("t")
    lowest = pl.col("mask") & -pl.col("mask")  # the lowest label's bit
    label = lowest.replace_strict({w: g for g, w in weights.items()}, return_dtype=_I64)
    cut = edges.select(pl.col("t").alias("s"), pl.col("t").shift(-1).alias("e"),
                       pl.col("d").cum_sum().alias("mask")).filter(pl.col("mask") != 0)
    segments = cut.select("s", "e", label.alias("g")).collect(engine="in-memory")
    # from the spans, not the segments: a span of no length is an interval of the union
    union = unions(each).collect(engine="in-memory")
    return segments, (union["s"], union["e"])


def _within_windows(windows: pl.LazyFrame, segments: pl.DataFrame) -> pl.LazyFrame:
    """Per window and label: the time of the label's segments inside it (step, g, ns > 0)."""
    if not segments.height:
        return pl.LazyFrame(schema={"step": _I64, "g": _I64, "ns": _I64})
    s, e, g = pl.lit(segments["s"]), pl.lit(segments["e"]), pl.lit(segments["g"])
    # the segments a window meets: from the first ending after w0 to the last starting before w1
    first = e.search_sorted(pl.col("w0"), side="right").cast(_I64)
    stop = s.search_sorted(pl.col("w1"), side="left").cast(_I64)
    met = windows.with_columns(pl.int_ranges(first, stop).alias("k")).explode("k")
    met = met.drop_nulls("k")
    a = pl.max_horizontal(s.gather(pl.col("k")), pl.col("w0"))
    b = pl.min_horizontal(e.gather(pl.col("k")), pl.col("w1"))
    rows = met.select("step", g.gather(pl.col("k")).alias("g"), (b - a).alias("ns"))
    return rows.filter(pl.col("ns") > 0).group_by("step", "g").agg(pl.col("ns").sum())


def _starts_in(windows: pl.LazyFrame, spans: pl.DataFrame) -> pl.LazyFrame:
    """Per window and label: how many of the label's spans start inside it (step, g, n)."""
    if not spans.height:
        return pl.LazyFrame(schema={"step": _I64, "g": _I64, "n": _I64})
    points = spans.select("g", "s").sort("s")
    s, g = pl.lit(points["s"]), pl.lit(points["g"])
    first = s.search_sorted(pl.col("w0"), side="left").cast(_I64)
    stop = s.search_sorted(pl.col("w1"), side="left").cast(_I64)
    met = windows.with_columns(pl.int_ranges(first, stop).alias("k")).explode("k")
    met = met.drop_nulls("k").select("step", g.gather(pl.col("k")).alias("g"))
    return met.group_by("step", "g").agg(pl.len().cast(_I64).alias("n"))
