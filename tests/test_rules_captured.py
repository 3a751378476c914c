"""The rules on this project's H200 captures (tests/fixtures/captured, README there): torch.compile with the
first compiled call in the window, eager vs SDPA attention, a batch-1 decode sampling over a 152k vocabulary,
a decode with a blocking pageable host copy per step. Expected figures are derived from the trace's own
tables in each test; a what-if device is named in the test."""

from __future__ import annotations

from functools import cache

import msgspec
from msgspec.structs import replace
import polars as pl
import pytest
from conftest import FIXTURES

from attrib.trace import as_text
from attrib.pipeline import Attribution, attribute
from attrib.analysis import Analysis
from attrib.analysis.build import build
from attrib.roofline.arch import override
from collectors import load
from rules import run

CAPTURED = FIXTURES / "captured"


@cache
def _a(name: str) -> Attribution:
    return attribute(load(CAPTURED / f"{name}.pt.trace.json.gz"))


@cache
def _doc(name: str, arch: str | None) -> Analysis:
    a = _a(name)
    return build(a) if arch is None else build(a, arch=override(arch), arch_from="override")


def _fired(name: str, arch: str | None = None) -> dict:
    return {f.rule: f for f in run(_a(name), _doc(name, arch))}


def test_p05_compile_explains_the_compile_step() -> None:
    """The first torch.compile'd decode call is inside the window: its step holds dynamo + inductor compile
    (entire_frame_compile and what nests in it, inductor's compile_file workers) and the autotuned kernels."""
    f = _fired("compile_decode")["P05-compile-in-window"]
    a = _a("compile_decode")
    [step] = f.evidence["steps_with_compile"]
    s = a.steps.filter(pl.col("step") == step["step"]).row(0, named=True)
    frame = a.trace.ops.filter(pl.col("name") == "entire_frame_compile")
    assert s["phase"] == "decode" and frame.height == 1
    assert frame["dur_ns"][0] / 1e6 <= f.ms_per_step <= s["step_ms"]  # at least the dynamo frame compile
    assert f.ms_per_step / s["step_ms"] > 0.9 and f.severity == "high"
    assert f.ms_per_step == pytest.approx(step["compile_ms"]) and f.ms_per_step > 1000
    # the compile step runs the benchmark kernels too: its kernel count is the phase's outlier
    med = a.steps.filter(pl.col("phase") == "decode")["n_kernels"].median()
    [odd] = f.evidence["kernel_count_outlier_steps"]
    assert odd["step"] == step["step"] and odd["kernels"] > 10 * med
    assert "P05-compile-in-window" not in _fired("sdpa_attn_a")  # eager: nothing compiled
    # the steps stage leaves the compile step out of the phase figures; the per-step rules do too
    idle = [f for f in run(a, _doc("compile_decode", None))
            if f.rule.startswith("ledger-") and f.phase == "decode"][0]
    assert idle.evidence["steps"] == _doc("compile_decode", None).to_dict()["phases"][1]["steps"] == 5


def test_p17_eager_attention_fires_and_sdpa_does_not() -> None:
    """Same L4 Llama, batch 8, prompt 2048: attn_implementation="eager" computes q@k^T, softmax, @v with bmm and a
    softmax kernel per layer; "sdpa" runs one fused cuDNN attention kernel."""
    [f] = [f for f in run(_a("eager_attn"), _doc("eager_attn", None))
           if f.rule == "P17-unfused-attention" and f.evidence["phase"] == "prefill"]
    k = _a("eager_attn").kernels.filter(pl.col("phase") == "prefill")
    soft = k.filter(pl.col("op") == "aten::_softmax")["dur_ns"].sum() / k["dur_ns"].sum()
    assert f.evidence["phase"] == "prefill" and f.evidence["softmax_share"] == pytest.approx(soft, abs=0.002)
    assert f.evidence["kernels_per_step"] == 4 * 3  # 4 layers x (bmm, softmax, bmm)
    assert "P17-unfused-attention" not in _fired("sdpa_attn_a")


def test_p08_sampler_share_at_batch_1_projected_onto_gfx1151() -> None:
    """Batch 1, vocab 151936, top-k/top-p sampling each step: on the traced H200 P08 (wave32 RDNA) does not
    apply; projected onto gfx1151 the kernels after the lm_head are a third of decode kernel time."""
    assert "P08-sampler-share" not in _fired("sampler_b1_v152k")
    f = _fired("sampler_b1_v152k", "gfx1151")["P08-sampler-share"]
    a = _a("sampler_b1_v152k")
    k = a.kernels.filter(pl.col("phase") == "decode")
    head_end = k.filter(pl.col("component") == "lm_head").group_by("step").agg(
        (pl.col("start_ns") + pl.col("dur_ns")).max().alias("e"))
    after = k.join(head_end, on="step").filter(pl.col("start_ns") >= pl.col("e"))
    assert f.evidence["sampler_share"] == pytest.approx(after["dur_ns"].sum() / k["dur_ns"].sum(), abs=0.01)
    assert f.evidence["vocab"] == 151936 and f.projection and f.evidence["tokens_per_step"] == 1
    assert "P08-sampler-share" not in _fired("sdpa_attn_a", "gfx1151")  # batch 8, greedy


def test_idle_names_the_blocking_copy() -> None:
    """Each decode step first copies 128 MiB of pageable host memory to the GPU (cudaMemcpyAsync from pageable
    memory blocks): the ledger's largest decode finding is that copy, with its milliseconds per step."""
    found = run(_a("blocking_copy_decode"), _doc("blocking_copy_decode", None))
    f = [f for f in found if f.rule.startswith("ledger-") and f.phase == "decode"][0]
    c = _a("blocking_copy_decode").trace.copies.filter(pl.col("kind") == "memcpy")
    per_step = c["dur_ns"].median() / 1e6
    assert c.height == 8 and c["bytes"].unique().to_list() == [128 * 2**20]
    assert f.rule == "ledger-copy" and f.evidence["rows"][0]["what"] == "memcpy HtoD"
    assert f.ms_per_step == pytest.approx(per_step, rel=0.02)
    p21 = _fired("blocking_copy_decode")["P21-host-device-copies-decode"]
    assert p21.ms_per_step == pytest.approx(c["dur_ns"].sum() / 1e6 / 8, rel=1e-3)


def test_linear_attention_torch_fallback_fires_on_qwen3next_and_not_elsewhere() -> None:
    """Qwen3-Next captured without flash-linear-attention / causal-conv1d: transformers runs the delta rule and
    the conv1d in PyTorch. The finding counts the kernels launched inside those frames, derived here from the
    trace's frames and launches; attention-only models and the same trace without its Python frames stay quiet."""
    a = _a("qwen3next_decode")
    found = {f.evidence["phase"]: f for f in run(a, _doc("qwen3next_decode", None))
             if f.rule == "linear-attention-torch-fallback"}
    assert set(found) == {"prefill", "decode"}
    dec = found["decode"]
    steps = a.steps.filter((pl.col("phase") == "decode") & pl.col("excluded").is_null())
    lo, hi = steps["window_start"].min(), steps["window_end"].max()
    fr = a.trace.frames.filter(pl.col("name").str.contains(r"\): torch_recurrent_gated_delta_rule$")
                               & pl.col("start_ns").is_between(lo, hi))
    # one recurrent-rule call per Gated DeltaNet layer (3) per decode step
    assert fr.height == 3 * steps.height
    la = a.kernels.filter((pl.col("component") == "linear_attention") & pl.col("step").is_in(steps["step"].implode()))
    per_step = dec.evidence["fallback_kernels_per_step"]
    assert 3 * 20 <= per_step <= la.height / steps.height  # many small kernels per layer, all linear_attention
    assert {x["frame"] for x in dec.evidence["frames"]} == {"torch_recurrent_gated_delta_rule", "causal_conv1d_update"}
    assert dec.ms_per_step > dec.evidence["kernel_ms_per_step"] > 0  # its kernels plus their share of launch gaps
    # graded by its share of the step (rules.finding.graded): 3.34 of a 19.2 ms decode step is 17%
    assert (
        dec.severity == "info"
        and found["prefill"].evidence["frames"][0]["frame"] == "torch_chunk_gated_delta_rule"
    )
    for other in ("sdpa_attn_a", "deepseekv3_decode", "compile_decode"):
        assert "linear-attention-torch-fallback" not in _fired(other)
    no_frames = replace(a, trace=a.trace.with_tables(frames=a.trace.frames.clear()))
    assert not [f for f in run(no_frames, _doc("qwen3next_decode", None))
                if f.rule == "linear-attention-torch-fallback"]


def test_p10_single_pass_decode_attention_at_16k_keys_and_quiet_below_8k_or_with_split_kv() -> None:
    """nosplit_ctx*: SDPA held to its memory-efficient kernel, which splits work over batch x heads x query
    blocks only: a batch-1 decode runs 16 CTAs over the whole context. At 16k keys it reads K/V at a few % of
    the H200's 4800 GB/s; the same kernel at 2k keys is under the 8K threshold; cuDNN's decode at 16k
    (slope_ctx16384) has its split-KV partner (lean_reduction) and runs near the roofline."""
    f = _fired("nosplit_ctx16384")["P10-decode-attention-no-split-kv"]
    a = _a("nosplit_ctx16384")
    att = as_text(a.kernels).filter((pl.col("phase") == "decode") & (pl.col("component") == "attention")
                           & pl.col("step").is_in(a.steps.filter(pl.col("excluded").is_null())["step"].implode()))
    steps = att["step"].n_unique()
    assert att["name"].str.starts_with("fmha_cutlassF").all() and att.height == 4 * steps  # one per layer
    ms = att["dur_ns"].sum() / 1e6 / steps
    gbs = att["bytes"].sum() / att["dur_ns"].sum()  # bytes per ns = GB/s
    assert f.evidence["attention_ms_per_step"] == pytest.approx(ms, rel=1e-3)
    assert f.evidence["achieved_gbs"] == pytest.approx(gbs, rel=1e-2) and gbs < 0.2 * 4800
    floor = att["bytes"].sum() / steps / 4272e9 * 1e3   # at the H200's sustained roof (archs.toml)
    assert f.ms_per_step == pytest.approx(ms - floor, rel=1e-2) and f.ms_per_step > 10 * floor
    # keys from the ops' shapes: the prompt plus the decode steps so far (the last step attends to the most)
    assert 16384 < f.evidence["keys"] <= 16384 + 6 and not f.projection
    assert "P10-decode-attention-no-split-kv" not in _fired("nosplit_ctx2048")
    assert "P10-decode-attention-no-split-kv" not in _fired("slope_ctx16384")
    # on the traced device only: the H200's 237 GB/s is 39% of gfx1201's roofline, not a collapse there
    assert "P10-decode-attention-no-split-kv" not in _fired("nosplit_ctx16384", "gfx1201")
    # and it grows with the context: 8x the keys, about 8x the attention time per step
    short = _a("nosplit_ctx2048").kernels.filter((pl.col("phase") == "decode") & (pl.col("component") == "attention"))
    ratio = ms / (short["dur_ns"].sum() / 1e6 / short["step"].n_unique())
    assert 6 < ratio < 9


def test_p02_fp8_decode_gemms_on_128x128_tiles_and_bf16_on_small_tiles_stay_quiet() -> None:
    """fp8_w8a8_decode: 4 tokens per step, every projection a `_scaled_mm` that cuBLASLt serves with
    nvjet 128x128 tiles (32x the token count); the bf16 decodes at M <= 4 get 64x8 / 8x64 tiles."""
    f = _fired("fp8_w8a8_decode")["P02-decode-gemm-big-tile"]
    a = _a("fp8_w8a8_decode")
    dec = as_text(a.kernels).filter(pl.col("step").is_in(a.steps.filter((pl.col("phase") == "decode")
                                                                & pl.col("excluded").is_null())["step"].implode()))
    big = dec.filter(pl.col("name").str.contains(r"^nvjet_sm90_qqtst_128x128_"))
    steps = dec["step"].n_unique()
    assert set(big["component"]) == {"qkv_proj", "o_proj", "mlp_gate_up", "mlp_down"}
    assert f.evidence["share_of_decode"] == pytest.approx(big["dur_ns"].sum() / dec["dur_ns"].sum(), abs=1e-3)
    assert f.evidence["tile_waste"] == 128 / 4 and not f.projection
    ms, floor = big["dur_ns"].sum() / 1e6 / steps, big["bytes"].sum() / 4272e9 * 1e3 / steps
    assert f.ms_per_step == pytest.approx(ms - floor, rel=1e-3) and 0 < f.ms_per_step < ms
    for quiet in ("sampler_b1_v152k", "qwen3next_decode", "deepseekv3_decode", "sdpa_attn_a"):
        assert "P02-decode-gemm-big-tile" not in _fired(quiet)
