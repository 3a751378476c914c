"""Did both sides of a comparison produce the same outputs? Read from the stamps' correctness_gate
(collectors.outputs: a digest of the generated token ids, or a check the user ran). A faster run
that generates other tokens is not a speedup: `compare --gate` calls such a pair not comparable.

Example:
    >>> check = outputs_check(base_analyses, cand_analyses)
    >>> check.status, check.line()
    ('identical', 'outputs identical (640 tokens, greedy token ids)')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from attrib.analysis.model import Analysis

IDENTICAL, DIFFER, ONE_SIDE, UNRECORDED, CHECKED = (
    "identical", "differ", "one side", "not recorded", "checked")


class OutputsCheck(msgspec.Struct, frozen=True):
    """status: identical | differ | one side | not recorded | checked (the user's own checks,
    all passed); tokens: generated tokens per run where digests agree; why: the detail."""

    status: str
    tokens: int | None = None
    how: str | None = None
    why: str | None = None

    @property
    def differ(self) -> bool:
        return self.status == DIFFER

    def line(self) -> str:
        """The check in one line, for the verdict block."""
        if self.status == IDENTICAL:
            return f"outputs identical ({self.tokens} tokens, {self.how})"
        if self.status == DIFFER:
            return f"OUTPUTS DIFFER: {self.why}"
        if self.status == CHECKED:
            return f"outputs checked on both sides: {self.why}"
        if self.status == ONE_SIDE:
            return f"outputs recorded on one side only: {self.why}"
        return ("outputs not recorded (collectors: cap.outputs(token_ids) puts their digest in "
                "the stamp)")

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "tokens": self.tokens, "how": self.how, "why": self.why}


def _gate(doc: Analysis) -> dict[str, Any] | None:
    g = doc.provenance.get("correctness_gate")
    return g if isinstance(g, dict) else None


def _digests(gates: list[dict[str, Any] | None]) -> set[str]:
    return {str(g["outputs_sha256"]) for g in gates if g and g.get("outputs_sha256")}


def _checks(gates: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    return [g for g in gates if g and "passed" in g]


def _short(digests: set[str]) -> str:
    return ", ".join(sorted(d[:12] for d in digests))


def outputs_check(base: Sequence[Analysis], cand: Sequence[Analysis]) -> OutputsCheck:
    """The outputs check of two sides' analyses (their `provenance` stamps)."""
    gb, gc = [_gate(d) for d in base], [_gate(d) for d in cand]
    db, dc = _digests(gb), _digests(gc)
    failed = [g for g in _checks(gb + gc) if not g["passed"]]
    if failed:
        return OutputsCheck(DIFFER, why="a check failed: " + "; ".join(dict.fromkeys(
            f"{g.get('how')} ({g.get('value')})" for g in failed)))
    if db and dc:
        if len(db | dc) == 1:
            first = next(g for g in gb if g and g.get("outputs_sha256"))
            return OutputsCheck(IDENTICAL, first.get("tokens"), first.get("how"))
        return OutputsCheck(DIFFER, why=f"sha256 {_short(db)} (base) vs {_short(dc)} (cand) of "
                                        "the generated token ids")
    if db or dc:
        side = "base" if db else "cand"
        return OutputsCheck(ONE_SIDE, why=f"only the {side} stamp has a digest; the other "
                                          "run's outputs are unknown")
    checks = _checks(gb + gc)
    if checks and not (all(gb) and all(gc)):
        return OutputsCheck(ONE_SIDE, why="a check is recorded on one side only")
    if checks:
        return OutputsCheck(CHECKED, why="; ".join(
            dict.fromkeys(f"{g.get('how')}: passed" for g in checks)))
    return OutputsCheck(UNRECORDED)
