"""P22: R9700 bimodal decode: against a baseline of the same run, every bandwidth-bound kernel is uniformly
0.5-0.8x as fast (a slow-state process). A pure function of two analysis documents, for `attrib compare`."""

from __future__ import annotations

from typing import Any

from rules.finding import Finding, phase_doc, r
from rules.thresholds import DEFAULT, Thresholds

REFS = ("https://github.com/ROCm/legacy-rocm-build/issues/6347",)
MIN_KERNELS = 3


def _kernels(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    ph = phase_doc(doc, "decode")
    return {k["name"]: k for k in (ph or {}).get("top_kernels", ()) if k.get("ms")}


def bimodal_decode(base: dict[str, Any], cand: dict[str, Any], th: Thresholds = DEFAULT) -> list[Finding]:
    """Fires when the candidate's decode kernels shared with the baseline (top kernels, ms per step) all run at a
    speed ratio base_ms / cand_ms in [bimodal_low, bimodal_high], within `bimodal_spread` of each other, on gfx1201."""
    if (cand.get("device") or {}).get("arch") != "gfx1201":
        return []
    b, c = _kernels(base), _kernels(cand)
    common = sorted(set(b) & set(c))
    if len(common) < MIN_KERNELS:
        return []
    ratios = {n: b[n]["ms"] / c[n]["ms"] for n in common}
    lo, hi = min(ratios.values()), max(ratios.values())
    if lo < th.bimodal_low or hi > th.bimodal_high or hi - lo > th.bimodal_spread:
        return []
    extra = sum(c[n]["ms"] - b[n]["ms"] for n in common)
    return [Finding(
        rule="P22-r9700-bimodal-decode", severity="high",
        title=f"every shared decode kernel runs {lo:.2f}-{hi:.2f}x as fast as in the baseline: a slow-state "
              f"process (R9700 bimodal decode), {extra:.3f} ms per step",
        ms_per_step=extra,
        evidence={"kernels_compared": len(common), "speed_ratio_min": r(lo), "speed_ratio_max": r(hi),
                  "baseline": (base.get("source") or {}).get("path"), "candidate": (cand.get("source") or {}).get("path"),
                  "kernels": [{"name": n[:100], "base_ms": b[n]["ms"], "candidate_ms": c[n]["ms"], "ratio": r(ratios[n])}
                              for n in sorted(common, key=lambda n: -c[n]["ms"])[:5]]},
        remedy="Restart the serving process (the state is fixed at spawn) and compare again; GPU_MAX_HW_QUEUES=1 is a "
               "partial mitigation.",
        references=REFS)]
