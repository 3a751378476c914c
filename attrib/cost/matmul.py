"""Cost formulas of the matrix families: dense GEMM, grouped / fused MoE GEMM, attention.

Each op function takes the parsed profiler args (dims, types, concrete) and returns a `Cost`.
Bytes = every operand read once + the output written once (the DRAM-traffic lower bound of a
well-tiled kernel); FLOPs = 2 per multiply-add.
"""

from __future__ import annotations

from math import prod

from attrib.cost.dtypes import (Cost, Tensor, broadcast, concrete_bool, concrete_dtype,
                                concrete_int, concrete_ints, size_of, tensor, unknown)


def gemm_cost(m: float, n: float, k: float, a_size: float, b_size: float, out_size: float,
              batch: float = 1, extra_bytes: float = 0.0) -> tuple[float, float]:
    """(bytes, flops) of `batch` GEMMs [m,k] x [k,n] -> [m,n] with the given element sizes."""
    nbytes = batch * (m * k * a_size + k * n * b_size + m * n * out_size) + extra_bytes
    return nbytes, 2.0 * batch * m * n * k


def linear(dims: list, types: list, concrete: list = ()) -> Cost:
    """aten::linear(input[..., K], weight[N, K], bias[N]?): M = prod(input[:-1]), 2*M*N*K FLOPs."""
    x, w = tensor(dims, types, 0), tensor(dims, types, 1)
    if x is None or w is None or len(w.shape) != 2 or w.shape[1] != x.shape[-1]:
        return unknown("gemm", "linear operands not recorded or inconsistent")
    bias = tensor(dims, types, 2)
    m, n, k = prod(x.shape[:-1]), w.shape[0], x.shape[-1]
    bias_bytes = bias.nbytes if bias else 0
    nbytes, flops = gemm_cost(m, n, k, x.size, w.size, x.size, extra_bytes=bias_bytes)
    return Cost(nbytes, flops, x.dtype, "gemm")


def _mm(a: Tensor | None, b: Tensor | None, bias: Tensor | None,
        out_dtype: str | None = None) -> Cost:
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        return unknown("gemm", "mm operands not recorded or inconsistent")
    out_size = size_of(out_dtype) or a.size
    (m, k), n = a.shape, b.shape[1]
    bias_bytes = bias.nbytes if bias else 0
    nbytes, flops = gemm_cost(m, n, k, a.size, b.size, out_size, extra_bytes=bias_bytes)
    return Cost(nbytes, flops, a.dtype, "gemm")


def mm(dims: list, types: list, concrete: list = ()) -> Cost:
    """aten::mm(a[M, K], b[K, N])."""
    return _mm(tensor(dims, types, 0), tensor(dims, types, 1), None)


def addmm(dims: list, types: list, concrete: list = ()) -> Cost:
    """aten::addmm(bias, a[M, K], b[K, N]): the bias is read once more."""
    return _mm(tensor(dims, types, 1), tensor(dims, types, 2), tensor(dims, types, 0))


def unquantized_gemm(dims: list, types: list, concrete: list = ()) -> Cost:
    """vllm::rocm_unquantized_gemm(x[M, K], weight[N, K], bias[N]?): same as linear."""
    return linear(dims, types, concrete)


def _bmm(a: Tensor | None, b: Tensor | None, c: Tensor | None) -> Cost:
    if a is None or b is None or len(a.shape) != 3 or len(b.shape) != 3 or a.shape[2] != b.shape[1]:
        return unknown("gemm", "bmm operands not recorded or inconsistent")
    (bt, m, k), n = a.shape, b.shape[2]
    nbytes = bt * (m * k * a.size) + b.nbytes + bt * m * n * a.size + (c.nbytes if c else 0)
    return Cost(nbytes, 2.0 * bt * m * n * k, a.dtype, "gemm")


def bmm(dims: list, types: list, concrete: list = ()) -> Cost:
    """aten::bmm(a[B, M, K], b[B, K, N])."""
    return _bmm(tensor(dims, types, 0), tensor(dims, types, 1), None)


def baddbmm(dims: list, types: list, concrete: list = ()) -> Cost:
    """aten::baddbmm(c, a[B, M, K], b[B, K, N])."""
    return _bmm(tensor(dims, types, 1), tensor(dims, types, 2), tensor(dims, types, 0))


def matmul(dims: list, types: list, concrete: list = ()) -> Cost:
    """aten::matmul with torch's rules: 1-D operands get a unit dim, batch dims broadcast."""
    a, b = tensor(dims, types, 0), tensor(dims, types, 1)
    if a is None or b is None:
        return unknown("gemm", "matmul operands not recorded")
    sa = (1,) + a.shape if len(a.shape) == 1 else a.shape
    sb = b.shape + (1,) if len(b.shape) == 1 else b.shape
    if sa[-1] != sb[-2]:
        return unknown("gemm", "matmul inner dims differ")
    if len(sb) == 2:          # [..., M, K] x [K, N]: one GEMM with M = prod(leading dims)
        m, k, n = prod(sa[:-1]), sa[-1], sb[-1]
        nbytes, flops = gemm_cost(m, n, k, a.size, b.size, a.size)
        return Cost(nbytes, flops, a.dtype, "gemm")
    batch = prod(broadcast(sa[:-2], sb[:-2]))
    m, k, n = sa[-2], sa[-1], sb[-1]
    nbytes = a.nbytes + b.nbytes + batch * m * n * a.size
    return Cost(nbytes, 2.0 * batch * m * n * k, a.dtype, "gemm")


def scaled_mm(dims: list, types: list, concrete: list = ()) -> Cost:
    """aten::_scaled_mm(a[M, K], b[K, N], scale_a, scale_b, bias?, scale_result?, out_dtype?):
    FP8 GEMM."""
    a, b = tensor(dims, types, 0), tensor(dims, types, 1)
    base = _mm(a, b, None, concrete_dtype(concrete, 6))
    if base.bytes is None:
        return base
    scales = sum(t.nbytes for t in (tensor(dims, types, i) for i in range(2, 6)) if t)
    return base._replace(bytes=base.bytes + scales)


def convolution(dims: list, types: list, concrete: list = (), stride: int = 3,
                bias: int | None = 2, padding: int | None = None,
                dilation: int | None = None) -> Cost:
    """Convolution (input [N, C_in, *S], weight [C_out, C_in/groups, *k]; the stride, padding
    and dilation lists at `stride`, `padding`, `dilation`, by default `stride`, +1, +2 as
    aten::convolution orders them): input, weight and bias read once, output written once; 2
    FLOPs per multiply-add. Output size per spatial dim: (S + 2p - d(k - 1) - 1) // s + 1. Seen
    in traces: the Gated DeltaNet / Mamba short conv (depthwise, groups = C) and vision patch
    embeddings (cudnn_convolution, under aten::convolution)."""
    x, w = tensor(dims, types, 0), tensor(dims, types, 1)
    if x is None or w is None or len(x.shape) != len(w.shape) or len(x.shape) < 3:
        return unknown("conv", "convolution operands not recorded or inconsistent")
    nsp = len(x.shape) - 2
    at = (stride, stride + 1 if padding is None else padding,
          stride + 2 if dilation is None else dilation)
    s, p, d = (concrete_ints(concrete, i) or [v] * nsp for i, v in zip(at, (1, 0, 1)))
    if len(s) == 1:
        s, p, d = s * nsp, p * nsp, d * nsp
    out_sp = [(x.shape[2 + i] + 2 * p[i] - d[i] * (w.shape[2 + i] - 1) - 1) // s[i] + 1
              for i in range(nsp)]
    if min(out_sp) <= 0:
        return unknown("conv", "output size from the recorded arguments is empty")
    out = x.shape[0] * w.shape[0] * prod(out_sp)
    b = tensor(dims, types, bias) if bias is not None else None
    nbytes = x.nbytes + w.nbytes + out * x.size + (b.nbytes if b else 0)
    return Cost(nbytes, 2.0 * out * prod(w.shape[1:]), x.dtype, "conv")


def expected_active_experts(num_experts: int, top_k: int, tokens: float) -> float:
    """Distinct experts hit by `tokens` tokens each routing to `top_k` of `num_experts`, uniform
    routing: E * (1 - (1 - k/E)^T)."""
    if num_experts <= 0 or tokens <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - min(top_k, num_experts) / num_experts) ** tokens)


def uniform_routing_note(e: int, k: int, t: int) -> str:
    """The note of a fused MoE priced at uniform routing over E experts, top-k, T tokens."""
    return (f"uniform routing: E_active = E*(1-(1-k/E)^T), E={e}, k={k}, T={t}; "
            "FLOPs assume a gated MLP")


def active_experts(e: int, rows: int, top_k: int | None, tokens: int | None,
                   expert_counts: list[int] | None = None) -> tuple[float, str | None]:
    """(experts hit, the assumption) of R routed rows over E experts: the nonzero `expert_counts`
    when known, else the uniform-routing expectation over T tokens (the router's T when known,
    else R / top_k), else (top_k unknown) R independent single-expert draws."""
    if expert_counts is not None:
        return float(sum(1 for c in expert_counts if c)), None
    if top_k:
        t = tokens or rows / top_k
        pad = f", R={rows} rows hold {rows - t * top_k:g} padding" if rows > t * top_k else ""
        why = f"uniform routing: E_active = E*(1-(1-k/E)^T), E={e}, k={top_k}, T={t:g}{pad}"
        return min(expected_active_experts(e, top_k, t), float(e), float(rows)), why
    why = f"uniform routing, top_k unknown: E_active = E*(1-(1-1/E)^R), E={e}, R={rows}"
    return min(expected_active_experts(e, 1, rows), float(e), float(rows)), why


def grouped_mm(dims: list, types: list, concrete: list = (), top_k: int | None = None,
               expert_counts: list[int] | None = None, tokens: int | None = None) -> Cost:
    """aten::_grouped_mm(a[R, K], b[E, K, N], offs[E], bias?, out_dtype?): R routed rows over E
    experts (R = T x top_k, plus each expert's padding where the caller aligns groups).

    Weight bytes are charged for the experts actually hit (`_active_experts`); the assumption is
    recorded."""
    a, b, offs = tensor(dims, types, 0), tensor(dims, types, 1), tensor(dims, types, 2)
    if a is None or b is None:
        return unknown("grouped_gemm", "grouped_mm operands not recorded")
    if len(a.shape) == 3 and len(b.shape) == 3:
        return bmm(dims, types, concrete)._replace(model="grouped_gemm")
    if len(a.shape) != 2 or len(b.shape) != 3 or b.shape[1] != a.shape[1]:
        return unknown("grouped_gemm", "grouped_mm layout other than 2-D x 3-D (MoE forward)")
    (rows, k), (e, _, n) = a.shape, b.shape
    active, why = active_experts(e, rows, top_k, tokens, expert_counts)
    out_size = size_of(concrete_dtype(concrete, 4)) or a.size
    a_bytes, b_bytes = rows * k * a.size, active * k * n * b.size
    nbytes = a_bytes + b_bytes + rows * n * out_size + (offs.nbytes if offs else 0)
    return Cost(nbytes, 2.0 * rows * k * n, a.dtype, "grouped_gemm", why)


def scaled_grouped_mm(dims: list, types: list, concrete: list = (), top_k: int | None = None,
                      tokens: int | None = None) -> Cost:
    """aten::_scaled_grouped_mm(mat_a[R, K], mat_b[E, K, N], scale_a[R], scale_b[E, N], offs[E],
    bias?, scale_result?, out_dtype?, use_fast_accum): fp8 (or int8) experts with rowwise scales.
    Bytes as `grouped_mm`'s at the operands' element sizes, plus the scales (the hit experts'
    share of scale_b); FLOPs at the fp8 roof (the dtype of mat_a)."""
    a, b = tensor(dims, types, 0), tensor(dims, types, 1)
    if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 3 or b.shape[1] != a.shape[1]:
        return unknown("grouped_gemm", "scaled_grouped_mm layout other than 2-D x 3-D (MoE)")
    (rows, k), (e, _, n) = a.shape, b.shape
    active, why = active_experts(e, rows, top_k, tokens, None)
    sa, sb, offs, bias = (tensor(dims, types, i) for i in (2, 3, 4, 5))
    out_size = size_of(concrete_dtype(concrete, 7)) or 2
    scales = (sa.nbytes if sa else 0) + (sb.nbytes * active / e if sb else 0)
    extra = scales + (offs.nbytes if offs else 0) + (bias.nbytes * active / e if bias else 0)
    nbytes = rows * k * a.size + active * k * n * b.size + rows * n * out_size + extra
    return Cost(nbytes, 2.0 * rows * k * n, a.dtype, "grouped_gemm", why)


def fused_experts(dims: list, types: list, concrete: list = ()) -> Cost:
    """vLLM fused MoE (hidden[T, H], w1[E, N1, H'], w2[E, H, N2'], topk_weights[T, k],
    topk_ids[T, k], ...).

    Weights are read for the expected active experts (uniform routing, T and k from topk_ids); other
    per-expert tensors (leading dim E: scales, zero points) likewise; the rest in full. Packed
    weights are charged as recorded (container bytes). FLOPs assume a gated MLP (N2 = N1/2).
    """
    x, w1, w2, ids = (tensor(dims, types, i) for i in (0, 1, 2, 4))
    if (x is None or w1 is None or w2 is None or ids is None
            or len(w1.shape) != 3 or len(ids.shape) != 2):
        return unknown("moe", "fused-experts operands not recorded")
    t, h = prod(x.shape[:-1]), x.shape[-1]
    e, n1 = w1.shape[0], w1.shape[1]
    k = ids.shape[1]
    active = expected_active_experts(e, k, t)
    frac = active / e
    others = [tensor(dims, types, i) for i in range(3, len(dims)) if i != 4]
    rest = sum((o.nbytes * frac if o.shape[0] == e and len(o.shape) > 1 else o.nbytes)
               for o in others if o)
    nbytes = 2 * x.nbytes + (w1.nbytes + w2.nbytes) * frac + ids.nbytes + rest
    flops = 2.0 * t * k * h * (n1 + n1 / 2)
    return Cost(nbytes, flops, x.dtype, "moe", uniform_routing_note(e, k, t))




def attention(dims: list, types: list, concrete: list = (), layout: str = "bhld",
              causal_index: int | None = 5, mask_index: int | None = 3) -> Cost:
    """Scaled dot-product attention: q, k, v read once, output written once, mask read once.

    FLOPs = 2*B*Hq*Lq*Lk*(D + Dv); causal keeps the visible (query, key) pairs: half when Lq == Lk
    (the usual convention);
    with Lq != Lk the torch-level ops align the mask top-left, flash/efficient forwards
    bottom-right.
    Decode (Lq = 1) reads the whole K/V it is given. Varlen (3-D packed) inputs get bytes, no FLOPs.
    """
    q, k, v = (tensor(dims, types, i) for i in range(3))
    if q is None or k is None or v is None:
        return unknown("attention", "q/k/v not recorded")
    mask = tensor(dims, types, mask_index) if mask_index is not None else None
    nbytes = q.nbytes + k.nbytes + v.nbytes + q.numel // q.shape[-1] * v.shape[-1] * q.size
    nbytes += mask.nbytes if mask else 0
    if len(q.shape) != 4 or len(k.shape) != 4:
        why = "varlen (packed) layout: FLOPs need per-sequence lengths"
        return Cost(nbytes, None, q.dtype, "attention", why)
    if layout == "bhld":
        (b, hq, lq, d), lk = q.shape, k.shape[2]
    else:
        (b, lq, hq, d), lk = q.shape, k.shape[1]
    if causal_index is None:
        causal = False
    elif layout == "blhd" and causal_index == 9:
        # custom_mask_type: 0 none, 1 top-left, 2 bottom-right
        causal = (concrete_int(concrete, 9) or 0) > 0
    else:
        causal = bool(concrete_bool(concrete, causal_index))
    pairs = float(lq * lk)
    why = None
    if causal:
        if lq == lk:
            pairs = lq * lk / 2.0
        elif layout == "bhld":                          # top-left: query i sees keys 0..i
            m = min(lq, lk)
            pairs = m * (m + 1) / 2.0 + (lq - m) * lk
        elif lq <= lk:
            # bottom-right: query i sees lk - lq + i + 1 keys
            pairs = lq * (lk - lq) + lq * (lq + 1) / 2.0
        else:
            pairs = lk * (lk + 1) / 2.0
        why = "causal: only visible (query, key) pairs counted"
    flops = 2.0 * b * hq * pairs * (d + v.shape[-1])
    return Cost(nbytes, flops, q.dtype, "attention", why)
