"""Per-step unit: a vision forward (ViT, H200 capture) is counted in samples, an LLM step in tokens."""

from __future__ import annotations

import json

import polars as pl
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


OWL = CAPTURED / "owlv2_b5.pt.trace.json.gz"
LLAVA = CAPTURED / "llava_b2.pt.trace.json.gz"


def _dims(events, name):
    return [tuple(map(tuple, e["args"]["Input Dims"][:2])) for e in events if e.get("name") == name]


def test_a_detector_with_a_text_tower_counts_images():
    """Issue 36 item 6: OWLv2 (a ViT over 5 images of 960 x 960, with a CLIP text tower over its 10
    queries) was a prefill of 'tokens'; its forward scores no vocabulary: 5 samples a step."""
    ev = raw_events(OWL)
    assert {d[0] for d in _dims(ev, "aten::conv2d")} == {(5, 3, 960, 960)}
    # aten::embedding reads (weight [V, H], ids): the text tower's token table and its 10 queries
    (vocab,) = {d[0][0] for d in _dims(ev, "aten::embedding") if d[1] == (10, 16)}
    # no linear has the token table's rows: no LM head
    assert not [d for d in _dims(ev, "aten::linear") if d[1][:1] == (vocab,)]
    (ph,) = analyze(OWL).phases
    assert ph.steps == 3 and ph.unit == "samples" and ph.samples_per_step == 5
    assert ph.gb_per_token is None and ph.tokens_per_step is None


def test_a_multimodal_generation_stays_in_tokens():
    """LLaVA: a prefill over 2 images (576 image tokens each) and 64 text tokens per sequence,
    then decode: its steps end in the LM head, so the image in the prefill keeps it in tokens."""
    ev = raw_events(LLAVA)
    assert {d[0] for d in _dims(ev, "aten::conv2d")} == {(2, 3, 336, 336)}
    assert [d for d in _dims(ev, "aten::linear") if d[1] == (32064, 2048)]
    an = analyze(LLAVA)
    pre, dec = an.phase("prefill"), an.phase("decode")
    assert pre.unit == dec.unit == "tokens" and pre.samples_per_step is None
    assert pre.tokens_per_step == 2 * (576 + 64) and dec.tokens_per_step == 2
    # decode reads the text tower, not the vision tower: the text decoder's weights (attention
    # 100.7 MB, MLP 276.8 MB of the config's parts), the LM head and the cache (read once by
    # attention, read and written by DynamicCache's cat), over 2 tokens
    info = json.loads((CAPTURED / "llava_b2.model.json").read_text())
    cfg = info["config"]["text_config"]
    h, f, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    kv_dim = cfg["num_key_value_heads"] * cfg["head_dim"]
    attn = layers * (2 * h * h + 2 * h * kv_dim) * 2
    mlp = layers * 3 * h * f * 2
    head = info["param_bytes"]["bytes_by_part"]["lm_head"]
    kv = sum(t["bytes"] for t in info["cache_tensors"])  # after the last step: 644 positions
    truth = (attn + mlp + head + 3 * kv) / 2 / 1e9
    assert dec.gb_per_token == pytest.approx(truth, rel=0.03)


def test_a_patch_embedding_is_a_priced_convolution():
    """The ViT's patch embedding runs under aten::cudnn_convolution(input, weight, padding, stride,
    dilation, groups, ...): its own component, priced from those shapes (it was 'no cost model',
    and the position pass took its kernel for a qkv projection)."""
    (conv,) = {(tuple(map(tuple, e["args"]["Input Dims"][:2])), tuple(e["args"]["Concrete Inputs"][2:5]))
               for e in raw_events(VIT) if e.get("name") == "aten::cudnn_convolution"}
    ((n, c, h, w), (co, ci, kh, kw)), (pad, stride, dil) = conv
    assert (pad, stride, dil) == ("[0, 0]", "[16, 16]", "[1, 1]")
    out = n * co * (h // 16) * (w // 16)
    truth_bytes = 2 * (n * c * h * w + co * ci * kh * kw + out)
    truth_flops = 2 * out * ci * kh * kw
    k = attribute(load(VIT)).kernels
    per = (k.filter(pl.col("op").cast(pl.Utf8) == "aten::cudnn_convolution")
           .group_by("step").agg(pl.col("bytes").sum(), pl.col("flops").sum()))
    assert per.height == 4 and set(per["bytes"].to_list()) == {truth_bytes}
    assert per["flops"].to_list() == pytest.approx([truth_flops] * 4)  # split over its kernels
    comps = k.filter(pl.col("op").cast(pl.Utf8) == "aten::cudnn_convolution")["component"]
    assert set(comps.cast(pl.Utf8).to_list()) == {"conv"}
