"""The verdict that opens every report: per phase the rate against its ceiling, where the step's
time goes, the top actions by the milliseconds they could recover; the run's facts and what was
assumed. Read from the typed Analysis after the rules ran: no figure is computed anew here.

An action is a finding of the phase with its own estimate (its evidence in one sentence, its
remedy), or a ranked bottleneck row no finding explains (a roofline gap, GPU idle). The step's
total distance from its floor (`explains="step"`) is no action, and the profiler's own cost is
none either (it is not in the step without the profiler).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import msgspec

from attrib.analysis.finding import Finding
from attrib.analysis.median import median
from attrib.analysis.model import Analysis, Bottleneck, Phase
from attrib.components.taxonomy import GEMM_COMPONENTS, LINK_COMPONENTS
from attrib.cost.dtypes import INDEX_TYPES
from attrib.roofline.arch import ARCH_GIVEN
from attrib.steps.ledger import OWN_COST

TOP_ACTIONS = 3
TOP_TIME = 4  # ledger rows under "where the time goes"
NOT_ACTIONS = ("ledger-profiler",)
CAVEAT_SHARE = 0.05  # of the mean step: the profiler's estimate said as a caveat from here on
_FIGURES = re.compile(r":\s+[\d.]+ ms\b|, [\d.]+ ms per step\b")
SAME_TIME = 0.02
DTYPE_MIN_SHARE = 0.5  # of GEMM time, priced in one dtype, for the dtype fact
ESTIMATED = 0.5  # a component whose bytes are mostly an estimate is named under "assumed"


class Fact(msgspec.Struct, frozen=True):
    """One key fact of the run: name (model, device, batch, ...), value, where it was read."""

    name: str
    value: str
    source: str


class TimeShare(msgspec.Struct, frozen=True):
    """A row of where the mean step's time goes (a ledger row, or kernels/idle without one)."""

    cause: str
    what: str
    ms_per_step: float
    share: float | None


class Action(msgspec.Struct, frozen=True):
    """What to fix, ranked by the ms per step it could recover, with its evidence in one sentence;
    finding: its index in Analysis.findings (None for a bottleneck row no finding explains)."""

    rank: int
    what: str
    ms_per_step: float
    share_of_step: float | None
    evidence: str
    remedy: str | None
    rule: str | None
    finding: int | None


class PhaseSummary(msgspec.Struct, frozen=True):
    """A phase's verdict: rate (tok/s, or samples/s) against its ceiling, the step, the top rows of
    the step's time (mean step: `mean_step_ms`), the top actions, the step's distance to its
    floor."""

    phase: str
    steps: int
    unit: str
    achieved: float | None
    ceiling: float | None
    of_ceiling: float | None
    step_ms: float | None
    mean_step_ms: float | None
    time: tuple[TimeShare, ...]
    actions: tuple[Action, ...]
    above_floor_ms: float | None


class Summary(msgspec.Struct, frozen=True):
    """The verdict: the run's facts, what was assumed, per phase the verdict; caveats: what the
    measurement itself adds to the figures (the profiler's own cost), said once."""

    facts: tuple[Fact, ...]
    assumed: tuple[str, ...]
    phases: tuple[PhaseSummary, ...]
    caveats: tuple[str, ...] = ()


def _time(ph: Phase) -> tuple[tuple[TimeShare, ...], float | None]:
    rows = ph.ledger_rows
    if rows:
        total = sum(r.ms_per_step for r in rows)
        shown = [r for r in rows if r.cause != OWN_COST]  # the caveat says it, once
        return tuple(_rounded(TimeShare(r.cause, r.what, r.ms_per_step, r.share))
                     for r in shown[:TOP_TIME]), round(total, 4)
    step = ph.step_ms.mean
    out = [TimeShare("kernels", c.component, c.ms, (c.ms / step) if step else None)
           for c in ph.component_rows if c.ms is not None]
    out = sorted(out, key=lambda t: -t.ms_per_step)[: TOP_TIME - 1]
    if ph.idle_ms:
        out.append(TimeShare("idle", "GPU idle", ph.idle_ms, ph.idle_fraction))
    ordered = sorted(out, key=lambda t: -t.ms_per_step)
    return tuple(_rounded(t) for t in ordered), None


def _rounded(t: TimeShare) -> TimeShare:
    share = None if t.share is None else round(t.share, 4)
    return TimeShare(t.cause, t.what, round(t.ms_per_step, 4), share)


def _row_evidence(b: Bottleneck) -> str:
    if b.kind == "GPU idle":
        return f"the GPU waits {b.ms_per_step:.3f} ms a step between kernels (launch, CPU, sync)"
    e = b.evidence
    rates = (_rate(e.get("achieved_gbs"), "{:.0f} GB/s"),
             _rate(e.get("achieved_tflops"), "{:.1f} TFLOP/s"))
    rate = ", ".join(x for x in rates if x)
    ms, roof = e.get("ms"), e.get("roofline_ms")
    if isinstance(ms, float) and isinstance(roof, float):
        at = f" at {rate}" if rate else ""
        said = (f"{b.component} runs {ms:.3f} ms a step{at}; its {e.get('bound') or ''}"
                f" roofline is {roof:.3f} ms").replace("  ", " ")
        if e.get("bound") == "link":  # one rank's trace cannot split waiting from transfer
            said += ("; the rest is waiting for the other ranks or per-call latency (`attrib "
                     "ranks` on every rank's trace splits them)")
        return said
    return b.what


def _rate(v: object, form: str) -> str | None:
    return form.format(v) if isinstance(v, (int, float)) else None


def _candidates(ph: Phase, findings: tuple[Finding, ...]) -> Iterator[tuple[float, Action]]:
    step = ph.step_ms.mean
    seen: set[int] = set()
    for b in ph.bottlenecks.ranked:
        own = [i for i in b.findings if i < len(findings) and findings[i].rule not in NOT_ACTIONS]
        for i in own:
            f = findings[i]
            ms = f.ms_per_step if f.ms_per_step is not None else b.ms_per_step
            if i in seen or ms is None:
                continue
            seen.add(i)
            yield ms, Action(
                0,
                _what(f.title, ph.phase),
                round(ms, 4),
                _share(ms, step),
                f.phrase(),
                f.remedy,
                f.rule,
                i,
            )
        if not b.findings and b.ms_per_step is not None:
            yield b.ms_per_step, Action(0, _row_what(b), b.ms_per_step, b.share_of_step,
                                        _row_evidence(b), None, None, None)


def _what(title: str, phase: str) -> str:
    """A finding's title as a short phrase: without the phase it opens with (the summary is per
    phase) and the figures after it (the action states its ms)."""
    return _FIGURES.split(title.removeprefix(f"{phase}: "), maxsplit=1)[0]


def _row_what(b: Bottleneck) -> str:
    if b.kind == "GPU idle":
        return "cut the GPU idle time between kernels"
    if b.evidence.get("bound") == "link":
        return f"bring {b.component} to its link time"
    return f"bring {b.component or b.kind} to its roofline"


def _share(ms: float, step: float | None) -> float | None:
    return round(ms / step, 4) if step else None


def _told(ms: float, chosen: list[tuple[float, Action]]) -> bool:
    """Whether `ms` is an estimate already chosen (within SAME_TIME): two rules telling of one
    stretch of time (the ledger's copy row and P21's host copies) make one action."""
    return any(abs(ms - c) <= SAME_TIME * max(ms, c) for c, _ in chosen)


def actions(ph: Phase, findings: tuple[Finding, ...], top: int = TOP_ACTIONS) -> tuple[Action, ...]:
    """The phase's top actions by recoverable ms per step (largest first)."""
    ranked: list[tuple[float, Action]] = []
    for ms, a in sorted(_candidates(ph, findings), key=lambda c: -c[0]):
        if len(ranked) < top and not _told(ms, ranked):
            ranked.append((ms, a))
    return tuple(Action(n, a.what, a.ms_per_step, a.share_of_step, a.evidence, a.remedy, a.rule,
                        a.finding) for n, (_, a) in enumerate(ranked, 1))


def phase_summary(ph: Phase, findings: tuple[Finding, ...]) -> PhaseSummary:
    samples = bool(ph.samples_per_step)
    achieved = ph.achieved_samples_s if samples else ph.achieved_tok_s
    ceiling = None if samples else ph.ceiling_tok_s
    time, mean = _time(ph)
    total = ph.bottlenecks.total
    return PhaseSummary(
        phase=ph.phase, steps=ph.steps, unit="samples/s" if samples else "tok/s",
        achieved=achieved, ceiling=ceiling,
        of_ceiling=round(achieved / ceiling, 4) if (achieved and ceiling) else None,
        step_ms=ph.step_ms.mean, mean_step_ms=mean, time=time,
        actions=actions(ph, findings),
        above_floor_ms=None if total is None else total.ms_per_step)


def _stamp(an: Analysis, key: str) -> str | None:
    v = an.provenance.get(key)
    return None if v is None or v == "" else str(v)


def _median_int(values: tuple[int | None, ...]) -> int | None:
    m = median(v for v in values if v is not None)
    return None if m is None else int(m)


def _token_phase(an: Analysis) -> Phase | None:
    decode = [p for p in an.phases if p.phase == "decode"]
    return next(iter(decode or an.phases), None)


def _dtype(an: Analysis) -> str | None:
    """The weights' dtype: the one holding the most priced time of the GEMM components (ms x the
    share whose bytes are known), where it holds at least half of their time; None otherwise (a
    dtype read off a sliver of the kernels, or off norms and samplers, is not the model's)."""
    by: dict[str, float] = {}
    total = 0.0
    for ph in an.phases:
        for c in ph.component_rows:
            if c.component not in GEMM_COMPONENTS or not c.ms:
                continue
            total += c.ms
            if c.dtype and c.dtype not in INDEX_TYPES:
                by[c.dtype] = by.get(c.dtype, 0.0) + c.ms * (c.bytes_known_share or 0.0)
    best = max(by, key=lambda d: by[d]) if by else None
    return best if best is not None and by[best] >= DTYPE_MIN_SHARE * total else None


def facts(an: Analysis, model: str | None = None) -> tuple[Fact, ...]:
    """Model, device, batch, context, dtype, quantization: from the stamp, else the trace."""
    dev = an.device
    out = []
    name = (_stamp(an, "model") or "").split(": ", 1)[0]  # the stamp's name, not its config
    if name or model:
        out.append(Fact("model", name or str(model), "stamp" if name else "--model"))
    if dev.name or dev.arch:
        out.append(Fact("device", f"{dev.name or '?'} ({dev.arch or '?'})",
                        dev.detected_from if dev.known else "trace"))
    ph = _token_phase(an)
    batch = _stamp(an, "batch")
    if batch:
        out.append(Fact("batch", batch, "stamp"))
    elif ph is not None and ph.speculative is not None:
        if ph.speculative.batch:
            out.append(Fact("batch", str(ph.speculative.batch),
                            "sequences of the verify pass's attention query (speculative: "
                            "tokens/step is the verify width)"))
    elif ph is not None and ph.tokens_per_step and ph.phase == "decode":
        out.append(Fact("batch", str(ph.tokens_per_step), f"decode tokens/step ({ph.tokens_from})"))
    elif ph is not None and ph.samples_per_step:
        out.append(Fact("batch", f"{ph.samples_per_step} samples", "trace"))
    ctx = _stamp(an, "context_length")
    # a vision forward's attention length is its patches, no context
    derived = (_median_int(ph.per_step.context)
               if ph is not None and not ph.samples_per_step else None)
    if derived is not None and ph is not None:
        source = f"{ph.phase} median ({ph.context_from or 'trace'})"
        out.append(Fact("context", str(derived), source))
    elif ctx and not (ph is not None and ph.samples_per_step):
        out.append(Fact("context", ctx, "stamp"))
    for key in ("dtype", "quantization", "kv_cache_dtype"):
        v = _stamp(an, key)
        if v:
            out.append(Fact(key, v, "stamp"))
    if not _stamp(an, "dtype") and (dt := _dtype(an)):
        out.append(Fact("dtype", dt, "kernels"))
    return tuple(out)


def assumed(an: Analysis, model: str | None, capture: str | None,
            context: int | None) -> tuple[str, ...]:
    """What the figures rest on beyond the trace: --model, --capture, a what-if, estimated bytes."""
    out = []
    if model:
        ctx = f"at context {context}" if context else "without a context (no decode K/V budget)"
        out.append(f"--model {model}: bytes of ops the trace has no shapes for, {ctx}")
    if capture:
        out.append(f"--capture {capture}: replayed kernels' ops and shapes from the capture trace")
    dev = an.device
    if dev.what_if:
        out.append(f"--arch {dev.arch}: a projection onto {dev.name} "
                   "(times measured on the traced device)")
    elif dev.detected_from == ARCH_GIVEN:
        out.append(f"--arch {dev.arch}: the device it ran on, as given (the trace does not tell "
                   "it apart)")
    if dev.known and dev.roofline_bw_basis == "peak":
        out.append(f"rooflines at the {dev.peak_bw_gbs:g} GB/s peak (no sustained figure known)")
    est = sorted({c.component for p in an.phases for c in p.component_rows
                  if (c.estimated_share or 0) >= ESTIMATED})
    modelled = [c for c in est if c not in LINK_COMPONENTS]
    if modelled:
        out.append(f"bytes mostly estimated (Inductor or model config) for {', '.join(modelled)}")
    if len(modelled) < len(est):
        out.append("collectives priced at their bus bytes (nccl-tests' convention: an "
                   "all-reduce moves 2(n-1)/n of its buffer over the link), not measured traffic")
    return tuple(out)


def caveats(an: Analysis) -> tuple[str, ...]:
    """Per phase where the profiler's estimated own cost is CAVEAT_SHARE of the mean step or more:
    what the step would take without it, and which figures it inflates."""
    out = []
    for ph in an.phases:
        prof = sum(r.ms_per_step for r in ph.ledger_rows if r.cause == OWN_COST)
        step = sum(r.ms_per_step for r in ph.ledger_rows)
        if not step or prof / step < CAVEAT_SHARE:
            continue
        out.append(f"{ph.phase}: the profiler's own host cost is an estimated {prof:.3f} ms of "
                   f"each {step:.3f} ms step ({prof / step:.0%}); unprofiled, the step would take "
                   f"about {step - prof:.3f} ms. The step time, tok/s and GPU idle include it; "
                   "the host and launch rows do not (it is carved out of them)")
    return tuple(out)


def summary(an: Analysis, model: str | None = None, capture: str | None = None,
            context: int | None = None) -> Summary:
    """The Summary of an analysis with its findings and ranked bottlenecks."""
    return Summary(facts=facts(an, model), assumed=assumed(an, model, capture, context),
                   phases=tuple(phase_summary(p, an.findings) for p in an.phases),
                   caveats=caveats(an))
