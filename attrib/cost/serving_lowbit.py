"""Cost formulas of the low-bit and skinny GEMMs of serving stacks: vLLM's `_C` / `_rocm_C` ops,
AITER's `gemm_a8w8*` / `gemm_a4w4*`, bitsandbytes' 4-bit and int8 ops.

Each takes one call's parsed profiler args (dims, types, concrete), in the op's schema order, and
returns a `Cost`: bytes = activations read + packed weights as stored + scales / zeros + output
written (a well-tiled kernel's DRAM floor); FLOPs = 2*M*N*K. Weight-only ops compute in the
activations' dtype (the kernels dequantize to 16 bits); W8A8 / W4A4 ops in the quantized dtype, so
the roofline uses the int8 / fp8 / fp4 peak. Schemas, packing and sources: docs/lowbit-gemms.md.
Priced from the schemas; bitsandbytes' ops are checked on real traces (tests/fixtures/captured/
issue36/bnb_*), the vLLM and AITER ops have no trace in the repository yet.
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from attrib.cost.dtypes import (Cost, Tensor, concrete_bool, concrete_dtype, concrete_int,
                                concrete_ints, concrete_str, size_of, tensor, unknown)
from attrib.cost.lowbit import W4A16, model_name, weight_format

if TYPE_CHECKING:
    from attrib.cost.registry import Call

W8A8 = "gemm"   # the family of an int8 / fp8 x int8 / fp8 GEMM (as aten::_scaled_mm)
MXFP4 = "gemm (mxfp4)"


def _rows(x: Tensor) -> int:
    return prod(x.shape[:-1])


def _bytes(*ts: Tensor | None) -> float:
    return sum(t.nbytes for t in ts if t is not None)


def _args(dims: list, types: list, *at: int | None) -> list[Tensor | None]:
    return [tensor(dims, types, i) if i is not None else None for i in at]


def _out_size(x: Tensor) -> float:
    """Bytes of an output element: the activations' when 16-bit, else bf16 / fp16's 2."""
    return x.size if x.size >= 2 else 2.0


def _gemm(m: int, n: int, k: int, nbytes: float, dtype: str, model: str,
          why: str | None = None) -> Cost:
    return Cost(nbytes, 2.0 * m * n * k, dtype, model, why)


# ---- vLLM CUDA weight-only int4 / int8 -------------------------------------------------------

def awq_gemm(dims: list, types: list, concrete: list = ()) -> Cost:
    """_C::awq_gemm(in_feats[M, K], qweight int32 [K, N/8], scales[K/g, N], qzeros int32
    [K/g, N/8], split_k_iters): the kernel writes split_k partial [M, N] outputs (their sum is a
    child aten::sum, priced on its own)."""
    x, w, s, z = _args(dims, types, 0, 1, 2, 3)
    if x is None or w is None or s is None or len(s.shape) != 2:
        return unknown(W4A16, "awq_gemm operands not recorded")
    m, k, n = _rows(x), x.shape[-1], s.shape[1]
    if 2 * w.nbytes != n * k:
        return unknown(W4A16, "awq_gemm qweight is not N*K/2 bytes")
    split = max(concrete_int(concrete, 4) or 1, 1)
    nbytes = x.nbytes + w.nbytes + _bytes(s, z) + split * m * n * x.size
    why = f"split-K {split}: {split} partial [M, N] outputs written" if split > 1 else None
    return _gemm(m, n, k, nbytes, x.dtype, model_name(weight_format(4, k // s.shape[0], "AWQ")),
                 why)


def _gptq_reconstructs(m: int, bit: int, exllama: bool) -> bool:
    """q_gemm.cu: a dequantized [K, N] weight then a BLAS GEMM above these M (else fused)."""
    if exllama:
        return m > (24 if bit == 8 else 50)
    return bit < 4 or m > 8


def gptq_gemm(dims: list, types: list, concrete: list = ()) -> Cost:
    """_C::gptq_gemm(a[M, K], b_q_weight int32 [K*bit/32, N], b_gptq_qzeros int32
    [G, N*bit/32], b_gptq_scales[G, N], b_g_idx[K], use_exllama, use_v2_format, bit)."""
    x, w, z, s, gi = _args(dims, types, 0, 1, 2, 3, 4)
    if x is None or w is None or s is None or len(w.shape) != 2 or len(s.shape) != 2:
        return unknown(W4A16, "gptq_gemm operands not recorded")
    m, k, n = _rows(x), x.shape[-1], w.shape[1]
    bit = concrete_int(concrete, 7) or round(w.nbytes * 8 / (n * k))
    if w.nbytes * 8 != n * k * bit:
        return unknown(W4A16, "gptq_gemm b_q_weight is not N*K*bit/8 bytes")
    nbytes = x.nbytes + w.nbytes + _bytes(z, s, gi) + m * n * x.size
    why = None
    exllama = concrete_bool(concrete, 5)
    if _gptq_reconstructs(m, bit, True if exllama is None else exllama):
        nbytes += 2 * k * n * x.size
        why = "dequantized to a [K, N] temporary (written, read by the BLAS GEMM): 2*K*N*b added"
    group = k // s.shape[0] if s.shape[0] > 1 else None
    return _gemm(m, n, k, nbytes, x.dtype, model_name(weight_format(bit, group, "GPTQ")), why)


# ---- vLLM Marlin / Machete (mixed-input GEMMs whose type is a vLLM ScalarType id) ------------

def scalar_type_bits(type_id: int | None) -> tuple[int, bool] | None:
    """(bits, floating point) of a vLLM ScalarType id (vllm/scalar_type.py `id`: exponent bits
    0-7, mantissa bits 8-15, sign bit 16); None for a value that is not such an id."""
    if type_id is None or type_id < 256:
        return None
    exponent, mantissa, signed = type_id & 0xFF, (type_id >> 8) & 0xFF, (type_id >> 16) & 1
    return exponent + mantissa + signed, exponent != 0


def marlin_sizes(concrete: list, m: int, k: int) -> tuple[int, int] | None:
    """(index of size_m, N): the consecutive ints size_m, size_n, size_k every Marlin schema
    holds, located by M and K."""
    for i in range(len(concrete) - 2):
        if concrete_int(concrete, i) == m and concrete_int(concrete, i + 2) == k:
            n = concrete_int(concrete, i + 1)
            if n:
                return i, n
    return None


def _float_format(bits: int, group: int | None) -> str | None:
    if bits == 8:
        return "fp8_e4m3fn"
    return {16: "nvfp4", 32: "mxfp4"}.get(group or 0) if bits == 4 else None


def _int_kind(zeros: Tensor | None) -> str | None:
    """Zero points packed in int32 (AWQ-style), 16-bit (scale and zero), or none (symmetric)."""
    if zeros is None:
        return "sym"
    return "AWQ" if zeros.dtype == "int32" else None


def marlin_format(concrete: list, at: int, bits: int, group: int | None,
                  zeros: Tensor | None) -> str | None:
    """The weight format of a Marlin GEMM whose size_m is concrete[at]: the vLLM ScalarType just
    before it says a float type (fp8 / mxfp4 / nvfp4), else an int of `bits` by its zeros."""
    decoded = scalar_type_bits(concrete_int(concrete, at - 1))
    if decoded and decoded[1]:
        return _float_format(bits, group)
    return weight_format(bits, group, _int_kind(zeros))


def marlin_gemm(dims: list, types: list, concrete: list = ()) -> Cost:
    """_C::marlin_gemm / _C::gptq_marlin_gemm, every schema version: a[M, K] first, then
    b_q_weight int32 (Marlin-tiled, N*K*bits/8 bytes), b_scales[K/g, N], optional zeros, and the
    ints size_m, size_n, size_k; the weight type (vLLM ScalarType id) just before size_m."""
    x = tensor(dims, types, 0)
    ts = [(i, t) for i in range(1, len(dims)) if (t := tensor(dims, types, i)) is not None]
    w = next(((i, t) for i, t in ts if t.dtype == "int32" and len(t.shape) == 2), None)
    hit = marlin_sizes(concrete, _rows(x), x.shape[-1]) if x is not None else None
    if x is None or w is None or hit is None:
        return unknown(W4A16, "marlin operands or size_m/size_n/size_k not recorded")
    (at, n), (wi, wt), m, k = hit, w, _rows(x), x.shape[-1]
    after = [t for i, t in ts if i > wi and t.dtype != "int32" and len(t.shape) == 2]
    s = next((t for t in after if t.shape[1] == n), None)
    if s is None or (wt.nbytes * 8) % (n * k):
        return unknown(W4A16, "marlin scales not found or weight not a whole bit width")
    bits = int(wt.nbytes * 8) // (n * k)
    z = next((t for i, t in ts if i > wi and t is not s and len(t.shape) == 2
              and t.shape[0] == s.shape[0] and t.shape[1] in (n, n * bits // 32)), None)
    bias = next((t for i, t in ts if i > wi and t.shape == (n,) and t.dtype == x.dtype), None)
    group = k // s.shape[0] if s.shape[0] > 1 else None
    fmt = marlin_format(concrete, at, bits, group, z)
    if fmt is None:
        return unknown(W4A16, f"marlin float weight of {bits} bits, group {group}: unknown format")
    nbytes = x.nbytes + wt.nbytes + _bytes(s, z, bias) + m * n * _out_size(x)
    why = "g_idx / perm / workspace not counted (4*K bytes each at most)"
    return _gemm(m, n, k, nbytes, x.dtype, model_name(fmt), why)


def machete_mm(dims: list, types: list, concrete: list = ()) -> Cost:
    """_C::machete_mm(A[M, K], B prepacked, b_type, out_type, group_scales[K/g, N]?,
    group_zeros[K/g, N]?, group_size?, channel_scales[N]?, token_scales[M]?, schedule)."""
    x, b, gs, gz, cs, ts = _args(dims, types, 0, 1, 4, 5, 7, 8)
    if x is None or b is None:
        return unknown(W4A16, "machete_mm operands not recorded")
    m, k = _rows(x), x.shape[-1]
    decoded = scalar_type_bits(concrete_int(concrete, 2))
    n = gs.shape[-1] if gs is not None else (cs.shape[-1] if cs is not None else None)
    if n is None and decoded:
        n = int(b.nbytes * 8 // (k * decoded[0]))
    if not n or (b.nbytes * 8) % (n * k):
        return unknown(W4A16, "machete_mm N not recoverable or B not a whole bit width")
    bits = int(b.nbytes * 8 // (n * k))
    group = concrete_int(concrete, 6) or (k // gs.shape[0] if gs is not None else None)
    group = group if gs is not None and group and group < k else None
    out = size_of(concrete_dtype(concrete, 3)) or _out_size(x)
    fmt = weight_format(bits, group, "sym" if gz is None else None)
    nbytes = x.nbytes + b.nbytes + _bytes(gs, gz, cs, ts) + m * n * out
    return _gemm(m, n, k, nbytes, x.dtype, model_name(fmt))


# ---- W8A8 (int8 / fp8): FLOPs at the 8-bit roof ---------------------------------------------

def cutlass_scaled_mm(dims: list, types: list, concrete: list = ()) -> Cost:
    """_C::cutlass_scaled_mm(out[M, N], a[M, K], b[K, N], a_scales, b_scales, bias?) and
    cutlass_scaled_mm_azp(..., azp_adj, azp?, bias?): every tensor read or written once."""
    out, a, b = _args(dims, types, 0, 1, 2)
    if out is None or a is None or b is None or len(b.shape) != 2 or b.shape[0] != a.shape[-1]:
        return unknown(W8A8, "cutlass_scaled_mm operands not recorded or inconsistent")
    rest = _args(dims, types, *range(3, len(dims)))
    nbytes = _bytes(out, a, b, *rest)
    return _gemm(_rows(a), b.shape[1], a.shape[-1], nbytes, a.dtype, W8A8)


def wv_split_k(dims: list, types: list, concrete: list = ()) -> Cost:
    """_rocm_C::wvSplitK(in_a = weight[N, K], in_b = x[M, K], in_bias?, CuCount) (older builds:
    no bias): a 16-bit skinny GEMM writing [M, N]."""
    w, x = _args(dims, types, 0, 1)
    if x is None or w is None or len(w.shape) != 2 or w.shape[1] != x.shape[-1]:
        return unknown("gemm", "wvSplitK operands not recorded or inconsistent")
    bias = tensor(dims, types, 2)
    (n, k), m = w.shape, _rows(x)
    return _gemm(m, n, k, x.nbytes + w.nbytes + _bytes(bias) + m * n * x.size, x.dtype, "gemm")


def wv_split_kq(dims: list, types: list, concrete: list = ()) -> Cost:
    """_rocm_C::wvSplitKQ(in_a = fp8 weight[N, K], in_b = fp8 x[M, K], in_bias?, out_c[M, N],
    scale_a, scale_b, CuCount) (older builds: no bias): every tensor read or written once."""
    w, x = _args(dims, types, 0, 1)
    if x is None or w is None or len(w.shape) != 2 or w.shape[1] != x.shape[-1]:
        return unknown(W8A8, "wvSplitKQ operands not recorded or inconsistent")
    nbytes = _bytes(*_args(dims, types, *range(len(dims))))
    return _gemm(_rows(x), w.shape[0], w.shape[1], nbytes, x.dtype, W8A8)


def wv_split_k_int4(dims: list, types: list, concrete: list = ()) -> Cost:
    """_rocm_C::wvSplitK_int4_g(in_a = packed int4 weight (N*K/2 bytes), in_b = x[M, K],
    in_scale[N, K/g], in_zero_points[N, K/g]?, in_bias?, CuCount, group_size)."""
    w, x, s, z, bias = _args(dims, types, 0, 1, 2, 3, 4)
    if x is None or w is None or s is None or len(s.shape) != 2:
        return unknown(W4A16, "wvSplitK_int4_g operands not recorded")
    m, k, n = _rows(x), x.shape[-1], s.shape[0]
    if 2 * w.nbytes != n * k:
        return unknown(W4A16, "wvSplitK_int4_g weight is not N*K/2 bytes")
    group = concrete_int(concrete, 6) or k // s.shape[1]
    nbytes = x.nbytes + w.nbytes + _bytes(s, z, bias) + m * n * x.size
    fmt = weight_format(4, group, None if z is not None else "sym")
    return _gemm(m, n, k, nbytes, x.dtype, model_name(fmt))


# ---- AITER: aiter::<python function name>, schema = the function's parameters ---------------

# op -> (index of an output tensor, of the output ScalarType code, of the bias), None: absent
AITER_A8W8: dict[str, tuple[int | None, int | None, int | None]] = {
    "aiter::gemm_a8w8": (None, 5, 4), "aiter::gemm_a8w8_bpreshuffle": (None, 5, 4),
    "aiter::gemm_a8w8_blockscale": (None, 4, None),
    "aiter::gemm_a8w8_blockscale_bpreshuffle": (5, 4, None),
    "aiter::gemm_a8w8_ck": (4, None, 5), "aiter::gemm_a8w8_bpreshuffle_ck": (4, None, None),
    "aiter::gemm_a8w8_bpreshuffle_cktile": (4, None, None),
    "aiter::_gemm_a8w8_asm": (4, None, 6), "aiter::gemm_a8w8_blockscale_ck": (4, None, None),
    "aiter::gemm_a8w8_blockscale_cktile": (4, None, None),
    "aiter::gemm_a8w8_blockscale_bpreshuffle_ck": (4, None, None),
    "aiter::gemm_a8w8_blockscale_bpreshuffle_cktile": (4, None, None),
    "aiter::_flatmm_a8w8_blockscale_asm": (4, None, None),
}
AITER_A4W4: dict[str, tuple[int | None, int | None, int | None]] = {
    "aiter::gemm_a4w4": (None, 5, 4), "aiter::_gemm_a4w4_asm": (4, None, 6),
    "aiter::_mxfp4_gemm_asm": (4, None, 5), "aiter::_nvfp4_gemm_asm": (6, None, 7),
    "aiter::gemm_a4w4_blockscale": (4, None, None),
}


def _out_bytes(dims: list, types: list, concrete: list, spec: tuple, m: int, n: int) -> float:
    """The output's bytes: its tensor when an argument, else M*N at the ScalarType code (bf16,
    the functions' default, when not recorded); plus the bias (or out_scale) argument."""
    out_at, dtype_at, extra_at = spec
    out = tensor(dims, types, out_at) if out_at is not None else None
    extra = tensor(dims, types, extra_at) if extra_at is not None else None
    if out is not None:
        return out.nbytes + _bytes(extra)
    size = size_of(concrete_dtype(concrete, dtype_at) if dtype_at is not None else None)
    return m * n * (size or 2.0) + _bytes(extra)


def aiter_a8w8(dims: list, types: list, concrete: list = (), name: str = "") -> Cost:
    """AITER a8w8 GEMMs (XQ[M, K] int8/fp8, WQ[N, K] (preshuffled: same bytes), x_scale, w_scale,
    ...): per-token/per-channel ([M, 1], [1, N]) or block ([M, K/128], [N/128, K/128]) fp32
    scales, as recorded."""
    x, w, xs, ws = _args(dims, types, 0, 1, 2, 3)
    if x is None or w is None or w.numel != w.shape[0] * x.shape[-1]:
        return unknown(W8A8, "a8w8 operands not recorded or inconsistent")
    m, n, k = _rows(x), w.shape[0], x.shape[-1]
    out = _out_bytes(dims, types, concrete, AITER_A8W8[name], m, n)
    return _gemm(m, n, k, x.nbytes + w.nbytes + _bytes(xs, ws) + out, x.dtype, W8A8)


def aiter_gemm_a8w8_bpreshuffle_asm(dims: list, types: list, concrete: list = ()) -> Cost:
    """aiter::_gemm_a8w8_blockscale_bpreshuffle_asm(A[M, K], B[N, K], out[M, N], A_scale,
    B_scale, bias?, ...): the output third."""
    x, w, out, xs, ws, bias = _args(dims, types, 0, 1, 2, 3, 4, 5)
    if x is None or w is None or out is None or w.numel != w.shape[0] * x.shape[-1]:
        return unknown(W8A8, "a8w8 asm operands not recorded or inconsistent")
    nbytes = _bytes(x, w, out, xs, ws, bias)
    return _gemm(_rows(x), w.shape[0], x.shape[-1], nbytes, x.dtype, W8A8)


def _fp4_format(scale: Tensor | None, k: int) -> str | None:
    """MXFP4 (an E8M0 scale per 32) or NVFP4 (an E4M3 scale per 16), from the scales."""
    if scale is None:
        return None
    if scale.dtype in ("e8m0", "fp8_e4m3fn"):
        return "mxfp4" if scale.dtype == "e8m0" else "nvfp4"
    per = k // scale.shape[-1] if scale.shape[-1] else 0   # padded: at most the block
    return "mxfp4" if per >= 32 else ("nvfp4" if per >= 16 else None)


def aiter_a4w4(dims: list, types: list, concrete: list = (), name: str = "") -> Cost:
    """AITER a4w4 GEMMs (A[M, K/2] fp4x2, B[N, K/2] fp4x2, A_scale[M, K/bs], B_scale[N, K/bs],
    ...): FLOPs at the fp4 peak."""
    a, b, sa, sb = _args(dims, types, 0, 1, 2, 3)
    if a is None or b is None or len(b.shape) != 2 or b.shape[1] != a.shape[-1]:
        return unknown(MXFP4, "a4w4 operands not recorded or inconsistent")
    m, n, k = _rows(a), b.shape[0], 2 * a.shape[-1]
    fmt = _fp4_format(sb, k)
    if fmt is None:
        return unknown(MXFP4, "a4w4 scale block not recoverable")
    out = _out_bytes(dims, types, concrete, AITER_A4W4[name], m, n)
    return _gemm(m, n, k, a.nbytes + b.nbytes + _bytes(sa, sb) + out, "fp4x2", model_name(fmt))


# ---- bitsandbytes (bitsandbytes/_ops.py) -----------------------------------------------------

_BNB_AT = {"bitsandbytes::gemv_4bit": (None, 5), "bitsandbytes::gemm_4bit": (5, 4)}


def bnb_4bit(dims: list, types: list, concrete: list = (), quant_type_at: int | None = None,
             blocksize_at: int = 5) -> Cost:
    """bitsandbytes::gemv_4bit(A[.., K], B uint8 [N*K/2, 1], shapeB [N, K], absmax fp32
    [N*K/bs], code[16], blocksize) and gemm_4bit(A, B, shapeB, absmax, blocksize, quant_type,
    bias?, absmax_8bit?, absmax_code?, absmax_offset?)."""
    x, w = _args(dims, types, 0, 1)
    shape = concrete_ints(concrete, 2)
    if x is None or w is None or not shape or len(shape) != 2 or shape[1] != x.shape[-1]:
        return unknown(W4A16, "4-bit operands or shapeB not recorded")
    (n, k), m = shape, _rows(x)
    if 2 * w.nbytes != n * k:
        return unknown(W4A16, "4-bit weight is not N*K/2 bytes")
    rest = [t for i in range(3, len(dims)) if (t := tensor(dims, types, i)) is not None]
    block = concrete_int(concrete, blocksize_at) or 0
    kind = concrete_str(concrete, quant_type_at) if quant_type_at is not None else ""
    fmt = f"{kind if kind in ('nf4', 'fp4') else 'bnb4'} absmax, g{block}"
    nbytes = x.nbytes + w.nbytes + _bytes(*rest) + m * n * x.size
    return _gemm(m, n, k, nbytes, x.dtype, model_name(fmt))


# the kernel a bitsandbytes 4-bit op launched: its fused kernels, or the dequantize of the
# dequantize + F.linear fallback (above M = 1536 on CUDA, 256 on ROCm, and where bnb's per-arch
# heuristic prefers it: on an H200 some M = 8 decode linears take it)
BNB4_KERNEL = r"(?P<path>kDequantize|gemm_4bit|gemv_4bit)"


def bnb_4bit_by_kernel(call: Call) -> Cost:
    """bitsandbytes 4-bit op priced by the kernel it launched: a fused GEMM as `bnb_4bit`; a
    dequantize kernel reads the packed weight and absmax and writes the 16-bit weight (the
    GEMM after it is its own aten::mm), one FLOP a weight."""
    gemm = bnb_4bit(call.dims, call.types, call.concrete, *_BNB_AT[call.name])
    if gemm.bytes is None or (call.kernel or {}).get("path") != "kDequantize":
        return gemm
    x, w = _args(call.dims, call.types, 0, 1)
    absmax = tensor(call.dims, call.types, 3)
    shape = concrete_ints(call.concrete, 2)
    if x is None or not shape:  # (priced above: both are there)
        return gemm
    n, k = shape
    nbytes = _bytes(w, absmax) + n * k * x.size
    why = "bitsandbytes' dequantize + F.linear path: the weight dequantized, the GEMM its aten::mm"
    return Cost(nbytes, float(n * k), x.dtype, gemm.model, why)


def bnb_int8_matmul(dims: list, types: list, concrete: list = ()) -> Cost:
    """bitsandbytes::int8_linear_matmul(A int8 [.., K], B int8 [N, K]) -> int32 [.., N]."""
    a, b = _args(dims, types, 0, 1)
    if a is None or b is None or len(b.shape) != 2 or b.shape[1] != a.shape[-1]:
        return unknown(W8A8, "int8 matmul operands not recorded or inconsistent")
    (n, k), m = b.shape, _rows(a)
    return _gemm(m, n, k, a.nbytes + b.nbytes + 4.0 * m * n, a.dtype, W8A8)


def bnb_int8_scaled_mm(dims: list, types: list, concrete: list = ()) -> Cost:
    """bitsandbytes::int8_scaled_mm(A int8, B int8 [N, K], row_stats[M], col_stats[N], bias?,
    dtype?): matmul, dequantize and bias in one; the output in `dtype` (fp16 by default)."""
    a, b = _args(dims, types, 0, 1)
    base = bnb_int8_matmul(dims, types, concrete)
    if base.bytes is None or a is None or b is None:
        return base
    m, n = _rows(a), b.shape[0]
    out = size_of(concrete_dtype(concrete, 5)) or 2.0
    rest = _bytes(*_args(dims, types, 2, 3, 4))
    return base._replace(bytes=a.nbytes + b.nbytes + rest + m * n * out)


def bnb_int8_mm_dequant(dims: list, types: list, concrete: list = ()) -> Cost:
    """bitsandbytes::int8_mm_dequant(A int32 [.., N], row_stats[M], col_stats[N], dtype?, bias?):
    elementwise, the int32 product read, the output (fp16 by default) written."""
    a, row, col, bias = _args(dims, types, 0, 1, 2, 4)
    if a is None:
        return unknown("io_args", "int8_mm_dequant input not recorded")
    out = size_of(concrete_dtype(concrete, 3)) or 2.0
    return Cost(_bytes(a, row, col, bias) + a.numel * out, 2.0 * a.numel, "fp32", "io_args")
