"""Components on the stacks users run (issue #10: items 3, 5, 6): collectives, MoE routing, linear
attention, shared experts, glue kernels and their evidence, on the real fixtures."""

from __future__ import annotations

import orjson
import polars as pl
import pytest

from attrib.trace import as_text
from attrib.pipeline import attribute
from attrib.analysis.build import build
from attrib.report.table import render
from collectors import load

from conftest import FIXTURES

VLLM = FIXTURES / "torch" / "mi300_vllm_prefilldecode_piecewise"


@pytest.fixture(scope="module")
def dense():
    return attribute(load(FIXTURES / "torch" / "h200_dense_prefill_cudagraph_decode.json.gz"))


@pytest.fixture(scope="module")
def vllm():
    return attribute(load(VLLM / "graph_execution.json.gz"), capture=load(VLLM / "graph_capture_rank_0.pt.trace.json.gz"))


def test_embedding_done_as_gather_is_embedding_and_priced(dense):
    # The dense model looks its tokens up with aten::gather(weight[128256, 4096], 0, ids[8192, 4096])
    # (ids expanded along H). Hand count: 8192 rows x 4096 x 2 B read + the same written, plus the
    # 8192 int64 ids (the expanded index has stride 0 along H): 2*8192*4096*2 + 8192*8 bytes.
    g = dense.kernels.filter(pl.col("op") == "aten::gather")
    assert g.height == 1
    row = g.row(0, named=True)
    assert row["component"] == "embedding" and row["evidence"] == "op"
    assert row["bytes"] == 2 * 8192 * 4096 * 2 + 8192 * 8


def test_swiglu_multiply_between_gate_up_and_down_is_activation(dense):
    # No with_stack: between each layer's gate_up GEMM and its down GEMM run the silu kernel and the
    # multiply; both are the activation, the multiply placed by position (and labelled so).
    k = dense.kernels.filter(pl.col("step").is_not_null()).sort("start_ns")
    for step in (k["step"].min(), k["step"].max()):
        s = k.filter(pl.col("step") == step).with_row_index("i")
        ups = s.filter(pl.col("component") == "mlp_gate_up")["i"].to_list()
        downs = s.filter(pl.col("component") == "mlp_down")["i"].to_list()
        assert len(ups) == 8
        for up in ups:
            down = min(d for d in downs if d > up)
            between = s.filter((pl.col("i") > up) & (pl.col("i") < down))
            assert between.height >= 2 and set(between["component"]) == {"activation"}, between
            assert "position" in set(between["evidence"])


def test_evidence_labels_are_true(dense, vllm):
    # a kernel with a component other than `other` says what placed it; none of them says `none`
    for a in (dense, vllm):
        named = a.kernels.filter(pl.col("component") != "other")
        assert named.filter(pl.col("evidence") == "none").height == 0
        assert set(a.kernels.filter(pl.col("component") == "other")["evidence"]) <= {"none"}


def test_moe_routing_kernels_beat_the_coarse_moe_op(vllm):
    # gpt-oss under vLLM: the routing kernels run under SortTokens, the expert GEMMs and the combine
    # scatter under vllm::moe_forward; the names say which part of the MoE each one is.
    k = as_text(vllm.kernels).filter(pl.col("step").is_not_null())
    comp = dict(k.group_by("name").agg(pl.col("component").unique()).select(
        "name", pl.col("component").list.join(",")).iter_rows())
    assert comp["_sum_bitmatrix_rows"] == "moe_dispatch"
    assert comp["_combined_routing_memset"] == "moe_dispatch" == comp["_combined_routing_compute"]
    assert comp["_topk_forward"] == "moe_router"
    assert comp["_finalize_matmul_scatter_bf16"] == "moe_combine"
    assert {comp[n] for n in comp if n.startswith("_matmul_ogs")} == {"moe_experts"}
    # the router GEMM (N = 32 experts) sits right before the experts, 24 layers
    router = k.filter((pl.col("component") == "moe_router") & pl.col("name").str.starts_with("Cijk_"))
    assert router.height == 24


def test_idle_counts_kernels_left_over_from_the_previous_step(fixtures):
    # MI300 HF Qwen1.5: the one ProfilerStep#6 window starts while 463 kernels launched before it
    # (ProfilerStep#5) still run. Independent count from the raw events: union of every kernel and
    # copy interval clipped to the window, 8.58% of it idle (36.6% when only the step's own kernels count).
    t = load(fixtures / "torch" / "mi300_hf_qwen1.5-0.5b-chat.json.gz")
    s = attribute(t).steps.row(0, named=True)
    w0, w1 = s["window_start"], s["window_end"]
    iv = sorted((max(a, w0), min(a + d, w1)) for a, d in
                [*t.kernels.select("start_ns", "dur_ns").iter_rows(), *t.copies.select("start_ns", "dur_ns").iter_rows()]
                if a < w1 and a + d > w0)
    busy, cur = 0, None
    for a, b in iv:
        if cur is None or a > cur[1]:
            busy += (cur[1] - cur[0]) if cur else 0
            cur = [a, b]
        else:
            cur[1] = max(cur[1], b)
    busy += cur[1] - cur[0]
    assert s["idle_fraction"] == pytest.approx(1 - busy / (w1 - w0), abs=1e-9)
    assert s["idle_fraction"] == pytest.approx(0.0858, abs=5e-4)


def test_profiler_step_holding_several_forwards_is_split(fixtures):
    # The captured HF Llama run (one prefill of 8x512 and 8 decode steps of 8 tokens), as it looks when
    # prof.step() is called once around the whole generate: one ProfilerStep range over all nine
    # forward passes, no phase annotations (derived here from the real trace, markers only).
    t = load(fixtures / "captured" / "hf_llama_cuda_b8_p512.pt.trace.json.gz")
    mk = t.markers.filter(pl.col("name").str.starts_with("ProfilerStep#") & (pl.col("side") == "cpu"))
    first, end = mk.sort("start_ns").row(0, named=True), (mk["start_ns"] + mk["dur_ns"]).max()
    one = mk.filter(pl.col("id") == first["id"]).with_columns(pl.lit(end - first["start_ns"], pl.Int64).alias("dur_ns"))
    a = attribute(t.with_tables(markers=one))
    steps = a.steps.sort("step")
    assert steps.height == 9
    assert steps["tokens"].to_list() == [4096] + [8] * 8
    assert steps["phase"].to_list() == ["prefill"] + ["decode"] * 8
    assert a.kernels.filter(pl.col("step").is_null()).height <= 1


def test_world_size_and_communication_share(fixtures):
    # vLLM's trace records its process group (distributedInfo: nccl, world size 1, rank 0)
    an = build(attribute(load(VLLM / "graph_execution.json.gz")))
    assert an.to_dict()["distributed"] == {"backend": "nccl", "rank": 0, "world_size": 1}
    assert "distributed: nccl, world size 1, rank 0" in render(an)
    # MI350X training trace: 1,310 ncclDevKernel_Generic_1 calls are communication, a line of the phase
    t = load(fixtures / "rocprof" / "gfx950_rocprofv3_json" / "908_results.json.gz")
    a = attribute(t)
    nccl = as_text(a.kernels).filter(pl.col("name").str.starts_with("ncclDevKernel") & pl.col("step").is_not_null())
    assert nccl.height > 0 and set(nccl["component"]) == {"communication"}
    an = build(a)
    doc = an.to_dict()
    for ph in doc["phases"]:
        # the component table's share (per-step medians), and from raw durations the same order
        comm = next(c for c in ph["components"] if c["component"] == "communication")
        assert ph["communication_share"] == comm["share"] > 0
        k = a.kernels.filter(pl.col("phase") == ph["phase"])
        raw = k.filter(pl.col("component") == "communication")["dur_ns"].sum() / k["dur_ns"].sum()
        assert ph["communication_share"] == pytest.approx(raw, abs=0.1)
    assert "communication" in render(an)


def test_llamacpp_legacy_rocprof_steps_are_forward_passes(fixtures):
    # R9700 legacy rocprof, llama.cpp prefill of llama-2-7b Q4_0 (32 layers), no markers: two forward
    # passes of a 512-token ubatch. Each ends with the Q6_K output GEMV (vocab 32000 rows) after the
    # two get_rows of the output row; each layer runs 7 MMQ GEMMs (the last layer's FFN, on the one
    # output row after get_rows, as 2 MMVQ GEMVs).
    from attrib.analysis.build import build
    a = attribute(load(fixtures / "rocprof" / "gfx1201_llamacpp_legacy_rocprof_v1" / "results.csv.gz"))
    steps = a.steps.sort("step")
    assert steps.height == 2 and set(steps["phase"]) == {"prefill"}
    assert steps["tokens"].to_list() == [512, 512]  # rms_norm_f32 runs one workgroup per row
    k = as_text(a.kernels).filter(pl.col("step").is_not_null()).sort("start_ns")
    for step in (0, 1):
        s = k.filter(pl.col("step") == step)
        assert s.filter(pl.col("component") == "lm_head")["name"].str.contains(r"ggml_type\)14").all()
        work = s.filter(~pl.col("name").str.starts_with("__amd_rocclr"))  # the logits read-back copy follows
        assert work["name"][-1] == s.filter(pl.col("component") == "lm_head")["name"][0]
        mmq = s.filter(pl.col("name").str.contains(r"mul_mat_q<"))
        assert mmq.height == 31 * 7 + 4
        n = dict(mmq.group_by("component").len().iter_rows())
        assert n == {"qkv_proj": 96, "o_proj": 32, "mlp_gate_up": 62, "mlp_down": 31}
        # the attention's own GEMMs (Q.K^T and P.V around soft_max, Tensile) are attention
        att = s.filter(pl.col("component") == "attention")
        assert att.filter(pl.col("name").str.starts_with("Cijk_")).height == 64
    # per-step component figures agree with the kernels they hold: the GEMM components' ms per step
    # are the median over the two steps of their kernels' time, and hold all of the mul_mat_q time
    doc = build(a).to_dict()
    comps = {c["component"]: c for c in doc["phases"][0]["components"]}
    for comp in ("qkv_proj", "o_proj", "mlp_gate_up", "mlp_down"):
        per_step = k.filter(pl.col("component") == comp).group_by("step").agg(pl.col("dur_ns").sum() / 1e6)
        assert comps[comp]["ms"] == pytest.approx(per_step["dur_ns"].median(), rel=1e-3)
    mmq_ms = k.filter(pl.col("name").str.contains(r"mul_mat_q<"))["dur_ns"].sum() / 1e6 / 2
    gemm_ms = sum(comps[c]["ms"] for c in ("qkv_proj", "o_proj", "mlp_gate_up", "mlp_down"))
    assert gemm_ms == pytest.approx(mmq_ms, rel=0.02) and mmq_ms > 290


def test_llamacpp_rocpd_decode_stays_one_token_per_step(fixtures):
    a = attribute(load(fixtures / "rocprof" / "gfx1201_llamacpp_rocpd_rocm7.2" / "32432_results.db.gz"))
    assert a.steps.height == 9 and set(a.steps["phase"]) == {"decode"} and set(a.steps["tokens"]) == {1}
    k = as_text(a.kernels).filter(pl.col("step").is_not_null() & ~pl.col("name").str.starts_with("__amd_rocclr"))
    assert set(k.group_by("step").len()["len"]) == {615}


def test_one_forward_that_looks_up_several_embedding_tables_is_one_step(fixtures):
    # MI300 BERT-small (TraceLens): one ProfilerStep#6 around one forward pass, which looks up
    # its word (30522 rows), token-type (2) and position (512) tables: three aten::embedding
    # ops. Only the token table's lookup marks a forward pass: one step, the ProfilerStep's span,
    # every kernel in it, its tokens the word lookup's [1, 141] ids.
    t = load(fixtures / "torch" / "mi300_bert_small.json.gz")
    emb = t.ops.filter(pl.col("name") == "aten::embedding").sort("start_ns")
    rows = [orjson.loads(d)[0][0] for d in emb["input_dims"]]
    assert rows == [30522, 2, 512]  # checked by hand: one BertEmbeddings forward
    span = t.markers.filter((pl.col("name") == "ProfilerStep#6") & (pl.col("side") == "cpu"))
    a = attribute(t)
    assert a.steps.height == 1
    step = a.steps.row(0, named=True)
    assert step["cpu_start"] == span["start_ns"][0]
    assert step["cpu_end"] == span["start_ns"][0] + span["dur_ns"][0]
    assert step["tokens"] == 141 and step["phase"] == "prefill"
    assert a.kernels["step"].null_count() == 0 and a.kernels.height == t.kernels.height == 60
    # without the ProfilerStep (derived here: markers dropped) the forward pass is the step
    bare = attribute(t.with_tables(markers=t.markers.clear()))
    assert bare.steps.height == 1 and bare.steps["marker"][0] == "forward (embedding op)"
    assert bare.steps["cpu_start"][0] == emb["start_ns"][0]


def test_pretty_printed_shapes_give_the_same_components(fixtures):
    # A trace re-written by a tool that pretty-prints JSON (TraceLens' test traces are: each
    # shape one number a line) holds the same shapes. Derived here from the captured HF Llama
    # run as captured without with_stack (frames dropped: the ops and shapes decide), its ops'
    # shapes and concrete inputs indented. Its rotary table GEMMs (inv_freq [1, 32, 1] @
    # positions [1, 1, T]) stay rope by op and shapes, its embedding gather the embedding.
    t = load(fixtures / "captured" / "hf_llama_cuda_b8_p512.pt.trace.json.gz")
    t = t.with_tables(frames=t.frames.clear())

    def pretty(text: str) -> str:
        return orjson.dumps(orjson.loads(text), option=orjson.OPT_INDENT_2).decode()

    cols = ("input_dims", "concrete_inputs")
    ops = t.ops.with_columns(pl.col(c).map_elements(pretty, return_dtype=pl.String) for c in cols)
    assert ops["input_dims"].str.contains("\n").sum() > 1000
    k = as_text(attribute(t).kernels)
    got = as_text(attribute(t.with_tables(ops=ops)).kernels)
    assert got.select("id", "component", "evidence").equals(k.select("id", "component", "evidence"))
    by_op = k.filter(pl.col("evidence") == "op")
    assert by_op.filter((pl.col("component") == "rope") & (pl.col("op") == "aten::bmm")).height == 9
    assert by_op.filter((pl.col("component") == "embedding") & (pl.col("op") == "aten::gather")).height
