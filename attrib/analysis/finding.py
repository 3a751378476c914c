"""The Finding record every rule returns: what, how serious, what it explains, what to do."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Union

SEVERITIES = ("high", "medium", "info")
# what a finding's ms_per_step accounts for, besides the components it names
EXPLAINS = ("idle", "step")

JSON = Union[None, bool, int, float, str, list["JSON"], tuple["JSON", ...], dict[str, "JSON"]]
Evidence = dict[str, object]  # the raw figures behind a finding (plain JSON values)


@dataclass(frozen=True)
class Finding:
    """One pathology hit.

    ms_per_step: the milliseconds per step it explains; phase: the phase it is about (None: the whole
    trace); components: the component rows it accounts for; explains: the non-component row it
    accounts for ("idle": the GPU idle row, "step": the whole step's distance from its floor);
    evidence: the raw figures behind it; projection: measured on another device and projected."""

    rule: str
    severity: str
    title: str
    ms_per_step: float | None = None
    evidence: Evidence = field(default_factory=dict)
    remedy: str | None = None
    references: tuple[str, ...] = ()
    projection: bool = False
    phase: str | None = None
    components: tuple[str, ...] = ()
    explains: str | None = None

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity {self.severity!r} not in {SEVERITIES}")
        if self.explains is not None and self.explains not in EXPLAINS:
            raise ValueError(f"explains {self.explains!r} not in {EXPLAINS}")

    def projected(self, device: str) -> Finding:
        """This finding as a what-if: said in the title, flagged in the JSON."""
        title = f"[projection onto {device}] {self.title}"
        return replace(self, projection=True, title=title)

    def to_json(self) -> dict[str, object]:
        ms = self.ms_per_step
        return {"rule": self.rule, "severity": self.severity,
                "title": self.title,
                "ms_per_step": None if ms is None else round(float(ms), 4),
                "projection": self.projection,
                "evidence": dict(self.evidence), "remedy": self.remedy,
                "references": list(self.references)}
