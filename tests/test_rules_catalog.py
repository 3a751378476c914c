"""The catalog rules on real traces: idle by cause, KV re-copy, ceilings, projections, provenance variants, compare.

Variants are derived in the test from real files and named so (a stamp field added, kernel durations scaled,
a what-if device). Numbers are derived from the trace's own tables where possible, else named regression pins.
"""

from __future__ import annotations

from functools import cache

import msgspec
from msgspec.structs import replace
import polars as pl
import pytest
from test_rules import TRACES, analysis_of, attribution, doc, fired

import rules
from attrib.app import model_budget
from attrib.cli import main
from attrib.pipeline import attribute
from attrib.analysis.build import build
from attrib.roofline.arch import override
from collectors import load
from rules import run
from rules.compare import bimodal_decode
from attrib.analysis import Analysis
from rules.idle import CAUSES, idle_causes

LLAMA2_7B = {"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
             "num_key_value_heads": 32, "vocab_size": 32000, "tie_word_embeddings": False}


def _found(a, d, th=rules.DEFAULT) -> dict:
    return {f.rule: f for f in run(a, d, thresholds=th)}


@cache
def _rocpd_doc(bits: float, arch: str | None = None) -> Analysis:
    a = attribution("gfx1201_rocpd")
    b = model_budget(LLAMA2_7B, weight_bits=bits, context=8)
    d = build(a, budget=b) if arch is None else build(a, arch=override(arch), arch_from="override", budget=b)
    return d


def test_idle_causes_add_up_to_the_steps_idle() -> None:
    """Per step, the causes partition the time no kernel runs: the steps stage's idle (no kernel and no copy
    running) plus at most the GPU copy time of the window (copies are a cause here, busy there)."""
    for name in ("h200_llama_eager", "mi300_hf", "gfx1201_rocpd", "h200_moe_eager"):
        a = attribution(name)
        for phase in a.steps["phase"].unique().drop_nulls():
            t = idle_causes(a, phase).join(a.steps.select("step", pl.col("idle_ms").alias("ref")), on="step")
            extra = t.select(sum(pl.col(c) for c in CAUSES) - pl.col("ref")).to_series()
            assert (extra >= -1e-3).all() and (extra <= t["gpu_copy_ms"] + 1e-3).all(), (name, phase)


def _ledger(name: str, phase: str) -> dict:
    """cause -> ms per step of a phase's ledger (the analysis' typed rows)."""
    ph = analysis_of(name).phase(phase)
    out: dict = {}
    for r in ph.ledger_rows:
        out[r.cause] = out.get(r.cause, 0.0) + r.ms_per_step
    return out


def test_idle_on_eager_hf_decode_is_launch_gaps_not_copies() -> None:
    """The eager HF Llama decode (batch 8): the GPU waits between launches, no copy holds it; P06 says
    so (launch-bound) and the ledger's own launch finding is not repeated for the decode."""
    causes = _ledger("h200_llama_eager", "decode")
    idle = {c: ms for c, ms in causes.items() if c != "kernels"}
    assert max(idle, key=idle.get) == "launch" and "copy" not in causes  # no memcpy in this trace
    found = run(attribution("h200_llama_eager"), analysis_of("h200_llama_eager"))
    assert "P06-launch-bound-decode" in {f.rule for f in found}
    assert not [f for f in found if f.rule == "ledger-launch" and f.phase == "decode"]


def test_idle_on_the_mi300_hf_prefill_is_not_the_synchronization() -> None:
    """The TraceLens HF prefill on MI300 calls hipDeviceSynchronize for 17 ms per step, but the GPU is
    busy then with the 463 kernels launched before the step: no sync row to speak of in the ledger, and
    no ledger finding names the synchronization."""
    a = attribution("mi300_hf")
    calls = a.trace.launches.filter(pl.col("name") == "hipDeviceSynchronize")
    assert calls["dur_ns"].sum() / 1e6 / max(a.steps.height, 1) > 17
    assert _ledger("mi300_hf", "prefill").get("sync", 0.0) < 0.1
    assert not [f for f in run(a, analysis_of("mi300_hf")) if f.rule == "ledger-sync"]


def test_ledger_findings_quiet_below_their_share() -> None:
    """A ledger cause under 5 % of the typical step gives no finding (the dense CUDA-graph decode's
    launch gaps inside and between replays: 4 %, reported as info only with the host row)."""
    found = [f for f in run(attribution("h200_dense_graph"), analysis_of("h200_dense_graph"))
             if f.rule.startswith("ledger-")]
    assert all(f.evidence["share_of_step"] >= 0.05 or f.rule == "ledger-profiler" for f in found
               if f.evidence["ms_per_step"] == f.ms_per_step)
    assert "ledger-host" in {f.rule for f in found}


def test_kv_cache_recopied_on_hf_dynamic_cache() -> None:
    """Llama decode, batch 8, 8 layers, 16 KV heads x 64 (hidden 2048 / 32 heads), bf16, context 512+: each step cats K and V onto the
    whole cache, reading and writing it: 2 (K,V) x 8 layers x 8 x 16 x 64 x ~516 positions x 2 B x 2
    (read + write) = ~270 MB, twice what attention reads (the cache once)."""
    f = fired("h200_llama_eager")["kv-cache-recopied"]
    expect = 2 * 8 * 8 * 16 * 64 * 516 * 2 * 2 / 1e6
    assert f.evidence["cat_mb_per_step"] == pytest.approx(expect, rel=0.02)
    assert f.evidence["cat_vs_attention_bytes"] == pytest.approx(2.0, abs=0.05)
    assert f.evidence["growth_mb_per_step"] == pytest.approx(expect / 516, rel=0.05)
    assert f.ms_per_step == pytest.approx(0.112, abs=0.005)  # regression pin: cat kernel ms per step
    assert "kv-cache-recopied" not in fired("mi300_vllm_replay")  # paged cache written in place


def test_decode_below_ceiling_and_quiet_near_it() -> None:
    f = fired("h200_moe_eager")["decode-below-bandwidth-ceiling"]
    ph = doc("h200_moe_eager")["phases"][1]
    assert f.ms_per_step == pytest.approx(ph["step_ms"]["mean"] - 1e3 * ph["tokens_per_step"] / ph["ceiling_tok_s"], abs=1e-3)
    d = _rocpd_doc(4.5)  # llama.cpp on the R9700 runs at about half its ceiling
    dec = d.to_dict()["phases"][0]
    assert 0.4 < dec["achieved_tok_s"] / dec["ceiling_tok_s"] < 0.6
    assert "decode-below-bandwidth-ceiling" not in _found(attribution("gfx1201_rocpd"), d)


def test_bytes_model_inconsistent_with_a_wrong_weight_width() -> None:
    """The real llama-bench Q4_0 decode priced as if weights were 16-bit: the GEMMs would move > 640 GB/s."""
    a = attribution("gfx1201_rocpd")
    f = _found(a, _rocpd_doc(16))["bytes-model-inconsistent"]
    assert {c["component"] for c in f.evidence["components"]} >= {"mlp_gate_up", "qkv_proj"}
    assert all(c["implied_gbs"] > 640 for c in f.evidence["components"])
    assert "bytes-model-inconsistent" not in _found(a, _rocpd_doc(4.5))


def test_p18_mmvq_below_bandwidth_projected_onto_a_7900_xtx() -> None:
    """The R9700's MMVQ GEMMs reach ~80 % of its 612 GB/s (quiet); measured against the 960 GB/s of a 7900 XTX
    (what-if) they would be below 75 %: the finding fires and says it is a projection."""
    a = attribution("gfx1201_rocpd")
    assert "P18-llamacpp-mmvq-bandwidth" not in _found(a, _rocpd_doc(4.5))
    f = _found(a, _rocpd_doc(4.5, "rx-7900-xtx"))["P18-llamacpp-mmvq-bandwidth"]
    assert f.projection and f.title.startswith("[projection onto ") and f.evidence["fraction"] < 0.75
    assert 450 < f.evidence["achieved_gbs"] < 612


def test_p19_mmq_prefill_on_the_r9700_and_not_on_decode_only() -> None:
    f = fired("gfx1201_rocprof_v1")["P19-llamacpp-prefill-microbatch"]
    # two 512-token forward passes x (31 layers x 7 MMQ GEMMs + the last layer's q, k, v, o) = 442
    assert f.evidence["mmq_launches"] == 442 and f.evidence["mmq_share"] > 0.9
    assert "P19-llamacpp-prefill-microbatch" not in fired("gfx1201_rocpd")


def test_p15_p16_vllm_mxfp4_and_ck_kernels_projected_onto_rdna() -> None:
    """The MI300 vLLM replay runs MXFP4 MoE (_matmul_ogs ... mxfp4) and CK Rmsnorm2dFwd: on its own gfx942
    neither rule applies; projected onto gfx1151/gfx1201 both fire, as projections."""
    assert not {"P15-low-bit-dequant", "P16-aiter-ck-on-rdna"} & set(fired("mi300_vllm_replay"))
    for arch in ("gfx1151", "gfx1201"):
        f = fired("mi300_vllm_replay", arch)
        p15, p16 = f["P15-low-bit-dequant"], f["P16-aiter-ck-on-rdna"]
        assert p15.projection and p15.evidence["share_of_kernel_time"] > 0.7
        assert p15.ms_per_step == pytest.approx(83.288 + 39.244, abs=0.01)  # the two _matmul_ogs kernels
        assert p16.evidence["kernels"] == 49 and "norm" in p16.evidence["components"]


def test_p23_hsa_override_added_to_a_real_stamp() -> None:
    """The MI300 HF trace (Tensile names carry _ISA942_, its own arch: quiet) with HSA_OVERRIDE_GFX_VERSION
    added to its provenance in the test."""
    assert "P23-hsa-override-gfx-version" not in fired("mi300_hf")
    tr = load(TRACES["mi300_hf"])
    prov = dict(tr.meta.provenance) | {"env": {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}}
    a = attribution("mi300_hf")
    a = replace(a, trace=tr.with_meta(provenance=prov))
    f = _found(a, build(a))["P23-hsa-override-gfx-version"]
    assert f.evidence["override_as_arch"] == "gfx1100" and f.evidence["kernel_isa_tokens"] == ["gfx942"]
    assert f.severity == "high"


def test_p20_gtt_limit_with_host_memory_added_to_a_real_stamp_projected_onto_gfx1151() -> None:
    tr = load(TRACES["h200_llama_eager"])
    a = attribution("h200_llama_eager")
    gfx1151 = override("gfx1151")
    assert "P20-gtt-limit-default" not in _found(a, build(a, arch=gfx1151, arch_from="override"))
    host = dict(tr.meta.provenance["host"]) | {"memory_bytes": 512 * 2**30}  # the field the stamp now records
    a = replace(a, trace=tr.with_meta(provenance=dict(tr.meta.provenance) | {"host": host}))
    f = _found(a, build(a, arch=gfx1151, arch_from="override"))["P20-gtt-limit-default"]
    total = tr.meta.devices[0]["totalGlobalMem"]
    assert f.evidence["fraction"] == pytest.approx(total / (512 * 2**30), abs=1e-3) and f.projection
    assert "P20-gtt-limit-default" not in _found(a, build(a))  # on its own H200 the rule does not apply


def _scaled(factor: float) -> dict:
    tr = load(TRACES["gfx1201_rocpd"])
    tr = tr.with_tables(kernels=tr.kernels.with_columns((pl.col("dur_ns") * factor).cast(pl.Int64)))
    return build(attribute(tr))


def test_p22_bimodal_against_the_same_trace_with_kernels_scaled_in_the_test() -> None:
    base = analysis_of("gfx1201_rocpd")
    slow = _scaled(1 / 0.65)
    [f] = bimodal_decode(base, slow)
    assert f.evidence["speed_ratio_min"] == pytest.approx(0.65, abs=0.01)
    assert f.evidence["speed_ratio_max"] == pytest.approx(0.65, abs=0.01)
    assert f.ms_per_step > 0
    assert bimodal_decode(base, base) == []
    assert bimodal_decode(base, _scaled(1 / 0.95)) == []  # 0.95x: noise, not the slow state


def test_attrib_rules_lists_the_catalog(capsys) -> None:
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    ids = [line.split()[0] for line in out.splitlines() if line and not line.startswith(" ")]
    assert ids == [r.id for r in rules.CATALOG] and len([i for i in ids if i.startswith("P")]) >= 18
    assert main(["rules", "--arch", "h200-sxm"]) == 0
    out = capsys.readouterr().out
    assert "P13-fp8-emulated-gfx11" not in out and "step-time-ledger" in out
    assert main(["rules", "--arch", "gfx1151"]) == 0
    assert "P13-fp8-emulated-gfx11" in capsys.readouterr().out
    assert main(["rules", "--arch", "gfx1103"]) == 0  # a target the database lacks that a rule names
    assert "P03-rocblas-tensile-fallback" in capsys.readouterr().out
    assert main(["rules", "--arch", "gfx9999x"]) == 2  # no such device (issue 38: it listed rules)
    assert "unknown arch 'gfx9999x'" in capsys.readouterr().err
    assert main(["rules", "--arch", "no-such-gpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown arch 'no-such-gpu'" in err


def _inside(k: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """Kernels that start inside one of the GPU-side annotation spans."""
    sp = spans.sort("start_ns").select(pl.col("start_ns").alias("s0"), (pl.col("start_ns") + pl.col("dur_ns")).alias("s1"))
    return (k.sort("start_ns").join_asof(sp, left_on="start_ns", right_on="s0")
            .filter(pl.col("start_ns") < pl.col("s1")))


def test_p13_p14_fp8_decode_projected_onto_gfx1151_and_gfx1201() -> None:
    """Our H200 W8A8-FP8 capture (torch._scaled_mm, per-token quant in torch ops). On its own H200 neither rule
    applies; projected onto gfx1151 (no FP8 WMMA) P13 fires, onto gfx1201 P14 fires on the separate quantize
    kernels. Their share is derived from the trace's own GPU-side "per_token_fp8_quant" annotation spans."""
    assert not {"P13-fp8-emulated-gfx11", "P14-fp8-kernel-choice-gfx1201"} & set(fired("h200_fp8_w8a8"))
    a = attribution("h200_fp8_w8a8")
    k = a.kernels.filter(pl.col("step").is_not_null())
    spans = a.trace.markers.filter((pl.col("name") == "per_token_fp8_quant") & (pl.col("side") == "gpu"))
    quant_share = _inside(k, spans)["dur_ns"].sum() / k["dur_ns"].sum()
    gemm_share = k.filter(pl.col("op") == "aten::_scaled_mm")["dur_ns"].sum() / k["dur_ns"].sum()
    p14 = fired("h200_fp8_w8a8", "gfx1201")["P14-fp8-kernel-choice-gfx1201"]
    assert p14.projection and p14.evidence["quant_share"] == pytest.approx(quant_share, abs=0.01)
    assert p14.evidence["fp8_gemm_kernels"] == 8 * 8 * 4  # steps x layers x GEMMs
    p13 = fired("h200_fp8_w8a8", "gfx1151")["P13-fp8-emulated-gfx11"]
    assert p13.evidence["share_of_kernel_time"] == pytest.approx(quant_share + gemm_share, abs=0.01)
    assert "P14-fp8-kernel-choice-gfx1201" not in fired("h200_fp8_w8a8", "gfx1151")
    assert "P13-fp8-emulated-gfx11" not in fired("h200_llama_eager", "gfx1151")  # bf16: nothing to emulate
