"""Cost formulas of fused MoE ops with quantized expert weights: vLLM's Triton `fused_experts`
ops, AITER's `fused_moe_`, vLLM's Marlin MoE GEMMs.

Weights are charged at their real bits (int4 packed two a byte in uint8 / int32 containers: the
container bytes), for the experts a uniform routing is expected to hit, with their scales and zero
points from the recorded shapes; the weight format goes in the cost model's name (`moe (int4 sym,
g128)`, `gemm (int4 AWQ, g128)`), as attrib.cost.lowbit labels it. W8A8 experts compute in the
weights' dtype (fp8 / int8: that peak), weight-only ones in the activations'. Schemas and sources:
docs/lowbit-gemms.md.
"""

from __future__ import annotations

from math import prod

from attrib.cost import matmul as mm
from attrib.cost.dtypes import Cost, Tensor, concrete_bool, concrete_int, tensor, unknown
from attrib.cost.lowbit import model_name, weight_format
from attrib.cost.serving_lowbit import W4A16, marlin_format, marlin_sizes

MOE = "moe"
FLOAT_SCALES = ("bf16", "fp16", "fp32")


def _w8a8_int8(concrete: list) -> bool:
    """use_int8_w8a8 of a vLLM fused_experts call: the schemas read (vLLM @000d1458, @13cb3e44)
    hold, after `activation` (5), apply_router_weight_on_input, use_fp8_w8a8, use_int8_w8a8,
    use_int8_w8a16, use_int4_w4a16 (6-10); a call whose 6-10 are not five booleans (an earlier
    layout, without use_int8_w8a8) is taken as weight-only."""
    flags = [concrete_bool(concrete, i) for i in range(6, 11)]
    return all(f is not None for f in flags) and bool(flags[2])


def _zero_kind(zp: Tensor | None) -> str:
    """Zero points stored (a zero of the weight's bits a group, packed: AWQ's layout) or none."""
    return "AWQ" if zp is not None else "sym"


def _format(x: Tensor, w1: Tensor, scale: Tensor | None, zp: Tensor | None,
            int8_w8a8: bool) -> tuple[str, str, float] | None:
    """(weight format, compute dtype, activation bytes the GEMMs read) of quantized experts;
    None for 16-bit weights or a layout not known."""
    e, n1, _ = w1.shape
    h = x.shape[-1]
    if w1.dtype.startswith("fp8"):
        return w1.dtype, w1.dtype, 1.0                       # W8A8 fp8
    bits, rem = divmod(w1.nbytes * 8, e * n1 * h)
    if rem or bits not in (4, 8):
        return None
    if bits == 8 and int8_w8a8:
        return "int8", "int8", 1.0
    if scale is None or scale.dtype not in FLOAT_SCALES:
        return None                                        # OCP MX / other scales: not labelled
    group = h // scale.shape[-1] if len(scale.shape) == 3 and scale.shape[-1] > 1 else None
    fmt = weight_format(int(bits), group, _zero_kind(zp) if group else None)
    return fmt, x.dtype, x.size


def _moe_cost(x: Tensor, w1: Tensor, w2: Tensor, ids: Tensor, others: list[Tensor],
              fmt: tuple[str, str, float]) -> Cost:
    """Bytes: the activations read (at the GEMMs' input size), the output written, the hit
    experts' share of every per-expert tensor (leading dim E, 2-D or more), the rest in full;
    FLOPs 2*T*k*H*(N1 + N1/2) (a gated MLP)."""
    t, h = prod(x.shape[:-1]), x.shape[-1]
    e, n1 = w1.shape[0], w1.shape[1]
    k = ids.shape[1]
    frac = mm.expected_active_experts(e, k, t) / e
    rest = sum(o.nbytes * frac if o.shape[0] == e and len(o.shape) > 1 else o.nbytes
               for o in others)
    nbytes = t * h * (fmt[2] + x.size) + (w1.nbytes + w2.nbytes) * frac + ids.nbytes + rest
    flops = 2.0 * t * k * h * (n1 + n1 / 2)
    return Cost(nbytes, flops, fmt[1], f"{MOE} ({fmt[0]})", mm.uniform_routing_note(e, k, t))


def _scale_zp(dims: list, types: list, e: int) -> tuple[Tensor | None, Tensor | None]:
    """w1_scale and w1_zp: the first per-expert float tensor after topk_ids (index 4) and the
    per-expert uint8 / int tensor after it, by dtype (their positions moved between versions)."""
    ts = [t for i in range(5, len(dims)) if (t := tensor(dims, types, i)) is not None]
    per_expert = [t for t in ts if t.shape[0] == e and len(t.shape) > 1]
    scale = next((t for t in per_expert if t.dtype in FLOAT_SCALES), None)
    zp = next((t for t in per_expert if t.dtype in ("uint8", "int8", "int32")), None)
    return scale, zp


def vllm_fused_experts(dims: list, types: list, concrete: list = ()) -> Cost:
    """vllm::fused_experts / inplace_fused_experts / outplace_fused_experts(hidden[T, H],
    w1[E, 2I, H'], w2[E, H, I'], topk_weights[T, k], topk_ids[T, k], activation, ...,
    use_fp8_w8a8, use_int8_w8a8, use_int8_w8a16, use_int4_w4a16, ..., w1_scale, w2_scale,
    w1_zp, w2_zp, a1_scale, a2_scale, block_shape, ...). int4 weights: uint8 [E, N, K/2] (two a
    byte along K), scales [E, N, K/g], zero points uint8 [E, N/2, K/g]; int8: [E, N, K] with
    per-channel [E, N] or group scales; fp8: per-tensor, per-channel or block scales."""
    base = mm.fused_experts(dims, types, concrete)
    x, w1, w2, ids = (tensor(dims, types, i) for i in (0, 1, 2, 4))
    if base.bytes is None or x is None or w1 is None or w2 is None or ids is None:
        return base
    scale, zp = _scale_zp(dims, types, w1.shape[0])
    fmt = _format(x, w1, scale, zp, _w8a8_int8(concrete))
    if fmt is None:
        return base
    others = [t for i in range(3, len(dims)) if i != 4 and (t := tensor(dims, types, i))]
    return _moe_cost(x, w1, w2, ids, others, fmt)


def aiter_fused_moe(dims: list, types: list, concrete: list = ()) -> Cost:
    """aiter::fused_moe_(hidden[T, H], w1[E, 2I, H], w2[E, H, I], topk_weight, topk_ids,
    expert_mask?, activation, quant_type, doweight_stage1, w1_scale?, w2_scale?, a1_scale?,
    a2_scale?, ...): fp8 / int8 experts quantize the activations to the weights' dtype (W8A8);
    other formats are priced from their container bytes, unlabelled."""
    base = mm.fused_experts(dims, types, concrete)
    x, w1, w2, ids = (tensor(dims, types, i) for i in (0, 1, 2, 4))
    if (base.bytes is None or x is None or w1 is None or w2 is None or ids is None
            or w1.dtype not in ("fp8_e4m3fn", "fp8_e4m3fnuz", "int8")
            or w1.shape[-1] != x.shape[-1]):
        return base
    fmt = (w1.dtype, w1.dtype, 1.0)
    others = [t for i in range(3, len(dims)) if i != 4 and (t := tensor(dims, types, i))]
    return _moe_cost(x, w1, w2, ids, others, fmt)


# ---- vLLM Marlin MoE (csrc/moe/torch_bindings.cpp) -------------------------------------------

def _marlin_top_k(name: str, concrete: list, at: int) -> int | None:
    """top_k: 7 after size_m in marlin_gemm_moe (size_m, size_n, size_k, is_k_full,
    num_experts, topk); before the type id in moe_wna16_marlin_gemm (`int top_k, bool
    mul_topk_weights, [bool is_ep,] int b_type_id, int size_m`)."""
    if name.endswith("marlin_gemm_moe"):
        return concrete_int(concrete, at + 5)
    i = at - 2
    while i >= 0 and concrete_bool(concrete, i) is not None and concrete_int(concrete, i) is None:
        i -= 1
    return concrete_int(concrete, i)


def marlin_moe(dims: list, types: list, concrete: list = (), name: str = "") -> Cost:
    """_moe_C::moe_wna16_marlin_gemm(a[M, K], c?, b_q_weight[E, ...] (Marlin-tiled), b_bias?,
    b_scales[E, K/g, N], [a_scales?, global_scale?,] b_zeros?, g_idx?, perm?, workspace,
    sorted_token_ids, expert_ids, num_tokens_past_padded, topk_weights, moe_block_size, top_k,
    mul_topk_weights, [is_ep,] b_type_id, size_m, size_n, size_k, ...) and the older
    _moe_C::marlin_gemm_moe(a, b_q_weights, sorted_ids, topk_weights, topk_ids, b_scales,
    b_zeros, g_idx, perm, workspace, b_q_type, size_m, size_n, size_k, is_k_full, num_experts,
    topk, ...): one of the expert GEMMs, M rows x top_k experts each into [M*top_k, N]."""
    x = tensor(dims, types, 0)
    if x is None:
        return unknown(W4A16, "Marlin MoE activations not recorded")
    m, k = prod(x.shape[:-1]), x.shape[-1]
    hit = marlin_sizes(concrete, m, k)
    ts = [(i, t) for i in range(1, len(dims)) if (t := tensor(dims, types, i)) is not None]
    w = next(((i, t) for i, t in ts if t.dtype == "int32" and len(t.shape) == 3), None)
    if hit is None or w is None:
        return unknown(W4A16, "Marlin MoE weight or size_m/size_n/size_k not recorded")
    (at, n), (wi, wt) = hit, w
    e = wt.shape[0]
    top_k = max(_marlin_top_k(name, concrete, at) or 1, 1)
    scales = [t for i, t in ts if i > wi and t.dtype != "int32" and len(t.shape) == 3
              and t.shape[0] == e and t.shape[2] == n]
    if not scales or (wt.nbytes * 8) % (e * n * k):
        return unknown(W4A16, "Marlin MoE scales not found or weight not a whole bit width")
    s, bits = scales[0], int(wt.nbytes * 8 // (e * n * k))
    z = next((t for i, t in ts if i > wi and t is not s and len(t.shape) == 3 and t.shape[0] == e
              and t.shape[1] == s.shape[1]), None)
    bias = next((t for i, t in ts if i > wi and t.shape == (e, n)), None)
    group = k // s.shape[1] if s.shape[1] > 1 else None
    fmt = marlin_format(concrete, at, bits, group, z)
    if fmt is None:
        return unknown(W4A16, f"Marlin MoE float weight of {bits} bits, group {group}: unknown")
    rows = m * top_k
    active, why = mm.active_experts(e, rows, top_k if top_k > 1 else None, m if top_k > 1 else None)
    per_expert = sum(t.nbytes for t in (wt, s, z, bias) if t is not None) / e
    out = 2.0 if x.size < 2 else x.size
    nbytes = x.nbytes + active * per_expert + rows * n * out
    return Cost(nbytes, 2.0 * rows * n * k, x.dtype, model_name(fmt), why)
