"""llama.cpp on RDNA: MMVQ decode below the bandwidth it should reach
(P18), MMQ prefill micro-batch (P19)."""

from __future__ import annotations


import polars as pl

from attrib.components.patterns import LLAMACPP_MMQ, LLAMACPP_MMVQ, TENSILE
from attrib.analysis.model import Analysis
from attrib.pipeline import Attribution
from rules.finding import Finding, first_names, kernel_ns, kernels_in, ns, num, r
from attrib.components.taxonomy import GEMM_COMPONENTS
from rules.thresholds import Thresholds

P18_REFS = (
    "https://github.com/ggml-org/llama.cpp/issues/24438",
    "https://github.com/ggml-org/llama.cpp/issues/20934",
    "https://github.com/ggml-org/llama.cpp/issues/26679",
    "https://kyuz0.github.io/amd-strix-halo-toolboxes",
)
P19_REFS = (
    "https://github.com/halo-box/strix-llama.cpp/pull/38",
    "https://github.com/ggml-org/llama.cpp/pull/16827",
)


def mmvq_below_bandwidth(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """P18: decode GEMM components served by mul_mat_vec_q move their
    (quantized) bytes below `p18_bw_fraction` of the roofline bandwidth
    (bytes from shapes or a --model budget)."""
    ph, bw = an.phase("decode"), an.device.roofline_bw
    k = kernels_in(a, "decode", pl.col("name").str.contains(LLAMACPP_MMVQ))
    if ph is None or not bw or not k.height:
        return []
    comps = set(k["component"].unique().to_list())
    rows = [
        c for c in ph.component_rows
        if c.component in comps and c.component in GEMM_COMPONENTS
        and c.bytes and c.ms and (c.bytes_known_share or 0) >= th.min_bytes_known
    ]
    if not rows:
        return []
    nbytes = sum(c.bytes or 0.0 for c in rows)
    ms = sum((c.ms or 0.0) * (c.bytes_known_share or 0.0) for c in rows)
    gbs = nbytes / (ms * 1e6)
    if gbs >= th.p18_bw_fraction * bw:
        return []
    floor = nbytes / (bw * 1e6)
    return [
        Finding(
            rule="P18-llamacpp-mmvq-bandwidth",
            severity="medium",
            title=f"llama.cpp MMVQ decode GEMMs move {gbs:.0f} GB/s, "
                  f"{gbs / bw:.0%} of the {bw:g} GB/s roofline "
                  f"(healthy HIP MMVQ reaches >= {th.p18_bw_fraction:.0%})",
            ms_per_step=ms - floor,
            components=tuple(c.component for c in rows),
            evidence={
                "achieved_gbs": r(gbs, 1),
                "roofline_bw_gbs": bw,
                "fraction": r(gbs / bw),
                "mmvq_ms_per_step": r(ms, 4),
                "floor_ms": r(floor, 4),
                "bytes_from": sorted({c.bytes_from or "" for c in rows}),
                "components": [
                    {"component": c.component, "achieved_gbs": c.achieved_gbs,
                     "ms": c.ms}
                    for c in rows
                ],
            },
            remedy="Compare with the Vulkan backend on the same model (often "
                   "faster for decode on RDNA), update llama.cpp "
                   "(MMVQ tuning for RDNA3.5/4), and check the quant type's MMVQ path.",
            references=P18_REFS,
        )
    ]


def mmq_prefill_microbatch(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """P19: a llama.cpp prefill whose GEMMs run as MMQ (mul_mat_q)
    micro-batches, at least half its kernel time: the -ub size decides MMQ
    vs dequant+BLAS routing and is worth a sweep on RDNA."""
    ph = an.phase("prefill")
    mmq = kernels_in(a, "prefill", pl.col("name").str.contains(LLAMACPP_MMQ))
    total = kernel_ns(a, "prefill")
    if ph is None or not mmq.height or not total or ns(mmq) / total < 0.5:
        return []
    name = pl.col("name")
    blas = kernels_in(a, "prefill",
                      name.str.contains(TENSILE) | name.str.contains(r"dequantize_block"))
    steps = max(ph.steps, 1)
    return [
        Finding(
            rule="P19-llamacpp-prefill-microbatch",
            severity="info",
            title="llama.cpp prefill GEMMs run as MMQ micro-batches: "
                  f"{num(mmq['dur_ns'].sum()) / total:.0%} of prefill kernel "
                  f"time in {mmq.height} mul_mat_q launches; "
                  "the -ub size changes their routing and speed",
            ms_per_step=ns(mmq) / 1e6 / steps,
            evidence={
                "mmq_launches": mmq.height,
                "mmq_share": r(ns(mmq) / total),
                "mmq_mean_us": r(num(mmq["dur_ns"].mean()) / 1e3, 1),
                "blas_or_dequant_launches": blas.height,
                "names": first_names(mmq, 2, 80),
            },
            remedy="Sweep -ub (and -b) for this model and quant on this GPU (e.g. 256..2048); on "
                   "gfx1151 non-monotonic "
                   "results are known, and large -ub (2048) is common for long prompts.",
            references=P19_REFS,
        )
    ]
