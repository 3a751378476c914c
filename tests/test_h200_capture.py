"""A trace captured on an H200 by this project's own collectors.capture (tests/fixtures/captured/README.md)."""

from __future__ import annotations

from pathlib import Path

from attrib.app import analyze

TRACE = Path(__file__).parent / "fixtures" / "captured" / "hf_llama_cuda_b8_p512.pt.trace.json.gz"


def test_gpu_capture_is_split_and_attributed():
    doc = analyze(TRACE).to_dict()
    phases = {p["phase"]: p for p in doc["phases"]}
    assert (phases["prefill"]["steps"], phases["prefill"]["tokens_per_step"]) == (1, 4096)
    assert (phases["decode"]["steps"], phases["decode"]["tokens_per_step"]) == (8, 8)
    assert phases["decode"]["tokens_from"] == "annotation"
    assert doc["device"]["arch"] == "sm_90"
    comps = {c["component"]: c for c in phases["decode"]["components"]}
    for c in ("qkv_proj", "attention", "o_proj", "mlp_gate_up", "mlp_down", "lm_head", "norm", "embedding"):
        assert c in comps and comps[c]["evidence"].get("module", 0) > 0, c
    assert comps.get("other", {"share": 0})["share"] < 0.05
    # weights of one decode step: 8 layers x (q 2048x2048, k/v 2048x1024 each, o 2048x2048,
    # gate/up/down 3 x 2048x6144) + lm_head 32000x2048, bf16
    per_layer = 2048 * 2048 * 2 + 2 * 2048 * 1024 + 3 * 2048 * 6144
    weights = (8 * per_layer + 32000 * 2048) * 2
    gemm = sum(comps[c]["bytes"] for c in ("qkv_proj", "o_proj", "mlp_gate_up", "mlp_down", "lm_head"))
    assert abs(gemm / weights - 1) < 0.05
    assert doc["provenance"]["gpu"]["name"] == "NVIDIA H200" and doc["provenance"]["batch"] == 8
