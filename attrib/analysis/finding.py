"""The Finding record every rule returns: what, how serious, what it explains, what to do."""

from __future__ import annotations

from typing import Any, Union

import msgspec
from msgspec import field
from msgspec.structs import force_setattr, replace

SEVERITIES = ("high", "medium", "info")
# rules whose findings are opportunities (a format the run did not use), not time the run lost:
# they rank after every other finding, keep their own severity and are no bottleneck row
OPPORTUNITIES = ("16-bit-gemm-decode",)
# what a finding's ms_per_step accounts for, besides the components it names
EXPLAINS = ("idle", "step")

JSON = Union[None, bool, int, float, str, list["JSON"], tuple["JSON", ...], dict[str, "JSON"]]
Evidence = dict[str, Any]  # the raw figures behind a finding (plain JSON values)


def count(n: float | None, noun: str, plural: str | None = None) -> str:
    """`n noun` with the noun plural unless n is 1 ("1 step", "2.5 steps", "6 steps")."""
    word = noun if n == 1 else (plural or noun + "s")
    return f"{n:g} {word}" if n is not None else f"some {plural or noun + 's'}"


def _figure(v: object) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One pathology hit, as the document holds it (fields in the document's order).

    summary: the evidence in words, one sentence (the rule's own, else `phrase` builds one when
    the finding is made); ms_per_step: the milliseconds per step it explains; phase:
    the phase it is about (None: the whole trace); components: the component rows it accounts
    for; explains: the non-component row it accounts for ("idle": the GPU idle row, "step": the
    whole step's distance from its floor); evidence: the raw figures behind it; projection:
    measured on another device and projected."""

    rule: str
    severity: str
    title: str
    summary: str | None = None
    ms_per_step: float | None = None
    projection: bool = False
    evidence: Evidence = field(default_factory=dict)
    remedy: str | None = None
    references: tuple[str, ...] = ()
    phase: str | None = None
    components: tuple[str, ...] = ()
    explains: str | None = None

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity {self.severity!r} not in {SEVERITIES}")
        if self.explains is not None and self.explains not in EXPLAINS:
            raise ValueError(f"explains {self.explains!r} not in {EXPLAINS}")
        if self.summary is None:
            force_setattr(self, "summary", self.phrase())

    def projected(self, device: str) -> Finding:
        """This finding as a what-if: said in the title, flagged in the JSON."""
        title = f"[projection onto {device}] {self.title}"
        return replace(self, projection=True, title=title)

    def phrase(self) -> str:
        """The evidence in one short sentence: the rule's own, else the time it explains of the
        step, else its first few figures."""
        if self.summary:
            return self.summary
        ms, step = self.ms_per_step, self.evidence.get("step_ms")
        if ms is not None and isinstance(step, (int, float)) and step > 0:
            return f"{ms:.3f} ms of each {step:.3f} ms step ({ms / step:.0%})"
        figures = [(k, v) for k, v in self.evidence.items() if k not in ("phase", "steps")
                   and isinstance(v, (int, float, str)) and not isinstance(v, bool)]
        phrase = "; ".join(f"{k.replace('_', ' ')} {_figure(v)}" for k, v in figures[:3])
        return phrase or self.title

    def to_json(self) -> dict[str, object]:
        """The finding as the document holds it."""
        out: dict[str, object] = msgspec.json.decode(msgspec.json.encode(self))
        return out
