"""Components and steps on our own H200 captures (issue #10: compile in the window, Gated DeltaNet,
MLA + shared experts, tensor-parallel all-reduce). Model configs: tests/fixtures/captured/README.md."""

from __future__ import annotations

import re
from functools import cache

import polars as pl
import pytest

from attrib.trace import as_text
from attrib.pipeline import Attribution, attribute
from attrib.analysis import Analysis
from attrib.analysis.build import build
from attrib.components.classify import by_name
from attrib.components.patterns import component_patterns
from attrib.report.table import render
from collectors import load

from conftest import FIXTURES

CAPTURED = FIXTURES / "captured"


@cache
def analysis_of(name: str) -> tuple[Attribution, Analysis]:
    a = attribute(load(CAPTURED / f"{name}.pt.trace.json.gz"))
    return a, build(a)


def analysed(name: str) -> tuple[Attribution, dict]:
    a, an = analysis_of(name)
    return a, an.to_dict()


def _phase(doc: dict, phase: str) -> dict:
    return next(p for p in doc["phases"] if p["phase"] == phase)


def _comps(doc: dict, phase: str = "decode") -> dict[str, dict]:
    return {c["component"]: c for c in _phase(doc, phase)["components"]}


def _per_step(a: Attribution, step: int, evidence_not: str = "") -> dict[str, int]:
    k = a.kernels.filter((pl.col("step") == step) & (pl.col("evidence") != evidence_not))
    return dict(k.group_by("component").len().iter_rows())


# `other` <= 5% of decode kernel time on every capture: tests/test_captured_numbers.py


def test_compile_step_is_left_out_and_said(fixtures):
    # L4 (4 layers) decode, batch 8, torch.compile'd; the FIRST compiled call is decode step 1 of the
    # window: 15.5 s holding dynamo/inductor compile and Triton autotune benchmarks (3,632 kernels
    # against 82 in every later step).
    a, doc = analysed("compile_decode")
    s = a.steps.sort("step")
    # one prefill (its annotation projected on two streams is one step), six decode steps
    assert s["phase"].to_list() == ["prefill"] + ["decode"] * 6
    assert s["excluded"].to_list() == [None, "compile", None, None, None, None, None]
    dec = _phase(doc, "decode")
    assert dec["steps"] == 5 and dec["step_ms"]["p90"] < 10
    [x] = dec["excluded_steps"]
    assert x["reason"] == "compile" and x["kernels"] == 3632 and x["step_ms"] > 15000
    assert "left out: step 1 (compile)" in render(analysis_of("compile_decode")[1])
    # the compile's own kernels (benchmarks, fills) are no model component: never qkv_proj by position
    bench = a.kernels.filter(pl.col("evidence") == "compile")
    assert bench.height == 3632 - 82 and set(bench["component"]) == {"other"}
    # the compiled call itself, like every later step: 4 layers x (q, k, v), o, gate, up, down (+ its
    # split-K reduce), one lm_head; the rotary frequency GEMM (K = 1) is rope
    for step in (1, 3):
        n = _per_step(a, step, evidence_not="compile")
        assert (n["qkv_proj"], n["o_proj"], n["mlp_gate_up"], n["mlp_down"], n["lm_head"]) == (12, 4, 8, 8, 1)


def test_gated_deltanet_is_linear_attention_with_its_projections():
    # Qwen3-Next, layers [GDN, GDN, GDN, full attention]: each GDN layer's in_proj_qkvz and in_proj_ba
    # are its input projections (qkv_proj), out_proj its output projection (o_proj); its recurrence,
    # conv and gating (torch fallbacks: aten kernels inside the module) are linear_attention.
    a, doc = analysed("qwen3next_decode")
    k = as_text(a.kernels).filter(pl.col("phase") == "decode")
    step = k.filter(pl.col("step") == k["step"].min())
    gdn = step.filter(pl.col("module_path").str.contains("Qwen3NextGatedDeltaNet"))
    lin = gdn.filter(pl.col("module_path").str.contains(r"GatedDeltaNet_\d+/Linear_\d+$"))
    assert dict(lin.group_by("component").len().iter_rows()) == {"qkv_proj": 6, "o_proj": 3}
    rest = gdn.filter(~pl.col("module_path").str.contains(r"/Linear_\d+$"))
    assert set(rest["component"]) <= {"linear_attention", "norm"} and rest.filter(
        pl.col("component") == "linear_attention").height > 100
    n = _per_step(a, int(step["step"][0]))
    assert (n["qkv_proj"], n["o_proj"]) == (3 * 2 + 3, 3 + 1)  # + the full-attention layer's q, k, v and o
    assert _comps(doc)["linear_attention"]["share"] > 0.1


@pytest.mark.parametrize("name,layers", [("qwen3next_decode", 4), ("deepseekv3_decode", 2)])
def test_shared_experts_by_class_path(name, layers):
    # with_stack paths hold classes: .../Qwen3NextSparseMoeBlock_0/Qwen3NextMLP_0/Linear_3 and
    # .../DeepseekV3MoE_0/DeepseekV3MLP_1/Linear_13 are the shared expert (an MLP directly in an MoE
    # block): gate, up, down GEMMs and the activation; Qwen3-Next's shared_expert_gate Linear too.
    a, _ = analysed(name)
    k = as_text(a.kernels).filter(pl.col("phase") == "decode")
    step = k.filter(pl.col("step") == k["step"].min())
    shared = step.filter(pl.col("module_path").str.contains(r"(?:SparseMoeBlock|MoE)_\d+/\w+MLP_\d+(?:/|$)"))
    assert shared.height > 0 and set(shared["component"]) == {"moe_shared_expert"}
    gemms = shared.filter(pl.col("module_path").str.contains(r"/Linear_\d+$"))
    assert gemms["module_path"].n_unique() == 3 * layers
    if name == "deepseekv3_decode":
        # layer 0 is dense (first_k_dense_replace=1): its DeepseekV3MLP sits in the decoder layer, an MLP
        dense = step.filter(pl.col("module_path").str.contains(r"DecoderLayer_0/DeepseekV3MLP_0/Linear"))
        assert set(dense["component"]) == {"mlp_gate_up", "mlp_down"}
    else:
        gate = step.filter(pl.col("module_path").str.contains(r"SparseMoeBlock_\d+/Linear_\d+$"))
        assert gate["module_path"].n_unique() == layers and set(gate["component"]) == {"moe_shared_expert"}


def test_tensor_parallel_all_reduce_is_communication():
    # Megatron-style TP=2 of L4: o_proj and down_proj are row-parallel, each followed by an NCCL
    # all-reduce launched from a forward hook inside the Linear's scope: 8 per decode step, all
    # communication by their kernel name, whatever the module says.
    for rank in (0, 1):
        a, doc = analysed(f"tp2_decode_rank{rank}")
        assert doc["distributed"] == {"backend": "nccl", "rank": rank, "world_size": 2}
        k = as_text(a.kernels).filter(pl.col("phase") == "decode")
        nccl = k.filter(pl.col("name").str.starts_with("ncclDevKernel_AllReduce"))
        steps = a.steps.filter(pl.col("phase") == "decode").height
        assert nccl.height == 8 * steps and set(nccl["component"]) == {"communication"}
        assert set(nccl["evidence"]) == {"name"} and nccl["module_path"].str.contains("Linear").all()
        dec = _phase(doc, "decode")
        assert dec["communication_share"] == _comps(doc)["communication"]["share"] > 0.3
        text = render(build(a))
        assert "world size 2" in text and "communication" in text


def test_eager_prefill_without_stack_names_its_norm_and_rope_glue():
    # compile_decode's prefill is eager HF with with_stack off: RMSNorm runs as aten ops (copy, pow,
    # mean, add, rsqrt, mul, copy, mul) and rotary as (mul, neg, cat, mul, add); no module names them.
    a, doc = analysed("compile_decode")
    k = a.kernels.filter(pl.col("phase") == "prefill")
    assert set(k.filter(pl.col("op").is_in(["aten::pow", "aten::rsqrt", "aten::mean"]))["component"]) == {"norm"}
    assert set(k.filter(pl.col("op") == "aten::neg")["component"]) == {"rope"}
    # 4 layers x 2 norms + the final norm, 8 kernels each (+ the residual add before all but the first)
    assert k.filter(pl.col("op") == "aten::rsqrt").height == 9
    assert _comps(doc, "prefill")["other"]["share"] <= 0.05


def test_warm_up_outlier_without_compile_spans():
    # The same capture as a profiler that did not record the compile's spans would give it (derived
    # here: every op, annotation and frame named by COMPILE_SPANS dropped): decode step 1 still holds
    # 3,632 kernels against 82 and 15.5 s against ~5 ms, an outlier of its phase, left out as warm-up.
    from attrib.components.patterns import COMPILE_SPANS
    t = load(CAPTURED / "compile_decode.pt.trace.json.gz")
    keep = ~pl.col("name").str.contains(COMPILE_SPANS)
    t = t.with_tables(ops=t.ops.filter(keep), markers=t.markers.filter(keep), frames=t.frames.filter(keep))
    a = attribute(t)
    s = a.steps.sort("step")
    assert s["excluded"].to_list() == [None, "warm-up", None, None, None, None, None]
    dec = _phase(build(a).to_dict(), "decode")
    assert dec["steps"] == 5 and [x["reason"] for x in dec["excluded_steps"]] == ["warm-up"]


@pytest.mark.parametrize("name", ["qwen3next_decode", "deepseekv3_decode", "tp2_decode_rank0", "hf_llama_cuda_b8_p512"])
def test_a_named_kernel_has_the_same_components_in_prefill_and_decode(name):
    # a kernel whose name says its job (KV write, rotary, norm, attention, collectives, ...) gets the
    # same components in both phases, whatever module or op launched it (a silu kernel may serve
    # several MLPs, so per name the set of components, prefill against decode)
    from attrib.components.classify import by_name
    a, _ = analysed(name)
    k = as_text(a.kernels).filter(pl.col("phase").is_in(["prefill", "decode"]) & (pl.col("evidence") != "compile"))
    named = by_name(k["name"]).filter(~pl.col("name_comp").is_in(["gemm", "copy", "elementwise"]) & pl.col("name_comp").is_not_null())
    k = k.join(named.select("name"), on="name")
    def comps(phase: str) -> pl.DataFrame:
        return k.filter(pl.col("phase") == phase).group_by("name").agg(
            pl.col("component").unique().sort().str.join(",").alias(phase))
    both = comps("prefill").join(comps("decode"), on="name")
    assert both.height > 0
    assert both.filter(pl.col("prefill") != pl.col("decode")).height == 0, both.filter(pl.col("prefill") != pl.col("decode"))


def test_sampling_after_lm_head_is_the_sampler():
    """sampler_b1_v152k samples each token in the step (softmax, top-k, top-p sort/cumsum/scatter,
    multinomial) after the lm_head GEMM: every kernel those ops launch is `sampler`, so the decode's
    `other` stays small (it was 30% of decode kernel time when they were unnamed)."""
    a, doc = analysed("sampler_b1_v152k")
    k = a.kernels.filter(pl.col("phase") == "decode")
    sampling = k.filter(pl.col("op").is_in(["aten::topk", "aten::sort", "aten::cumsum", "aten::softmax",
                                             "aten::multinomial", "aten::scatter"]))
    assert sampling.height >= 4 * _phase(doc, "decode")["steps"]
    assert set(sampling["component"]) == {"sampler"}
    assert k.filter(pl.col("component") == "other")["dur_ns"].sum() <= 0.05 * k["dur_ns"].sum()


def test_fp8_scaled_mm_gemms_are_the_layer_linears_and_priced():
    """fp8_w8a8_decode (examples/fp8_w8a8_capture.py): 8 pre-norm layers of qkv, o, gate_up, down as
    torch._scaled_mm on float8_e4m3fn weights, no attention kernel, no module scope. Each GEMM is its
    layer's linear by position between the norms and the SwiGLU activation (they were `norm`/`other`),
    priced as A [4, K] fp8 + B [K, N] fp8 + row scales [4, 1] and [1, N] fp32 + out [4, N] bf16, 2MNK
    FLOPs; the per-token activation quantization inside record_function("per_token_fp8_quant") is
    `quantize` by that annotation."""
    a, doc = analysed("fp8_w8a8_decode")
    k = a.kernels.filter(pl.col("phase") == "decode")
    steps = k["step"].n_unique()
    mm = k.filter(pl.col("op") == "aten::_scaled_mm")
    got = dict(mm.group_by("component").len().iter_rows())
    assert got == {c: 8 * steps for c in ("qkv_proj", "o_proj", "mlp_gate_up", "mlp_down")}
    shapes = {"qkv_proj": (4096, 12288), "o_proj": (4096, 4096), "mlp_gate_up": (4096, 28672), "mlp_down": (14336, 4096)}
    for comp, (kk, n) in shapes.items():
        row = mm.filter(pl.col("component") == comp)
        want = 4 * kk + kk * n + (4 + n) * 4 + 4 * n * 2
        assert set(row["bytes"]) == {want} and set(row["flops"]) == {2.0 * 4 * n * kk}, comp
    quant = a.trace.markers.filter((pl.col("name") == "per_token_fp8_quant") & (pl.col("side") == "cpu"))
    q = k.filter(pl.col("component") == "quantize")
    assert q.height == 8 * 8 * 4 * steps and set(q["evidence"]) == {"annotation"}   # 8 kernels per quantization
    assert quant.height == 32 * steps                   # one per GEMM: 4 per layer, 8 layers
    assert _comps(doc)["other"]["share"] <= 0.05


def test_moe_router_gemm_by_shape_without_module_scope():
    """Qwen3-Next as a trace without with_stack would give it (derived here: every Python frame dropped):
    no module names the router. Its GEMM [1, 1024] x [1024, 16] is followed by a softmax and a top-k over
    16 experts: moe_router. in_proj_ba of the Gated DeltaNet layers has the same N = 16 but feeds the
    delta rule (sigmoid and softplus over 8 values): never the router. By position alone, 3 of the 4
    routers of each step were qkv_proj."""
    t = load(CAPTURED / "qwen3next_decode.pt.trace.json.gz")
    a = attribute(t.with_tables(frames=t.frames.clear()))
    k = a.kernels.filter(pl.col("phase") == "decode")
    steps = k["step"].n_unique()
    dims = t.ops.select(pl.col("id").alias("op_id"), "input_dims")
    n16 = k.join(dims, on="op_id").filter(pl.col("input_dims") == "[[1, 1024], [1024, 16]]")
    assert n16.height == 7 * steps                      # 4 routers + 3 in_proj_ba per step
    router = n16.filter(pl.col("component") == "moe_router")
    assert router.height == 4 * steps and set(router["evidence"]) == {"op"}
    # the routers are the 4th N=16 GEMM of each layer pair order: the ones a softmax over 16 follows
    by_step = n16.sort("start_ns").group_by("step", maintain_order=True).agg(pl.col("component"))
    for comps in by_step["component"]:
        assert comps.to_list() == ["qkv_proj", "moe_router"] * 3 + ["moe_router"]


def test_inductor_static_cache_writes_are_kv_cache_write():
    """compile_decode's graph writes each layer's new K (fused with its rotary) and V into the
    StaticCache with Inductor kernels named for index_copy: kv_cache_write, 2 per layer and step (they
    were `other` and, for V, `rope` by position), as the eager prefill's index_copy kernels are."""
    a, doc = analysed("compile_decode")
    k = as_text(a.kernels).filter(pl.col("evidence") != "compile")
    dec = k.filter((pl.col("phase") == "decode") & pl.col("name").str.contains(r"^triton_\w*fused\w*_index_copy"))
    assert dec.height == 2 * 4 * _phase(doc, "decode")["steps"] + 2 * 4     # + the left-out compiling call's own
    assert set(dec["component"]) == {"kv_cache_write"}
    pre = k.filter((pl.col("phase") == "prefill") & (pl.col("op") == "aten::index_copy_"))
    assert pre.height == 2 * 4 and set(pre["component"]) == {"kv_cache_write"}


def test_kernel_name_patterns_first_row_wins():
    """by_name runs each pattern of the table once (the index of the first match, then component and
    family gathered by it): every distinct kernel name of a capture gets the component and family of
    the first table row whose pattern it matches, as reading the table top-down by hand gives (Python's
    re on these ASCII names). 20 of the 82 names match more than one row, so the order is tested."""
    names = load(CAPTURED / "deepseekv3_decode.pt.trace.json.gz").kernels["name"]
    rows = list(component_patterns().iter_rows(named=True))
    got = by_name(names).select("name", "name_comp", "name_family")
    assert got.height == names.n_unique() == 82
    several = 0
    for name, comp, family in got.iter_rows():
        hits = [r for r in rows if re.search(r["pattern"], name)]
        several += len(hits) > 1
        assert (comp, family) == ((hits[0]["component"], hits[0]["family"]) if hits else (None, None))
    assert several == 20
