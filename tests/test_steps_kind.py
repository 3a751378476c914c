"""Per-step unit: a vision forward (ViT, H200 capture) is counted in samples, an LLM step in tokens."""

from __future__ import annotations

from attrib.pipeline import attribute
from collectors import load

from conftest import FIXTURES, raw_events

CAPTURED = FIXTURES / "captured"
VIT = CAPTURED / "vit_forward_b8.pt.trace.json.gz"


def test_vision_forward_steps_count_samples_not_tokens():
    # the raw events: the patch embedding's conv2d reads [8, 3, 224, 224], 4 recorded forwards
    convs = [e for e in raw_events(VIT) if e.get("name") == "aten::conv2d"]
    assert {tuple(e["args"]["Input Dims"][0]) for e in convs} == {(8, 3, 224, 224)}
    steps = attribute(load(VIT)).steps
    assert steps.height == 4
    assert steps["unit"].to_list() == ["samples"] * 4 and steps["samples"].to_list() == [8] * 4
    # the "tokens" the GEMM shapes give are 8 x 197 patches: not tokens, hence the unit
    assert set(steps["tokens"].to_list()) == {8 * 197}


def test_llm_steps_count_tokens():
    steps = attribute(load(CAPTURED / "mistral_swa_b4.pt.trace.json.gz")).steps
    assert set(steps["unit"].to_list()) == {"tokens"} and steps["samples"].null_count() == steps.height
