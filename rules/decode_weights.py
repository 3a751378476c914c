"""16-bit GEMM weights in a memory-bound decode: the inverse of low-bit-gemm-large-m. A decode step
that reads most of its bytes as bf16/fp16 weights would read N x fewer with weight-only int4 or
int8 weights. An opportunity (a format the run did not use), not a pathology: it ranks after
every other finding and is no bottleneck row (attrib.analysis.finding.OPPORTUNITIES).

The figures are `--what-if weights=int4`'s (attrib.analysis.reprice.traced_rows) with the weight
bytes from the trace's shapes (attrib.cost.gemm_weights), not a model config's."""

from __future__ import annotations

from attrib.analysis.model import Analysis, Phase
from attrib.analysis.reprice import ceiling, traced_rows
from attrib.analysis.whatif import WhatIfRow
from attrib.cost import gemm_weights
from attrib.cost.lowbit import format_bits
from attrib.cost.weights import WEIGHT_CLASS, Formats
from attrib.pipeline import Attribution
from rules.finding import Finding, kernels_in, r, steps_in
from rules.thresholds import Thresholds

RULE = "16-bit-gemm-decode"
TO = Formats({"default": "int4"})  # the what-if's int4 (attrib.cost.dtypes.WHAT_IF_BITS)
SIXTEEN = 16.0
GEMMS = frozenset(WEIGHT_CLASS) - {"embedding"}  # the weight classes read by a GEMM (not gathered)
REFS = ("https://github.com/pytorch/ao/blob/main/torchao/quantization/README.md",
        "https://docs.vllm.ai/en/latest/features/quantization/",
        "https://github.com/ggml-org/llama.cpp/blob/master/tools/quantize/README.md")


def _weights(a: Attribution, ph: Phase) -> dict[str, float]:
    """component -> the 16-bit weight bytes of its dense GEMMs a decode step, from shapes."""
    k = kernels_in(a, ph.phase, columns=("component", "op_id"))
    per = gemm_weights.per_step(k, a.trace.ops)
    got = gemm_weights.median_per_step(per, steps_in(a, ph.phase)["step"])
    sixteen = {c.component for c in ph.component_rows if format_bits(c.weight_format) == SIXTEEN}
    return {c: w for c, w in got.items() if c in sixteen}


def _low_bit(ph: Phase) -> bool:
    """Whether any weight GEMM of the phase already runs below 16 bits, or in a format whose bits
    are not known (int4/int8/fp8, bitsandbytes' NF4: the model is quantized; a 16-bit lm_head
    beside it is a choice, not this rule's)."""
    bits = (format_bits(c.weight_format) for c in ph.component_rows
            if c.component in WEIGHT_CLASS and c.weight_format)
    return any(b is None or b < SIXTEEN for b in bits)


def _remedy(arch: str | None) -> str:
    fits = (" On gfx11 (no FP8 matrix units: fp8 is emulated, P13) int4 weight-only is the format "
            "that fits." if arch and arch.startswith("gfx11") else "")
    return ("Serve decode with weight-only low-bit weights: int4 (AWQ / GPTQ checkpoints on "
            "vLLM's Marlin/Machete or Triton kernels, torchao int4 weight-only, llama.cpp Q4_K) "
            f"or int8 (torchao int8 weight-only, W8A16).{fits} Project it first with `attrib "
            "analyze TRACE --model config.json --what-if weights=int4`; keep prefill on 16-bit or "
            "large-M kernels (low-bit-gemm-large-m) and check the model's accuracy.")


def _finding(a: Attribution, an: Analysis, th: Thresholds) -> Finding | None:
    ph, bw = an.phase("decode"), an.device.roofline_bw
    if ph is None or not bw or not ph.step_ms.mean or not ph.tokens_per_step or _low_bit(ph):
        return None
    rows = traced_rows(ph, _weights(a, ph), TO, an.device)
    hit = [x for x in rows if x.repriced is not None]
    if {c.component for c in ph.component_rows if c.component in GEMMS} - {x.component for x in hit}:
        return None  # a GEMM without 16-bit weights from shapes (unpriced, a format not known)
    comps = {c.component: c for c in ph.component_rows}
    ms = sum(comps[x.component].ms or 0.0 for x in hit)
    total = sum(x.bytes for x in rows)
    weights = sum(x.repriced_bytes for x in hit)
    if not hit or not ms or weights < th.weights16_bytes_share * total:
        return None
    gemm = sum(x.bytes for x in hit)
    gbs = gemm / (ms * 1e6)
    floor = sum(x.floor_ms or 0.0 for x in hit)
    after = sum(x.projected_floor_ms or 0.0 for x in hit)
    if gbs < th.weights16_bw_fraction * bw or after >= floor:
        return None
    return _found(an, ph, rows, hit, ms, floor, after)


def _found(an: Analysis, ph: Phase, rows: list[WhatIfRow] | tuple[WhatIfRow, ...],
           hit: list[WhatIfRow], ms: float, floor: float, after: float) -> Finding:
    bw, step = float(an.device.roofline_bw or 0), float(ph.step_ms.mean or 0)
    total, projected = sum(x.bytes for x in rows), sum(x.projected_bytes for x in rows)
    weights = sum(x.repriced_bytes for x in hit)
    to = weights - sum(x.bytes - x.projected_bytes for x in hit)
    gemm, gemm_after = sum(x.bytes for x in hit), sum(x.projected_bytes for x in hit)
    gbs, achieved_after = gemm / (ms * 1e6), ms * gemm_after / gemm
    fmt = "/".join(sorted({str(c.weight_format) for c in ph.component_rows
                           if c.component in {x.component for x in hit}}))
    bits = TO.bits("default")
    names = " + ".join(x.component for x in sorted(hit, key=lambda x: -x.repriced_bytes))
    ceil, ceil_after = ph.ceiling_tok_s, ceiling(ph.tokens_per_step or 0,
                                                 [x.projected_floor_ms for x in rows])
    rise = (f"; the decode ceiling {ceil:,.0f} -> {ceil_after:,.0f} tok/s"
            if ceil and ceil_after else "")
    return Finding(
        rule=RULE, severity="info", phase=ph.phase, components=tuple(x.component for x in hit),
        ms_per_step=floor - after,
        title=(f"decode: {names} read {weights / 1e9:.3f} GB of {fmt} weights a step "
               f"({weights / total:.0%} of the step's {total / 1e9:.3f} GB); int4 weights "
               f"({bits:g} bits) would read {to / 1e9:.3f} GB: {total / projected:.1f}x fewer "
               "bytes a step"),
        summary=(f"The GEMMs run {ms:.3f} ms a step at {gbs:.0f} GB/s ({gbs / bw:.0%} of the "
                 f"{bw:g} GB/s roofline): their floor drops {floor:.3f} -> {after:.3f} ms "
                 f"({floor - after:.3f} ms a step, {(floor - after) / step:.1%} of the "
                 f"{step:.3f} ms step: `--what-if weights=int4`'s projection); at their achieved "
                 f"GB/s {ms:.3f} -> {achieved_after:.3f} ms{rise}"),
        evidence={"phase": ph.phase, "step_ms": step, "tokens_per_step": ph.tokens_per_step,
                  "weight_format": fmt, "to_format": "int4", "to_bits": bits,
                  "weight_bytes_per_step": weights, "projected_weight_bytes_per_step": to,
                  "bytes_per_step": total, "projected_bytes_per_step": projected,
                  "weight_share": r(weights / total, 4), "bytes_ratio": r(total / projected, 3),
                  "gemm_ms": r(ms, 4), "gemm_gbs": r(gbs, 1), "roofline_gbs": bw,
                  "bw_fraction": r(gbs / bw, 4), "floor_ms": r(floor, 4),
                  "projected_floor_ms": r(after, 4), "at_achieved_gbs_ms": r(achieved_after, 4),
                  "ceiling_tok_s": ceil, "projected_ceiling_tok_s": r(ceil_after, 1),
                  "weights": {x.component: x.repriced_bytes for x in hit}},
        remedy=_remedy(an.arch), references=REFS)


def sixteen_bit_decode(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """The decode phase's 16-bit dense GEMM weights (bytes from the ops' shapes; every weight GEMM
    of the phase has them, none is low-bit or unpriced) when they are
    `weights16_bytes_share` of the step's bytes or more, the GEMMs run at `weights16_bw_fraction`
    of the roofline bandwidth or more, and int4 weights would lower their floor; ms_per_step is that
    drop (`--what-if weights=int4`'s: the time saved at their achieved GB/s x their share of the
    roofline)."""
    f = _finding(a, an, th)
    return [] if f is None else [f]
