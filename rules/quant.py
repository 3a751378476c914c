"""Low-precision paths on RDNA: FP8 emulated on gfx11 (P13), FP8 kernel
choice on gfx1201 (P14), low-bit (MXFP4 / W4A16) GEMMs dequantizing in
software or far below the bandwidth they should reach (P15)."""

from __future__ import annotations


import polars as pl

from attrib.components.patterns import (
    FP8_KERNEL,
    FP8_NAME,
    GEMM_LIKE,
    LOW_BIT_KERNEL,
    QUANTIZE_KERNEL,
)
from attrib.analysis.model import Analysis
from attrib.pipeline import Attribution
from rules.finding import Finding, distinct, first_names, kernel_ns, kernels_in, ns, num, r
from rules.thresholds import Thresholds

FP8_OP = r"_scaled_mm|fp8|float8|w8a8"
QUANT_OPS = (
    r"^aten::(?:abs|amax|max|clamp|clamp_min|div|reciprocal|copy_|_to_copy|to)$"
)
NO_FP8 = (
    "gfx1100", "gfx1101", "gfx1102", "gfx1103",
    "gfx1150", "gfx1151", "gfx1152", "gfx1153",
)

P13_REFS = (
    "https://github.com/lemonade-sdk/vllm-rocm/issues/44",
    "https://github.com/lemonade-sdk/vllm-rocm/issues/36",
    "https://github.com/vllm-project/vllm/pull/31184",
)
P14_REFS = (
    "https://github.com/vllm-project/vllm/issues/57838",
    "https://github.com/vllm-project/vllm/pull/17004",
    "https://github.com/vllm-project/vllm/pull/46192",
)
P15_REFS = (
    "https://github.com/vllm-project/vllm/issues/34579",
    "https://github.com/kyuz0/amd-strix-halo-vllm-toolboxes/issues/10",
    "https://github.com/lemonade-sdk/vllm-rocm/issues/24",
    "https://github.com/vllm-project/vllm/pull/46186",
    "https://github.com/vllm-project/vllm/pull/40977",
)
# the marker columns _fp8 adds and drops again
_MARKS = ("_gemm", "_cast", "_named", "_qop", "_run", "_dtypes", "_fp8_name", "_bare_cast")


def _share(total: float, sub: pl.DataFrame) -> float:
    """The kernel time of `sub` over `total` ns."""
    return float(ns(sub) / total) if total else 0.0


def _ms(sub: pl.DataFrame) -> float:
    return float(ns(sub) / 1e6 / max(sub["step"].n_unique(), 1))


def _dtype_counts(a: Attribution, op_ids: pl.Series) -> pl.DataFrame:
    """Per aten::copy_ op of `op_ids` (op_id): how many distinct float/int dtypes its inputs
    have (only a copy_'s dtypes are read: the other ops' text is never parsed)."""
    quoted = pl.col("input_types").str.extract_all(r'"([^"]+)"')
    numeric = pl.element().str.contains(r"(?i)float|half|bfloat|int")
    dtypes = quoted.list.eval(pl.element().filter(numeric)).list.n_unique()
    copies = a.trace.ops.filter((pl.col("name") == "aten::copy_")
                                & pl.col("id").is_in(op_ids.drop_nulls().implode()))
    return copies.select(pl.col("id").alias("op_id"), dtypes.alias("_dtypes"))


def _feeding_runs(g: list[bool], c: list[bool], q: list[bool]) -> list[bool]:
    """Marks the run of quantize ops (q) just before each FP8 GEMM (g)
    that holds a float8 cast (c)."""
    mark, i = [False] * len(g), len(g) - 1
    while i >= 0:  # from each FP8 GEMM back through the quantize ops that feed it
        if not g[i]:
            i -= 1
            continue
        j = i - 1
        while j >= 0 and q[j] and not g[j]:
            j -= 1
        if any(c[j + 1:i]):
            mark[j + 1:i] = [True] * (i - j - 1)
        i = j
    return mark


def _name_marks(names: pl.Series) -> pl.DataFrame:
    """Per distinct kernel name, the FP8 marks its name alone gives (patterns run once a
    name, not once a kernel)."""
    # vLLM's kAuto KV template is not FP8
    name = pl.col("name").str.replace_all(r"Fp8KVCacheDataType\)0", "")
    cast = name.str.contains(FP8_NAME)
    fused = name.str.contains(r"(?i)fp8\w*quant")
    return names.unique().to_frame().with_columns(
        cast.alias("_cast"),
        (name.str.contains(QUANTIZE_KERNEL) & cast | fused).alias("_named"),
        name.str.contains(FP8_KERNEL).alias("_fp8_name"),
        (cast & ~name.str.contains(GEMM_LIKE)).alias("_bare_cast"))


def _may_hold_fp8(a: Attribution) -> bool:
    """Whether any kernel's name or op may be FP8 (a GEMM or a named quantize kernel): else
    `_fp8` finds none, and reads no kernel row."""
    marks = _name_marks(distinct(a, "name"))
    ops = distinct(a, "op").drop_nulls()
    return bool(marks["_fp8_name"].any() or marks["_named"].any()
                or ops.str.contains(FP8_OP).any())


def _fp8(a: Attribution) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(FP8 GEMM kernels, activation-quantize kernels) inside steps: name, op, start_ns,
    dur_ns, step. Quantize kernels: named so (vLLM's fused quant kernels), or the run of
    torch ops (abs, amax, div, clamp, casts) just before an FP8 GEMM that
    ends in a float8 cast (torch-native per-token quantization, e.g.
    vLLM's RowWiseTorchFP8ScaledMMLinearKernel)."""
    k = kernels_in(a, columns=("name", "op", "op_id", "start_ns", "dur_ns"),
                   where=None if _may_hold_fp8(a) else pl.lit(False)).sort("start_ns")
    op = pl.col("op").fill_null("")
    fp8_gemm = pl.col("_fp8_name") | op.str.contains(FP8_OP)
    gemm = fp8_gemm & ~pl.col("_bare_cast")
    # a copy_ between two dtypes is a cast (part of quantizing);
    # a same-dtype copy_ is a layout copy (not)
    converts = (pl.col("op") != "aten::copy_") | (pl.col("_dtypes").fill_null(2) > 1)
    qop = op.str.contains(QUANT_OPS) & converts
    k = (k.join(_name_marks(k["name"]), on="name", how="left", maintain_order="left")
         .join(_dtype_counts(a, k["op_id"]), on="op_id", how="left", maintain_order="left")
         .with_columns(gemm.alias("_gemm"), qop.alias("_qop")))
    g, c, q = k["_gemm"].to_list(), k["_cast"].to_list(), k["_qop"].to_list()
    mark = _feeding_runs(g, c, q)
    # typed: an empty trace has no rows
    k = k.with_columns(pl.Series("_run", mark, dtype=pl.Boolean))
    quant = k.filter(pl.col("_named") | pl.col("_run"))
    gemms = k.filter(pl.col("_gemm") & ~pl.col("_named") & ~pl.col("_run"))
    return gemms.drop(*_MARKS), quant.drop(*_MARKS)


def fp8_emulated_gfx11(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """P13: FP8 GEMM or FP8 quantize kernels on a gfx11 device, which has
    no FP8 WMMA: emulated on VALU."""
    gemm, quant = _fp8(a)
    if not gemm.height and not quant.height:
        return []
    total = kernel_ns(a)
    both = pl.concat([gemm, quant])
    return [Finding(
        rule="P13-fp8-emulated-gfx11", severity="high",
        title=f"FP8 kernels on {an.arch}, which has no FP8 matrix unit: "
              f"{_share(total, both):.0%} of kernel time runs emulated",
        ms_per_step=_ms(both),
        evidence={"fp8_kernels": gemm.height, "quant_kernels": quant.height,
                  "share_of_kernel_time": r(_share(total, both)),
                  "quant_share": r(_share(total, quant)),
                  "names": first_names(both, 4)},
        remedy="Serve a BF16 or W4A16/W8A16 (AWQ, GPTQ, compressed-tensors) "
               "checkpoint on gfx11; FP8 is native only on gfx12 among RDNA.",
        references=P13_REFS)]


def fp8_kernel_choice_gfx1201(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """P14: FP8 GEMMs on gfx12 with separate quantize kernels each step
    above `quant_share` of kernel time."""
    gemm, quant = _fp8(a)
    if not gemm.height:
        return []
    qs = _share(kernel_ns(a), quant)
    if qs <= th.quant_share:
        return []
    return [Finding(
        rule="P14-fp8-kernel-choice-gfx1201", severity="medium",
        title=f"FP8 GEMMs on gfx12 spend {qs:.0%} of kernel time "
              "in separate quantize kernels",
        ms_per_step=_ms(quant),
        evidence={"fp8_gemm_kernels": gemm.height,
                  "quant_kernels": quant.height, "quant_share": r(qs),
                  "gemm_names": first_names(gemm, 3),
                  "quant_names": first_names(quant, 3)},
        remedy="Check which FP8 linear kernel the engine selected (vLLM >= 0.28 "
               "picks RowWiseTorchFP8ScaledMMLinearKernel on RDNA4: 5-24 % "
               "decode loss); prefer a fused-quant path or the ChannelWise kernel.",
        references=P14_REFS)]


def low_bit_dequant(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """P15: low-bit GEMMs (MXFP4, W4A16, AWQ/GPTQ/Marlin) on RDNA, which has
    no FP4/FP6 unit: fire when their priced bytes move below
    `p15_bw_fraction` of the roofline bandwidth, or when MXFP4 kernels run
    at all (software dequantization) for more than `quant_share` of kernel
    time."""
    name = pl.col("name")
    low_bit = name.str.contains(LOW_BIT_KERNEL) & ~name.str.starts_with("void mul_mat")
    lb = kernels_in(a, where=low_bit)
    if not lb.height:
        return []
    known = lb.filter(pl.col("bytes").is_not_null() & (pl.col("bytes") > 0))
    bw = an.device.roofline_bw
    known_ns = ns(known)
    gbs = (
        float(num(known["bytes"].sum()) / known_ns)
        if known.height and known_ns
        else None
    )
    frac = gbs / bw if (gbs is not None and bw) else None
    mx = lb.filter(pl.col("name").str.contains(r"(?i)mxfp4|fp4"))
    share = _share(kernel_ns(a), lb)
    slow = frac is not None and frac < th.p15_bw_fraction
    software = mx.height > 0 and share > th.quant_share
    if not (slow or software):
        return []
    how = (
        f" at {frac:.0%} of the roofline bandwidth"
        if frac is not None
        else " with MXFP4 weights and no FP4 unit: dequantized in software"
    )
    return [Finding(
        rule="P15-low-bit-dequant", severity="high",
        title=f"low-bit GEMMs take {share:.0%} of kernel time on {an.arch}" + how,
        ms_per_step=_ms(lb),
        evidence={"kernels": lb.height, "share_of_kernel_time": r(share),
                  "achieved_gbs": r(gbs, 1), "roofline_bw_gbs": bw,
                  "fraction_of_roofline": r(frac),
                  "bytes_known_kernels": known.height,
                  "names": first_names(lb, 4)},
        remedy="On gfx1151 use a W4A16 path built for it (vLLM PR #46186; "
               "HybridW4A16LinearKernel, PR #40977) or llama.cpp for MXFP4 MoE "
               "models; the generic Triton W4A16 kernel runs below half the "
               "bandwidth.",
        references=P15_REFS)]
