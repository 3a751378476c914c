"""Linking, steps/phases and components on the real fixtures, and the analysis document."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import polars as pl
import pytest

from attrib.trace import as_text
from attrib.pipeline import attribute
from attrib.analysis.build import build
from attrib.components.taxonomy import TAXONOMY
from attrib.components.patterns import RUNTIME_HELPERS, component_patterns
from attrib.link.launches import link
from attrib.steps.phases import parse_marker, DEFAULT_MAP
from collectors import load

from conftest import EXAMPLE_TRACE, FIXTURES, ROOT, raw_events

SCHEMA = json.loads((ROOT / "attrib" / "data" / "attrib.analysis-1.schema.json").read_text())
TORCH = [EXAMPLE_TRACE, *sorted((FIXTURES / "torch").glob("*.json.gz")),
         *sorted((FIXTURES / "torch" / "mi300_vllm_prefilldecode_piecewise").glob("*.json.gz"))]


@pytest.fixture(scope="module")
def moe():
    a = attribute(load(EXAMPLE_TRACE))
    return a, build(a).to_dict()


def test_moe_steps_tokens_and_totals(moe):
    a, doc = moe
    phases = {p["phase"]: p for p in doc["phases"]}
    assert (phases["prefill"]["steps"], phases["decode"]["steps"]) == (1, 6)
    assert (phases["prefill"]["tokens_per_step"], phases["decode"]["tokens_per_step"]) == (2048, 4)
    kernels = [e for e in raw_events(EXAMPLE_TRACE) if e.get("cat") == "kernel"]  # Kineto ts/dur in us
    assert doc["source"]["kernels"] == len(kernels) and doc["source"]["kernels_outside_steps"] == 0
    assert doc["source"]["kernel_ms"] == pytest.approx(sum(e["dur"] for e in kernels) / 1e3, abs=1e-4)


def test_moe_components(moe):
    a, doc = moe
    dec = next(p for p in doc["phases"] if p["phase"] == "decode")
    comps = {c["component"]: c for c in dec["components"]}
    assert set(comps) <= set(TAXONOMY)
    assert comps.get("other", {"share": 0})["share"] <= 0.10
    # per decode step, 8 layers: one lm_head GEMM, attention and experts in every layer
    assert comps["lm_head"]["kernels"] == 1
    for c in ("qkv_proj", "o_proj", "attention", "moe_experts", "moe_router", "norm", "kv_cache_write", "rope"):
        assert comps[c]["kernels"] >= 8, c
    # q, k, v Linear layers come before attention, o_proj after: 3 vs 1 GEMMs per layer (+ split-K reduce)
    k = as_text(a.kernels).filter(pl.col("phase") == "decode")
    per_step = k.filter(pl.col("step") == k["step"].min())
    assert per_step.filter(pl.col("component") == "qkv_proj").height == 24
    assert per_step.filter((pl.col("component") == "o_proj") & pl.col("name").str.contains("nvjet")).height == 8
    assert (k["evidence"] == "module").mean() > 0.95


def test_rocm_linking_counts_unlaunched_kernels(fixtures):
    path = fixtures / "torch" / "mi300_hf_qwen1.5-0.5b-chat.json.gz"
    # from the raw events: a kernel is launched when a runtime/driver call carries its correlation id
    events = raw_events(path)
    calls = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    raw = [e for e in events if e.get("cat") == "kernel"]
    n_launched = sum(e["args"].get("correlation") in calls for e in raw)
    assert 0 < n_launched < len(raw)  # the fixture has both kinds (1053 of 1516 as read by hand)
    t = load(path)
    links = link(t)
    corr = set(t.launches["correlation"].drop_nulls().to_list())
    launched = t.kernels.filter(pl.col("correlation").is_in(list(corr)))["id"]
    got = links.filter(pl.col("id").is_in(launched.to_list()))
    assert got.height == n_launched
    assert got["launch_id"].null_count() == 0 and got["op_id"].null_count() == 0
    doc = build(attribute(t)).to_dict()
    assert doc["source"]["kernels_without_launch"] == len(raw) - n_launched


def test_graph_replay_kernels_use_gpu_spans_and_names(fixtures):
    path = fixtures / "torch" / "h200_dense_prefill_cudagraph_decode.json.gz"
    a = attribute(load(path))
    doc = build(a).to_dict()
    phases = {p["phase"]: p for p in doc["phases"]}
    # fixtures README: batch 8, prompt 1024, 16 decode steps each ONE cudaGraphLaunch
    graph_calls = {e["args"]["correlation"] for e in raw_events(path) if e.get("name") == "cudaGraphLaunch"}
    assert phases["decode"]["steps"] == len(graph_calls) == 16 and phases["prefill"]["tokens_per_step"] == 8 * 1024
    assert phases["decode"]["tokens_per_step"] == 8  # one token per sequence of the prefill batch
    # replayed: exactly the kernels whose correlation id is a graph launch's (from the raw events)
    replayed = sum(e["args"].get("correlation") in graph_calls for e in raw_events(path) if e.get("cat") == "kernel")
    assert a.kernels["graph"].sum() == replayed > 0
    comps = {c["component"] for c in phases["decode"]["components"]}
    assert {"attention", "qkv_proj", "o_proj", "mlp_gate_up", "lm_head"} <= comps
    assert doc["source"]["kernels_outside_steps"] == 0


def test_vllm_step_annotation():
    assert parse_marker("execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)_generation_37(sq37sk34489sqsq37sqsk34489)",
                        DEFAULT_MAP) == ("mixed", 8192, "vllm annotation")
    assert parse_marker("execute_context_1(888_788544)_generation_0(0)", DEFAULT_MAP) == ("prefill", 888, "vllm annotation")
    assert parse_marker("execute_context_0(0)_generation_32(32)", DEFAULT_MAP) == ("decode", 32, "vllm annotation")
    assert parse_marker("decode (tokens=4)", DEFAULT_MAP) == ("decode", 4, "annotation")
    assert parse_marker("step[DECODE bs=32]", DEFAULT_MAP) == ("decode", 32, "sglang annotation")
    assert parse_marker("my_gen", DEFAULT_MAP | {"my_gen": "decode"})[0] == "decode"
    assert parse_marker("ProfilerStep#3", DEFAULT_MAP) is None


@pytest.mark.parametrize("path", TORCH, ids=lambda p: Path(p).name)
def test_every_torch_fixture_gives_a_valid_document(path):
    doc = build(attribute(load(path))).to_dict()
    jsonschema.validate(doc, SCHEMA)
    for ph in doc["phases"]:
        assert {c["component"] for c in ph["components"]} <= set(TAXONOMY)


def test_pattern_table_is_valid():
    table = component_patterns()
    assert set(table["component"]) - {"gemm", "copy", "elementwise"} <= set(TAXONOMY)
    import re
    for p in table["pattern"]:
        re.compile(p)


# the readers' kernel counts are proved against the raw files in test_rocprof_readers.py
ROCPROF = ["gfx1201_llamacpp_rocpd_rocm7.2/32432_results.db.gz", "gfx1151_llamacpp_rocprofv3_csv",
           "gfx1201_llamacpp_legacy_rocprof_v1/results.csv.gz", "gfx950_rocprofv3_json/908_results.json.gz"]


@pytest.mark.parametrize("rel", ROCPROF, ids=[r.split("/")[0] for r in ROCPROF])
def test_every_rocprof_fixture_gives_a_valid_document(rel):
    t = load(FIXTURES / "rocprof" / rel)
    doc = build(attribute(t)).to_dict()
    jsonschema.validate(doc, SCHEMA)
    assert doc["source"]["kernels"] == t.kernels.height > 0
    for ph in doc["phases"]:
        assert {c["component"] for c in ph["components"]} <= set(TAXONOMY)


def test_r9700_llama_bench_is_all_decode_split_into_tokens():
    doc = build(attribute(load(FIXTURES / "rocprof" / ROCPROF[0]))).to_dict()
    assert doc["device"]["arch"] == "gfx1201" and "R9700" in doc["device"]["name"]
    assert [p["phase"] for p in doc["phases"]] == ["decode"]
    # llama-bench -n 8 runs one warm-up token, then the 8 measured ones; setup copies/fills before
    names = load(FIXTURES / "rocprof" / ROCPROF[0]).kernels.sort("start_ns")["name"]
    setup = names.str.contains(RUNTIME_HELPERS).arg_min()  # helper kernels before the first model kernel
    # 9 tokens; the first (46 ms, 3.9x the others: warm-up) is left out of the figures and listed
    assert doc["phases"][0]["steps"] == 8 and doc["source"]["kernels_outside_steps"] == setup > 0
    assert [x["reason"] for x in doc["phases"][0]["excluded_steps"]] == ["warm-up"]


def test_vllm_mi300_replay_links_every_launched_kernel(fixtures):
    path = fixtures / "torch" / "mi300_vllm_prefilldecode_piecewise" / "graph_execution.json.gz"
    kinds = [e["args"].get("kind") for e in raw_events(path) if e.get("cat") == "kernel"]  # ROCm Kineto kernel kinds
    t = load(path)
    links = link(t)
    eager = links.filter(~pl.col("graph"))
    assert eager.height == kinds.count("Dispatch Kernel") and eager["launch_id"].null_count() == 0
    assert eager["op_id"].null_count() == 0
    graph = links.filter(pl.col("graph"))
    assert graph.height == kinds.count("Dispatch Task") > 0 and graph["launch_id"].null_count() == 0
    assert graph["op_id"].null_count() == graph.height  # the launch call site is the graph's, not theirs
