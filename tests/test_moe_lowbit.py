"""Fused MoE with quantized experts (issue 36) priced from their schemas: vLLM's fused_experts ops,
AITER's fused_moe_, vLLM's Marlin MoE GEMMs (attrib/cost/moe_lowbit.py, docs/lowbit-gemms.md).

No trace holding these ops is in the repository (no vLLM on the GPU machine): each call is built
as a trace records it (Input Dims, Input type, Concrete Inputs in schema order) from a real layer,
Mixtral-8x7B (E = 8, H = 4096, I = 14336, top-2) and Qwen3-30B-A3B (E = 128, H = 2048, I = 768,
top-8), the packing spelled out; every expected figure is derived by hand from E, N, K, the bits
and the group.
"""

from __future__ import annotations

import polars as pl
import pytest

from attrib.cost.component_bytes import component_formats
from attrib.cost.lowbit import format_bits
from attrib.cost.ops import op_cost

BF16, F32, I32, I64 = "c10::BFloat16", "float", "int", "long int"
FP8, I8, U8 = "c10::Float8_e4m3fn", "signed char", "unsigned char"
U4B8 = (4 << 8) | (8 << 17)   # vLLM ScalarType uint4b8 (GPTQ int4): mantissa 4, bias 8
NONE = ([], "")
E, H, I, TOPK, G = 8, 4096, 14336, 2, 128   # Mixtral-8x7B, group 128


def _call(name, args, concrete):
    dims, types = [a[0] for a in args], [a[1] for a in args]
    return op_cost(name, dims, types, [concrete.get(i, "") for i in range(len(args))])


def _vllm(t, w1, w2, flags, quant, activation_dtype=BF16, k=TOPK):
    """vllm::outplace_fused_experts as vLLM @13cb3e44 registers it: hidden, w1, w2,
    topk_weights, topk_ids, activation, apply_router_weight_on_input, use_fp8_w8a8,
    use_int8_w8a8, use_int8_w8a16, use_int4_w4a16, ocp_mx_scheme, per_channel_quant,
    global_num_experts, expert_map, w1_scale, w2_scale, w1_zp, w2_zp, a1_scale, a2_scale,
    block_shape, w1_bias, w2_bias. flags: the four use_* booleans; quant: w1_scale ... a2_scale."""
    h = H if w1[0][0] == E else 2048
    args = [([t, h], activation_dtype), w1, w2, ([t, k], F32), ([t, k], I32), ([], ""),
            ([], "Scalar"), *[([], "Scalar")] * 4, NONE, ([], "Scalar"), ([], "Scalar"), NONE,
            *quant, NONE, NONE, NONE]
    conc = {5: "silu", 6: "False", 12: "False", 13: "-1"}
    conc |= {7 + i: str(f) for i, f in enumerate(flags)}
    return _call("vllm::outplace_fused_experts", args, conc)


def test_int4_w4a16_mixtral_decode():
    """use_int4_w4a16 (vLLM's MoeWNA16 path for GPTQ / AWQ experts): w1 uint8 [E, 2I, H/2] (two
    int4 a byte along K), w2 uint8 [E, H, I/2], scales bf16 [E, 2I, H/g] and [E, H, I/g], no zero
    points (GPTQ sym: the kernel's zero 8). One token, top-2 of 8: E_active = 8*(1 - 6/8) = 2.
    Per expert: weights 3*H*I/2 = 88,080,384 B, scales 3*H*I/g*2 = 2,752,512 B; + x read and
    the output written (2*H*2) + topk_weights, topk_ids (8 + 8)."""
    w1, w2 = ([E, 2 * I, H // 2], U8), ([E, H, I // 2], U8)
    scales = [([E, 2 * I, H // G], BF16), ([E, H, I // G], BF16), NONE, NONE, NONE, NONE]
    c = _vllm(1, w1, w2, (False, False, False, True), scales)
    per_expert = 3 * H * I // 2 + 3 * H * I // G * 2
    assert per_expert == 88_080_384 + 2_752_512
    assert c.bytes == 2 * per_expert + 2 * H * 2 + 16 == 181_682_192
    assert c.flops == 2 * 1 * TOPK * H * 3 * I and c.dtype == "bf16"
    assert c.model == "moe (int4 sym, g128)" and format_bits("int4 sym, g128") == 4 + 16 / 128
    # AWQ experts keep zero points: uint8 [E, 2I/2, H/g] and [E, H/2, I/g] (two a byte along N)
    zp = [([E, I, H // G], U8), ([E, H // 2, I // G], U8)]
    c = _vllm(1, w1, w2, (False, False, False, True), scales[:2] + zp + scales[4:])
    assert c.bytes == 181_682_192 + 2 * (I * H // G + H // 2 * I // G)
    assert c.model == "moe (int4 AWQ, g128)"


def test_fp8_w8a8_qwen3_moe_block_scales():
    """use_fp8_w8a8, DeepSeek-style 128x128 blocks (Qwen3-30B-A3B-FP8): w1 fp8 [128, 1536, 2048],
    w2 [128, 2048, 768], w1_scale fp32 [128, 12, 16], w2_scale [128, 16, 6]; block_shape
    [128, 128]. One token, top-8 of 128: E_active = 8. Per expert 3*2048*768 = 4,718,592 B
    of weights and (12*16 + 16*6)*4 = 1,152 B of scales; the GEMMs read the activations
    quantized to fp8 (2048 B; the quantization is its own child op) and write bf16 (4096 B).
    FLOPs at the fp8 roof."""
    e, h, i, k = 128, 2048, 768, 8
    w1, w2 = ([e, 2 * i, h], FP8), ([e, h, i], FP8)
    scales = [([e, 12, 16], F32), ([e, 16, 6], F32), NONE, NONE, NONE, NONE]
    c = _vllm(1, w1, w2, (True, False, False, False), scales, k=k)
    assert c.bytes == 8 * (4_718_592 + 1_152) + 2048 + 4096 + 2 * 8 * 4 == 37_764_160
    assert c.flops == 2 * 1 * k * h * 3 * i == 75_497_472
    assert (c.dtype, c.model) == ("fp8_e4m3fn", "moe (fp8_e4m3fn)")


@pytest.mark.parametrize("w8a8", [False, True])
def test_int8_experts_by_flag(w8a8):
    """int8 experts (vLLM ExpertsInt8 / W8A16, or compressed-tensors W8A8 int8): w1 int8
    [E, 2I, H], w2 [E, H, I], per-channel fp32 scales [E, 2I] and [E, H]. Weight-only keeps
    bf16 activations (read 2H); W8A8 reads them quantized to int8 (H) and computes in int8.
    Two experts hit: 2*(3*H*I + (2I + H)*4)."""
    w1, w2 = ([E, 2 * I, H], I8), ([E, H, I], I8)
    scales = [([E, 2 * I], F32), ([E, H], F32), NONE, NONE, NONE, NONE]
    c = _vllm(1, w1, w2, (False, w8a8, not w8a8, False), scales)
    experts = 2 * (3 * H * I + (2 * I + H) * 4)
    assert c.bytes == experts + (1 if w8a8 else 2) * H + 2 * H + 16
    assert (c.dtype, c.model) == (("int8", "moe (int8)") if w8a8
                                  else ("bf16", "moe (int8 per-channel)"))


def test_older_schema_and_bf16_unchanged():
    """A call whose arguments 6-10 are not five booleans (a layout without use_int8_w8a8, such
    as activation, then use_fp8_w8a8, use_int8_w8a16, use_int4_w4a16, global_num_experts): int8
    weights are taken as W8A16. bf16 experts keep the fused-MoE model (2 experts of 3*H*I*2 B,
    x read and written)."""
    w1, w2 = ([E, 2 * I, H], I8), ([E, H, I], I8)
    args = [([1, H], BF16), w1, w2, ([1, 2], F32), ([1, 2], I32), ([], ""), *[([], "Scalar")] * 4,
            NONE, ([E, 2 * I], F32), ([E, H], F32), NONE, NONE, NONE, NONE, NONE]
    c = _call("vllm::inplace_fused_experts", args,
              {5: "silu", 6: "False", 7: "True", 8: "False", 9: "-1"})
    assert c.model == "moe (int8 per-channel)" and c.dtype == "bf16"
    bf = _vllm(1, ([E, 2 * I, H], BF16), ([E, H, I], BF16), (False,) * 4, [NONE] * 6)
    assert (bf.bytes, bf.model) == (2 * 3 * H * I * 2 + 2 * H * 2 + 16, "moe")


def test_aiter_fused_moe_fp8():
    """aiter::fused_moe_(hidden, w1, w2, topk_weight, topk_ids, expert_mask, activation,
    quant_type, doweight_stage1, w1_scale [E, 2I, 1], w2_scale [E, H, 1], a1_scale, a2_scale):
    fp8 experts, per-token activations: W8A8 at the fp8 roof. Mixtral, one token: 2 experts of
    3*H*I fp8 + (2I + H)*4 scales; x read at 1 B, the output written at 2 B."""
    args = [([1, H], BF16), ([E, 2 * I, H], FP8), ([E, H, I], FP8), ([1, 2], F32), ([1, 2], I32),
            NONE, ([], "Scalar"), ([], "Scalar"), ([], "Scalar"), ([E, 2 * I, 1], F32),
            ([E, H, 1], F32), NONE, NONE]
    c = _call("aiter::fused_moe_", args, {6: "0", 7: "2", 8: "False"})
    assert c.bytes == 2 * (3 * H * I + (2 * I + H) * 4) + H + 2 * H + 16
    assert (c.dtype, c.model) == ("fp8_e4m3fn", "moe (fp8_e4m3fn)")


def _marlin(a_rows, k, n, top_k, weight, scales, sizes_m):
    """_moe_C::moe_wna16_marlin_gemm as vLLM @b4ae92e37450 registers it (csrc/moe/
    torch_bindings.cpp): a, c?, b_q_weight, b_bias?, b_scales, a_scales?, global_scale?,
    b_zeros?, g_idx?, perm?, workspace, sorted_token_ids, expert_ids, num_tokens_past_padded,
    topk_weights, moe_block_size, top_k, mul_topk_weights, b_type_id, size_m, size_n, size_k,
    is_full_k, use_atomic_add, use_fp32_reduce, is_zp_float, thread_k, thread_n, blocks_per_sm."""
    args = [([a_rows, k], BF16), NONE, weight, NONE, scales, NONE, NONE, NONE, NONE, NONE,
            ([132], I32), ([64], I32), ([4], I32), ([1], I32), ([4, 2], F32),
            *[([], "Scalar")] * 14]
    conc = {15: "16", 16: str(top_k), 17: "False", 18: str(U4B8), 19: str(sizes_m),
            20: str(n), 21: str(k), 22: "True", 23: "False", 24: "True", 25: "False",
            26: "-1", 27: "-1", 28: "-1"}
    return _call("_moe_C::moe_wna16_marlin_gemm", args, conc)


def test_marlin_moe_gptq_int4_mixtral():
    """GPTQ int4 g128 Mixtral experts on Marlin, 4 tokens. GEMM1: a [4, H], b_q_weight int32
    [E, H/16, 2I*16/8] (Marlin tiles: E*2I*H/2 bytes), b_scales bf16 [E, H/g, 2I], top_k 2,
    size_m 4: 8 routed rows into [8, 2I]. E_active = 8*(1 - (6/8)^4) = 5.46875. Bytes = x
    2*4*H + E_active*(2I*H/2 + H/g*2I*2) + 8*2I*2; FLOPs 2*8*2I*H. GEMM2: a = the activation's
    [8, I], top_k 1, size_m 8: 8 independent draws, E_active = 8*(1 - (7/8)^8)."""
    n1 = 2 * I
    c = _marlin(4, H, n1, 2, ([E, H // 16, n1 * 16 // 8], I32), ([E, H // G, n1], BF16), 4)
    active = E * (1 - (1 - 2 / E) ** 4)
    assert active == 5.46875
    want = 2 * 4 * H + active * (n1 * H // 2 + H // G * n1 * 2) + 8 * n1 * 2
    assert c.bytes == pytest.approx(want, rel=1e-12)
    assert (c.flops, c.dtype, c.model) == (2 * 8 * n1 * H, "bf16", "gemm (int4 sym, g128)")
    c2 = _marlin(8, I, H, 1, ([E, I // 16, H * 16 // 8], I32), ([E, I // G, H], BF16), 8)
    active2 = E * (1 - (7 / 8) ** 8)
    want2 = 2 * 8 * I + active2 * (H * I // 2 + I // G * H * 2) + 8 * H * 2
    assert c2.bytes == pytest.approx(want2, rel=1e-12) and c2.flops == 2 * 8 * H * I


def test_component_format_from_moe_model():
    """The component table's weight format reads `moe (fmt)`, never the model-config estimate."""
    k = pl.DataFrame({"component": ["moe_experts", "moe_experts"],
                      "cost_model": ["moe (int4 sym, g128)", "moe (model config)"],
                      "dtype": ["bf16", "bf16"], "dur_ns": [10, 1]})
    got = component_formats(k).to_dicts()
    assert got == [{"component": "moe_experts", "weight_format": "int4 sym, g128"}]
    est = component_formats(k.filter(pl.col("cost_model") == "moe (model config)"))
    assert est.height == 0
