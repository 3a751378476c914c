"""The median of a few numbers, as `statistics.median` computes it, without importing statistics
(with fractions and random, ~3 ms of the start of `attrib analyze`)."""

from __future__ import annotations

from collections.abc import Iterable


def median(values: Iterable[float]) -> float | None:
    """The middle value of `values`, the mean of the middle two of an even count (as
    statistics.median); None where there are none."""
    xs = sorted(values)
    n = len(xs)
    if not n:
        return None
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
