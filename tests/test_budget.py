"""Analytic decode-step budget from model configs: the two H200 fixtures' configs (shared/fixtures/README.md),
hand-derived per component, and cross-checked against the per-op cost formulas."""

from __future__ import annotations

import polars as pl
import pytest

from attrib.cost.budget import budget_totals, decode_budget, model_shape
from attrib.cost.ops import op_cost

# h200_qwen3moe_eager_prefill_decode: Qwen3MoeForCausalLM, bf16, batch 4, prompt 512, 6 decode steps
QWEN3_MOE = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 8, "num_attention_heads": 32,
             "head_dim": 128, "num_key_value_heads": 4, "num_experts": 32, "num_experts_per_tok": 8,
             "moe_intermediate_size": 768, "vocab_size": 151936, "tie_word_embeddings": False,
             "decoder_sparse_step": 1, "mlp_only_layers": []}
# h200_dense_prefill_cudagraph_decode: Llama-style, bf16, batch 8, static KV cache of 2048 positions
DENSE = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 8, "num_attention_heads": 32,
         "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256}


def _by(budget: pl.DataFrame) -> dict[str, dict]:
    return {r["component"]: r for r in budget.iter_rows(named=True)}


def test_model_shape():
    m = model_shape(QWEN3_MOE)
    assert (m.head_dim, m.kv_heads, m.experts, m.top_k, m.moe_layers, m.qk_norm) == (128, 4, 32, 8, 8, True)
    d = model_shape(DENSE)
    assert (d.head_dim, d.moe_layers, d.qk_norm) == (128, 0, False)          # head_dim = 4096 / 32


def test_qwen3_moe_decode_step():
    # first decode step: context 513 (512 prompt + the new token); HF eager runs q, k, v as 3 linears
    b = _by(decode_budget(QWEN3_MOE, batch=4, context=513, qkv_fused=False))
    # qkv weights: 8 layers x 2048 x (32*128 + 2*4*128 = 5120) x 2 B = 167,772,160
    assert b["qkv_proj"]["weight_bytes"] == 167_772_160
    # activations: 8 x 4 x (3*2048 in + 5120 out) x 2 = 720,896
    assert b["qkv_proj"]["act_bytes"] == 720_896
    # o_proj: 8 x 4096 x 2048 x 2 = 134,217,728
    assert b["o_proj"]["weight_bytes"] == 134_217_728
    # lm_head: 151936 x 2048 x 2 = 622,329,856; logits 4 x 151936 x 2 + input 4 x 2048 x 2 = 1,231,872
    assert (b["lm_head"]["weight_bytes"], b["lm_head"]["act_bytes"]) == (622_329_856, 1_231_872)
    # router: 8 x 2048 x 32 x 2 = 1,048,576
    assert b["moe_router"]["weight_bytes"] == 1_048_576
    # experts: E_active = 32*(1-(1-8/32)^4) = 21.875; 8 x 21.875 x 3*2048*768 x 2 = 1,651,507,200
    assert b["moe_experts"]["weight_bytes"] == 1_651_507_200
    # K/V read: 8 layers x 4 seqs x 2 (K,V) x 4 heads x 128 x 513 positions x 2 B = 33,619,968 (65,536 B/position)
    assert b["attention"]["kv_bytes"] == 33_619_968
    # KV write: 8 x 4 x 2 x 512 x 2 B written + the same read = 131,072
    assert b["kv_cache_write"]["bytes"] == 131_072
    # embedding: 4 rows x 2048 x 2 read + written + 4 int64 ids = 32,800
    assert b["embedding"]["bytes"] == 32_800
    tot = budget_totals(decode_budget(QWEN3_MOE, batch=4, context=513, qkv_fused=False), 4)
    # weights: the above + 16,384 embedding rows + 73,728 norm weights (17 x 2048 x 2 + 8 x 2 x 128 x 2)
    assert tot["weight_bytes"] == 2_576_965_632
    assert tot["gb_per_token"] == pytest.approx(tot["bytes"] / 4 / 1e9)  # total bytes: tests/test_regression_pins.py


def test_qwen3_moe_budget_matches_op_formulas():
    # The budget uses the same conventions as the op cost model: one decode step's linears
    # (8 x q,k,v,o,router + lm_head) priced op by op = qkv_proj + o_proj + lm_head + moe_router.
    bf = '["c10::BFloat16", "c10::BFloat16", ""]'
    ops = [("[[4, 1, 2048], [4096, 2048], []]", 8), ("[[4, 1, 2048], [512, 2048], []]", 16),
           ("[[4, 1, 4096], [2048, 4096], []]", 8), ("[[4, 2048], [32, 2048], []]", 8),
           ("[[4, 1, 2048], [151936, 2048], []]", 1)]
    priced = sum(op_cost("aten::linear", d, bf).bytes * n for d, n in ops)
    b = _by(decode_budget(QWEN3_MOE, batch=4, context=513, qkv_fused=False))
    assert priced == sum(b[c]["bytes"] for c in ("qkv_proj", "o_proj", "lm_head", "moe_router")) == 927_847_424
    # experts: 8 layers x (gate_up 137,855,104 + down 68,993,152) from _grouped_mm, less the 2 x 128 B offs
    types = '["c10::BFloat16", "c10::BFloat16", "int", "", ""]'
    gu = op_cost("aten::_grouped_mm", "[[32, 2048], [32, 2048, 1536], [32], [], []]", types, top_k=8).bytes
    dn = op_cost("aten::_grouped_mm", "[[32, 768], [32, 768, 2048], [32], [], []]", types, top_k=8).bytes
    assert 8 * (gu + dn - 256) == b["moe_experts"]["bytes"] == 1_654_784_000


def test_qwen3_moe_kv_grows_64_kib_per_position():
    steps = [budget_totals(decode_budget(QWEN3_MOE, batch=4, context=c, qkv_fused=False), 4)["kv_bytes"]
             for c in range(513, 519)]
    # kv_bytes = KV read 65,536*ctx + KV write 65,536
    assert steps == [65_536 * c + 65_536 for c in range(513, 519)]


def test_dense_decode_step_static_cache():
    b = decode_budget(DENSE, batch=8, context=2048)
    r = _by(b)
    # fused qkv: 8 x 4096 x (4096 + 2*8*128 = 6144) x 2 = 402,653,184
    assert r["qkv_proj"]["weight_bytes"] == 402_653_184
    assert r["o_proj"]["weight_bytes"] == 268_435_456                 # 8 x 4096 x 4096 x 2
    assert r["mlp_gate_up"]["weight_bytes"] == 1_879_048_192          # 8 x 4096 x 28672 x 2
    assert r["mlp_down"]["weight_bytes"] == 939_524_096               # 8 x 14336 x 4096 x 2
    assert r["lm_head"]["weight_bytes"] == 1_050_673_152              # 128256 x 4096 x 2
    # the static cache is read whole: 8 layers x 8 seqs x 2 x 8 heads x 128 x 2048 x 2 B = 512 MiB
    assert r["attention"]["kv_bytes"] == 536_870_912
    tot = budget_totals(b, 8)
    assert tot["weight_bytes"] == 4_540_538_880       # GEMMs + lm_head 4,540,334,080 + emb rows 65,536 + norms 139,264
    assert tot["bytes"] == 5_097_812_032
    assert tot["gb_per_token"] == pytest.approx(0.637226504)
    assert "moe_experts" not in r


def test_quantized_weights_and_fp8_kv():
    # mxfp4 weights (4.25 bits incl. scales) and fp8 KV: qkv 201,326,592 params x 4.25/8 = 106,954,752 B
    r = _by(decode_budget(DENSE, batch=8, context=2048, weight_bits=4.25, kv_bytes=1))
    assert r["qkv_proj"]["weight_bytes"] == 106_954_752
    assert r["attention"]["kv_bytes"] == 268_435_456
    assert r["norm"]["weight_bytes"] == 17 * 4096 * 2                 # norms stay in the model dtype
    # a bf16 lm_head next to 4-bit GEMMs
    assert _by(decode_budget(DENSE, batch=8, context=2048, weight_bits=4.5, lm_head_bits=16))["lm_head"][
        "weight_bytes"] == 1_050_673_152


def test_shared_expert_and_dense_first_layers():
    # synthetic Qwen2-MoE-style: shared expert 5632 wide with a sigmoid gate (H x 1)
    cfg = {"model_type": "qwen2_moe", "hidden_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 16,
           "num_key_value_heads": 16, "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
           "shared_expert_intermediate_size": 5632, "intermediate_size": 5632, "vocab_size": 151936,
           "tie_word_embeddings": False}
    r = _by(decode_budget(cfg, batch=1, context=100))
    assert r["moe_shared_expert"]["weight_bytes"] == 4 * (3 * 2048 * 5632 + 2048) * 2
    # one token: exactly top_k = 4 experts are active per layer
    assert r["moe_experts"]["weight_bytes"] == pytest.approx(4 * 4 * 3 * 2048 * 1408 * 2)
    # DeepSeek-style: first layer dense, the rest MoE
    ds = {**cfg, "model_type": "moe_dense_first", "first_k_dense_replace": 1, "n_shared_experts": 2,
          "shared_expert_intermediate_size": None}
    r = _by(decode_budget(ds, batch=1, context=100))
    assert r["mlp_gate_up"]["weight_bytes"] == 1 * 2048 * 2 * 5632 * 2
    assert r["moe_shared_expert"]["weight_bytes"] == 3 * 3 * 2048 * (2 * 1408) * 2


def test_sliding_window_layers_and_refusals():
    # GPT-OSS-style alternation: 4 layers, 2 sliding (window 128), 8 KV heads x 64, batch 1, context 1000
    cfg = {"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 4, "num_attention_heads": 64,
           "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "vocab_size": 201088,
           "num_local_experts": 32, "experts_per_token": 4, "sliding_window": 128,
           "layer_types": ["sliding_attention", "full_attention"] * 2}
    r = _by(decode_budget(cfg, batch=1, context=1000))
    # K/V read = 2 x 8 x 64 x (2 x 1000 + 2 x 128) positions x 2 B = 4,620,288
    assert r["attention"]["kv_bytes"] == 2 * 8 * 64 * (2 * 1000 + 2 * 128) * 2 == 4_620_288
    with pytest.raises(ValueError, match="MLA"):
        decode_budget({**DENSE, "kv_lora_rank": 512}, context=10)
    with pytest.raises(ValueError, match="linear_attention"):
        decode_budget({**DENSE, "layer_types": ["linear_attention", "full_attention"] * 4}, context=10)
