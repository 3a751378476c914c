"""The Finding record every rule returns, and helpers the rules share (reads of the document)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SEVERITIES = ("high", "medium", "info")
DECODE_LIKE = ("decode", "mixed")  # phases whose steps generate tokens


@dataclass(frozen=True)
class Finding:
    """One pathology hit: what, how sure/serious, the numbers behind it, what to do, where to read."""

    rule: str
    severity: str
    title: str
    evidence: dict[str, Any] = field(default_factory=dict)
    remedy: str | None = None
    references: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity {self.severity!r} not in {SEVERITIES}")

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity, "title": self.title,
                "evidence": dict(self.evidence), "remedy": self.remedy, "references": list(self.references)}


def phase_doc(doc: dict[str, Any], phase: str) -> dict[str, Any] | None:
    """The document's entry for `phase`, or None."""
    return next((p for p in doc.get("phases", ()) if p.get("phase") == phase), None)


def roofline_bw(doc: dict[str, Any]) -> float | None:
    """GB/s the document's rooflines use: sustained where known, else peak; None when no device."""
    d = doc.get("device") or {}
    bw = d.get("roofline_bw_gbs") or d.get("sustained_bw_gbs") or d.get("peak_bw_gbs")
    return float(bw) if bw else None


def arch(doc: dict[str, Any]) -> str | None:
    return (doc.get("device") or {}).get("arch")


def is_rdna(arch_name: str | None) -> bool:
    """gfx11xx / gfx12xx (RDNA3, 3.5, 4)."""
    return bool(arch_name) and arch_name.startswith(("gfx11", "gfx12"))


def r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)
