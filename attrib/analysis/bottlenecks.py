"""Bottlenecks of each phase, ranked by the milliseconds per step a fix could recover.

Three sources, never added to each other (one row per place the time goes):
- a component's gap to its roofline (`gap_ms`: its time above max(bytes / BW, FLOPs / peak));
- the GPU idle time of a step (launch and CPU time between kernels: `idle_ms`);
- a rule's finding with its own estimate (`ms_per_step`) that no component or idle row already
  holds (not an opportunity: attrib.analysis.finding.OPPORTUNITIES).
A finding is attached to the rows it names (`Finding.components`, or `explains="idle"`); one that
names no phase is about the token-generating phases. The row's recoverable time is the larger of
the two estimates. Components with no bytes or FLOPs have no roofline: they are listed after the
ranked rows with their time and "recoverable unknown". A finding that `explains="step"` (the whole
step's distance from its floor) is the phase's total, not a row.
"""

from __future__ import annotations

import msgspec
from msgspec import field
from msgspec.structs import replace

from attrib.analysis.finding import OPPORTUNITIES, Evidence, Finding
from attrib.analysis.model import Bottleneck, Bottlenecks, Phase, Total, Unpriced
from attrib.steps.phases import TOKEN_PHASES

MIN_UNPRICED_SHARE = 0.05  # an unpriced component below this share of the phase is not listed


class _Row(msgspec.Struct):
    """A bottleneck row while findings are attached to it."""

    kind: str
    component: str | None
    ms: float | None
    what: str
    evidence: Evidence
    findings: list[int] = field(default_factory=list)

    def freeze(self, step_ms: float | None, rank: int) -> Bottleneck:
        ms = None if self.ms is None else round(self.ms, 4)
        share = round(ms / step_ms, 4) if (ms is not None and step_ms) else None
        return Bottleneck(kind=self.kind, component=self.component, ms_per_step=ms,
                          share_of_step=share, what=self.what, evidence=self.evidence,
                          findings=tuple(self.findings), rank=rank)


def _component_rows(ph: Phase) -> list[_Row]:
    rows = []
    for c in ph.component_rows:
        if c.gap_ms is None or c.gap_ms <= 0:
            continue
        what = f"{c.component}: {c.ms:.3f} ms/step"
        if c.roofline_ms is not None:
            what += f", roofline {c.roofline_ms:.3f} ms ({c.bound or '?'}-bound)"
        rows.append(_Row("roofline gap", c.component, c.gap_ms, what, {
            "ms": c.ms, "roofline_ms": c.roofline_ms, "bound": c.bound,
            "achieved_gbs": c.achieved_gbs, "achieved_tflops": c.achieved_tflops,
            "bytes_known_share": c.bytes_known_share, "kernels_per_step": c.kernels}))
    return rows


def _idle_row(ph: Phase) -> _Row | None:
    if not ph.idle_ms:
        return None
    return _Row("GPU idle", None, ph.idle_ms,
                f"GPU idle {ph.idle_ms:.3f} ms/step between kernels (launch, CPU and sync time)",
                {"idle_ms": ph.idle_ms, "idle_fraction": ph.idle_fraction,
                 "kernel_ms": ph.kernel_ms})


def _about(f: Finding, ph: Phase, comps: set[str]) -> bool:
    """Whether finding `f` belongs to phase `ph`'s rows (an opportunity belongs to none)."""
    if f.rule in OPPORTUNITIES:
        return False
    if f.phase is not None:
        return f.phase == ph.phase
    # a finding that names no phase is about token generation; one naming none of the phase's
    # components is about the whole trace (the report lists it with all findings)
    return ph.phase in TOKEN_PHASES and bool(comps.intersection(f.components))


def _ms(f: Finding) -> float | None:
    """The finding's estimate as its JSON states it."""
    return None if f.ms_per_step is None else round(float(f.ms_per_step), 4)


def _attach(rows: list[_Row], i: int, f: Finding, idle: _Row | None) -> None:
    by_comp = {r.component: r for r in rows if r.component}
    targets = [by_comp[c] for c in f.components if c in by_comp]
    if not targets and idle is not None and f.explains == "idle":
        targets = [idle]
    ms = _ms(f)
    if not targets and ms is not None:
        comp = f.components[0] if len(f.components) == 1 else None
        targets = [_Row("finding", comp, ms, f.title or f.rule, {})]
        rows.append(targets[0])
    for target in targets:
        target.findings.append(i)
    if ms is not None and len(targets) == 1 and (targets[0].ms is None or ms > targets[0].ms):
        targets[0].ms = round(ms, 4)
        # the row says what the larger estimate is, not the figure it replaced
        targets[0].what = f.title


def phase_bottlenecks(ph: Phase, findings: tuple[Finding, ...]) -> Bottlenecks:
    """Ranked rows by recoverable ms/step, the components without a roofline, and the finding that
    states the whole step's distance from its floor, if any."""
    step_ms = ph.step_ms.mean
    rows = _component_rows(ph)
    idle = _idle_row(ph)
    if idle is not None:
        rows.append(idle)
    comps = {c.component for c in ph.component_rows}
    total = None
    for i, f in enumerate(findings):
        if f.explains == "step" and f.phase == ph.phase:
            total = Total(finding=i, ms_per_step=_ms(f), title=f.title)
        elif _about(f, ph, comps):
            _attach(rows, i, f, idle)
    rows.sort(key=lambda r: -(round(r.ms, 4) if r.ms is not None else 0))
    unpriced = tuple(
        Unpriced(component=c.component, ms_per_step=c.ms, share=c.share,
                 why="no bytes or FLOPs known: no roofline, recoverable time unknown")
        for c in ph.component_rows
        if c.roofline_ms is None and (c.share or 0) >= MIN_UNPRICED_SHARE)
    ranked = tuple(r.freeze(step_ms, n) for n, r in enumerate(rows, 1))
    return Bottlenecks(ranked=ranked, unpriced=unpriced, total=total)


def rank(phases: tuple[Phase, ...], findings: tuple[Finding, ...]) -> tuple[Phase, ...]:
    """The phases with their bottlenecks set from their figures and the findings."""
    return tuple(replace(p, bottlenecks=phase_bottlenecks(p, findings)) for p in phases)
