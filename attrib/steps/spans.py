"""Interval arithmetic on nanosecond spans (numpy): unions and covered time. The one home; rules
read it through rules.intervals."""

from __future__ import annotations

import numpy as np


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
        return cum[prev] * (j > 0) + part

    return upto(np.asarray(b)) - upto(np.asarray(a))


def complement(w0: int, w1: int, ms: np.ndarray, me: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The stretches of [w0, w1) that the disjoint sorted intervals (ms, me) leave uncovered."""
    i, j = np.searchsorted(me, w0, side="right"), np.searchsorted(ms, w1, side="left")
    s, e = np.clip(ms[i:j], w0, w1), np.clip(me[i:j], w0, w1)
    a, b = np.concatenate([[w0], e]), np.concatenate([s, [w1]])
    keep = b > a
    return a[keep], b[keep]
