"""The Finding record every rule returns, the Rule catalog entry, and helpers the rules share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

from attrib.pipeline import Attribution
from rules.thresholds import Thresholds

SEVERITIES = ("high", "medium", "info")
DECODE_LIKE = ("decode", "mixed")  # phases whose steps generate tokens


@dataclass(frozen=True)
class Finding:
    """One pathology hit: what, how serious, the milliseconds per step it explains, the numbers behind it,
    what to do, where to read. `projection`: measured on another device and projected (what-if)."""

    rule: str
    severity: str
    title: str
    ms_per_step: float | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    remedy: str | None = None
    references: tuple[str, ...] = ()
    projection: bool = False

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity {self.severity!r} not in {SEVERITIES}")

    def projected(self, device: str) -> "Finding":
        """This finding as a what-if: said in the title, flagged in the JSON."""
        return replace(self, projection=True, title=f"[projection onto {device}] {self.title}")

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity, "title": self.title,
                "ms_per_step": None if self.ms_per_step is None else round(float(self.ms_per_step), 4),
                "projection": self.projection, "evidence": dict(self.evidence), "remedy": self.remedy,
                "references": list(self.references)}


RuleFn = Callable[[Attribution, dict[str, Any], Thresholds], list[Finding]]


@dataclass(frozen=True)
class Rule:
    """A catalog entry: id, the function, the archs it applies to (prefixes; empty = every device),
    what it needs from a trace, and its references."""

    id: str
    fn: RuleFn
    needs: str
    archs: tuple[str, ...] = ()
    references: tuple[str, ...] = ()

    def applies(self, arch_name: str | None) -> bool:
        return not self.archs or (arch_name is not None and arch_name.startswith(self.archs))


def steps_in(a: Attribution, phase: str | None = None) -> pl.DataFrame:
    """The steps the phase figures count (not those the steps stage left out: compile, warm-up), of `phase`."""
    st = a.steps if "excluded" not in a.steps.columns else a.steps.filter(pl.col("excluded").is_null())
    return st if phase is None else st.filter(pl.col("phase") == phase)


def kernels_in(a: Attribution, phase: str | None = None) -> pl.DataFrame:
    """The kernels of those steps (of `phase`, else of every phase)."""
    return a.kernels.filter(pl.col("step").is_in(steps_in(a, phase)["step"].implode()))


def phase_doc(doc: dict[str, Any], phase: str) -> dict[str, Any] | None:
    """The document's entry for `phase`, or None."""
    return next((p for p in doc.get("phases", ()) if p.get("phase") == phase), None)


def component(ph: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    """A phase entry's component row, or None."""
    return next((c for c in (ph or {}).get("components", ()) if c["component"] == name), None)


def roofline_bw(doc: dict[str, Any]) -> float | None:
    """GB/s the document's rooflines use: sustained where known, else peak; None when no device."""
    d = doc.get("device") or {}
    bw = d.get("roofline_bw_gbs") or d.get("sustained_bw_gbs") or d.get("peak_bw_gbs")
    return float(bw) if bw else None


def arch(doc: dict[str, Any]) -> str | None:
    return (doc.get("device") or {}).get("arch")


def is_rdna(arch_name: str | None) -> bool:
    """gfx11xx / gfx12xx (RDNA3, 3.5, 4)."""
    return bool(arch_name) and arch_name.startswith(RDNA)


def env(doc: dict[str, Any]) -> dict[str, str]:
    """The capture stamp's environment variables (strings), {} without a stamp."""
    e = (doc.get("provenance") or {}).get("env") or {}
    return {str(k): str(v) for k, v in e.items()} if isinstance(e, dict) else {}


def steps_of(doc: dict[str, Any], ph: dict[str, Any]) -> int:
    return max(int(ph.get("steps") or 0), 1)


def r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


RDNA = ("gfx11", "gfx12")
