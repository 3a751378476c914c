"""Components on the stacks users run (issue #10: items 3, 5, 6): collectives, MoE routing, linear
attention, shared experts, glue kernels and their evidence, on the real fixtures."""

from __future__ import annotations

import polars as pl
import pytest

from attrib.pipeline import attribute
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
    k = vllm.kernels.filter(pl.col("step").is_not_null())
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
