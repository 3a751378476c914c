"""P22: R9700 bimodal decode: against a baseline of the same run, every
bandwidth-bound kernel is uniformly 0.5-0.8x as fast (a slow-state
process). A pure function of two analyses, for `attrib compare`."""

from __future__ import annotations

from attrib.analysis.model import Analysis, TopKernel
from rules.finding import Finding, r
from rules.thresholds import DEFAULT, Thresholds

REFS = ("https://github.com/ROCm/legacy-rocm-build/issues/6347",)
MIN_KERNELS = 3


def _kernels(an: Analysis) -> dict[str, TopKernel]:
    ph = an.phase("decode")
    return {k.name: k for k in (ph.kernel_rows if ph else ()) if k.ms}


def _ms(k: TopKernel) -> float:
    return k.ms or 0.0


def bimodal_decode(base: Analysis, cand: Analysis, th: Thresholds = DEFAULT) -> list[Finding]:
    """Fires when the candidate's decode kernels shared with the baseline
    (top kernels, ms per step) all run at a speed ratio base_ms / cand_ms in
    [bimodal_low, bimodal_high], within `bimodal_spread` of each other, on
    gfx1201."""
    if cand.arch != "gfx1201":
        return []
    b, c = _kernels(base), _kernels(cand)
    common = sorted(set(b) & set(c))
    if len(common) < MIN_KERNELS:
        return []
    ratios = {n: _ms(b[n]) / _ms(c[n]) for n in common}
    lo, hi = min(ratios.values()), max(ratios.values())
    if lo < th.bimodal_low or hi > th.bimodal_high or hi - lo > th.bimodal_spread:
        return []
    extra = sum(_ms(c[n]) - _ms(b[n]) for n in common)
    return [
        Finding(
            rule="P22-r9700-bimodal-decode",
            severity="high",
            title=f"every shared decode kernel runs {lo:.2f}-{hi:.2f}x as fast "
                  "as in the baseline: a slow-state "
                  f"process (R9700 bimodal decode), {extra:.3f} ms per step",
            ms_per_step=extra,
            evidence={
                "kernels_compared": len(common),
                "speed_ratio_min": r(lo),
                "speed_ratio_max": r(hi),
                "baseline": base.source.path,
                "candidate": cand.source.path,
                "kernels": [
                    {"name": n[:100], "base_ms": b[n].ms, "candidate_ms": c[n].ms,
                     "ratio": r(ratios[n])}
                    for n in sorted(common, key=lambda n: -_ms(c[n]))[:5]
                ],
            },
            remedy="Restart the serving process (the state is fixed at spawn) "
                   "and compare again; GPU_MAX_HW_QUEUES=1 is a partial mitigation.",
            references=REFS,
        )
    ]
