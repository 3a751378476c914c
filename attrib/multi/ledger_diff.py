"""Where a phase's step time went between two sides: the change of the mean step split over the
step-time ledger rows of both (attrib.steps.ledger: every nanosecond of a step once, with one
cause), so the rows sum to the change of the mean step.

A row is (cause, what): a kernel component, a copy, launch gaps, a host op or Python frame that
held the GPU idle, a synchronizing call, a wait, the profiler's own cost. With several traces on
a side, a row is the step-weighted mean of the traces' rows (a trace without it counts 0), its
median gap the step-weighted mean of the traces' medians.

Example:
    >>> diff = ledger_diff(base_phases, cand_phases)
    >>> diff.delta_ms, diff.rows[0].label
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from attrib.analysis.model import Phase
from attrib.steps.ledger import OWN_COST

DEVICE = ("kernels", "copy")  # ledger causes that are GPU time; the rest is host-side or a wait
REST = "rest"  # the cause of the row that sums the smaller rows in a shown table
WAIT = "outside"  # GPU work queued, waiting on something the trace does not show
KEEP = 12  # rows shown by name; the rest summed into one row (the sum still holds)
WORDS = {"launch": "launch gaps", OWN_COST: "profiler (estimate)", "copy": "copy"}


class Move(msgspec.Struct, frozen=True):
    """One ledger row on both sides: mean ms a step, events a step and the median event (us,
    launch gaps and host/sync stretches only) per side, and the change."""

    cause: str
    what: str
    base_ms: float
    cand_ms: float
    base_n: float | None
    cand_n: float | None
    base_median_us: float | None
    cand_median_us: float | None

    @property
    def delta_ms(self) -> float:
        return self.cand_ms - self.base_ms

    @property
    def side(self) -> str:
        """device (kernels, copies), wait (queued work waiting), host (launch gaps, host ops and
        frames, syncs, the profiler), or rest (the summed smaller rows)."""
        if self.cause == REST:
            return REST
        return "device" if self.cause in DEVICE else "wait" if self.cause == WAIT else "host"

    @property
    def label(self) -> str:
        """The row as a reader names it: `attention`, `launch gaps`, `launch gaps inside graph
        replays`, `host aten::linear`."""
        if self.cause == "kernels":
            return self.what
        if self.cause == REST:
            return self.what
        if self.cause == "launch" and self.what != "between launches":
            return f"{WORDS['launch']} {self.what}"  # inside graph replays: another row
        if self.cause in ("launch", OWN_COST):
            return WORDS[self.cause]
        return f"{self.cause} {self.what}"

    def detail(self) -> str:
        """Counts and median gaps of both sides, where the ledger has them."""
        parts = []
        if self.base_n is not None or self.cand_n is not None:
            parts.append(f"{_n(self.base_n)} -> {_n(self.cand_n)} a step")
        if self.base_median_us is not None or self.cand_median_us is not None:
            parts.append(f"median {_us(self.base_median_us)} -> {_us(self.cand_median_us)} us")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"cause": self.cause, "what": self.what, "side": self.side,
                "base_ms": round(self.base_ms, 4), "cand_ms": round(self.cand_ms, 4),
                "delta_ms": round(self.delta_ms, 4), "base_n": _r(self.base_n),
                "cand_n": _r(self.cand_n), "base_median_us": _r(self.base_median_us),
                "cand_median_us": _r(self.cand_median_us)}


class LedgerDiff(msgspec.Struct, frozen=True):
    """A phase's mean step on both sides, the kernels launched a step, and the ledger rows
    (largest change first, all of them: they sum to the mean step's change)."""

    base_step_ms: float
    cand_step_ms: float
    base_launches: float | None
    cand_launches: float | None
    rows: tuple[Move, ...]

    @property
    def delta_ms(self) -> float:
        return self.cand_step_ms - self.base_step_ms

    def side_ms(self, side: str) -> tuple[float, float]:
        """The base and candidate ms a step of one side's rows (device, host or wait)."""
        rows = [r for r in self.rows if r.side == side]
        return sum(r.base_ms for r in rows), sum(r.cand_ms for r in rows)

    def shown(self, keep: int = KEEP) -> list[Move]:
        """The `keep` largest changes, then one row summing the rest (so the table still sums)."""
        if len(self.rows) <= keep + 1:
            return list(self.rows)
        rest = self.rows[keep:]
        other = Move(REST, f"{len(rest)} smaller rows", sum(r.base_ms for r in rest),
                     sum(r.cand_ms for r in rest), None, None, None, None)
        return [*self.rows[:keep], other]

    def moved(self, share: float = 0.05, most: int = 3) -> list[Move]:
        """The rows that moved most: at most `most`, each at least `share` of the largest."""
        if not self.rows:
            return []
        top = abs(self.rows[0].delta_ms)
        return [r for r in self.rows[:most] if abs(r.delta_ms) >= share * top and top > 0]

    def to_dict(self) -> dict[str, Any]:
        host, device = self.side_ms("host"), self.side_ms("device")
        return {"statistic": "mean step", "base_step_ms": round(self.base_step_ms, 4),
                "cand_step_ms": round(self.cand_step_ms, 4), "delta_ms": round(self.delta_ms, 4),
                "host_delta_ms": round(host[1] - host[0], 4),
                "device_delta_ms": round(device[1] - device[0], 4),
                "base_launches": _r(self.base_launches), "cand_launches": _r(self.cand_launches),
                "rows": [r.to_dict() for r in self.rows]}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _n(x: float | None) -> str:
    return "0" if x is None else f"{x:.3g}"


def _us(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _weighted(values: list[tuple[float | None, int]]) -> float | None:
    known = [(v, w) for v, w in values if v is not None]
    total = sum(w for _, w in known)
    return sum(v * w for v, w in known) / total if total else None


def _steps(p: Phase) -> int:
    return max(p.steps, 1)


def _side(phases: Sequence[Phase]) -> tuple[float, float | None, dict[tuple[str, str],
                                                                      dict[str, Any]]]:
    """One side's mean step (ms), kernels a step, and its rows: (cause, what) -> figures."""
    steps = [_steps(p) for p in phases]
    total = sum(steps)
    step_ms = [v for p in phases for v in p.per_step.step_ms if v is not None]
    step = sum(step_ms) / max(len(step_ms), 1)
    launches = _weighted([(_mean(list(p.per_step.kernels)), w) for p, w in zip(phases, steps)])
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for p, w in zip(phases, steps):
        for r in p.ledger_rows:
            got = rows.setdefault((r.cause, r.what), {"ms": 0.0, "n": [], "med": []})
            got["ms"] += r.ms_per_step * w / total
            got["n"].append((r.n_per_step, w))
            got["med"].append((r.median_us, w))
    return step, launches, rows


def _mean(values: list[Any] | None) -> float | None:
    known = [v for v in values or () if v is not None]
    return sum(known) / len(known) if known else None


def _n_of(side: dict[str, Any] | None, key: str, total: int) -> float | None:
    """A row's step-weighted count or median over all of a side's traces (absent: None)."""
    if side is None:
        return None
    got = _weighted(side[key])
    if got is None or key == "med":
        return got
    return got * sum(w for v, w in side[key] if v is not None) / total


def ledger_diff(base: Sequence[Phase], cand: Sequence[Phase]) -> LedgerDiff:
    """The diff of one phase's ledgers: base/cand are that phase of each side's analyses."""
    b_step, b_launch, b_rows = _side(base)
    c_step, c_launch, c_rows = _side(cand)
    b_total = sum(_steps(p) for p in base)
    c_total = sum(_steps(p) for p in cand)
    moves = []
    for key in dict.fromkeys([*b_rows, *c_rows]):
        b, c = b_rows.get(key), c_rows.get(key)
        moves.append(Move(key[0], key[1], b["ms"] if b else 0.0, c["ms"] if c else 0.0,
                          _n_of(b, "n", b_total), _n_of(c, "n", c_total),
                          _n_of(b, "med", b_total), _n_of(c, "med", c_total)))
    moves.sort(key=lambda m: -abs(m.delta_ms))
    return LedgerDiff(b_step, c_step, b_launch, c_launch, tuple(moves))


def _said(diff: LedgerDiff, r: Move) -> str:
    """A moved row in words: its change, and what counts tell (kernels launched a step and the
    median gap for launch gaps; kernels a step for a component; new or gone for a host row)."""
    text = f"{r.label} {r.delta_ms:+.3f} ms"
    if r.cause == "launch":
        return text + (f" ({_n(diff.base_launches)} -> {_n(diff.cand_launches)} kernels a step, "
                       f"median gap {_us(r.base_median_us)} -> {_us(r.cand_median_us)} us)")
    if r.cause == "kernels" and r.base_n != r.cand_n:
        return text + f" ({_n(r.base_n)} -> {_n(r.cand_n)} kernels a step)"
    if r.base_ms == 0 or r.cand_ms == 0:
        return text + (" (new)" if r.base_ms == 0 else " (gone)")
    return text


def moved_list(diff: LedgerDiff, most: int = 3) -> list[str]:
    """The rows that moved most, each `attention +0.901 ms`."""
    return [f"{r.label} {r.delta_ms:+.3f} ms" for r in diff.moved(most=most)]


def moved_words(diff: LedgerDiff, most: int = 3) -> str:
    """The rows that moved most in one phrase: `attention +0.901 ms, launch gaps +0.341 ms`."""
    return ", ".join(moved_list(diff, most))


def explain(diff: LedgerDiff, most: int = 3) -> str:
    """The change in words, the larger side first: `host-side +3.428 ms: launch gaps +1.506 ms
    (191 -> 191 kernels a step, median gap 22.6 -> 30.5 us), host aten::linear +0.503 ms;
    kernels -0.001 ms`."""
    parts = []
    sides = [s for s in ("host", "device", "wait") if any(r.side == s for r in diff.rows)]
    sides.sort(key=lambda s: -abs(_delta(diff, s)))
    moved = diff.moved(most=len(diff.rows))
    for s in sides:
        rows = [r for r in moved if r.side == s][:most]
        name = {"host": "host-side", "device": "kernels", "wait": "waits"}[s]
        body = ", ".join(_said(diff, r) for r in rows)
        parts.append(f"{name} {_delta(diff, s):+.3f} ms" + (f": {body}" if body else ""))
    return "; ".join(parts)


def _delta(diff: LedgerDiff, side: str) -> float:
    b, c = diff.side_ms(side)
    return c - b
