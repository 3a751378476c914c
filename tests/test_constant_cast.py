"""The rotary table recast every step (rules/constant_cast.py, attrib.components.rope_table) on the
MI300 vLLM gpt-oss piecewise-graph trace (graph replay + its capture)."""

from __future__ import annotations

import gzip
import json

import polars as pl

from attrib.pipeline import attribute
from collectors import load
from rules.constant_cast import constant_casts

from conftest import FIXTURES

VLLM = FIXTURES / "torch" / "mi300_vllm_prefilldecode_piecewise"


def _attribution():
    return attribute(load(VLLM / "graph_execution.json.gz"),
                     capture=load(VLLM / "graph_capture_rank_0.pt.trace.json.gz"))


def test_raw_events_show_the_table_cast():
    ev = json.loads(gzip.decompress((VLLM / "graph_capture_rank_0.pt.trace.json.gz").read_bytes()))
    ops = [
        e
        for e in ev["traceEvents"]
        if e.get("cat") == "cpu_op" and e["name"] == "triton_poi_fused__to_copy_1"
    ]
    assert len(ops) == 23
    assert {json.dumps(e["args"]["Input Dims"]) for e in ops} == {"[[131072, 64], [131072, 64], []]"}
    assert {tuple(e["args"]["Input type"][:2]) for e in ops} == {("float", "c10::BFloat16")}


def test_table_cast_is_rope_and_a_finding():
    a = _attribution()
    k = a.kernels.filter(pl.col("name") == "triton_poi_fused__to_copy_1")
    assert k.height == 23 and k["component"].unique().to_list() == ["rope"]
    # 131072 x 64 read as fp32 and written as bf16: 50,331,648 B a call
    assert k["bytes"].to_list() == [131072 * 64 * (4 + 2.0)] * 23
    (f,) = constant_casts(a)
    assert f.evidence["calls_per_step"] == 23 and f.evidence["component"] == "rope"
    assert f.ms_per_step == k["dur_ns"].sum() / 1e6


def test_no_finding_on_a_decode_without_table_casts():
    a = attribute(load(FIXTURES / "captured" / "sampler_b1_v152k.pt.trace.json.gz"))
    assert constant_casts(a) == []
