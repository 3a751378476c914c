"""Interval arithmetic on nanosecond spans (numpy): unions and covered time."""

from __future__ import annotations

import numpy as np
import polars as pl


Spans = tuple[np.ndarray, np.ndarray]  # merged (disjoint, sorted) starts and ends


def merge(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals [s, e) as sorted disjoint intervals."""
    if not len(s):
        return s, e
    o = np.argsort(s, kind="stable")
    s, e = s[o], np.maximum.accumulate(e[o])
    new = np.empty(len(s), dtype=bool)
    new[0], new[1:] = True, s[1:] > e[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.append(e[idx[1:] - 1], e[-1])


def covered(a: np.ndarray, b: np.ndarray, ms: np.ndarray, me: np.ndarray) -> np.ndarray:
    """Per interval [a_i, b_i): nanoseconds covered by the disjoint sorted intervals (ms, me)."""
    if not len(ms):
        return np.zeros(len(a))
    cum = np.concatenate([[0], np.cumsum(me - ms)])

    def upto(x: np.ndarray) -> np.ndarray:
        j = np.searchsorted(ms, x, side="right")
        prev = np.clip(j - 1, 0, None)
        part = np.where(j > 0, np.clip(x - ms[prev], 0, me[prev] - ms[prev]), 0)
        out: np.ndarray = cum[prev] * (j > 0) + part
        return out

    got: np.ndarray = upto(np.asarray(b)) - upto(np.asarray(a))
    return got


def spans(df: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) nanosecond arrays of a table with start_ns, dur_ns."""
    s = df["start_ns"].to_numpy().astype(np.int64)
    return s, s + df["dur_ns"].fill_null(0).to_numpy().astype(np.int64)


def total(s: np.ndarray, e: np.ndarray) -> int:
    """Nanoseconds of the union."""
    ms, me = merge(s, e)
    return int((me - ms).sum())
