"""Generic roofline findings (not catalog entries): memory-bound components
far below the roofline, decode far below the bandwidth ceiling, a bytes
model inconsistent with the device's peak."""

from __future__ import annotations


from attrib.analysis.model import Analysis, Component
from attrib.pipeline import Attribution
from rules.finding import DECODE_LIKE, Finding, r
from rules.thresholds import Thresholds


def _far_below(c: Component, bw: float, th: Thresholds) -> bool:
    """A memory-bound component, big enough and priced enough, under
    `gap_max_fraction` of the roofline bandwidth `bw`."""
    big = c.bound == "memory" and (c.share or 0) > th.gap_min_share
    gbs = c.achieved_gbs
    below = gbs is not None and gbs < th.gap_max_fraction * bw
    return big and below and (c.bytes_known_share or 0) >= th.min_bytes_known


def memory_bound_gap(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """Decode components: bound == memory, share > 10 %, achieved < 50 % of
    the roofline bandwidth."""
    ph, bw = an.phase("decode"), an.device.roofline_bw
    if ph is None or not bw:
        return []
    slow = [c for c in ph.component_rows if _far_below(c, bw, th)]
    if not slow:
        return []
    slow.sort(key=lambda c: c.gap_ms or 0, reverse=True)
    gap = sum(c.gap_ms or 0 for c in slow)
    basis = an.device.roofline_bw_basis or "sustained"
    summary = "; ".join(
        f"{c.component} at {c.achieved_gbs:.0f} GB/s "
        f"({(c.achieved_gbs or 0) / bw:.0%} of the roofline), "
        f"{c.gap_ms or 0:.3f} ms above it"
        for c in slow[:3]
    )
    rows = [
        {"component": c.component, "share": c.share,
         "achieved_gbs": c.achieved_gbs,
         "fraction_of_roofline": r((c.achieved_gbs or 0.0) / bw),
         "gap_ms": c.gap_ms}
        for c in slow
    ]
    return [Finding(
        rule="roofline-memory-bound-gap", severity="medium",
        title=f"{len(slow)} memory-bound decode component(s) run below "
              f"{th.gap_max_fraction:.0%} of the "
              f"{bw:g} GB/s roofline, {gap:.3f} ms per step above their memory floor",
        ms_per_step=gap, components=tuple(c.component for c in slow),
        summary=summary,
        evidence={"roofline_bw_gbs": bw, "roofline_bw_basis": basis,
                  "gap_ms_per_step": r(gap, 4),
                  "step_ms": ph.step_ms.mean, "kernel_ms": ph.kernel_ms,
                  "achieved_tok_s": ph.achieved_tok_s,
                  "ceiling_tok_s": ph.ceiling_tok_s,
                  "components": rows},
        remedy="Look at these components' kernels first: small "
               "elementwise/norm kernels at low GB/s want fusion (fewer passes "
               "over the activations), GEMV-shaped GEMMs want a skinny/GEMV "
               "kernel or a tuned tile; the gap_ms of each is the most its fix "
               "can save per step.",
        references=())]


def decode_below_ceiling(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """Token steps whose tokens/s is below `ceiling_fraction` of the
    bandwidth ceiling (bytes per step / roofline GB/s): the milliseconds
    per step above the memory floor, split into GPU idle and kernel time.
    A speculative loop's rates count generated tokens, its step's floor is
    the verify pass's."""
    out = []
    for phase in DECODE_LIKE:
        ph = an.phase(phase)
        if ph is None:
            continue
        got, ceil = ph.achieved_tok_s, ph.ceiling_tok_s
        step, tokens = ph.step_ms.mean, ph.tokens_per_step
        if not got or not ceil or got >= th.ceiling_fraction * ceil:
            continue
        if step is None or not tokens:
            continue
        # a speculative loop's ceiling counts generated tokens; its step is the verify pass
        spec = ph.speculative
        floor = 1e3 * tokens / (spec.verify_ceiling_tok_s or ceil if spec else ceil)
        out.append(
            Finding(
                rule="decode-below-bandwidth-ceiling",
                severity="high",
                title=f"{phase} runs at {got:g} tok/s, {got / ceil:.1%} of the "
                      f"{ceil:g} tok/s its bytes "
                      f"allow at {an.device.roofline_bw:g} GB/s: "
                      f"{step - floor:.3f} ms per step above the memory floor",
                ms_per_step=step - floor,
                phase=phase,
                explains="step",
                summary=f"a {step:.3f} ms step against a {floor:.3f} ms memory floor; "
                        f"{ph.idle_ms or 0:.3f} ms of it GPU idle, "
                        f"{ph.kernel_ms or 0:.3f} ms kernels",
                evidence={
                    "phase": phase,
                    "achieved_tok_s": got,
                    "ceiling_tok_s": ceil,
                    "fraction": r(got / ceil, 4),
                    "step_ms": step,
                    "floor_ms": r(floor, 4),
                    "idle_ms": ph.idle_ms,
                    "kernel_ms": ph.kernel_ms,
                    "gb_per_token": ph.gb_per_token,
                    "bytes_known_share": ph.bytes_known_share,
                    "roofline_bw_gbs": an.device.roofline_bw,
                },
                remedy="Look at the idle and kernel findings: idle time "
                       "(launch gaps, copies, syncs) and kernels below "
                       "their roofline are what separates the step from its floor.",
                references=(),
            )
        )
    return out


def bytes_inconsistent(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """Components whose bytes over their time exceed the device's peak
    bandwidth (the document nulls them and says why): the bytes model
    over-counts, or the data stayed in cache; their rooflines cannot be
    trusted. Quiet on a what-if device: times measured on a faster chip
    exceed a slower one's peak without any model error."""
    if an.device.what_if:
        return []
    out = []
    for ph in an.phases:
        bad = [c for c in ph.component_rows if c.inconsistent]
        if not bad:
            continue
        ms = sum(c.ms or 0 for c in bad)
        rows = [
            {"component": c.component, "ms": c.ms, "bytes": c.bytes,
             "bytes_from": c.bytes_from,
             "implied_gbs": r(c.bytes / (c.ms * 1e6), 1) if c.bytes and c.ms else None,
             "why": c.inconsistent}
            for c in bad
        ]
        out.append(Finding(
            rule="bytes-model-inconsistent", severity="info",
            title=f"{ph.phase}: {len(bad)} component(s) would move bytes faster "
                  f"than the device's "
                  f"{an.device.peak_bw_gbs} GB/s peak: their bytes model is wrong or their "
                  f"data sat in cache",
            ms_per_step=ms, phase=ph.phase,
            components=tuple(c.component for c in bad),
            evidence={"phase": ph.phase, "components": rows,
                      "peak_bw_gbs": an.device.peak_bw_gbs},
            remedy="Check the shapes and dtypes behind these components "
                   "(quantized weights priced as bf16, expected active experts, "
                   "a cache-resident working set); a what-if onto a slower "
                   "device makes every time measured on a faster one look impossible.",
            references=()))
    return out
