"""Interval arithmetic on nanosecond spans (polars Int64 Series): unions, covered time, the
stretches left uncovered."""

from __future__ import annotations

import polars as pl

from attrib.steps.spans import Spans, busy, covered, merge, of_events, uncovered

__all__ = ("Spans", "busy", "covered", "merge", "ms", "spans", "total", "uncovered")


def spans(df: pl.DataFrame) -> Spans:
    """(start, end) nanosecond Series of a table with start_ns, dur_ns."""
    got = df.lazy().select(*of_events()).collect(engine="in-memory")
    return got["s"], got["e"]


def total(s: pl.Series, e: pl.Series) -> int:
    """Nanoseconds of the union."""
    ms, me = merge(s, e)
    return int((me - ms).sum())


def ms(ns: pl.Series) -> pl.Series:
    """Milliseconds of nanoseconds, each divided by 1e6 as Python divides (polars multiplies a
    column by the reciprocal 1/1e6: the last bit can differ)."""
    return pl.Series(ns.name, [None if v is None else v / 1e6 for v in ns.to_list()], pl.Float64)
