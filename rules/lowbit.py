"""Weight-only low-bit GEMMs at the wrong size: a kernel built for a few rows (tinygemm, a GEMV-style
int8 kernel, an AWQ kernel with small tiles) run at large M, where the layer is compute-bound and
the 16-bit GEMM of the same FLOPs would be many times faster."""

from __future__ import annotations

import polars as pl

from attrib.analysis.model import Analysis
from attrib.cost.lowbit import LOW_BIT_MODEL
from attrib.pipeline import Attribution
from rules.finding import Finding, first_names, kernels_in, ns, num, r, steps_in
from rules.thresholds import Thresholds

# torchao's HQQ benchmark: tinygemm 4.6x slower than a Triton int4 GEMM at M = 512 (N = K = 4096)
REFS = ("https://github.com/pytorch/ao/blob/main/torchao/prototype/hqq/README.md",)
_COLUMNS = ("name", "component", "dur_ns", "bytes", "flops", "dtype", "cost_model")


def _formats(k: pl.DataFrame) -> str:
    """The weight formats of the kernels (`gemm (int4 g128)` -> int4 g128), most time first."""
    fmt = pl.col("cost_model").str.extract(r"^gemm \((.+)\)$")
    by = k.group_by(fmt.alias("f")).agg(pl.col("dur_ns").sum()).sort("dur_ns", descending=True)
    return ", ".join(f for f in by["f"].to_list() if f)


def _finding(a: Attribution, an: Analysis, phase: str, th: Thresholds) -> Finding | None:
    ph = an.phase(phase)
    bw = an.device.roofline_bw
    if ph is None or not ph.step_ms.mean or not bw:
        return None
    k = kernels_in(a, phase, where=pl.col("cost_model").str.contains(LOW_BIT_MODEL),
                   columns=_COLUMNS)
    if not k.height:
        return None
    k = k.filter(pl.col("flops").is_not_null() & pl.col("bytes").is_not_null())
    steps = steps_in(a, phase).height
    if not k.height or not steps:
        return None
    dtype = str(k.group_by("dtype").agg(pl.col("dur_ns").sum())
                .sort("dur_ns", descending=True)["dtype"][0])
    roof, basis = an.device.matrix_roof(dtype)
    if not roof:
        return None
    ms = ns(k) / 1e6 / steps
    flops, nbytes = num(k["flops"].sum()) / steps, num(k["bytes"].sum()) / steps
    compute_ms, memory_ms = flops / (roof * 1e9), nbytes / (bw * 1e6)
    step = float(ph.step_ms.mean)
    # large M: the layer's own shapes make it compute-bound, so its 16-bit GEMM is held to the
    # FLOPs at the 16-bit roof, not to the bytes the low-bit weights save
    if compute_ms <= memory_ms or ms < th.lowbit_large_m_share * step:
        return None
    ratio = ms / compute_ms
    if ratio < th.lowbit_large_m_ratio:
        return None
    achieved = flops / (ms * 1e9)
    fmt, rows = _formats(k), ph.tokens_per_step
    at = f" at M = {rows} rows" if rows else ""
    comps = tuple(k.group_by("component").agg(pl.col("dur_ns").sum())
                  .sort("dur_ns", descending=True)["component"].to_list())
    how = f"the {dtype} {'calibrated' if basis == 'measured' else 'peak'} {roof:g} TFLOP/s"
    return Finding(
        rule="low-bit-gemm-large-m", severity="high",
        title=(f"{phase}: weight-only GEMMs ({fmt}){at} take {ms:.3f} ms a step, {ratio:.1f}x the "
               f"{compute_ms:.3f} ms a {dtype} GEMM of the same FLOPs takes at {how}"),
        ms_per_step=ms - compute_ms, phase=phase, components=comps,
        summary=(f"{flops / 1e12:.3f} TFLOP a step at {achieved:.1f} TFLOP/s "
                 f"({achieved / roof:.1%} of {how}); compute-bound by their shapes "
                 f"({compute_ms:.3f} ms of FLOPs > {memory_ms:.3f} ms of bytes at {bw:g} GB/s)"),
        evidence={"phase": phase, "steps": steps, "rows": rows, "weight_format": fmt,
                  "kernels_per_step": r(k.height / steps, 1), "kernel_ms": r(ms, 4),
                  "flops_per_step": flops, "bytes_per_step": nbytes,
                  "achieved_tflops": r(achieved, 2), "roof_dtype": dtype,
                  "roof_tflops": roof, "roof_basis": basis,
                  "compute_floor_ms": r(compute_ms, 4), "memory_floor_ms": r(memory_ms, 4),
                  "slowdown": r(ratio, 2), "step_ms": step, "names": first_names(k, 3)},
        remedy=("Keep the low-bit kernel for decode (few rows: its bytes are what it saves) and "
                "run large-M passes (prefill, big batches) as 16-bit GEMMs: dequantize the weights "
                "once for prefill (or keep a 16-bit copy), or use a low-bit GEMM built for large M "
                "(tensor-core tiles of 64+ rows: Marlin/Machete-style W4A16, an fp8 path)."),
        references=REFS)


def low_bit_large_m(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """Every phase whose weight-only low-bit GEMMs (priced by attrib.cost.lowbit) are compute-bound
    by their shapes, take `lowbit_large_m_share` of the step or more and run
    `lowbit_large_m_ratio` times or more slower than their FLOPs at the 16-bit matrix roof."""
    found = (_finding(a, an, ph.phase, th) for ph in an.phases)
    return [f for f in found if f is not None]
