"""Per-step unit: a vision forward (ViT, H200 capture) is counted in samples, an LLM step in tokens."""

from __future__ import annotations

import pytest

from attrib.app import analyze
from attrib.pipeline import attribute
from attrib.report.table import render
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


def test_vision_forward_is_reported_per_sample():
    """Issue 20 item 4: the ViT forward is reported per sample (8 images a forward), no token figure:
    the analysis nulls GB/token and tok/s and gives samples/s and GB per sample instead."""
    an = analyze(VIT)
    (ph,) = an.phases
    assert ph.samples_per_step == 8 and ph.tokens_per_step is None
    assert ph.gb_per_token is None and ph.achieved_tok_s is None and ph.ceiling_tok_s is None
    assert ph.achieved_samples_s == pytest.approx(8 / (ph.step_ms.mean / 1e3), rel=1e-3)
    assert ph.bytes_per_step and ph.gb_per_sample == pytest.approx(ph.bytes_per_step / 8 / 1e9, rel=1e-3)
    assert "8 samples/step" in render(an) and "GB/token" not in render(an)
    llm = analyze(CAPTURED / "mistral_swa_b4.pt.trace.json.gz").phase("decode")
    assert llm is not None and llm.samples_per_step is None and llm.gb_per_token is not None
