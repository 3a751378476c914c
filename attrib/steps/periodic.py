"""Steps from the kernel sequence alone, for traces without step markers (e.g. plain llama-bench).

A decode loop launches the same kernel-name sequence once per token. `split_tokens` finds its
period from the autocorrelation of kernel-name ids (matches at each lag, summed over names with
FFTs), prefers among well-matching lags the one whose boundary has a distinct GPU idle gap (the
host samples between tokens; layer boundaries inside a token have none), then walks the sequence
one period at a time, snapping each boundary to the largest gap near where it is expected.
Runtime helper kernels (`__amd_rocclr_*` copies/fills) are left out of the pattern and assigned to
the step whose time window holds them. Partial windows at the ends get no step.

Limits: one repeating loop is assumed (a trace mixing prefill and decode forwards of different
lengths gets boundaries from the dominant loop); each step's phase is guessed from its own kernel
names, so a mislabelled step still tells which kind of work it holds.
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl

from attrib.components.patterns import GEMM_NAMES, GEMV_NAMES, RUNTIME_HELPERS

MAX_PATTERN = 200_000
_GEMMISH = re.compile(f"{GEMM_NAMES}|{GEMV_NAMES}")


def _lag_matches(ids: np.ndarray) -> np.ndarray:
    """m[p] = number of i with ids[i] == ids[i + p], for every lag p < len(ids)."""
    n = len(ids)
    size = 1 << int(np.ceil(np.log2(2 * n)))
    codes, counts = np.unique(ids, return_counts=True)
    codes = codes[counts > 1]
    rows = max(1, min(32, (1 << 24) // size))  # bound the FFT buffers (~128 MiB)
    total = np.zeros(n)
    for chunk in np.array_split(codes, max(1, -(-len(codes) // rows))):
        if len(chunk) == 0:
            continue
        onehot = (ids[None, :] == chunk[:, None]).astype(np.float64)
        spec = np.fft.rfft(onehot, size, axis=1)
        total += np.fft.irfft(spec * spec.conj(), size, axis=1)[:, :n].sum(axis=0)
    return np.rint(total)


def _gap_score(gaps: np.ndarray, period: int) -> tuple[float, int]:
    """(lower-quartile gap at the best phase / overall median gap, that phase) for a period.

    A true loop boundary idles in (nearly) every repetition, so the lower quartile over the
    repetitions is used: one slow repetition (the warm-up) cannot fake a boundary.
    """
    rows = len(gaps) // period
    table = gaps[: rows * period].reshape(rows, period)
    med = np.quantile(table, 0.25, axis=0)
    phase = int(np.argmax(med))
    return float(med[phase] / max(np.median(gaps), 1.0)), phase


def find_period(ids: np.ndarray, gaps: np.ndarray, min_period: int = 2) -> tuple[int, int] | None:
    """(period, phase) of the repeating name sequence, or None when nothing repeats."""
    n = len(ids)
    if n < 2 * min_period:
        return None
    matches = _lag_matches(ids)
    lags = np.arange(n)
    frac = np.where(lags > 0, matches / np.maximum(n - lags, 1), 0.0)
    frac[:min_period] = 0.0
    frac[n // 2 + 1:] = 0.0  # at least two repetitions
    best = frac.max()
    if best < 0.5:
        return None
    left, right = np.roll(frac, 1), np.roll(frac, -1)
    cands = np.flatnonzero((frac >= 0.8 * best) & (frac >= left) & (frac >= right))
    if (cands <= n // 3).any():  # prefer lags seen at least three times: quartiles need rows
        cands = cands[cands <= n // 3]
    for p in cands[:64]:
        score, phase = _gap_score(gaps, int(p))
        if score >= 4.0:  # a distinct idle gap marks the loop boundary
            return int(p), phase
    p = int(next(c for c in cands if frac[c] >= best - 1e-9) if frac[cands].max() >= best - 1e-9
            else cands[0])
    return p, _gap_score(gaps, p)[1]


def _boundaries(gaps: np.ndarray, period: int, phase: int) -> list[int]:
    """Step starts one period apart; a start without a distinct gap moves to the largest one
    within a quarter period (sequences that drift by a few kernels)."""
    n, width = len(gaps), max(1, period // 4)
    threshold = 4.0 * max(float(np.median(gaps)), 1.0)
    out = [phase]
    while out[-1] + period < n:
        expected = out[-1] + period
        lo, hi = max(out[-1] + 1, expected - width), min(n, expected + width + 1)
        if expected < n and gaps[expected] >= threshold:
            out.append(expected)  # on time: keep it (a slow warm-up has big gaps everywhere)
            continue
        j = lo + int(np.argmax(gaps[lo:hi]))
        out.append(j if gaps[j] >= threshold else expected)
    return out


def _phase_of(names: pl.Expr) -> pl.Expr:
    dec = names.str.contains(GEMV_NAMES).sum()
    pre = names.str.contains(GEMM_NAMES).sum()
    return (pl.when(dec > pre).then(pl.lit("decode"))
            .when(pre > dec).then(pl.lit("prefill")).otherwise(pl.lit("unknown")))


def forward_ends(names: pl.Series, period: int) -> list[int] | None:
    """Positions of the output GEMM that ends each forward pass, when the period found is a layer:
    a GEMM/GEMV name seen at least twice, never twice within two periods, at a steady spacing (the
    lm_head after the layer loop; llama.cpp's Q6_K output GEMV). The latest such name wins; None
    when there is none (the period already is a forward pass: a decode token loop). The positions
    of each GEMM-like name are grouped by polars: no Python string per kernel (1 M kernels)."""
    gemmish = names.to_frame("name").with_row_index("i").filter(
        pl.col("name").str.contains(_GEMMISH.pattern))
    groups = gemmish.group_by("name").agg(pl.col("i"))["i"]
    best: np.ndarray | None = None
    for positions in groups:
        at = positions.to_numpy().astype(np.int64)
        if len(at) < 2:
            continue
        spacing = np.diff(at)
        if spacing.min() < 2 * period or spacing.max() > 1.5 * spacing.min():
            continue
        if best is None or at[-1] > best[-1]:
            best = at
    return None if best is None else best.tolist()


def _step_of(starts: pl.Series, bounds: list[int], partial: bool,
             last_end: int | None) -> pl.Expr:
    """Each kernel's step: the last of the steps starting at `starts[bounds]` that starts at or
    before it, null before the first; where `partial`, null in the trailing window too (after
    `last_end`, the last forward's output GEMM, where given; else the last step)."""
    at = pl.lit(starts.gather(bounds))
    idx = at.search_sorted(pl.col("start_ns"), side="right").cast(pl.Int64) - 1
    valid = idx >= 0
    if partial:
        valid &= (idx < len(bounds) - 1) if last_end is None else pl.col("start_ns") <= last_end
    return pl.when(valid).then(idx)


def split_tokens(kernels: pl.DataFrame, min_period: int = 2) -> pl.DataFrame:
    """`kernels` (sorted by start) with `step` (token index from 0, null outside the loop) and
    `phase` ("decode" when GEMV kernels such as llama.cpp's mul_mat_vec_* dominate the step,
    "prefill" for mul_mat_q / GEMM, else "unknown")."""
    k = kernels.sort("start_ns").with_row_index("_row")
    helper = pl.col("name").str.contains(RUNTIME_HELPERS)
    loop = k.filter(~helper).with_columns(
        _gap=(pl.col("start_ns") - (pl.col("start_ns") + pl.col("dur_ns")).shift(1))
        .fill_null(0).clip(0))
    if loop.height == 0:
        return k.drop("_row").with_columns(step=pl.lit(None, pl.Int64), phase=pl.lit(None, pl.Utf8))
    ids = loop["name"].cast(pl.Categorical).to_physical().to_numpy().astype(np.int64)
    gaps = loop["_gap"].to_numpy().astype(np.float64)
    head = min(len(ids), MAX_PATTERN)  # the period is found on a prefix; boundaries walk all
    found = find_period(ids[:head], gaps[:head], min_period)
    if found is None:
        return k.drop("_row").with_columns(step=pl.lit(None, pl.Int64),
                                           phase=pl.lit(None, pl.Utf8))
    period, phase = found
    ends = forward_ends(loop["name"], period)
    last: int | None = None
    if ends is not None:  # one step per forward pass, each ending at its output GEMM
        bounds, last = [0, *[e + 1 for e in ends[:-1]]], loop["start_ns"][ends[-1]]
        partial = True
    else:
        bounds = _boundaries(gaps, period, phase)
        partial = len(gaps) - bounds[-1] < period // 2  # the trailing window is a partial step
    k = k.with_columns(step=_step_of(loop["start_ns"], bounds, partial, last))
    phases = k.filter(pl.col("step").is_not_null()).group_by("step").agg(
        phase=_phase_of(pl.col("name")))
    return k.join(phases, on="step", how="left").sort("_row").drop("_row")
