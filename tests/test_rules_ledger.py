"""Findings that read the step-time ledger (rules/ledger.py), P05 on a vLLM capture trace, and P03/P12
on real MI300 kernels projected onto RDNA/Strix devices (--arch), all on real fixtures."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import msgspec
from msgspec.structs import replace
import polars as pl

from attrib.trace import as_text
from attrib.components.patterns import COMPILE_SPANS
from attrib.pipeline import Attribution, attribute
from attrib.analysis import Analysis
from attrib.analysis.build import build
from attrib.roofline.arch import override
from collectors import load
from rules.attention import navi_paged_attention_traps
from rules.gemm import rocblas_fallback
from rules.jit import compile_in_window
from rules.ledger import findings_of
from rules.thresholds import Thresholds
from conftest import FIXTURES

CAP = FIXTURES / "captured"
TORCH = FIXTURES / "torch"
SGLANG = TORCH / "mi300_sglang_qwen3-8b_decode" / "sglang_Qwen3-8B_decode.json.gz"
VLLM = TORCH / "mi300_vllm_prefilldecode_piecewise"
RESNET = TORCH / "mi300_resnet_act_checkpoint" / "mi300_resnet_act_checkpoint.json.gz"
TH = Thresholds()


@cache
def attributed(path: Path) -> Attribution:
    return attribute(load(path))


@cache
def doc(path: Path, arch: str | None = None) -> Analysis:
    a = attributed(path)
    return build(a) if arch is None else build(a, arch=override(arch), arch_from="override")


def test_cudnn_stall_finding_names_the_op_its_ms_and_its_fixes() -> None:
    f = findings_of(attributed(CAP / "ledger_cudnn_decode.json.gz"), "decode")
    top = f[0]
    assert top.rule == "ledger-host" and top.severity == "high"
    assert "aten::_cudnn_attention_forward" in top.title
    assert top.evidence["rows"][0]["what"] == "aten::_cudnn_attention_forward"
    # the mean counted step's stall, as the ledger and every phase figure: 55-58 ms a step; the
    # first step's 514 ms (the first plan build) is a warm-up outlier, left out and listed
    assert 50 < top.evidence["rows"][0]["ms_per_step"] < 60
    assert all(w in top.remedy for w in ("warm the decode shapes", "pad the KV", "SDPA backend"))
    assert "graph" not in top.remedy.lower()
    assert [x.ms_per_step for x in f] == sorted((x.ms_per_step for x in f), reverse=True)


def test_graph_replayed_decode_gets_no_graph_advice() -> None:
    """Capture (b) is 100% graph-replayed: its launch row is the graph's own gaps, and says so."""
    f = findings_of(attributed(CAP / "ledger_graph_ahead.json.gz"), "decode")
    launch = next(x for x in f if x.rule == "ledger-launch")
    assert launch.evidence["graph_replayed_share"] == 1.0
    assert "inside graph replays" in launch.title
    assert "would not help" in launch.remedy and "reduce-overhead" not in launch.remedy
    assert launch.severity == "info"


def test_eager_launch_gaps_name_graphs_and_compile_and_the_profiler_caveat() -> None:
    """An eager HF decode (sdpa_attn_a): launch gaps between one-by-one launches are 39% of the step;
    the host-side rows are most of it, so the profiler's estimate is named as a caveat."""
    f = {x.rule: x for x in findings_of(attributed(CAP / "sdpa_attn_a.pt.trace.json.gz"), "decode")}
    launch = f["ledger-launch"]
    assert launch.severity == "medium"
    assert "CUDA/HIP graph" in launch.remedy and "torch.compile" in launch.remedy
    assert 10 < launch.evidence["rows"][0]["median_us"] < 50  # a true median gap, not a sum over a count
    prof = f["ledger-profiler"]
    assert prof.severity == "info" and prof.evidence["host_side_share"] > 0.5
    assert "estimate" in prof.title and "without it" in prof.remedy


def test_host_sampling_finding_names_the_frame() -> None:
    top = findings_of(attributed(CAP / "ledger_host_sampling.json.gz"), "decode")[0]
    assert top.rule == "ledger-host" and "sample_top_p (ledger_capture.py:" in top.title
    assert "on the GPU" in top.remedy


def test_sglang_wait_outside_the_window_is_not_called_a_copy() -> None:
    f = findings_of(attributed(SGLANG), "decode")
    assert f[0].rule == "ledger-outside" and f[0].severity == "high"
    assert "stream wait" in f[0].title and "non_blocking" not in f[0].remedy
    assert all(x.rule != "ledger-copy" for x in f)


def test_p05_quiet_on_the_vllm_capture_trace_and_firing_on_a_compile() -> None:
    """The vLLM capture trace holds `compile_fx.py(N): wrapper` (the runtime wrapper of a cached
    compiled graph), no compile; the torch.compile capture holds inductor/autotune spans."""
    cap = VLLM / "graph_capture_rank_0.pt.trace.json.gz"
    frames = attributed(cap).trace.frames
    wrapper = frames.filter(pl.col("name").str.contains(r"compile_fx\.py\(\d+\): wrapper"))
    assert wrapper.height == 1
    assert not wrapper["name"].str.contains(COMPILE_SPANS).any()
    assert compile_in_window(attributed(cap), doc(cap), TH) == []
    comp = CAP / "compile_decode.pt.trace.json.gz"
    assert [x.rule for x in compile_in_window(attributed(comp), doc(comp), TH)] == ["P05-compile-in-window"]


def test_p03_on_real_rocblas_tensile_kernels_projected_onto_gfx1151() -> None:
    """The MI300 ResNet step: 28 rocBLAS-named Tensile kernels (no UserArgs, 4-field MI token) are 67% of
    its Cijk_ GEMM time beside 12 hipBLASLt ones. On MI300 P03 does not apply; projected onto gfx1151
    the fallback is named. The SGLang decode (hipBLASLt UserArgs kernels only) stays quiet."""
    cijk = as_text(attributed(RESNET).kernels).filter(pl.col("name").str.starts_with("Cijk_"))
    legacy = cijk.filter(~pl.col("name").str.contains("_UserArgs_"))
    share = legacy["dur_ns"].sum() / cijk["dur_ns"].sum()
    f = rocblas_fallback(attributed(RESNET), doc(RESNET, "gfx1151"), TH)
    assert len(f) == 1 and f[0].rule == "P03-rocblas-tensile-fallback"
    assert f[0].evidence["rocblas_kernels"] == legacy.height == 28
    assert f[0].evidence["rocblas_share"] == round(share, 3)
    assert all("_UserArgs_" not in n for n in f[0].evidence["names"])
    assert rocblas_fallback(attributed(SGLANG), doc(SGLANG, "gfx1151"), TH) == []


def test_p12_on_real_ll4mi_paged_attention_projected_onto_gfx1201() -> None:
    """The SGLang decode runs paged_attention_ll4mi_QKV/reduce (bf16 KV: Fp8KVCacheDataType 0). Projected
    onto gfx1201, P12 names the kernel (info: no trap); with the stamp saying fp8 KV and block size 32
    (a variant of the document, kernels unchanged) the traps are named (high)."""
    a = attributed(SGLANG)
    d = doc(SGLANG, "gfx1201")
    f = navi_paged_attention_traps(a, d, TH)
    assert len(f) == 1 and f[0].severity == "info"
    assert f[0].evidence["calls"] == 72 and f[0].evidence["traps"] == []
    assert any("paged_attention_ll4mi_QKV" in n for n in f[0].evidence["kernels"])
    bad = replace(d, provenance={"kv_cache_dtype": "fp8_e4m3", "block_size": 32})
    g = navi_paged_attention_traps(a, bad, TH)[0]
    assert g.severity == "high" and len(g.evidence["traps"]) == 2
