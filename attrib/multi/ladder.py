"""A tuning campaign as a ladder (`attrib ladder RUN RUN ...`): each step compared with the last
promoted one as `compare` compares two sides, its multiplier of generated tok/s, promoted or not,
the ledger rows that moved, and the cumulative multiplier of the promoted steps. The result is a
typed `Ladder`; `to_dict()` is the `attrib.ladder/1` document.

A step is one run or several runs of one configuration (their steps pooled, the bootstrap over
runs: a run-level CI). Its multiplier is the previous promoted step's mean ms per token over its own
(a speculative decode: per generated token), so a multiplier above 1 is faster; the CI is the
bootstrap CI of compare's per-token difference, turned into a ratio. Promoted: decode per token is
`faster` (beyond noise, compare's verdict with its run-level check), the outputs are not known to
differ, and the stamps say a matched baseline. The first step is the base, promoted by definition.
The cumulative multiplier is the product of the promoted steps' multipliers (the log scale is the
honest one: a campaign is a sequence of multipliers, not increments).

Example:
    >>> lad = ladder([("eager", [doc_a]), ("sdpa", [doc_b, doc_c])])
    >>> lad.cumulative, [s.promoted for s in lad.steps]
"""

from __future__ import annotations

from typing import Any

import msgspec

from attrib.analysis.model import Analysis
from attrib.multi.compare import Comparison, Stats, compare
from attrib.multi.ledger_diff import moved_list

SCHEMA_ID = "attrib.ladder/1"
PHASES = ("decode", "prefill")


class Rung(msgspec.Struct, frozen=True):
    """One phase of a step against the last promoted step: the multiplier of tok/s (None where a
    side lacks the phase) and its 95% CI."""

    phase: str
    multiplier: float | None
    ci_low: float | None
    ci_high: float | None
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        return msgspec.structs.asdict(self)


class Step(msgspec.Struct, frozen=True):
    """A step of the ladder: its name and runs, its rungs (decode, prefill), whether it was
    promoted and why, the ledger rows that moved in decode, against which step."""

    name: str
    runs: tuple[str, ...]
    against: str | None
    rungs: tuple[Rung, ...]
    promoted: bool
    why: str
    moved: tuple[str, ...]
    outputs: str | None

    def rung(self, phase: str) -> Rung | None:
        return next((r for r in self.rungs if r.phase == phase), None)

    @property
    def multiplier(self) -> float | None:
        r = self.rung("decode")
        return None if r is None else r.multiplier

    def to_dict(self) -> dict[str, Any]:
        dec = self.rung("decode")
        return {"name": self.name, "runs": list(self.runs), "against": self.against,
                "multiplier": None if dec is None else dec.multiplier,
                "ci_low": None if dec is None else dec.ci_low,
                "ci_high": None if dec is None else dec.ci_high,
                "promoted": self.promoted, "why": self.why,
                "revert_to": None if self.promoted else self.against,
                "moved": list(self.moved),
                "outputs": self.outputs, "phases": [r.to_dict() for r in self.rungs]}


class Ladder(msgspec.Struct, frozen=True):
    """The campaign: its steps in order and the cumulative decode multiplier from the first step
    to the last promoted one."""

    steps: tuple[Step, ...]
    cumulative: float
    min_effect_pct: float

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA_ID, "steps": [s.to_dict() for s in self.steps],
                "cumulative": round(self.cumulative, 4),
                "last_promoted": next((s.name for s in reversed(self.steps) if s.promoted), None),
                "min_effect_pct": self.min_effect_pct}


def _ratio(s: Stats) -> tuple[float | None, float | None, float | None]:
    """base ms / cand ms per token (a tok/s multiplier) and its CI from the CI of the
    difference."""
    if not s.base_ms or not s.cand_ms or s.delta_ms is None:
        return None, None, None
    mult = s.base_ms / s.cand_ms
    if s.ci_low_ms is None or s.ci_high_ms is None:
        return round(mult, 4), None, None
    hi_ms, lo_ms = s.cand_ms + s.ci_high_ms - s.delta_ms, s.cand_ms + s.ci_low_ms - s.delta_ms
    low = s.base_ms / hi_ms if hi_ms > 0 else None
    high = s.base_ms / lo_ms if lo_ms > 0 else None
    return round(mult, 4), None if low is None else round(low, 4), \
        None if high is None else round(high, 4)


def _rungs(cmp: Comparison) -> tuple[Rung, ...]:
    out = []
    for name in PHASES:
        ph = cmp.phase(name)
        if ph is None:
            continue
        tok = ph.step.per_token
        out.append(Rung(name, *_ratio(tok), tok.verdict))
    return tuple(out)


def _why(cmp: Comparison, rungs: tuple[Rung, ...]) -> tuple[bool, str]:
    dec = next((r for r in rungs if r.phase == "decode"), None)
    if dec is None:
        return False, "no decode phase on both sides"
    if cmp.outputs.differ:
        return False, f"outputs differ ({cmp.outputs.why})"
    if not cmp.matched_baseline:
        keys = ", ".join(m["key"] for m in cmp.provenance_diff["mismatch"])
        return False, f"not a matched baseline ({keys} differ)"
    if dec.verdict != "faster":
        return False, dec.verdict
    return True, "faster"


def ladder(steps: list[tuple[str, list[Analysis]]],
           min_effect_pct: float = 3.0) -> Ladder:
    """The Ladder of (name, the step's runs' analysis documents), in campaign order."""
    if not steps:
        raise ValueError("a ladder needs at least one step")
    first_name, first_docs = steps[0]
    out = [Step(first_name, tuple(str(d.source.path) for d in first_docs), None, (), True,
                "the base", (), None)]
    top_name, top_docs, cumulative = first_name, first_docs, 1.0
    for name, docs in steps[1:]:
        cmp = compare(top_docs, docs, min_effect_pct=min_effect_pct)
        rungs = _rungs(cmp)
        promoted, why = _why(cmp, rungs)
        dec = cmp.phase("decode")
        moved = tuple(moved_list(dec.ledger)) if dec is not None and dec.ledger else ()
        step = Step(name, tuple(str(d.source.path) for d in docs), top_name, rungs, promoted,
                    why, moved, cmp.outputs.line())
        out.append(step)
        if promoted and step.multiplier:
            cumulative *= step.multiplier
            top_name, top_docs = name, docs
    return Ladder(tuple(out), cumulative, min_effect_pct)
