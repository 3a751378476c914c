"""Low-precision paths on RDNA: FP8 emulated on gfx11 (P13), FP8 kernel choice on gfx1201 (P14), low-bit
(MXFP4 / W4A16) GEMMs dequantizing in software or far below the bandwidth they should reach (P15)."""

from __future__ import annotations

from typing import Any

import polars as pl

from attrib.pipeline import Attribution
from rules.finding import Finding, r, roofline_bw
from rules.thresholds import Thresholds

FP8 = (r"(?i)fp8|float8|e4m3|e5m2|_scaled_mm|w8a8|scaled_mm|^Cijk_\w*_(?:F8F8S|B8F8HS|F8B8|B8B8|F8H|F8S)_")
QUANT = r"(?i)per_token_group_quant|scaled_fp8_quant|dynamic_\w*quant|quantize|dequant|convert_fp8|to_fp8"
LOW_BIT = r"(?i)mxfp4|w4a16|awq|gptq|marlin|q_gemm_rdna3|mxfp4_gemm_rdna3|int4|wvSplitK_int4"
NO_FP8 = ("gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153")

P13_REFS = ("https://github.com/lemonade-sdk/vllm-rocm/issues/44", "https://github.com/lemonade-sdk/vllm-rocm/issues/36",
            "https://github.com/vllm-project/vllm/pull/31184")
P14_REFS = ("https://github.com/vllm-project/vllm/issues/57838", "https://github.com/vllm-project/vllm/pull/17004",
            "https://github.com/vllm-project/vllm/pull/46192")
P15_REFS = ("https://github.com/vllm-project/vllm/issues/34579", "https://github.com/kyuz0/amd-strix-halo-vllm-toolboxes/issues/10",
            "https://github.com/lemonade-sdk/vllm-rocm/issues/24", "https://github.com/vllm-project/vllm/pull/46186",
            "https://github.com/vllm-project/vllm/pull/40977")


def _share(k: pl.DataFrame, sub: pl.DataFrame) -> float:
    total = k["dur_ns"].sum()
    return float(sub["dur_ns"].sum() / total) if total else 0.0


def _ms(sub: pl.DataFrame) -> float:
    return float(sub["dur_ns"].sum() / 1e6 / max(sub["step"].n_unique(), 1))


def _fp8(a: Attribution) -> tuple[pl.DataFrame, pl.DataFrame]:
    k = a.kernels.filter(pl.col("step").is_not_null())
    name = pl.col("name").str.replace_all(r"Fp8KVCacheDataType\)0", "")  # vLLM's kAuto KV template is not FP8
    is_fp8 = name.str.contains(FP8) | (pl.col("dtype").fill_null("").str.contains("fp8"))
    return k.filter(is_fp8 & ~pl.col("name").str.contains(QUANT)), k.filter(pl.col("name").str.contains(QUANT) & is_fp8
                                                                               | pl.col("name").str.contains(r"(?i)fp8\w*quant"))


def fp8_emulated_gfx11(a: Attribution, doc: dict[str, Any], th: Thresholds) -> list[Finding]:
    """P13: FP8 GEMM or FP8 quantize kernels on a gfx11 device, which has no FP8 WMMA: emulated on VALU."""
    gemm, quant = _fp8(a)
    if not gemm.height and not quant.height:
        return []
    k = a.kernels.filter(pl.col("step").is_not_null())
    both = pl.concat([gemm, quant])
    return [Finding(
        rule="P13-fp8-emulated-gfx11", severity="high",
        title=f"FP8 kernels on {(doc.get('device') or {}).get('arch')}, which has no FP8 matrix unit: "
              f"{_share(k, both):.0%} of kernel time runs emulated",
        ms_per_step=_ms(both),
        evidence={"fp8_kernels": gemm.height, "quant_kernels": quant.height, "share_of_kernel_time": r(_share(k, both)),
                  "quant_share": r(_share(k, quant)), "names": both["name"].unique().sort().head(4).str.slice(0, 100).to_list()},
        remedy="Serve a BF16 or W4A16/W8A16 (AWQ, GPTQ, compressed-tensors) checkpoint on gfx11; FP8 is native only "
               "on gfx12 among RDNA.",
        references=P13_REFS)]


def fp8_kernel_choice_gfx1201(a: Attribution, doc: dict[str, Any], th: Thresholds) -> list[Finding]:
    """P14: FP8 GEMMs on gfx12 with separate quantize kernels each step above `quant_share` of kernel time."""
    gemm, quant = _fp8(a)
    if not gemm.height:
        return []
    k = a.kernels.filter(pl.col("step").is_not_null())
    qs = _share(k, quant)
    if qs <= th.quant_share:
        return []
    return [Finding(
        rule="P14-fp8-kernel-choice-gfx1201", severity="medium",
        title=f"FP8 GEMMs on gfx12 spend {qs:.0%} of kernel time in separate quantize kernels",
        ms_per_step=_ms(quant),
        evidence={"fp8_gemm_kernels": gemm.height, "quant_kernels": quant.height, "quant_share": r(qs),
                  "gemm_names": gemm["name"].unique().sort().head(3).str.slice(0, 100).to_list(),
                  "quant_names": quant["name"].unique().sort().head(3).str.slice(0, 100).to_list()},
        remedy="Check which FP8 linear kernel the engine selected (vLLM >= 0.28 picks RowWiseTorchFP8ScaledMMLinearKernel "
               "on RDNA4: 5-24 % decode loss); prefer a fused-quant path or the ChannelWise kernel.",
        references=P14_REFS)]


def low_bit_dequant(a: Attribution, doc: dict[str, Any], th: Thresholds) -> list[Finding]:
    """P15: low-bit GEMMs (MXFP4, W4A16, AWQ/GPTQ/Marlin) on RDNA, which has no FP4/FP6 unit: fire when their
    priced bytes move below `p15_bw_fraction` of the roofline bandwidth, or when MXFP4 kernels run at all
    (software dequantization) for more than `quant_share` of kernel time."""
    k = a.kernels.filter(pl.col("step").is_not_null())
    lb = k.filter(pl.col("name").str.contains(LOW_BIT) & ~pl.col("name").str.starts_with("void mul_mat"))
    if not lb.height:
        return []
    known = lb.filter(pl.col("bytes").is_not_null() & (pl.col("bytes") > 0))
    bw = roofline_bw(doc)
    gbs = float(known["bytes"].sum() / known["dur_ns"].sum()) if known.height and known["dur_ns"].sum() else None
    frac = gbs / bw if (gbs is not None and bw) else None
    mx = lb.filter(pl.col("name").str.contains(r"(?i)mxfp4|fp4"))
    share = _share(k, lb)
    if not ((frac is not None and frac < th.p15_bw_fraction) or (mx.height and share > th.quant_share)):
        return []
    return [Finding(
        rule="P15-low-bit-dequant", severity="high",
        title=f"low-bit GEMMs take {share:.0%} of kernel time on {(doc.get('device') or {}).get('arch')}"
              + (f" at {frac:.0%} of the roofline bandwidth" if frac is not None else
                 " with MXFP4 weights and no FP4 unit: dequantized in software"),
        ms_per_step=_ms(lb),
        evidence={"kernels": lb.height, "share_of_kernel_time": r(share), "achieved_gbs": r(gbs, 1),
                  "roofline_bw_gbs": bw, "fraction_of_roofline": r(frac), "bytes_known_kernels": known.height,
                  "names": lb["name"].unique().sort().head(4).str.slice(0, 100).to_list()},
        remedy="On gfx1151 use a W4A16 path built for it (vLLM PR #46186; HybridW4A16LinearKernel, PR #40977) or "
               "llama.cpp for MXFP4 MoE models; the generic Triton W4A16 kernel runs below half the bandwidth.",
        references=P15_REFS)]
