"""Decode GB/token on every H200 capture (tests/fixtures/captured) against bytes counted by hand from
the model's shapes (derivations: tests/fixtures/captured/README.md, "Hand-derived decode bytes per
token"). Two figures per trace: the minimal one (each weight, the KV cache and the recurrent state
read once) and the one as the stack runs (HF DynamicCache's torch.cat of the cache, GQA expansion
copies, the torch fallback of the Gated DeltaNet recurrence, MLA's re-expanded latent). The measured
figure is held within 10% of the as-run count; the minimal one is asserted beside it. On every
capture too: `other` <= 5% of decode kernel time, no component above the device's peak counted."""

from __future__ import annotations

import math
from functools import cache

import orjson
import polars as pl
import pytest

from attrib.app import analyze
from attrib.cost.strides import HAS_ZERO_STRIDE
from attrib.pipeline import attribute
from collectors import load

from conftest import FIXTURES
from test_captured_round2 import HAND as ROUND2

CAPTURED = FIXTURES / "captured"
# a forward pass, no decode (tests/test_steps_kind.py): a classifier, a detector with a text tower
VISION = {"vit_forward_b8", "owlv2_b5"}
ALL = sorted(
    n
    for n in (p.name.removesuffix(".pt.trace.json.gz") for p in CAPTURED.glob("*.pt.trace.json.gz"))
    if n not in VISION
)

# L4: hidden 2048, 4 layers, 16 q / 8 KV heads x 128, FFN 5632, vocab 32000, untied lm_head, bf16:
# attention 100,663,296 + MLP 276,824,064 + norms 36,864 + lm_head 131,072,000; a decode step also
# gathers batch x 2048 x 2 B embedding rows.
L4 = 100_663_296 + 276_824_064 + 36_864 + 131_072_000


def _dense(w: float, kv_per_key: float, keys: float, extra_kv: int, tokens: int) -> tuple[float, float, int]:
    """(minimal, as run, tokens): weights `w` and K/V read once over `keys` keys per step (the mean over the
    decode steps), and as run `extra_kv` more passes over K/V."""
    kv = kv_per_key * keys
    return w + kv, w + (1 + extra_kv) * kv, tokens


def _l4_mha(keys: float, extra_kv: int) -> tuple[float, float, int]:
    """L4 with 16 KV heads (k/v projections 2048 x 2048: +33,554,432 B) at batch 1; K/V per key:
    4 layers x 2 x 16 heads x 128 x 2 B."""
    return _dense(L4 + 33_554_432 + 4096, 32_768, keys, extra_kv, 1)


def _l4(batch: int, keys: float, extra_kv: int) -> tuple[float, float, int]:
    """L4 at `batch`; K/V per key: 4 layers x 2 x batch x 8 heads x 128 x 2 B."""
    return _dense(L4 + batch * 4096, 16_384 * batch, keys, extra_kv, batch)


# Qwen3-Next (README): W = 136,099,168; 1 full-attention layer, 1,024 B of K/V per key, 258.5 keys.
# Gated DeltaNet state per layer, 3 layers: recurrent S = 8 x 128 x 128 x 4 B (fp32) = 524,288 and the
# conv state 2048 x 4 x 2 B = 16,384, each read once (minimal). As run (transformers 5.17.0's torch
# fallbacks, ops as the trace records them): torch_recurrent_gated_delta_rule for one token makes 7
# passes over S: state*decay (read S, write S), state*k (read, write), .sum(-2) (read), outer k x delta
# (write), state + outer (read 2S, write S), state*q (read, write), .sum(-2) (read) = 12 S; the cache
# keeps the new state by assignment (no copy). torch_causal_conv1d_update: cat([state, x]) reads 16,384 +
# 4,096 and writes 20,480, state.copy_(last 4 columns) reads and writes 16,384, the depthwise conv reads
# the 20,480 B window = 94,208 per layer. DynamicCache re-copies the full-attention K/V (+2 x KV).
_Q3N_W, _Q3N_KV = 136_099_168, 1_024 * 258.5
QWEN3NEXT = (_Q3N_W + _Q3N_KV + 3 * (524_288 + 16_384),
             _Q3N_W + 3 * _Q3N_KV + 3 * (12 * 524_288 + 94_208), 1)

# DeepSeek-V3 (README): W = 109,268,736; the cache holds the latent, 576 B per key per layer (3 layers),
# 258.5 keys. As run, per key per layer: DynamicCache's cat re-reads and re-writes it (1,152); kv_b_proj
# reads the 512 B latent and writes 8 heads x (64 + 64) x 2 = 2,048; k_nope is copied into K (read and
# write 8 x 64 x 2: 2,048); k_rope is expanded into K (read 64, write 8 x 32 x 2 = 512: 576); cuDNN SDPA
# reads K [8 x 96] and V [8 x 64]: 2,560. 8,896 B per key per layer.
DEEPSEEKV3 = (109_268_736 + 1_728 * 258.5, 109_268_736 + 3 * 8_896 * 258.5, 1)

# hf_llama_cuda_b8_p512 (examples/hf_capture.py --layers 8 --hidden 2048 --vocab 32000): 32 heads x 64,
# 16 KV heads, FFN 3 x 2048 = 6144, untied: attention 8 x 2048 x (2048 + 1024 + 1024 + 2048) x 2 =
# 201,326,592; MLP 8 x 3 x 2048 x 6144 x 2 = 603,979,776; norms 17 x 2048 x 2 = 69,632; lm_head
# 131,072,000; 8 embedding rows 32,768. K/V per key: 8 layers x 2 x 8 x 16 x 64 x 2 = 262,144; 516.5 keys.
_HF_W, _HF_KV = 201_326_592 + 603_979_776 + 69_632 + 131_072_000 + 32_768, 262_144 * 516.5
HF_LLAMA = (_HF_W + _HF_KV, _HF_W + 3 * _HF_KV, 8)

# fp8_w8a8_decode (examples/fp8_w8a8_capture.py): 8 layers of float8_e4m3fn weights, 1 B each: qkv
# 4096 x 12288, o 4096 x 4096, gate_up 4096 x 28672, down 14336 x 4096 = 243,269,632 per layer; fp32
# per-output-channel scales (12288 + 4096 + 28672 + 4096) x 4 = 196,608 per layer; no KV cache, no
# embedding or lm_head: 8 x 243,466,240 = 1,947,729,920 per step of 4 tokens, minimal and as run.
FP8 = (8 * (243_269_632 + 196_608),) * 2 + (4,)

# name -> (minimal bytes per step, as-run bytes per step, tokens per step)
HAND = {
    # DynamicCache: torch.cat of the whole cache each step (reads it and writes it again): +2 x KV
    "sdpa_attn_a": _l4(8, 2052.5, 2), "sdpa_attn_b": _l4(8, 2052.5, 2),
    "slope_ctx1024": _l4(8, 1027.5, 2), "slope_ctx4096": _l4(8, 4099.5, 2), "slope_ctx16384": _l4(8, 16387.5, 2),
    "blocking_copy_decode": _l4(8, 516.5, 2),
    "nosplit_ctx2048": _l4_mha(2051.5, 2), "nosplit_ctx16384": _l4_mha(16387.5, 2),
    # eager: + repeat_kv (reads K/V, writes them expanded to 16 heads: +3) and the two bmm read the
    # expanded K and V (+1): 1 + 2 + 3 + 1 passes
    "eager_attn": _l4(8, 2052.5, 6),
    # StaticCache of 526 slots (SDPA reads all, masked): the compiled graph's GQA expansion reads K and
    # V and writes them twice over (8 -> 16 heads), cuDNN SDPA reads the expanded copies: 1 + 2 + 2
    "compile_decode": _l4(8, 526, 4),
    # vocab 151,936: lm_head (151,936 - 32,000) x 2048 x 2 = 491,257,856 B more than L4's
    "sampler_b1_v152k": _dense(L4 + 491_257_856 + 4096, 16_384, 516.5, 2, 1),
    # TP=2, per rank (README): q/k/v/o and MLP halved, norms, embedding and lm_head whole: 319,885,312;
    # K/V of 4 KV heads per rank: 4 x 2 x 8 x 4 x 128 x 2 = 65,536 per key
    "tp2_decode_rank0": _dense(319_885_312, 65_536, 515.5, 2, 8),
    "tp2_decode_rank1": _dense(319_885_312, 65_536, 515.5, 2, 8),
    "qwen3next_decode": QWEN3NEXT, "deepseekv3_decode": DEEPSEEKV3,
    "hf_llama_cuda_b8_p512": HF_LLAMA, "fp8_w8a8_decode": FP8,
    # LLaVA (README): its text tower is L4 with a 32,064-row vocab (lm_head 131,334,144 B), 2
    # sequences of 576 image + 64 text tokens; decode reads the text tower only
    "llava_b2": _dense(100_663_296 + 276_824_064 + 36_864 + 131_334_144 + 2 * 4096, 32_768,
                       642.5, 2, 2),
    **ROUND2,   # sliding windows, grouped routing (tests/test_captured_round2.py)
}


@cache
def _decode(name: str) -> tuple[dict, dict]:
    doc = analyze(CAPTURED / f"{name}.pt.trace.json.gz", phase="decode").to_dict()
    return doc, doc["phases"][0]


def test_every_capture_has_a_hand_count():
    assert set(HAND) == set(ALL)


@pytest.mark.parametrize("name", ALL)
def test_decode_gb_per_token_matches_the_hand_count_as_run(name):
    minimal, as_run, tokens = HAND[name]
    _, ph = _decode(name)
    assert ph["tokens_per_step"] == tokens
    assert ph["gb_per_token"] == pytest.approx(as_run / tokens / 1e9, rel=0.10)
    # the minimal figure never exceeds what the stack moves; the measure sits at or above it
    assert minimal <= as_run and ph["gb_per_token"] >= 0.99 * minimal / tokens / 1e9


def test_repeat_kv_copies_read_the_unexpanded_kv():
    """Eager attention's repeat_kv copies K/V out of an expand()ed view (stride 0 over the 2 query heads of
    each KV head): the copy reads the 8-head cache once and writes 16 heads. Priced from the recorded
    strides, each copy_ of a decode step is charged 3 x its source's 8-head bytes (read 1, write 2); read at
    the view's size it was 4 x, one more pass over K/V per step (0.034 GB/token)."""
    a = attribute(load(CAPTURED / "eager_attn.pt.trace.json.gz"))
    copies = a.trace.ops.filter((pl.col("name") == "aten::copy_") & pl.col("input_strides").str.contains(HAS_ZERO_STRIDE))
    k = a.kernels.filter(pl.col("op_id").is_in(copies["id"].implode()) & (pl.col("phase") == "decode"))
    assert k.height == 8 * 2 * 4  # 8 steps x (K, V) x 4 layers
    dims = [orjson.loads(d) for d in copies.filter(pl.col("id").is_in(k["op_id"].implode()))["input_dims"]]
    # self [B, 8, 2, T, 128] written (then viewed as 16 heads); src the same dims with stride 0 on the 2
    per_copy = [(math.prod(d[0]) * 2, math.prod(d[1]) * 2 // d[1][2]) for d in dims]
    assert all(w == 2 * r for w, r in per_copy)
    assert k["bytes"].sum() == pytest.approx(sum(w + r for w, r in per_copy), rel=1e-6)


@pytest.mark.parametrize("name", ALL)
def test_decode_other_share_and_no_component_above_the_peak(name):
    doc, ph = _decode(name)
    rows = {c["component"]: c for c in ph["components"]}
    assert rows.get("other", {"share": 0.0})["share"] <= 0.05
    peak = doc["device"]["peak_bw_gbs"]
    counted = [c for c in ph["components"] if c["bytes"] is not None and not c.get("inconsistent")]
    # memory traffic: a collective's bus bytes cross the link (tests/test_link_roofline.py)
    memory = [c for c in counted if c["bound"] != "link"]
    assert ph["bytes_per_step"] == pytest.approx(sum(c["bytes"] for c in memory))
    assert all(c["achieved_gbs"] is None or c["achieved_gbs"] <= peak for c in counted), counted


def _kernels(name: str):
    import polars as pl

    from attrib.pipeline import attribute
    from collectors import load
    t = load(CAPTURED / f"{name}.pt.trace.json.gz")
    a = attribute(t)
    k = a.kernels.filter(pl.col("phase") == "decode")
    return k.join(t.ops.select(pl.col("id").alias("op_id"), "input_dims"), on="op_id", how="left")


def test_qwen3next_linear_attention_bytes_are_the_fallbacks_passes():
    """Per Gated DeltaNet layer and decode step, the 7 kernels over the fp32 state [1, 8, 128, 128] carry
    the 12 S of the hand count (their small operands add < 1%); the depthwise conv over the 5-column window is
    priced (input 2048 x 5 x 2 + weight 2048 x 4 x 2 + 2 output columns 2048 x 2 x 2 = 45,056; it was
    unpriced, as was softplus: the row's bytes were known for 94% of its time)."""
    import polars as pl
    k = _kernels("qwen3next_decode")
    steps = k["step"].n_unique()
    # the state is an input, or (the outer product k x delta) the output of [1, 8, 128, 1] x [1, 8, 1, 128]
    over_state = pl.col("input_dims").str.contains(r"\[1, 8, 128, 128\]|\[1, 8, 128, 1\], \[1, 8, 1, 128\]")
    state = k.filter((pl.col("component") == "linear_attention") & over_state)
    assert state.height == 7 * 3 * steps
    per_layer = state["bytes"].sum() / steps / 3
    assert per_layer == pytest.approx(12 * 524_288, rel=0.01)
    conv = k.filter(pl.col("op") == "aten::_conv_depthwise2d")
    assert conv.height == 3 * steps and set(conv["bytes"]) == {20_480 + 16_384 + 8_192}
    rows = {c["component"]: c for c in _decode("qwen3next_decode")[1]["components"]}
    assert rows["linear_attention"]["bytes_known_share"] == 1.0


def test_sampler_sorts_and_scans_are_priced():
    """sampler_b1_v152k's top-p: sort of the [1, 151936] fp32 logits (read, values and int64 indices
    written: 2 x 607,744 + 151,936 x 8) and cumsum (read and written: 2 x 607,744); they were unpriced."""
    import polars as pl
    k = _kernels("sampler_b1_v152k")
    big = pl.col("input_dims").str.starts_with("[[1, 151936]")
    sort = k.filter((pl.col("op") == "aten::sort") & big)
    # an op's bytes are shared among its kernels by duration: their sum is exact up to float rounding
    per_op = sort.group_by("op_id").agg(pl.col("bytes").sum())["bytes"].to_list()
    assert sort.height and per_op == pytest.approx([2 * 607_744 + 151_936 * 8] * len(per_op), rel=1e-12)
    scan = k.filter((pl.col("op") == "aten::cumsum") & big)
    per_op = scan.group_by("op_id").agg(pl.col("bytes").sum())["bytes"].to_list()
    assert scan.height and per_op == pytest.approx([2 * 607_744] * len(per_op), rel=1e-12)
    assert _decode("sampler_b1_v152k")[1]["bytes_known_share"] > 0.98
