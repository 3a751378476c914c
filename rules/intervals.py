"""Interval arithmetic on nanosecond spans (numpy): unions and covered time."""

from __future__ import annotations

import numpy as np
import polars as pl

from attrib.steps.spans import covered, merge

Spans = tuple[np.ndarray, np.ndarray]  # merged (disjoint, sorted) starts and ends

__all__ = ("Spans", "covered", "merge", "spans", "total")


def spans(df: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) nanosecond arrays of a table with start_ns, dur_ns."""
    s = df["start_ns"].to_numpy().astype(np.int64)
    return s, s + df["dur_ns"].fill_null(0).to_numpy().astype(np.int64)


def total(s: np.ndarray, e: np.ndarray) -> int:
    """Nanoseconds of the union."""
    ms, me = merge(s, e)
    return int((me - ms).sum())
