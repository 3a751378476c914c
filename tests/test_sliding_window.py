"""Sliding-window layers priced at their window: vLLM's paged attention on the MI300 gpt-oss-20b
trace (12 of 24 layers slide over 128 keys) with the model config (the HF captures: test_captured_round2)."""

from __future__ import annotations

import orjson
import pytest

from attrib.app import analyze_path, model_budget
from attrib.options import Options
from attrib.cost.serving import windowed
from test_numbers_cost import GPT_OSS

from conftest import FIXTURES

VLLM = FIXTURES / "torch" / "mi300_vllm_prefilldecode_piecewise"
# execute_8192_context_9(sq8155sk8430...)_generation_37(sq37sk34489...): 46 requests, Σq 8192, Σk 42919
SK, SQ, REQ, SQSK = 42_919, 8_192, 46, 7_705_799


def _attention(budget=None) -> dict:
    doc = analyze_path(VLLM / "graph_execution.json.gz", Options(budget=budget)).to_dict()
    return {c["component"]: c for c in doc["phases"][0]["components"]}["attention"]


def test_paged_attention_reads_the_window_on_sliding_layers(tmp_path):
    cfg = tmp_path / "gpt-oss-20b.json"
    cfg.write_text(orjson.dumps(GPT_OSS).decode())
    full = _attention()
    windowed_row = _attention(model_budget(cfg))
    q_o = 2 * SQ * 64 * 64 * 2                       # q read and o written, per layer
    kv = 2 * 8 * 64 * 2                               # K and V per key: 8 KV heads x 64 x bf16
    assert full["bytes"] == pytest.approx(24 * (SK * kv + q_o), rel=1e-9)
    # 12 sliding layers read at most Σq + 46 x 128 = 14,080 keys, the 12 full ones Σk = 42,919
    sliding_keys = min(SK, SQ + REQ * 128)
    assert sliding_keys == 14_080
    assert windowed_row["bytes"] == pytest.approx(
        12 * (SK * kv + q_o) + 12 * (sliding_keys * kv + q_o), rel=1e-9
    )
    assert windowed_row["flops"] == pytest.approx(12 * 4 * 64 * 64 * (SQSK + min(SQSK, SQ * 128)), rel=1e-9)


def test_windowed_sums_without_a_window_are_the_annotation():
    sums = {"sq": SQ, "sk": SK, "sqsq": 0, "sqsk": SQSK, "requests": REQ}
    assert windowed(sums, None)[:2] == (SK, SQSK)
    assert windowed(sums, (1.0, 10**6))[:2] == (SK, SQSK)   # a window longer than every context
