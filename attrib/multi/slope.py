"""Context slope: traces of one stack at different context lengths -> per component, decode
time per step against context, t = a + b*L (scipy linregress over every step of every trace,
L the step's context), b in microseconds per 1k context tokens with its 95% CI; and the
context at which attention overtakes the weight-bound components (where the two fitted lines
cross). The attrib.slope/1 document.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from attrib.analysis.records import as_dict
from attrib.components.taxonomy import GEMM_COMPONENTS
from attrib.analysis.model import Analysis, Component, Phase, StepSeries
from attrib.multi.provenance_diff import provenance_diff

SCHEMA_ID = "attrib.slope/1"
WEIGHT_BOUND = GEMM_COMPONENTS  # their time per step does not follow the context
MIN_CONTEXTS = 2
# stamp fields that follow the context by construction (a cache sized to the prompt):
# not a different stack
CONTEXT_KEYS = ("context_length", "tokens_per_step", "model_config.max_position_embeddings")
SAME_BYTES = 0.01    # bytes per step this close in every trace: the same work
DRIFT_SHARE = 0.10   # the same work whose fitted time moves by more than this share of it: drift


class Fit(msgspec.Struct, frozen=True):
    """t = a + b*L over n points: b in us per 1k context with its 95% CI, a in us, r2.
    points: the (context, ms) pairs fitted (for the plot; not in the JSON)."""

    slope_us_per_1k: float
    ci_low: float
    ci_high: float
    intercept_us: float
    r2: float
    n: int
    points: tuple[tuple[float, float], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = as_dict(self)
        del out["points"]
        return out


class SlopeRow(msgspec.Struct, frozen=True):
    component: str  # "step", "kernels", or a component
    fit: Fit

    def to_dict(self) -> dict[str, Any]:
        return {"component": self.component} | self.fit.to_dict()


class TraceContext(msgspec.Struct, frozen=True):
    path: str | None
    steps: int
    context_min: int | None
    context_max: int | None
    context_from: str | None


class Drift(msgspec.Struct, frozen=True):
    component: str
    moved_us: float
    mean_us: float
    kernels: int | None


class Crossover(msgspec.Struct, frozen=True):
    context: int | None
    why: str


class Slope(msgspec.Struct, frozen=True):
    """The context slope of one phase over traces of one stack (what the slope renderers read)."""

    phase: str
    traces: tuple[TraceContext, ...]
    rows: tuple[SlopeRow, ...]
    weight_bound: tuple[str, ...]
    weight_fit: Fit | None
    drift: tuple[Drift, ...]
    crossover: Crossover
    notes: tuple[str, ...]

    def row(self, component: str) -> SlopeRow | None:
        return next((r for r in self.rows if r.component == component), None)

    def to_dict(self) -> dict[str, Any]:
        """The attrib.slope/1 document."""
        wb = {"components": list(self.weight_bound)}
        return {"schema": SCHEMA_ID, "phase": self.phase,
                "traces": [as_dict(t) for t in self.traces],
                "rows": [r.to_dict() for r in self.rows],
                "weight_bound": wb | (self.weight_fit.to_dict() if self.weight_fit else {}),
                "drift": [as_dict(d) for d in self.drift], "crossover": as_dict(self.crossover),
                "notes": list(self.notes)}


def _points(phs: list[Phase], get) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for ph in phs:
        s = ph.per_step
        for i, ctx in enumerate(s.context):
            y = get(s, i)
            if ctx is not None and y is not None:
                xs.append(float(ctx))
                ys.append(float(y))
    return xs, ys


def fit(xs: list[float], ys: list[float]) -> Fit | None:
    """slope (us per 1k context), its 95% CI, intercept (us), r2, n; None below 3 points or
    2 contexts."""
    if len(xs) < 3 or len(set(xs)) < MIN_CONTEXTS:
        return None
    from scipy.stats import linregress, t as student_t  # ~0.5 s to import: only slope pays it

    r = linregress(xs, ys)
    half = student_t.ppf(0.975, len(xs) - 2) * r.stderr
    k = 1e3 * 1e3  # ms per token -> us per 1k tokens

    def num(x: float, nd: int) -> float:   # plain floats: numpy's are not JSON
        return round(float(x), nd)
    return Fit(num(r.slope * k, 3), num((r.slope - half) * k, 3), num((r.slope + half) * k, 3),
               num(r.intercept * 1e3, 3), num(r.rvalue ** 2, 4), len(xs), tuple(zip(xs, ys)))


def _same_work(rows: list[Component | None]) -> bool:
    """The component ran the same kernels moving the same bytes in every trace."""
    if any(r is None or r.bytes is None for r in rows) or not rows:
        return False
    b = [float(r.bytes or 0) for r in rows if r is not None]
    kernels = {r.kernels for r in rows if r is not None}
    return len(kernels) == 1 and max(b) <= (1 + SAME_BYTES) * min(b)


def drift(phs: list[Phase], fits: dict[str, Fit], lo: float, hi: float) -> list[Drift]:
    """Components whose work is the same in every trace (kernels and bytes per step) but whose time
    moved with the context by more than DRIFT_SHARE of it, significantly: clock or process drift
    between the traces, not context."""
    out = []
    for c, f in fits.items():
        rows = [p.component(c) for p in phs]
        if not _same_work(rows) or f.ci_low <= 0 <= f.ci_high:
            continue
        mean_us = 1e3 * sum(r.ms or 0.0 for r in rows if r is not None) / len(rows)
        moved = f.slope_us_per_1k * (hi - lo) / 1e3
        if mean_us and abs(moved) > DRIFT_SHARE * mean_us:
            out.append(Drift(c, round(moved, 3), round(mean_us, 3),
                             rows[0].kernels if rows[0] else None))
    return out


def _crossover(att: Fit | None, weights: Fit | None, lo: float, hi: float) -> Crossover:
    if att is None or weights is None:
        return Crossover(None, "no attention or no weight-bound component in the traces")
    if att.ci_low <= 0:
        return Crossover(None, "the attention slope is not significantly above 0: "
                               "no crossover claimed")
    da = att.slope_us_per_1k - weights.slope_us_per_1k
    gap = weights.intercept_us - att.intercept_us  # at L = 0
    if gap <= 0:
        return Crossover(0, "attention already takes longer than the weight-bound components "
                            "at any context")
    if da <= 0:
        return Crossover(None, "attention grows no faster than the weight-bound components: no "
                               "crossover")
    ctx = round(gap / da * 1e3)
    where = "within" if lo <= ctx <= hi else "extrapolated beyond"
    return Crossover(ctx, f"{where} the measured contexts ({lo:g}..{hi:g})")


def _traces(docs: Sequence[Analysis], phase: str) -> tuple[TraceContext, ...]:
    out = []
    for d in docs:
        ph = next((p for p in d.phases if p.phase == phase), None)
        ctx = [c for c in (ph.per_step.context if ph else ()) if c is not None]
        out.append(TraceContext(d.source.path, ph.steps if ph else 0,
                                min(ctx) if ctx else None, max(ctx) if ctx else None,
                                ph.context_from if ph else None))
    return tuple(out)


def _comp(s: StepSeries, i: int, c: str) -> float:
    return float((s.components.get(c) or (0.0,) * len(s.step))[i])


def _fits(phs: list[Phase], comps: list[str]) -> tuple[list[SlopeRow], dict[str, Fit]]:
    rows = []
    for name, key in (("step", "step_ms"), ("kernels", "kernel_ms")):
        f = fit(*_points(phs, lambda s, i, key=key: getattr(s, key)[i]))
        if f:
            rows.append(SlopeRow(name, f))
    fits = {}
    for c in comps:
        f = fit(*_points(phs, lambda s, i, c=c: _comp(s, i, c)))
        if f:
            fits[c] = f
            rows.append(SlopeRow(c, f))
    return rows, fits


def _notes(phs: list[Phase], docs: Sequence[Analysis], traces: tuple[TraceContext, ...],
           drifted: list[Drift], present: list[str], distinct: set[int], phase: str) -> list[str]:
    notes = [f"drift: {d.component} ran the same {d.kernels} kernels and bytes per step in "
             f"every trace, yet its time moved {d.moved_us:+.1f} us over the contexts "
             f"({d.mean_us:.1f} us): clock or process drift between traces, not context"
             for d in drifted]
    batches = sorted({p.tokens_per_step for p in phs if p.tokens_per_step is not None})
    if len(batches) > 1:
        notes.append(f"not one batch: the traces run {batches} tokens per {phase} step; "
                     "slopes mix batch and context")
    wb = [sum(float(r.bytes or 0) for r in p.component_rows if r.component in present)
          for p in phs]
    if present and min(wb) > 0 and max(wb) > (1 + SAME_BYTES) * min(wb):
        notes.append("not one model? the weight-bound components move "
                     + ", ".join(f"{b / 1e6:.1f}" for b in wb) + " MB per step across the traces")
    if len(distinct) < 3:
        notes.append(f"{len(distinct)} distinct contexts: "
                     "a slope from fewer than 3 is weakly supported")
    missing = [str(tr.path) for tr in traces if tr.context_min is None]
    if missing:
        notes.append("no context known (no attention shapes, vLLM annotation or provenance "
                     "context_length): " + ", ".join(missing))
    for w in provenance_diff(docs, docs)["within_side"]:
        if w["side"] == "base" and w["key"] not in CONTEXT_KEYS:
            notes.append(f"not one stack? the traces differ in {w['key']}: {w['values']}")
    notes.append("steps of one trace are not independent samples: the CIs assume they are")
    return notes


def slope(docs: Sequence[Analysis], phase: str = "decode") -> Slope:
    """The Slope of analyses of one stack at several contexts."""
    phs = [p for d in docs for p in d.phases if p.phase == phase]
    traces = _traces(docs, phase)
    comps = list(dict.fromkeys(c.component for p in phs for c in p.component_rows))
    distinct = {tr.context_min for tr in traces if tr.context_min is not None}
    if len(distinct) < MIN_CONTEXTS:
        why = (f"no slope: the traces share one context ({sorted(distinct)}); "
               "a slope needs traces at two or more contexts")
        return Slope(phase, traces, (), (), None, (), Crossover(None, why), (why,))
    rows, fits = _fits(phs, comps)
    present = [c for c in WEIGHT_BOUND if c in comps]
    weights = None
    if present:
        weights = fit(*_points(phs, lambda s, i: sum(_comp(s, i, c) for c in present)))
    contexts = [x for tr in traces for x in (tr.context_min, tr.context_max) if x is not None]
    lo, hi = min(contexts, default=0), max(contexts, default=0)
    drifted = drift(phs, fits, lo, hi)
    notes = _notes(phs, docs, traces, drifted, present, distinct, phase)
    crossover = _crossover(fits.get("attention"), weights, lo, hi)
    if any(d.component in present for d in drifted):
        crossover = Crossover(None, "the weight-bound components drifted between traces (same "
                                    "kernels, time moved): no crossover claimed")
    return Slope(phase, traces, tuple(rows), tuple(present), weights, tuple(drifted), crossover,
                 tuple(notes))
