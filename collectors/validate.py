"""The reader boundary: values that cannot be true are dropped, column-wise, with one warning each.

Every reader passes its tables through `tables()` before building the Trace. Per table: rows
without a start time or a duration, with a negative duration, or that lie far outside the span
of the table's own events (a timestamp of 12 among timestamps of 1.7e18 ns) are dropped; exact
duplicate rows (the same event written twice, a directory holding a copy) are dropped; ids that
key more than one row are given fresh ones, so no later join can multiply rows; runtime launches
that share a correlation id are reported. Each check is a polars expression (no per-event Python)
and adds at most one warning that counts what it changed.
"""

from __future__ import annotations

import polars as pl

from attrib.errors import TraceError

# Events further than this from the table's median time (or 10x its central 80% span, if larger)
# are not from this run.
WINDOW_NS = 3600 * 10**9
NAME_LIMIT = 1 << 16  # real C++ template kernel names reach 5 KB (sampler_b1_v152k)
_TIMED = ("kernels", "ops", "frames", "launches", "markers", "copies")
# Columns that identify one event: two rows equal on all of them are the same event written twice
# (two kernels cannot start at the same ns on one stream; two calls on one thread neither).
_SAME_EVENT = {
    "kernels": ("name", "start_ns", "dur_ns", "device", "stream", "queue", "pid", "tid"),
    "copies": ("name", "start_ns", "dur_ns", "device", "stream", "bytes"),
    "launches": ("name", "start_ns", "dur_ns", "pid", "tid"),
    "markers": ("name", "start_ns", "dur_ns", "pid", "tid", "side"),
}
_ROWS = {"kernels": "kernels", "ops": "CPU ops", "frames": "Python frames",
         "launches": "runtime calls", "markers": "annotations", "copies": "copies"}


def _sorted_starts(df: pl.DataFrame) -> pl.Series:
    """The table's start times without nulls, sorted: the column itself where it already is
    (readers sort by start), so no copy of it is made."""
    s = df["start_ns"]
    if s.null_count() or not s.is_sorted():
        s = s.drop_nulls().sort()
    return s


def _increasing(s: pl.Series) -> bool:
    """Whether the column, nulls aside, strictly increases (then no value repeats): a check
    without hashing, true of the correlation ids of runtime calls sorted by start. Chunk by
    chunk (a reader's table is its pieces joined), so no copy of the column is made."""
    if s.null_count():
        s = s.drop_nulls()
    last = None
    for c in s.get_chunks():
        n = c.len()
        if n == 0:
            continue
        if last is not None and not c[0] > last:
            return False
        if n > 1 and not (c.slice(1) > c.slice(0, n - 1)).all():
            return False
        last = c[-1]
    return True


def _within(df: pl.DataFrame, lo: int, hi: int) -> bool:
    """Whether every row has a start and a duration, neither negative, and lies in [lo, hi]:
    judged from the columns' extremes alone (no column of row ends is built)."""
    start, dur = df["start_ns"], df["dur_ns"]
    if start.null_count() or dur.null_count():
        return False
    first, last, longest, shortest = start.min(), start.max(), dur.max(), dur.min()
    if not all(isinstance(v, int) for v in (first, last, longest, shortest)):
        return False
    return bool(0 <= first and lo <= first and 0 <= shortest and last + longest <= hi)


def _times(df: pl.DataFrame, label: str, warnings: list[str]) -> pl.DataFrame:
    """Drop rows without a start or duration, with a negative duration, or outside the run's
    span."""
    start, dur = pl.col("start_ns"), pl.col("dur_ns")
    missing = start.is_null() | dur.is_null()
    negative = (dur < 0) | (start < 0)  # no profiler clock runs before 0
    s = _sorted_starts(df)
    if s.len():
        n = s.len() - 1
        mid = s[n // 2]
        half = max(WINDOW_NS, 10 * (s[n * 9 // 10] - s[n // 10]))
        if _within(df, mid - half, mid + half):
            return df
        outside = (start < mid - half) | (start + dur > mid + half)
    else:
        outside = pl.lit(False)
    only_outside = outside.fill_null(False) & ~missing & ~negative.fill_null(False)
    flags = df.select(missing.sum().alias("m"), negative.fill_null(False).sum().alias("n"),
                      only_outside.sum().alias("o")).row(0)
    if not any(flags):
        return df
    m, n, o = flags
    what = (
        [f"{m} without a usable start time or duration (missing, not a number, or out of range)"]
        * bool(m)
        + [f"{n} with a negative duration or start time"] * bool(n)
        + [f"{o} timed hours away from the rest of the trace"] * bool(o)
    )
    warnings.append(f"{sum(flags)} {label} dropped: {', '.join(what)}")
    return df.filter(~missing & ~negative.fill_null(False) & ~outside.fill_null(False))


def _exact(df: pl.DataFrame, c: str) -> pl.Expr:
    """A key column for comparing rows: text as its category id (equal exactly where the text is
    equal), so that hashing a row does not copy its text (kernel names of 500 bytes: 110 MB per
    GB of trace in the row encoding)."""
    return pl.col(c).cast(pl.Categorical).to_physical() if df.schema[c] == pl.Utf8 else pl.col(c)


def _shared_start(df: pl.DataFrame) -> pl.Series:
    """Rows whose start time another row may share (a null start counts as shared): only they
    can be a copy of another row. Sorted starts (readers sort by them) are compared with their
    neighbours, not hashed."""
    s = df["start_ns"]
    if s.null_count() or not s.is_sorted():
        return s.is_duplicated() | s.is_null()
    same = s.slice(1) == s.slice(0, s.len() - 1)  # row i + 1 starts when row i does
    edge = pl.Series([False])
    return pl.concat([edge, same]) | pl.concat([same, edge])


def _first_copies(df: pl.DataFrame, names: list[str]) -> pl.Series | None:
    """True where no earlier row is equal on the columns `names`; None where every row is the
    first. With a start time among them, only the rows that share their start with another
    row are compared."""
    key = pl.struct([_exact(df, c) for c in names]).is_first_distinct()
    if "start_ns" in names and not df["start_ns"].null_count() and _increasing(df["start_ns"]):
        return None  # every row starts after the one before: none is a copy
    if "start_ns" not in names:
        first = df.select(key).to_series()
    else:
        shared = _shared_start(df)
        if not shared.any():
            return None
        first = pl.repeat(True, df.height, eager=True).scatter(
            shared.arg_true(), df.filter(shared).select(key).to_series())
    return None if first.all() else first


def _duplicates(df: pl.DataFrame, table: str, label: str, warnings: list[str]) -> pl.DataFrame:
    names = [c for c in _SAME_EVENT.get(table, ()) if c in df.columns]
    if not names or df.height < 2:
        return df
    first = _first_copies(df, names)
    if first is None:
        return df
    dup = df.height - int(first.sum())
    warnings.append(f"{dup} {label} are exact copies of another row "
                    "(the same event written twice); dropped")
    return df.filter(first)


def _nested_copies(df: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    """Annotations inside an earlier one of the same name on the same thread and side (a range
    opened twice: a decorator and a `with`, a wrapper around a wrapper) are one range: the inner
    copies are dropped with a warning, else each step would be counted twice."""
    group = [c for c in ("name", "pid", "tid", "side") if c in df.columns]
    if df.height < 2 or "dur_ns" not in df.columns:
        return df
    end = pl.col("start_ns") + pl.col("dur_ns")
    order = df.with_row_index("_row").sort(["start_ns", "dur_ns"], descending=[False, True])
    inside = end <= end.cum_max().shift(1).over(group)
    nested = order.filter(inside.fill_null(False))["_row"]
    if not nested.len():
        return df
    warnings.append(f"{nested.len()} annotations lie inside a copy of themselves (the same name "
                    "on the same thread: a range opened twice); each counted once")
    return df.with_row_index("_row").filter(~pl.col("_row").is_in(nested.implode())).drop("_row")


def _ids(df: pl.DataFrame, label: str, warnings: list[str]) -> pl.DataFrame:
    """Ids unique: a repeated id (e.g. dispatch ids of two processes) gets a fresh one."""
    if "id" not in df.columns or df.height < 2:
        return df
    if not df["id"].null_count() and _increasing(df["id"]):
        return df  # row numbers (strictly increasing): unique without hashing
    first = pl.col("id").is_first_distinct() & pl.col("id").is_not_null()
    repeated = df.height - df.select(first.sum()).item()
    if not repeated:
        return df
    top = int(df["id"].max() or 0) + 1
    warnings.append(f"{repeated} {label} repeat the id of another row; given new ids from {top}")
    fresh = top + pl.int_range(pl.len(), dtype=pl.Int64)
    return df.with_columns(pl.when(first).then(pl.col("id")).otherwise(fresh).alias("id"))


def _names(df: pl.DataFrame, label: str, warnings: list[str]) -> pl.DataFrame:
    if "name" not in df.columns or df.schema["name"] != pl.Utf8:
        return df
    # a missing "name" key is read as ""
    nameless = pl.col("name").is_null() | (pl.col("name") == "")
    nulls, longest = df.select(
        nameless.sum().alias("n"), pl.col("name").str.len_bytes().max().alias("l")
    ).row(0)
    if nulls:
        every = "every one of the " if nulls == df.height else ""
        warnings.append(f"{every}{nulls} {label} have no name; shown as '?'")
        shown = pl.when(nameless).then(pl.lit("?")).otherwise(pl.col("name"))
        df = df.with_columns(shown.alias("name"))
    if (longest or 0) > NAME_LIMIT:
        n = df.select((pl.col("name").str.len_bytes() > NAME_LIMIT).sum()).item()
        warnings.append(f"{n} {label} have names over {NAME_LIMIT} bytes; "
                        f"cut to {NAME_LIMIT} characters")
        df = df.with_columns(pl.col("name").str.slice(0, NAME_LIMIT))
    return df


def _ambiguous_correlation(launches: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    """A correlation id must key one runtime call; a shared one links no kernel (it cannot be
    told which)."""
    if "correlation" not in launches.columns or launches.height < 2:
        return launches
    if _increasing(launches["correlation"]):
        return launches  # no id repeats
    shared = pl.col("correlation").is_not_null() & pl.col("correlation").is_duplicated()
    n = launches.select(shared.sum()).item()
    if not n:
        return launches
    warnings.append(f"{n} runtime calls share their correlation id with another; "
                    "their kernels are left unlinked (which call launched them cannot be told)")
    unshared = pl.when(shared).then(None).otherwise(pl.col("correlation"))
    return launches.with_columns(unshared.alias("correlation"))


def table(name: str, df: pl.DataFrame | None, warnings: list[str]) -> pl.DataFrame | None:
    """One table through every check (see the module docstring)."""
    if df is None or df.height == 0 or name not in _TIMED:
        return df
    label = _ROWS[name]
    if "start_ns" in df.columns and "dur_ns" in df.columns:
        df = _times(df, label, warnings)
    df = _duplicates(df, name, label, warnings)
    if name == "markers":
        df = _nested_copies(df, warnings)
    df = _ids(df, label, warnings)
    if name in ("kernels", "copies", "markers"):
        df = _names(df, label, warnings)
    if name == "launches":
        df = _ambiguous_correlation(df, warnings)
    return df


# Two clocks a factor of about 1e3 or 1e6 apart: us beside ns, or s beside us (drift and run
# length widen it)
_UNIT_RATIOS = ((200, 5_000, "1e3"), (200_000, 5_000_000, "1e6"))


def _unit(ratio: float) -> str | None:
    return next((u for lo, hi, u in _UNIT_RATIOS if lo <= ratio <= hi), None)


def unit_break(tabs: dict[str, pl.DataFrame | None]) -> str | None:
    """Where timestamps change unit, said plainly; None if they agree. Within a table: its start
    times fall into two groups with a gap of 100x or more whose medians are ~1e3 or ~1e6 apart
    (some kernels in s); across tables: kernels and CPU-side rows (ops, runtime calls) whose
    medians are that far apart (one side in ns)."""
    medians: dict[str, float] = {}
    for name in _TIMED:
        df = tabs.get(name)
        if df is None or "start_ns" not in df.columns:
            continue
        s = _sorted_starts(df)
        s = s.filter(s > 0) if s.len() and s[0] <= 0 else s
        if s.len() < 2:
            continue
        medians[name] = float(s[s.len() // 2])
        if s[-1] < 99 * s[0]:
            continue  # no start 100x the one before it: no column of ratios needed
        ratio = s.slice(1) / s.slice(0, s.len() - 1)
        k = int(ratio.arg_max())
        low, high = s.slice(0, k + 1), s.slice(k + 1)
        if ratio[k] >= 100 and min(low.len(), high.len()) >= max(2, s.len() // 100):
            unit = _unit(float(high.median()) / float(low.median()))
            if unit:
                return (
                    f"{_ROWS[name]} change time unit: {low.len():,} start near "
                    f"{low.median() / 1e9:.3g} s and "
                    f"{high.len():,} near {high.median() / 1e9:.3g} s, {unit}x apart "
                    "(some written in another unit)"
                )
    for cpu in ("ops", "launches"):
        if "kernels" in medians and cpu in medians:
            a, b = medians["kernels"], medians[cpu]
            unit = _unit(max(a, b) / min(a, b))
            if unit:
                return (f"kernels start near {a / 1e9:.3g} s and "
                        f"{_ROWS[cpu]} near {b / 1e9:.3g} s, {unit}x "
                        "apart: one side's timestamps are in another unit")
    return None


def two_sessions(launches: pl.DataFrame | None) -> str | None:
    """Half or more of the runtime calls repeat their correlation id exactly once, the repeat the
    same time later: two sessions in one trace (one merged with a shifted copy of itself)."""
    if launches is None or launches.height < 20 or "correlation" not in launches.columns:
        return None
    if _increasing(launches["correlation"]):
        return None  # no id repeats
    span = pl.col("start_ns").max() - pl.col("start_ns").min()
    pairs = (launches.filter(pl.col("correlation").is_not_null()).group_by("correlation")
             .agg(pl.len().alias("n"), span.alias("shift"))
             .filter(pl.col("n") == 2))
    if 2 * pairs.height * 2 < launches.height:
        return None
    shift = float(pairs["shift"].median())
    same = pairs.filter((pl.col("shift") - shift).abs() <= 0.01 * shift + 1000).height
    if shift <= 0 or same < 0.9 * pairs.height:
        return None
    return (
        f"{2 * pairs.height:,} runtime calls repeat their correlation id once, "
        f"each {shift / 1e9:.3f} s later: "
        "two profiling sessions in one trace (merged with a shifted copy?); "
        "analyze each session's trace on its own"
    )


# A GPU's clock against the host's, from kernels and the calls that launched them: every kernel
# starts after its launch began (seen: 5 us to 146 ms for the earliest kernel of a device on the
# fixtures, the host far ahead of a busy GPU). Half of them earlier than LEAD_NS, or 99% later
# than LAG_NS: the two clocks differ (an offset moves every kernel of the device; a few broken
# timestamps move a few). The first CLOCK_SAMPLE kernels tell.
LEAD_NS = 1_000_000
LAG_NS = 1_000_000_000
CLOCK_SAMPLE = 50_000
# A kernel cannot outlast the host timeline it was launched in by more than this.
OUTLAST_NS = 1_000_000_000


def clock_break(kernels: pl.DataFrame | None, launches: pl.DataFrame | None) -> str | None:
    """Where a device's kernels start before the calls that launched them, or every one of them
    seconds after: its clock is not the host's. None where they agree (or nothing links)."""
    need = ("correlation", "start_ns")
    if kernels is None or launches is None or not all(
            c in t.columns for c in need for t in (kernels, launches)):
        return None
    calls = launches.head(2 * CLOCK_SAMPLE).select(
        "correlation", pl.col("start_ns").alias("_call")).drop_nulls()
    calls = calls.unique("correlation", keep="none")  # an id two calls share tells nothing
    lag = pl.col("start_ns") - pl.col("_call")
    by = ["device"] if "device" in kernels.columns else []
    sample = kernels.head(CLOCK_SAMPLE).select(*by, *need).join(calls, on="correlation")
    if not sample.height:
        return None
    rows = (sample.group_by(by or pl.lit(0).alias("device"))
            .agg(lag.median().alias("median"), lag.quantile(0.01).alias("early"),
                 pl.len().alias("n")))
    for device, median, early, n in rows.sort("device").iter_rows():
        if median < -LEAD_NS:
            return (f"device {device}'s kernels start {-median / 1e6:,.1f} ms before the calls "
                    f"that launched them (the median of {n:,} linked): its clock is not the "
                    "host's, so its kernels cannot be placed in their steps")
        if early > LAG_NS:
            return (f"device {device}'s kernels start {early / 1e9:,.2f} s or more after the "
                    f"calls that launched them (99% of {n:,} linked): its clock is not the "
                    "host's, so its kernels cannot be placed in their steps")
    return None


def _outlasting(tabs: dict[str, pl.DataFrame | None], warnings: list[str]) -> None:
    """Kernels longer than the whole host timeline (launches and ops) by OUTLAST_NS are dropped
    with a warning: such a duration cannot be true (a kernel of 1e9 us in a 2 s capture)."""
    kernels = tabs.get("kernels")
    host = [t for t in (tabs.get("launches"), tabs.get("ops")) if t is not None and t.height]
    if kernels is None or not kernels.height or not host:
        return
    lo = min(int(t["start_ns"].min()) for t in host)
    hi = max(int((t["start_ns"] + t["dur_ns"]).max()) for t in host)
    too_long = pl.col("dur_ns") > (hi - lo) + OUTLAST_NS
    n = kernels.select(too_long.sum()).item()
    if n:
        longest = kernels["dur_ns"].max()
        warnings.append(f"{n} kernels dropped: they last up to {longest / 1e9:,.1f} s, longer "
                        f"than the whole host timeline ({(hi - lo) / 1e9:,.2f} s)")
        tabs["kernels"] = kernels.filter(~too_long)


def tables(tabs: dict[str, pl.DataFrame | None], warnings: list[str],
           path: object = None) -> dict[str, pl.DataFrame | None]:
    """Every table through `table()`; warnings are appended to `warnings`. Timestamps in two units
    or two sessions in one trace (before anything is dropped), or a GPU clock that is not the
    host's (after), are a TraceError naming `path`."""
    problem = unit_break(tabs) or two_sessions(tabs.get("launches"))
    if problem and path is not None:
        raise TraceError(path, problem)
    out = {k: table(k, v, warnings) for k, v in tabs.items()}
    problem = clock_break(out.get("kernels"), out.get("launches"))  # broken rows dropped first
    if problem and path is not None:
        raise TraceError(path, problem)
    _outlasting(out, warnings)
    return out
