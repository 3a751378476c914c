"""Cost model: each formula against a hand-derived figure (derivation in the comment), then the
vectorized entry point on the real H200 Qwen3-MoE trace.

Shapes and type strings below are copied from real traces in shared/fixtures (H200 Qwen3-MoE,
H200 dense, MI300 HF Qwen1.5, MI300 vLLM capture) unless marked synthetic.
"""

from __future__ import annotations

import gzip

import orjson
import polars as pl
import pytest

from attrib.cost import matmul as mm
from attrib.cost import elementwise as ew
from attrib.cost.ops import op_cost, op_costs

BF, F32, I64, I32 = "c10::BFloat16", "float", "long int", "int"


def _c(name, dims, types, concrete=None, **kw):
    return op_cost(name, dims, types, concrete or [""] * len(dims), **kw)


# ------------------------------------------------------------------ GEMM family


def test_linear_decode_q_proj():
    # q_proj at decode, x[4,1,2048] @ W[4096,2048]^T: M=4, N=4096, K=2048, bf16 (2 B)
    # bytes = M*K*2 + N*K*2 + M*N*2 = 16,384 + 16,777,216 + 32,768 = 16,826,368
    # flops = 2*M*N*K = 2*4*4096*2048 = 67,108,864
    c = _c("aten::linear", [[4, 1, 2048], [4096, 2048], []], [BF, BF, ""])
    assert (c.bytes, c.flops, c.dtype, c.model) == (16_826_368, 67_108_864, "bf16", "gemm")


def test_linear_with_bias_and_addmm_agree():
    # MI300 Qwen1.5 prefill q_proj: x[16,559,1024], W[1024,1024], b[1024]: M=8944, N=K=1024
    # bytes = 8944*1024*2 + 1024*1024*2 + 8944*1024*2 + 1024*2 = 18,317,312*2 + 2,097,152 + 2,048 = 38,733,824
    # flops = 2*8944*1024*1024 = 18,756,927,488
    lin = _c("aten::linear", [[16, 559, 1024], [1024, 1024], [1024]], [BF, BF, BF])
    add = _c("aten::addmm", [[1024], [8944, 1024], [1024, 1024], [], []], [BF, BF, BF, "Scalar", "Scalar"])
    assert lin.bytes == add.bytes == 38_733_824
    assert lin.flops == add.flops == 18_756_927_488


def test_mm_and_matmul_dense_prefill_qkv():
    # H200 dense prefill fused qkv: [8192,4096] @ [4096,6144]
    # bytes = 8192*4096*2 + 4096*6144*2 + 8192*6144*2 = 67,108,864 + 50,331,648 + 100,663,296 = 218,103,808
    # flops = 2*8192*6144*4096 = 412,316,860,416
    m = _c("aten::mm", [[8192, 4096], [4096, 6144]], [BF, BF])
    t = _c("aten::matmul", [[8, 1024, 4096], [4096, 6144]], [BF, BF])
    assert m.bytes == t.bytes == 218_103_808
    assert m.flops == t.flops == 412_316_860_416


def test_batched_matmul_and_bmm_rope_outer_product():
    # rotary inv_freq outer product, fp32: [1,64,1] x [1,1,512]: B=1, M=64, K=1, N=512
    # bytes = 64*4 + 512*4 + 64*512*4 = 256 + 2,048 + 131,072 = 133,376; flops = 2*64*512*1 = 65,536
    for name in ("aten::matmul", "aten::bmm"):
        c = _c(name, [[1, 64, 1], [1, 1, 512]], [F32, F32])
        assert (c.bytes, c.flops, c.dtype) == (133_376, 65_536, "fp32")


def test_scaled_mm_fp8_synthetic():
    # synthetic FP8 GEMM a[16,4096] e4m3 x b[4096,4096] e4m3, row scales [16,1] fp32, col scales [1,4096] fp32,
    # out_dtype 15 (bf16): bytes = 16*4096 + 4096*4096 + 16*4096*2 + 16*4 + 4096*4
    #                            = 65,536 + 16,777,216 + 131,072 + 64 + 16,384 = 16,990,272
    fp8 = "c10::Float8_e4m3fn"
    c = _c("aten::_scaled_mm", [[16, 4096], [4096, 4096], [16, 1], [1, 4096], [], [], [], []],
           [fp8, fp8, F32, F32, "", "", "Scalar", "Scalar"], ["", "", "", "", "", "", "15", "False"])
    assert (c.bytes, c.flops, c.dtype) == (16_990_272, 2 * 16 * 4096 * 4096, "fp8_e4m3fn")


# ------------------------------------------------------------------ MoE


def test_expected_active_experts():
    # 4 tokens, top-8 of 32: 32 * (1 - (1 - 8/32)^4) = 32 * (1 - 0.31640625) = 21.875
    assert mm.expected_active_experts(32, 8, 4) == 21.875
    assert mm.expected_active_experts(32, 8, 2048) == pytest.approx(32.0)
    assert mm.expected_active_experts(32, 8, 0) == 0.0


def test_grouped_mm_decode_gate_up_and_down():
    # Qwen3-MoE decode, T=4 tokens x k=8 -> R=32 routed rows; gate_up b[32,2048,1536]; E_active = 21.875
    # bytes = R*K*2 + E_act*K*N*2 + R*N*2 + offs 32*4
    #       = 131,072 + 21.875*6,291,456 (=137,625,600) + 98,304 + 128 = 137,855,104
    # flops = 2*R*K*N = 2*32*2048*1536 = 201,326,592
    dims, types = [[32, 2048], [32, 2048, 1536], [32], [], []], [BF, BF, I32, "", ""]
    c = _c("aten::_grouped_mm", dims, types, top_k=8)
    assert (c.bytes, c.flops, c.model) == (137_855_104, 201_326_592, "grouped_gemm")
    assert "k=8" in c.assumption and "T=4" in c.assumption
    # down b[32,768,2048]: 32*768*2 + 21.875*768*2048*2 + 32*2048*2 + 128 = 49,152 + 68,812,800 + 131,072 + 128
    down = _c("aten::_grouped_mm", [[32, 768], [32, 768, 2048], [32], [], []], types, top_k=8)
    assert down.bytes == 68_993_152
    # known counts: 5 experts hit -> 5*2048*1536*2 = 31,457,280 of weights
    known = mm.grouped_mm(dims, types, [""] * 5, expert_counts=[6, 6, 6, 6, 8] + [0] * 27)
    assert known.bytes == 131_072 + 31_457_280 + 98_304 + 128 and known.assumption is None
    # k unknown: R=32 single draws, E*(1-(31/32)^32) = 20.4142...
    blind = _c("aten::_grouped_mm", dims, types)
    e_act = 32 * (1 - (31 / 32) ** 32)
    assert blind.bytes == pytest.approx(131_072 + e_act * 6_291_456 + 98_304 + 128)
    assert "top_k unknown" in blind.assumption


def test_grouped_mm_prefill_reads_all_experts():
    # prefill R=16384 rows (2048 tokens x 8): every expert is hit -> 32*2048*1536*2 = 201,326,592 of weights
    # bytes = 16384*2048*2 + 201,326,592 + 16384*1536*2 + 128 = 67,108,864 + 201,326,592 + 50,331,648 + 128
    c = _c("aten::_grouped_mm", [[16384, 2048], [32, 2048, 1536], [32], [], []], [BF, BF, I32, "", ""], top_k=8)
    assert c.bytes == 318_767_232


def test_fused_experts_synthetic():
    # synthetic vLLM fused MoE at decode: hidden[4,2048], w1[32,1536,2048], w2[32,2048,768] bf16,
    # topk_weights[4,8] fp32, topk_ids[4,8] int32: E_act = 21.875, fraction 0.68359375
    # weights: w1 32*1536*2048*2 = 201,326,592 B, w2 32*2048*768*2 = 100,663,296 B
    # bytes = 2*4*2048*2 + (201,326,592 + 100,663,296)*0.68359375 + 128 (ids) + 128 (weights)
    #       = 32,768 + 206,438,400 + 256 = 206,471,424 (= one Qwen3-MoE layer of the budget's expert weights)
    # flops = 2*T*k*H*(N1 + N1/2) = 2*4*8*2048*(1536 + 768) = 301,989,888
    c = _c("vllm::inplace_fused_experts", [[4, 2048], [32, 1536, 2048], [32, 2048, 768], [4, 8], [4, 8]],
           [BF, BF, BF, F32, I32])
    assert (c.bytes, c.flops, c.model) == (206_471_424, 301_989_888, "moe")


# ------------------------------------------------------------------ attention


def test_sdpa_decode_reads_whole_kv():
    # decode q[4,32,1,128], k/v[4,4,513,128] bf16, not causal
    # bytes = q 32,768 + k 2,101,248 + v 2,101,248 + out 32,768 = 4,268,032
    # flops = 2*B*Hq*Lq*Lk*(D+Dv) = 2*4*32*1*513*256 = 33,619,968
    c = _c("aten::scaled_dot_product_attention", [[4, 32, 1, 128], [4, 4, 513, 128], [4, 4, 513, 128], [], [], [], [], []],
           [BF, BF, BF, "", "Scalar", "Scalar", "Scalar", "Scalar"], ["", "", "", "", "0.", "False", "0.0883", "True"])
    assert (c.bytes, c.flops, c.assumption) == (4_268_032, 33_619_968, None)


def test_sdpa_causal_prefill_halves_flops_and_variants_agree():
    # prefill q[4,32,512,128], k/v[4,4,512,128], causal
    # bytes = 16,777,216 + 2,097,152 + 2,097,152 + 16,777,216 = 37,748,736
    # flops = 2*4*32*(512*512/2)*256 = 8,589,934,592
    q, kv = [4, 32, 512, 128], [4, 4, 512, 128]
    sdpa = _c("aten::scaled_dot_product_attention", [q, kv, kv, [], [], [], [], []],
              [BF, BF, BF, "", "Scalar", "Scalar", "Scalar", "Scalar"], ["", "", "", "", "0.", "True", "0.0883", "True"])
    cudnn = _c("aten::_scaled_dot_product_cudnn_attention", [q, kv, kv, [], [], [], [], [], []],
               [BF, BF, BF, "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"],
               ["", "", "", "", "False", "0.", "True", "False", "0.0883"])
    fwd = _c("aten::_cudnn_attention_forward", [q, kv, kv] + [[]] * 10, [BF, BF, BF] + [""] * 3 + ["Scalar"] * 7,
             ["", "", "", "", "", "", "512", "512", "False", "0.", "True", "False", "0.0883"])
    for c in (sdpa, cudnn, fwd):
        assert (c.bytes, c.flops) == (37_748_736, 8_589_934_592)


def test_sdpa_with_mask_static_cache():
    # H200 dense prefill: q[8,32,1024,128], k/v[8,8,2048,128] (static cache), bool mask [1,1,1024,2048]
    # bytes = 67,108,864 + 33,554,432*2 + 67,108,864 + 2,097,152 = 203,423,744
    # flops = 2*8*32*1024*2048*256 = 274,877,906,944 (not causal: the mask does the masking)
    c = _c("aten::scaled_dot_product_attention",
           [[8, 32, 1024, 128], [8, 8, 2048, 128], [8, 8, 2048, 128], [1, 1, 1024, 2048], [], [], [], []],
           ["c10::BFloat16"] * 3 + ["bool", "Scalar", "Scalar", "", "Scalar"], ["", "", "", "", "0.", "False", "", "True"])
    assert (c.bytes, c.flops) == (203_423_744, 274_877_906_944)


def test_flash_forward_blhd_layout():
    # MI300 Qwen1.5: _flash_attention_forward q/k/v[16,559,16,64] (B, L, H, D), causal at arg 8
    # bytes = 4 * 16*559*16*64*2 = 73,269,248; flops = 2*16*16*(559*559/2)*128 = 10,239,377,408
    qkv = [16, 559, 16, 64]
    c = _c("aten::_flash_attention_forward", [qkv, qkv, qkv] + [[]] * 12, [BF, BF, BF, "", ""] + ["Scalar"] * 6 + [""] * 4,
           ["", "", "", "", "", "559", "559", "0.", "True", "False", "0.125", "", "", "", ""])
    assert (c.bytes, c.flops) == (73_269_248, 10_239_377_408)


def test_causal_alignment_when_lengths_differ():
    # synthetic chunk: Lq=2 queries over Lk=4 keys, causal. Top-left (torch SDPA): 1 + 2 = 3 pairs;
    # bottom-right (flash forward): 3 + 4 = 7 pairs. flops = 2*B*H*pairs*(D+Dv) with B=H=1, D=Dv=8.
    top = mm.attention([[1, 1, 2, 8], [1, 1, 4, 8], [1, 1, 4, 8]], [F32] * 3, ["", "", "", "", "", "True"])
    bottom = mm.attention([[1, 2, 1, 8], [1, 4, 1, 8], [1, 4, 1, 8]], [F32] * 3, [""] * 8 + ["True"],
                          layout="blhd", causal_index=8, mask_index=None)
    assert (top.flops, bottom.flops) == (2 * 3 * 16, 2 * 7 * 16)


# ------------------------------------------------------------------ memory-bound families


def test_embedding_gathers_rows_not_table():
    # 4 tokens from a [151936,2048] bf16 table: rows 4*2048*2 = 16,384 read + 16,384 written + ids 4*8
    c = _c("aten::embedding", [[151936, 2048], [4, 1], [], [], []], [BF, I64, "Scalar", "Scalar", "Scalar"])
    assert (c.bytes, c.flops) == (32_800, 0)
    sel = _c("aten::index_select", [[151936, 2048], [], [2048]], [BF, "Scalar", I64], ["", "0", ""])
    assert sel.bytes == 2 * 2048 * 2048 * 2 + 2048 * 8


def test_kv_writes():
    # static-cache index_copy_: source [8,8,1024,128] bf16 read and written = 2*16,777,216, index 1024*8
    c = _c("aten::index_copy_", [[8, 8, 2048, 128], [], [1024], [8, 8, 1024, 128]], [BF, "Scalar", I64, BF])
    assert c.bytes == 33_562_624
    # vLLM reshape_and_cache_flash: k,v [8192,8,64] bf16 = 8,388,608 each, read + written, slots 8192*8
    r = _c("_C_cache_ops::reshape_and_cache_flash",
           [[8192, 8, 64], [8192, 8, 64], [224304, 32, 8, 64], [224304, 32, 8, 64], [8192], [], [], []],
           [BF, BF, BF, BF, I64, "", F32, F32])
    assert (r.bytes, r.model) == (33_619_968, "kv_write")
    # index_put_ of 16384 int64 values: 2*131,072 (indices not recorded)
    p = _c("aten::index_put_", [[16384], [], [16384], []], [I64, "", I64, "Scalar"], ["", "", "", "False"])
    assert p.bytes == 262_144 and "not recorded" in p.assumption


def test_elementwise_broadcast_promotion_inplace():
    # residual add bf16 [4,1,2048] + [4,1,2048] -> 3 * 16,384
    assert _c("aten::add", [[4, 1, 2048], [4, 1, 2048], []], [BF, BF, "Scalar"]).bytes == 49_152
    # fp32 [4,1,2048] * [4,1,1] -> 32,768 + 16 + 32,768
    assert _c("aten::mul", [[4, 1, 2048], [4, 1, 1]], [F32, F32]).bytes == 65_552
    # norm weight [2048] * x [4,1,2048] bf16 -> 4,096 + 16,384 + 16,384
    assert _c("aten::mul", [[2048], [4, 1, 2048]], [BF, BF]).bytes == 36_864
    # x + eps: the 0-dim double is a scalar -> 16 + 16
    assert _c("aten::add", [[4, 1, 1], [], []], [F32, "double", "Scalar"]).bytes == 32
    # comparison writes bool: 16384*8 + 16384*1
    ge = _c("aten::ge", [[16384], []], [I64, "Scalar"])
    assert (ge.bytes, ge.dtype) == (147_456, "bool")
    # in-place masked_fill_: self 67,108,864 read + mask 16,384 + self 67,108,864 written
    assert _c("aten::masked_fill_", [[16384, 2048], [16384, 1], []], [BF, "bool", "Scalar"]).bytes == 134_234_112
    # fill_ only writes: 32 int32
    assert _c("aten::fill_", [[32], []], [I32, "Scalar"]).bytes == 128
    # bf16 + fp16 promotes to fp32: 2 + 2 + 4 bytes per element
    assert _c("aten::add", [[10], [10], []], [BF, "c10::Half", "Scalar"]).bytes == 80


def test_activation_and_fused_io_ops():
    # silu on routed rows [32,768] bf16: 49,152 read + 49,152 written
    s = _c("aten::silu", [[32, 768]], [BF])
    assert (s.bytes, s.model) == (98_304, "activation")
    # vLLM silu_and_mul(out[T,I], x[T,2I]): 64*1024*2 + 64*2048*2
    assert _c("_C::silu_and_mul", [[64, 1024], [64, 2048]], [BF, BF]).bytes == 393_216


def test_norms():
    # _fused_rms_norm x[8,1024,4096] bf16: 67,108,864 read + written, weight 8,192
    assert _c("aten::_fused_rms_norm", [[8, 1024, 4096], [], [4096], []], [BF, "ScalarList", BF, ""]).bytes == 134_225_920
    # fused residual add + norm: x and residual [8192,2880] read and written (4 * 47,185,920) + weight 5,760;
    # the aiter op that passes out/residual_out as arguments gives the same figure
    fused = _c("vllm::rocm_aiter_rmsnorm2d_fwd_with_add", [[8192, 2880], [8192, 2880], [2880], []], [BF, BF, BF, "Scalar"])
    ck = _c("aiter::rmsnorm2d_fwd_with_add_ck", [[8192, 2880]] * 4 + [[2880], [], []], [BF] * 5 + ["Scalar"] * 2)
    assert fused.bytes == ck.bytes == 188_749_440


def test_copies():
    # copy_ into bf16 from fp32 [4,1,2048]: src 32,768 + dst 16,384
    assert _c("aten::copy_", [[4, 1, 2048], [4, 1, 2048], []], [BF, F32, "Scalar"]).bytes == 49_152
    # _to_copy fp32 -> bf16 (ScalarType 15): same 49,152
    tc = _c("aten::_to_copy", [[4, 1, 2048]] + [[]] * 6, [F32, "Scalar", "", "", "", "Scalar", ""],
            ["", "15", "", "", "", "False", ""])
    assert (tc.bytes, tc.dtype) == (49_152, "bf16")
    # aten::to fp32 -> 6 (fp32) is a no-op
    assert _c("aten::to", [[4, 1, 2048]] + [[]] * 4, [F32, "Scalar", "Scalar", "Scalar", ""],
              ["", "6", "False", "False", ""]).bytes == 0
    # aten::to(device, dtype) overload: bf16 [4,32] -> fp32 = 256 + 512
    assert _c("aten::to", [[4, 32]] + [[]] * 5, [BF, "", "Scalar", "Scalar", "Scalar", ""],
              ["", "", "6", "False", "False", ""]).bytes == 768
    assert _c("aten::clone", [[16384, 1536], []], [BF, "Scalar"]).bytes == 100_663_296
    cat = _c("aten::cat", [[[4, 4, 512, 128], [4, 4, 1, 128]], []], ["TensorList", "Scalar"])
    assert cat.bytes is None and "TensorList" in cat.assumption


def test_softmax_topk_reductions_rope():
    # router softmax bf16 [4,32] with dtype=6 (fp32 out): 256 + 512; _softmax fp32: 512 + 512
    assert _c("aten::softmax", [[4, 32], [], []], [BF, "Scalar", "Scalar"], ["", "-1", "6"]).bytes == 768
    assert _c("aten::_softmax", [[4, 32], [], []], [F32, "Scalar", "Scalar"], ["", "-1", "False"]).bytes == 1024
    # topk k=8 of fp32 [4,32]: 512 read + 4*8*(4 + 8) written
    assert _c("aten::topk", [[4, 32], [], [], [], []], [F32] + ["Scalar"] * 4, ["", "8", "-1", "True", "True"]).bytes == 896
    # MoE combine: sum over dim 1 of bf16 [4,8,2048] -> 131,072 + 16,384
    assert _c("aten::sum", [[4, 8, 2048], [], [], []], [BF, "ScalarList", "Scalar", ""], ["", "[1]", "False", ""]).bytes == 147_456
    # greedy sampler argmax over [4,151936] bf16 -> 1,215,488 + 4 int64
    assert _c("aten::argmax", [[4, 151936], [], []], [BF, "Scalar", "Scalar"], ["", "-1", "True"]).bytes == 1_215_520
    # vLLM rotary: positions 8192*8 + q 2*67,108,864 + k 2*8,388,608 + one [64] bf16 cache row per token
    r = _c("_C::rotary_embedding", [[8192], [8192, 4096], [8192, 512], [], [131072, 64], []],
           [I64, BF, BF, "Scalar", BF, "Scalar"])
    assert r.bytes == 65_536 + 134_217_728 + 16_777_216 + 1_048_576


def test_unknowns_stay_null():
    assert _c("aten::mm", [], []).bytes is None
    no_shapes = op_cost("aten::linear", None, None)
    assert (no_shapes.bytes, no_shapes.model) == (None, "gemm") and "not recorded" in no_shapes.assumption
    assert op_cost("vllm::moe_forward", "[[8192, 3072], [8192, 32], [], []]", "[]").model == "none"
    assert op_cost("aten::linear", "[[4, 7], [8, 5], []]", f'["{BF}", "{BF}", ""]').bytes is None  # K mismatch
    assert ew.cat([], [], []).bytes is None


# ------------------------------------------------------------------ vectorized, on the real trace


def _ops_table(path) -> pl.DataFrame:
    with gzip.open(path) as f:
        events = orjson.loads(f.read())["traceEvents"]
    rows = []
    for i, e in enumerate(events):
        if e.get("cat") == "cpu_op":
            a = e.get("args", {})
            raw = [orjson.dumps(a[k]).decode() if k in a else None for k in ("Input Dims", "Input type", "Concrete Inputs")]
            rows.append((i, e["name"], *raw))
    return pl.DataFrame(rows, schema=["id", "name", "input_dims", "input_types", "concrete_inputs"], orient="row")


def test_op_costs_on_h200_moe_trace(fixtures):
    ops = _ops_table(fixtures / "torch/h200_qwen3moe_eager_prefill_decode.json.gz")
    costs = op_costs(ops)
    assert costs.columns == ["id", "bytes", "flops", "dtype", "cost_model", "assumption"]
    assert costs["id"].to_list() == ops["id"].to_list()
    j = ops.join(costs, on="id")
    # top_k inferred from the router's aten::topk (k=8 of 32): decode gate_up / down as derived above
    gm = j.filter(pl.col("name") == "aten::_grouped_mm", pl.col("input_dims").str.starts_with("[[32,"))
    assert gm.height == 96 and set(gm["bytes"].to_list()) == {137_855_104, 68_993_152}
    assert gm["assumption"].str.contains("k=8").all()
    # all 287 linears priced; the 231 cats (DynamicCache growth) honestly unknown
    assert j.filter(pl.col("name") == "aten::linear")["bytes"].null_count() == 0
    cats = j.filter(pl.col("name") == "aten::cat")
    assert cats.height == 231 and cats["bytes"].null_count() == 231
    assert j.filter(pl.col("name") == "aten::view")["cost_model"].null_count() == j.filter(pl.col("name") == "aten::view").height
    # one decode step's projections (8 layers x q,k,v,o,router + lm_head), averaged over the 6 decode steps:
    # = budget qkv_proj (unfused) 168,493,056 + o_proj 134,610,944 + lm_head 623,561,728 + moe_router 1,181,696
    dec = j.filter(pl.col("name") == "aten::linear",
                   pl.col("input_dims").str.starts_with("[[4,1,") | pl.col("input_dims").str.starts_with("[[4,2048]"))
    assert dec["bytes"].sum() / 6 == 927_847_424
