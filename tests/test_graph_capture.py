"""Graph capture <-> replay merge on the real vLLM piecewise fixture (MI300X, ROCm)."""

from __future__ import annotations

import polars as pl
import pytest

from attrib.components.classify import classify
from attrib.cost.ops import op_costs
from attrib.link.graph_capture import capture_launches, merge
from attrib.link.launches import link
from attrib.steps.phases import assign_steps
from collectors import load

from conftest import FIXTURES, raw_events

VLLM = FIXTURES / "torch" / "mi300_vllm_prefilldecode_piecewise"
H200 = FIXTURES / "torch" / "h200_dense_prefill_cudagraph_decode.json.gz"


def _raw_counts() -> tuple[int, int, int, int]:
    """From the raw events (gzip + json): capture segments (hipStreamBeginCapture calls), kernels replayed
    in the vLLM trace (ROCm kind "Dispatch Task"), the H200 trace's graph launches and their kernels."""
    begins = sum(e.get("name") == "hipStreamBeginCapture" for e in raw_events(VLLM / "graph_capture_rank_0.pt.trace.json.gz"))
    tasks = sum(e["args"].get("kind") == "Dispatch Task" for e in raw_events(VLLM / "graph_execution.json.gz")
                if e.get("cat") == "kernel")
    graphs = {e["args"]["correlation"] for e in raw_events(H200) if e.get("name") == "cudaGraphLaunch"}
    h200 = sum(e["args"].get("correlation") in graphs for e in raw_events(H200) if e.get("cat") == "kernel")
    return begins, tasks, len(graphs), h200


@pytest.fixture(scope="module")
def traces():
    replay = load(VLLM / "graph_execution.json.gz")
    capture = load(VLLM / "graph_capture_rank_0.pt.trace.json.gz")
    return replay, link(replay), capture


@pytest.fixture(scope="module")
def merged(traces):
    replay, links, capture = traces
    return merge(replay, links, capture)


def _ops_of(trace, links):
    return (links.join(trace.kernels.select("id", "name", "start_ns"), on="id")
            .join(trace.ops.select(pl.col("id").alias("op_id"), pl.col("name").alias("op"), "input_dims",
                                   pl.col("start_ns").alias("op_ns")), on="op_id", how="left"))


def test_segments_and_groups(traces, merged):
    replay, links, capture = traces
    segs = capture_launches(capture)
    sizes = segs.group_by("seg", maintain_order=True).len()["len"].to_list()
    begins, tasks, _, _ = _raw_counts()
    # piecewise capture of gpt-oss: one graph per piece; every replayed kernel has its captured launch
    assert len(sizes) == begins and sum(sizes) == tasks and sizes == [4] + [15] * 23 + [12]
    assert set(segs["annotation"]) == {"capture_8192_PIECEWISE"} and set(segs["batch_size"]) == {8192}
    report = merged[2]
    assert report.segments == report.groups == begins and report.replayed == tasks
    assert report.captures == {"capture_8192_PIECEWISE": begins}


def test_all_replayed_kernels_get_op_and_module(traces, merged):
    replay, links, _ = traces
    trace, out, report = merged
    _, tasks, _, _ = _raw_counts()
    assert (report.matched, report.unmatched, report.with_op, report.with_module) == (tasks, 0, tasks, tasks)
    assert report.groups_exact == report.groups and report.mean_ratio == 1.0 and report.groups_ambiguous == 0
    cap = out.filter(pl.col("link") == "capture")
    assert cap.height == tasks and cap["graph"].all() and cap["op_id"].null_count() == 0
    # the capture's module scope is torch.compile's graph module under the model
    assert set(cap["module_path"]) == {"GptOssForCausalLM_0/GraphModule_0"}
    # eager kernels untouched; graph launch kept
    assert out.filter(~pl.col("graph")).equals(links.filter(~pl.col("graph")))
    assert out["launch_id"].equals(links["launch_id"])
    # appended ops: unique ids past the replay's, no External id to re-link by
    assert trace.ops.height == replay.ops.height + report.ops_appended and trace.ops["id"].is_unique().all()
    new = trace.ops.filter(pl.col("id") > replay.ops["id"].max())
    assert new.height == report.ops_appended and new["external_id"].null_count() == new.height
    assert trace.kernels.equals(replay.kernels)


def test_op_names_fit_kernel_names(traces, merged):
    trace, out, _ = merged
    k = _ops_of(trace, out).filter(pl.col("link") == "capture")
    def ops(pattern):
        return set(k.filter(pl.col("name").str.contains(pattern))["op"])
    assert ops(r"^Cijk_") == {"aten::addmm"}
    assert ops(r"Rmsnorm2dFwd") == {"aiter::rms_norm", "aiter::rmsnorm2d_fwd_with_add_ck"}
    assert ops(r"rotary_embedding") == {"_C::rotary_embedding"}
    assert ops(r"^_matmul_ogs|^_finalize_matmul") == {"vllm::moe_forward"}
    assert ops(r"^_topk_forward") == {"TopK"}
    assert ops(r"^triton_") == set(k.filter(pl.col("name").str.starts_with("triton_"))["name"])
    # group i <-> segment i: each graph launch's ops lie after the previous launch's ops
    spans = k.group_by("launch_id").agg(pl.col("op_ns").min().alias("lo"), pl.col("op_ns").max().alias("hi"),
                                        pl.col("start_ns").min().alias("t")).sort("t")
    assert (spans["lo"].slice(1) > spans["hi"].slice(0, spans.height - 1)).all()
    # shapes come along: GEMMs are priced from the capture's Input Dims (8192 tokens)
    gemm = k.filter(pl.col("op") == "aten::addmm")
    assert gemm["input_dims"].str.contains(r"\[8192, 2880\]|\[8192, 4096\]").any()
    cost = op_costs(trace.ops.filter(pl.col("id").is_in(gemm["op_id"].unique().implode())))
    assert cost["bytes"].null_count() == 0 and (cost["flops"] > 0).all()


def _classified(replay, links, capture=None):
    if capture is not None:
        replay, links, _ = merge(replay, links, capture)
    spans, kernel_steps = assign_steps(replay, links, None)
    comp = classify(replay, links, kernel_steps)
    return kernel_steps, comp.join(links.select("id", "graph", "link"), on="id")


def test_analysis_with_merge(traces):
    replay, links, capture = traces
    steps0, before = _classified(replay, links)
    steps1, after = _classified(replay, links, capture)
    # phases/steps assign graph kernels by GPU time: unchanged by the merge
    assert steps1.sort("id").equals(steps0.sort("id"))
    g0, g1 = before.filter(pl.col("graph")), after.filter(pl.col("graph"))
    assert g0["op"].null_count() == 361 and g1["op"].null_count() == 0
    # The module scope is only torch.compile's GraphModule, which decides no component, so the
    # capture's CPU op is the evidence: by op for 168 kernels (norm, rope, moe, and the 23 casts of the
    # rotary cos/sin table, attrib.components.rope_table), not by module; the 24
    # `_finalize_matmul_scatter` kernels under vllm::moe_forward are the combine, by their name.
    ev = dict(g1.group_by("evidence").len().iter_rows())
    assert ev.get("module", 0) == 0 and ev["op"] == 145 + 23
    table = g1.filter(pl.col("op") == "triton_poi_fused__to_copy_1")
    assert table.height == 23 and set(table["component"]) == {"rope"} and set(table["evidence"]) == {"op"}
    assert dict(g0.group_by("evidence").len().iter_rows()).get("op", 0) == 0
    moe = g1.filter(pl.col("op") == "vllm::moe_forward")
    assert moe.height == 72
    assert dict(moe.group_by("component", "evidence").len().select(
        pl.format("{}/{}", "component", "evidence"), "len").iter_rows()) == {"moe_experts/op": 48, "moe_combine/name": 24}
    assert set(g1.filter(pl.col("op").str.contains("rms"))["component"]) == {"norm"}


def test_tolerates_a_missing_capture_launch(traces):
    replay, links, capture = traces
    first = capture_launches(capture).filter(pl.col("pos") == 1)["id"][0]  # rmsnorm of the 4-kernel piece
    cut = capture.with_tables(launches=capture.launches.filter(pl.col("id") != first))
    _, out, report = merge(replay, links, cut)
    assert (report.matched, report.unmatched, report.groups_exact) == (360, 1, 24)
    assert report.mean_ratio == pytest.approx((24 + 6 / 7) / 25, abs=1e-4)
    assert out.filter(pl.col("graph") & pl.col("link").ne_missing("capture")).height == 1


def test_batch_size_filter(traces):
    replay, links, capture = traces
    assert merge(replay, links, capture, batch_size=8192)[2].matched == 361
    none = merge(replay, links, capture, batch_size=4)[2]
    assert none.segments == 0 and none.matched == 0


def test_unrelated_capture_matches_nothing(traces):
    replay, links, capture = traces
    begins, tasks, graphs, h200_replayed = _raw_counts()
    h200 = load(H200)
    # no capture segments in the H200 trace
    t, out, report = merge(replay, links, h200)
    assert (report.segments, report.matched, report.unmatched) == (0, 0, tasks)
    assert out.equals(links) and t.ops.equals(replay.ops)
    # CUDA replay groups against the ROCm capture: segments found, no name sequence close enough
    h_links = link(h200)
    t, out, report = merge(h200, h_links, capture)
    assert (report.segments, report.groups, report.replayed) == (begins, graphs, h200_replayed)
    assert report.matched == 0 and report.mean_ratio is None
    assert out.equals(h_links) and t.ops.equals(h200.ops)


def test_two_batch_sizes_with_the_same_kernels(traces):
    """A capture of two batch sizes with identical kernel sequences: ambiguity is reported, the first
    captured wins, and batch_size picks the other."""
    replay, links, capture = traces
    later = int(capture.launches["start_ns"].max()) + 1
    off = 10**7

    def copy(df, **extra):
        shift = [pl.col(c) + off for c in ("id", "correlation", "external_id", "parent") if c in df.columns]
        return pl.concat([df, df.with_columns(pl.col("start_ns") + later, *shift, **extra)])

    both = capture.with_tables(
        launches=copy(capture.launches), ops=copy(capture.ops), frames=copy(capture.frames),
        markers=copy(capture.markers, name=pl.col("name").str.replace("8192", "512")))
    first = int(capture.ops["start_ns"].max())
    for bs, ambiguous, second in ((None, 25, False), (512, 0, True), (8192, 0, False)):
        t, _, report = merge(replay, links, both, batch_size=bs)
        assert report.matched == 361 and report.groups_ambiguous == ambiguous
        new = t.ops.filter(pl.col("id") > replay.ops["id"].max())
        assert (new["start_ns"].min() > first) == second
