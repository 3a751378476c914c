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
_ROWS = {"kernels": "kernels", "ops": "CPU ops", "frames": "Python frames", "launches": "runtime calls",
         "markers": "annotations", "copies": "copies"}


def _times(df: pl.DataFrame, label: str, warnings: list[str]) -> pl.DataFrame:
    """Drop rows without a start or duration, with a negative duration, or outside the run's span."""
    start, dur = pl.col("start_ns"), pl.col("dur_ns")
    missing = start.is_null() | dur.is_null()
    negative = dur < 0
    s = df["start_ns"].drop_nulls().sort()  # readers sort by start: no work then
    if s.len():
        n = s.len() - 1
        mid = s[n // 2]
        half = max(WINDOW_NS, 10 * (s[n * 9 // 10] - s[n // 10]))
        outside = (start < mid - half) | (start + dur > mid + half)
    else:
        outside = pl.lit(False)
    flags = df.select(missing.sum().alias("m"), negative.fill_null(False).sum().alias("n"),
                      (outside.fill_null(False) & ~missing & ~negative.fill_null(False)).sum().alias("o")).row(0)
    if not any(flags):
        return df
    m, n, o = flags
    what = [f"{m} without a usable start time or duration (missing, not a number, or out of range)"] * bool(m) + [f"{n} with a negative duration"] * bool(n) \
        + [f"{o} timed hours away from the rest of the trace"] * bool(o)
    warnings.append(f"{sum(flags)} {label} dropped: {', '.join(what)}")
    return df.filter(~missing & ~negative.fill_null(False) & ~outside.fill_null(False))


def _duplicates(df: pl.DataFrame, table: str, label: str, warnings: list[str]) -> pl.DataFrame:
    key = [c for c in _SAME_EVENT.get(table, ()) if c in df.columns]
    if not key or df.height < 2:
        return df
    dup = df.select(pl.struct(key).is_first_distinct().not_().sum()).item()
    if not dup:
        return df
    warnings.append(f"{dup} {label} are exact copies of another row (the same event written twice); dropped")
    return df.filter(pl.struct(key).is_first_distinct())


def _ids(df: pl.DataFrame, label: str, warnings: list[str]) -> pl.DataFrame:
    """Ids unique: a repeated id (e.g. dispatch ids of two processes) gets a fresh one."""
    if "id" not in df.columns or df.height < 2:
        return df
    ids = df["id"]
    if not ids.null_count() and ids.is_sorted() and ids.diff().drop_nulls().min() > 0:
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
    nulls, longest = df.select(pl.col("name").null_count().alias("n"), pl.col("name").str.len_bytes().max().alias("l")).row(0)
    if nulls:
        warnings.append(f"{nulls} {label} have no name; shown as '?'")
        df = df.with_columns(pl.col("name").fill_null("?"))
    if (longest or 0) > NAME_LIMIT:
        n = df.select((pl.col("name").str.len_bytes() > NAME_LIMIT).sum()).item()
        warnings.append(f"{n} {label} have names over {NAME_LIMIT} bytes; cut to {NAME_LIMIT} characters")
        df = df.with_columns(pl.col("name").str.slice(0, NAME_LIMIT))
    return df


def _ambiguous_correlation(launches: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    """A correlation id must key one runtime call; a shared one links no kernel (it cannot be told which)."""
    if "correlation" not in launches.columns or launches.height < 2:
        return launches
    shared = pl.col("correlation").is_not_null() & pl.col("correlation").is_duplicated()
    n = launches.select(shared.sum()).item()
    if not n:
        return launches
    warnings.append(f"{n} runtime calls share their correlation id with another; their kernels are left "
                    "unlinked (which call launched them cannot be told)")
    return launches.with_columns(pl.when(shared).then(None).otherwise(pl.col("correlation")).alias("correlation"))


def table(name: str, df: pl.DataFrame | None, warnings: list[str]) -> pl.DataFrame | None:
    """One table through every check (see the module docstring)."""
    if df is None or df.height == 0 or name not in _TIMED:
        return df
    label = _ROWS[name]
    if "start_ns" in df.columns and "dur_ns" in df.columns:
        df = _times(df, label, warnings)
    df = _duplicates(df, name, label, warnings)
    df = _ids(df, label, warnings)
    if name in ("kernels", "copies", "markers"):
        df = _names(df, label, warnings)
    if name == "launches":
        df = _ambiguous_correlation(df, warnings)
    return df


def tables(tabs: dict[str, pl.DataFrame | None], warnings: list[str]) -> dict[str, pl.DataFrame | None]:
    """Every table through `table()`; warnings are appended to `warnings`."""
    return {k: table(k, v, warnings) for k, v in tabs.items()}
