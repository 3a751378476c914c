"""Serving stacks' low-bit GEMMs (issue 36) priced from their schemas: vLLM `_C` / `_rocm_C`, AITER,
bitsandbytes (attrib/cost/serving_lowbit.py, docs/lowbit-gemms.md).

No trace holding these ops is in the repository (no vLLM on the GPU machine, no AMD GPU): each call
is built here as a trace would record it (Input Dims, Input type, Concrete Inputs in schema order)
from Llama-3-8B's q_proj (N = K = 4096) at M = 1 and M = 512, the packing spelled out from the
schema; every expected figure is derived by hand from M, N, K, the group size and the bit width.
"""

from __future__ import annotations

import pytest

from attrib.components.patterns import GEMM_OPS
from attrib.cost.lowbit import LOW_BIT_MODEL, format_bits
from attrib.cost.ops import op_cost
from attrib.cost.registry import Call, model_for
from attrib.cost.serving_lowbit import AITER_A4W4, AITER_A8W8, bnb_4bit_by_kernel, scalar_type_bits

N = K = 4096          # Llama-3-8B q_proj
G = 128               # group size
BF16, FP16, I32, F32 = "c10::BFloat16", "c10::Half", "int", "float"
FP8, I8, U8 = "c10::Float8_e4m3fn", "signed char", "unsigned char"
E8M0, FP4 = "c10::Float8_e8m0fnu", "c10::Float4_e2m1fn_x2"
U4B8 = (4 << 8) | (8 << 17)          # vLLM ScalarType uint4b8: mantissa 4, bias 8 -> 1049600
FP8_ID = 4 | (3 << 8) | (1 << 16)    # float8_e4m3fn: exponent 4, mantissa 3, signed
NONE = ([], "")                      # an absent optional argument


def _call(name: str, args: list[tuple[list, str]], concrete: dict[int, str] | None = None):
    dims, types = [a[0] for a in args], [a[1] for a in args]
    conc = [(concrete or {}).get(i, "") for i in range(len(args))]
    return op_cost(name, dims, types, conc)


def _bnb(name: str, args: list[tuple[list, str]], concrete: dict[int, str], path: str):
    """A bitsandbytes 4-bit call priced by the kernel it launched (`path`: the kernel name's)."""
    dims, types = [a[0] for a in args], [a[1] for a in args]
    conc = [concrete.get(i, "") for i in range(len(args))]
    return bnb_4bit_by_kernel(Call(name, dims, types, conc, kernel={"path": path}))


def _scalar() -> tuple[list, str]:
    return [], "Scalar"


@pytest.mark.parametrize("m", [1, 512])
def test_awq_gemm(m):
    """_C::awq_gemm(x[M, K] fp16, qweight int32 [K, N/8], scales fp16 [K/g, N], qzeros int32
    [K/g, N/8], split_k 8): x 2MK + weights NK/2 + scales 2NK/g + zeros (N/8)(K/g)4 + 8 partial
    outputs 8*2MN."""
    c = _call("_C::awq_gemm", [([m, K], FP16), ([K, N // 8], I32), ([K // G, N], FP16),
                               ([K // G, N // 8], I32), _scalar()], {4: "8"})
    want = 2 * m * K + N * K // 2 + 2 * N * K // G + 4 * (N // 8) * (K // G) + 8 * 2 * m * N
    assert (c.bytes, c.flops, c.dtype) == (want, 2 * m * N * K, "fp16")
    assert c.model == "gemm (int4 AWQ, g128)" and "split-K 8" in c.assumption
    assert m > 1 or want == 8_790_016


@pytest.mark.parametrize("m, dq", [(1, False), (50, False), (51, True), (512, True)])
def test_gptq_gemm(m, dq):
    """_C::gptq_gemm(a[M, K], b_q_weight int32 [K*4/32, N], qzeros int32 [K/g, N*4/32], scales
    [K/g, N], g_idx int32 [K], use_exllama, use_v2_format, bit 4): above M = 50 (exllama) the
    weight is dequantized to a [K, N] fp16 temporary, written then read: + 2 * 2KN."""
    c = _call("_C::gptq_gemm", [([m, K], FP16), ([K * 4 // 32, N], I32),
                                ([K // G, N * 4 // 32], I32), ([K // G, N], FP16), ([K], I32),
                                _scalar(), _scalar(), _scalar()], {5: "True", 6: "False", 7: "4"})
    want = 2 * m * K + N * K // 2 + 4 * (K // G) * (N // 8) + 2 * (K // G) * N + 4 * K + 2 * m * N
    want += 2 * 2 * K * N if dq else 0
    assert (c.bytes, c.flops, c.model) == (want, 2 * m * N * K, "gemm (int4 GPTQ, g128)")
    assert format_bits("int4 GPTQ, g128") == 4 + (16 + 4) / 128


@pytest.mark.parametrize("m", [1, 512])
def test_marlin_gemm_current_schema(m):
    """_C::marlin_gemm(a, c?, b_q_weight int32 [K/16, N*16*4/32], b_bias?, b_scales [K/g, N],
    a_scales?, global_scale?, b_zeros?, g_idx [0], perm [0], workspace, b_type_id uint4b8,
    size_m, size_n, size_k, ...): GPTQ symmetric: 2MK + NK/2 + 2NK/g + 2MN."""
    args = [([m, K], BF16), NONE, ([K // 16, N * 16 * 4 // 32], I32), NONE, ([K // G, N], BF16),
            NONE, NONE, NONE, ([0], I32), ([0], I32), ([528], I32)] + [_scalar()] * 8
    conc = {11: str(U4B8), 12: str(m), 13: str(N), 14: str(K), 15: "True"}
    c = _call("_C::marlin_gemm", args, conc)
    want = 2 * m * K + N * K // 2 + 2 * N * K // G + 2 * m * N
    assert (c.bytes, c.flops, c.dtype) == (want, 2 * m * N * K, "bf16")
    assert c.model == "gemm (int4 sym, g128)" and format_bits("int4 sym, g128") == 4 + 16 / 128


def test_marlin_gemm_older_schema_with_zeros_and_fp8():
    """gptq_marlin_gemm(a, b_q_weight, b_scales, b_zeros, g_idx, perm, workspace, b_q_type,
    size_m, size_n, size_k, is_k_full, has_zp, use_fp32_reduce, is_zp_float): AWQ-Marlin zeros
    int32 [K/g, N*4/32] add 4*(K/g)*(N/8); an fp8 weight (K*N bytes, channelwise scales [1, N])
    is weight-only fp8 at the activations' 16-bit roof."""
    m = 512
    args = [([m, K], FP16), ([K // 16, N * 2], I32), ([K // G, N], FP16), ([K // G, N // 8], I32),
            ([0], I32), ([0], I32), ([528], I32)] + [_scalar()] * 8
    c = _call("_C::gptq_marlin_gemm", args, {7: str(U4B8), 8: str(m), 9: str(N), 10: str(K)})
    want = 2 * m * K + N * K // 2 + 2 * N * K // G + 4 * (K // G) * (N // 8) + 2 * m * N
    assert (c.bytes, c.model) == (want, "gemm (int4 AWQ, g128)")
    args[1], args[2], args[3] = ([K // 16, N * 4], I32), ([1, N], FP16), NONE
    c = _call("_C::gptq_marlin_gemm", args, {7: str(FP8_ID), 8: str(m), 9: str(N), 10: str(K)})
    assert (c.bytes, c.dtype, c.model) == (2 * m * K + N * K + 2 * N + 2 * m * N, "fp16",
                                           "gemm (fp8_e4m3fn)")
    assert scalar_type_bits(U4B8) == (4, False) and scalar_type_bits(FP8_ID) == (8, True)


def test_marlin_without_sizes_stays_unpriced():
    c = _call("_C::marlin_gemm", [([1, K], BF16), ([K // 16, N * 2], I32), ([K // G, N], BF16)])
    assert c.bytes is None and "size_m" in c.assumption


@pytest.mark.parametrize("m", [1, 512])
def test_machete_mm(m):
    """_C::machete_mm(A[M, K] bf16, B prepacked int32 (N*K/2 bytes), b_type uint4b8, out_type,
    group_scales [K/g, N], group_zeros?, group_size 128, channel_scales?, token_scales?,
    schedule)."""
    args = [([m, K], BF16), ([K // 8, N], I32), _scalar(), _scalar(), ([K // G, N], BF16),
            NONE, _scalar(), NONE, NONE, ([], "")]
    c = _call("_C::machete_mm", args, {2: str(U4B8), 6: str(G)})
    want = 2 * m * K + N * K // 2 + 2 * N * K // G + 2 * m * N
    assert (c.bytes, c.flops, c.model) == (want, 2 * m * N * K, "gemm (int4 sym, g128)")


@pytest.mark.parametrize("a_type, dtype", [(FP8, "fp8_e4m3fn"), (I8, "int8")])
def test_cutlass_scaled_mm(a_type, dtype):
    """_C::cutlass_scaled_mm(out[M, N] bf16, a[M, K], b[K, N], a_scales [M, 1] f32, b_scales
    [1, N] f32, bias?): MK + KN + 4M + 4N + 2MN, FLOPs at the 8-bit roof."""
    m = 512
    c = _call("_C::cutlass_scaled_mm", [([m, N], BF16), ([m, K], a_type), ([K, N], a_type),
                                        ([m, 1], F32), ([1, N], F32), NONE])
    assert (c.bytes, c.flops, c.dtype, c.model) == (m * K + K * N + 4 * m + 4 * N + 2 * m * N,
                                                    2 * m * N * K, dtype, "gemm")


@pytest.mark.parametrize("m", [1, 4])
def test_wv_split_k(m):
    """_rocm_C::wvSplitK(in_a = weight [N, K], in_b = x [M, K], in_bias?, CuCount) -> [M, N]:
    2NK + 2MK + 2MN (older 3-argument schema: the same)."""
    c = _call("_rocm_C::wvSplitK", [([N, K], BF16), ([m, K], BF16), NONE, _scalar()], {3: "80"})
    old = _call("_rocm_C::wvSplitK", [([N, K], BF16), ([m, K], BF16), _scalar()], {2: "80"})
    want = 2 * N * K + 2 * m * K + 2 * m * N
    assert (c.bytes, c.flops, c.model) == (want, 2 * m * N * K, "gemm") and old.bytes == want


def test_wv_split_kq():
    """_rocm_C::wvSplitKQ(in_a fp8 [N, K], in_b fp8 [M, K], in_bias?, out_c [M, N] bf16,
    scale_a [1], scale_b [1], CuCount): NK + MK + 2MN + 8, FLOPs at the fp8 roof."""
    m = 2
    c = _call("_rocm_C::wvSplitKQ", [([N, K], FP8), ([m, K], FP8), NONE, ([m, N], BF16),
                                     ([1], F32), ([1], F32), _scalar()], {6: "80"})
    assert (c.bytes, c.flops, c.dtype) == (N * K + m * K + 2 * m * N + 8, 2 * m * N * K,
                                           "fp8_e4m3fn")


def test_wv_split_k_int4_g():
    """_rocm_C::wvSplitK_int4_g(in_a uint8 [N, K/2], in_b [M, K], in_scale [N, K/g], zp?, bias?,
    CuCount, group_size 128): NK/2 + 2MK + 2N*K/g + 2MN; with zero points [N, K/g] + 2N*K/g."""
    m = 1
    args = [([N, K // 2], U8), ([m, K], BF16), ([N, K // G], BF16), NONE, NONE, _scalar(),
            _scalar()]
    c = _call("_rocm_C::wvSplitK_int4_g", args, {5: "80", 6: str(G)})
    want = N * K // 2 + 2 * m * K + 2 * N * K // G + 2 * m * N
    assert (c.bytes, c.flops, c.model) == (want, 2 * m * N * K, "gemm (int4 sym, g128)")
    args[3] = ([N, K // G], BF16)
    c = _call("_rocm_C::wvSplitK_int4_g", args, {5: "80", 6: str(G)})
    assert (c.bytes, c.model) == (want + 2 * N * K // G, "gemm (int4 g128)")


@pytest.mark.parametrize("m", [1, 512])
def test_aiter_a8w8(m):
    """aiter::gemm_a8w8(XQ int8 [M, K], WQ int8 [N, K], x_scale [M, 1] f32, w_scale [1, N] f32,
    bias?, dtype 15 = bf16, splitK): MK + NK + 4M + 4N + 2MN; the CK op under it takes Out [M, N]
    fifth; the blockscale form (fp8) has [M, K/128] and [N/128, K/128] fp32 scales."""
    c = _call("aiter::gemm_a8w8", [([m, K], I8), ([N, K], I8), ([m, 1], F32), ([1, N], F32),
                                   NONE, _scalar(), _scalar()], {5: "15", 6: "0"})
    want = m * K + N * K + 4 * m + 4 * N + 2 * m * N
    assert (c.bytes, c.flops, c.dtype, c.model) == (want, 2 * m * N * K, "int8", "gemm")
    c = _call("aiter::gemm_a8w8_ck", [([m, K], I8), ([N, K], I8), ([m, 1], F32), ([1, N], F32),
                                      ([m, N], BF16), NONE, _scalar()], {6: "0"})
    assert c.bytes == want
    c = _call("aiter::gemm_a8w8_blockscale", [([m, K], FP8), ([N, K], FP8),
                                              ([m, K // 128], F32),
                                              ([N // 128, K // 128], F32), _scalar(), _scalar()],
              {4: "15", 5: "False"})
    want = m * K + N * K + 4 * m * K // 128 + 4 * (N // 128) * (K // 128) + 2 * m * N
    assert (c.bytes, c.dtype) == (want, "fp8_e4m3fn")


@pytest.mark.parametrize("a_type, s_type", [(FP4, E8M0), (U8, U8)])
def test_aiter_a4w4(a_type, s_type):
    """aiter::gemm_a4w4(A [M, K/2] fp4x2, B [N, K/2] fp4x2, A_scale [M, K/32] e8m0, B_scale
    [N, K/32] e8m0, bias?, dtype 15, ...): MK/2 + NK/2 + MK/32 + NK/32 + 2MN, MXFP4 (a scale per
    32; uint8 containers: the scale count says so), FLOPs at the fp4 peak."""
    m = 512
    args = [([m, K // 2], a_type), ([N, K // 2], a_type), ([m, K // 32], s_type),
            ([N, K // 32], s_type), NONE, _scalar()]
    c = _call("aiter::gemm_a4w4", args, {5: "15"})
    want = m * K // 2 + N * K // 2 + m * K // 32 + N * K // 32 + 2 * m * N
    assert (c.bytes, c.flops, c.dtype, c.model) == (want, 2 * m * N * K, "fp4x2", "gemm (mxfp4)")


def test_bitsandbytes_4bit():
    """bitsandbytes::gemv_4bit(A [1, 1, K], B uint8 [N*K/2, 1], shapeB [N, K], absmax fp32
    [N*K/64], code [16] fp32, blocksize 64): 2K + NK/2 + 4NK/64 + 64 + 2N; gemm_4bit(A, B,
    shapeB, absmax, blocksize, quant_type 'nf4', bias?, ...) at M = 512 likewise, when its
    kernel is bitsandbytes' own; where it is a dequantize kernel (the dequantize + F.linear path),
    the op reads the packed weight and absmax and writes the weight in 16 bits, N*K FLOPs."""
    args = [([1, 1, K], BF16), ([N * K // 2, 1], U8), _scalar(), ([N * K // 64], F32),
            ([16], F32), _scalar()]
    c = _bnb("bitsandbytes::gemv_4bit", args, {2: f"[{N}, {K}]", 5: "64"}, "gemv_4bit")
    want = 2 * K + N * K // 2 + 4 * N * K // 64 + 64 + 2 * N
    assert (c.bytes, c.flops, c.model) == (want, 2 * N * K, "gemm (bnb4 absmax, g64)")
    assert format_bits("bnb4 absmax, g64") == 4.5
    m = 512
    args = [([m, K], BF16), ([N * K // 2, 1], U8), _scalar(), ([N * K // 64], F32), _scalar(),
            ([], "str"), NONE, NONE, NONE, NONE]
    conc = {2: f"[{N}, {K}]", 4: "64", 5: "nf4"}
    c = _bnb("bitsandbytes::gemm_4bit", args, conc, "gemm_4bit")
    want = 2 * m * K + N * K // 2 + 4 * N * K // 64 + 2 * m * N
    assert (c.bytes, c.flops, c.model) == (want, 2 * m * N * K, "gemm (nf4 absmax, g64)")
    c = _bnb("bitsandbytes::gemm_4bit", args, conc, "kDequantize")
    want = N * K // 2 + 4 * N * K // 64 + 2 * N * K
    assert (c.bytes, c.flops, c.model) == (want, N * K, "gemm (nf4 absmax, g64)")


def test_bitsandbytes_int8():
    """int8_linear_matmul(A int8 [M, K], B int8 [N, K]) -> int32: MK + NK + 4MN at the int8 roof;
    int8_mm_dequant(A int32 [M, N], row_stats [M], col_stats [N], dtype 15, bias?): 4MN + 4M +
    4N + 2MN, elementwise (not a GEMM)."""
    m = 512
    c = _call("bitsandbytes::int8_linear_matmul", [([m, K], I8), ([N, K], I8)])
    assert (c.bytes, c.flops, c.dtype) == (m * K + N * K + 4 * m * N, 2 * m * N * K, "int8")
    c = _call("bitsandbytes::int8_mm_dequant", [([m, N], I32), ([m], F32), ([N], F32),
                                                _scalar(), NONE], {3: "15"})
    assert (c.bytes, c.model) == (4 * m * N + 4 * m + 4 * N + 2 * m * N, "io_args")
    assert "bitsandbytes::int8_mm_dequant" not in GEMM_OPS


def test_unestablished_packing_is_unpriced_not_zero():
    """A weight whose bytes do not match the schema's packing is named, not priced 0 MB."""
    c = _call("_C::awq_gemm", [([1, K], FP16), ([K, N // 4], I32), ([K // G, N], FP16),
                               ([K // G, N // 8], I32), _scalar()], {4: "8"})
    assert c.bytes is None and "N*K/2" in c.assumption
    c = _call("_rocm_C::wvSplitK_int4_g", [([N, K], U8), ([1, K], BF16), ([N, K // G], BF16),
                                           NONE, NONE, _scalar(), _scalar()], {6: str(G)})
    assert c.bytes is None


OPS = ("_C::awq_gemm", "_C::gptq_gemm", "_C::marlin_gemm", "_C::gptq_marlin_gemm",
       "_C::machete_mm", "_C::cutlass_scaled_mm", "_C::cutlass_scaled_mm_azp",
       "_rocm_C::wvSplitK", "_rocm_C::wvSplitKQ", "_rocm_C::wvSplitK_int4_g",
       "aiter::_gemm_a8w8_blockscale_bpreshuffle_asm", "bitsandbytes::gemv_4bit",
       "bitsandbytes::gemm_4bit", "bitsandbytes::int8_linear_matmul",
       "bitsandbytes::int8_scaled_mm", *AITER_A8W8, *AITER_A4W4)


@pytest.mark.parametrize("name", OPS)
def test_registry_and_classifier(name):
    """Each op resolves to its shape model, and its kernels count as a GEMM's for the position
    classifier (patterns.GEMM_OPS, the activation's argument index)."""
    model = model_for(name)
    assert model is not None and name in model.ops
    # bitsandbytes' 4-bit ops by the kernel they launched (fused, or dequantize + F.linear)
    assert model.from_shapes != name.startswith("bitsandbytes::gem")
    assert GEMM_OPS[name] == (1 if name.startswith(("_rocm_C::", "_C::cutlass")) else 0)


def test_low_bit_rule_sees_weight_only_formats():
    """The low-bit large-M rule reads weight-only formats, not W8A8 / fp8 ones."""
    import re
    hits = ["gemm (int4 GPTQ, g128)", "gemm (int4 sym, g128)", "gemm (nf4 absmax, g64)",
            "gemm (bnb4 absmax, g64)"]
    assert all(re.search(LOW_BIT_MODEL, h) for h in hits)
    assert not any(re.search(LOW_BIT_MODEL, h) for h in ("gemm", "gemm (mxfp4)",
                                                         "gemm (fp8_e4m3fn)"))


def test_bitsandbytes_signatures_of_the_real_captures():
    """Signatures as recorded in tests/fixtures/captured/issue36/bnb_nf4_b1 (TinyLlama q_proj,
    decode) and bnb_int8_b1 (prefill, 512 tokens): the one place these ops are in a real trace.
    gemm_4bit: x 2 x 2048 + 2048 x 2048 / 2 + absmax 4 x 65536 + out 2 x 2048 = 2,367,488 B (the
    quant_type string is not recorded: bnb4). int8_linear_matmul: 512 x 1536 + 1536 x 1536 +
    4 x 512 x 1536 = 6,291,456 B."""
    c = bnb_4bit_by_kernel(Call("bitsandbytes::gemm_4bit",
                                [[1, 2048], [2097152, 1], [], [65536], [], [], [], [], [], []],
                                [BF16, U8, "ScalarList", F32, "Scalar", "", "", "", "", ""],
                                ["", "", "[2048, 2048]", "", "64", "", "", "", "", ""],
                                kernel={"path": "gemm_4bit"}))
    assert (c.bytes, c.flops, c.model) == (2_367_488, 2 * 2048 * 2048, "gemm (bnb4 absmax, g64)")
    c = op_cost("bitsandbytes::int8_linear_matmul", [[512, 1536], [1536, 1536]], [I8, I8], ["", ""])
    assert (c.bytes, c.flops, c.dtype) == (6_291_456, 2 * 512 * 1536 * 1536, "int8")
