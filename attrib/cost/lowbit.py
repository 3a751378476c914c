"""Cost formulas of low-bit weight GEMMs: weight-only int4 / int8 (W4A16, W8A16).

Each takes the parsed profiler args (dims, types, concrete) of one op call and returns a `Cost`:
bytes = activations read + packed weights + scales/zeros + output written, FLOPs = 2*M*N*K at the
activations' dtype (the kernels dequantize to 16 bits and multiply there). Schemas, packing and
sources: docs/lowbit-gemms.md.
"""

from __future__ import annotations

import re
from math import prod

from attrib.cost.dtypes import SIZES, WEIGHT_BITS, Cost, concrete_int, tensor, unknown

W4A16 = "gemm_w4a16"   # the family of a call whose shapes are missing
W8A16 = "gemm_w8a16"
AWQ_GROUP = 128   # AWQ's default group: the Triton kernel's group is a compile-time constant


def weight_format(bits: int, group: int | None, kind: str | None = None) -> str:
    """The weight format as the trace shows it: int4 g128 (a 16-bit scale and zero a group),
    int4 AWQ, g128 / int4 GPTQ, g128 (16-bit scale, packed zero), int4 sym, g128 (scale only),
    int8 per-channel."""
    if not group:
        return f"int{bits} per-channel"
    return f"int{bits} {kind}, g{group}" if kind else f"int{bits} g{group}"


def _group_bits(kind: str | None, bits: int) -> int:
    """Bits a group's scale and zero take: 16-bit scale and zero (tinygemm, fp32 absmax) 32,
    16-bit scale and a packed zero (AWQ, GPTQ) 16 + bits, a 16-bit scale alone 16."""
    return {"AWQ": 16 + bits, "GPTQ": 16 + bits, "sym": 16}.get(kind or "", 32)


def format_bits(fmt: str | None) -> float | None:
    """Bits per weight of a traced weight format (`weight_format`), scales and zeros included:
    int4 g128 (tinygemm: a 16-bit scale and zero a group) 4.25, int4 AWQ / GPTQ g128 (16-bit
    scale, 4-bit zero) 4.156, int4 sym g128 4.125, nf4 absmax g64 (bitsandbytes) 4.5, int8
    per-channel 8, block-scaled mxfp4 4.25 / nvfp4 4.5 / mxfp8 8.25, a dtype its
    size (bf16 16, fp8_e4m3fn 8); None when unknown."""
    if not fmt:
        return None
    if (m := re.match(r"^(?:int|nf|fp|bnb)(\d+) (?:(AWQ|GPTQ|sym|absmax), )?g(\d+)", fmt)):
        bits, group = int(m.group(1)), int(m.group(3))
        return bits + _group_bits(m.group(2), bits) / group if group else None
    if (m := re.match(r"^int(\d+) per-channel$", fmt)) is not None:
        return float(m.group(1))
    if fmt in ("mxfp4", "nvfp4", "mxfp8"):   # block-scaled (attrib.cost.block_scale_moe)
        return WEIGHT_BITS[fmt]
    size = SIZES.get(fmt)
    return 8.0 * size if size else None


# the cost_model of every weight-only low-bit GEMM this module prices (`model_name`)
LOW_BIT_MODEL = r"^gemm \((?:int\d|nf4|bnb4|fp4 absmax)"


def model_name(fmt: str) -> str:
    """The cost_model of a low-bit GEMM: its weight format in the family's name."""
    return f"gemm ({fmt})"


def _result(x_numel: float, m: float, n: int, k: int, size: float, weight: float,
            scales: float, dtype: str, fmt: str) -> Cost:
    nbytes = x_numel * size + weight + scales + m * n * size
    return Cost(nbytes, 2.0 * m * n * k, dtype, model_name(fmt))


def weight_int4pack_mm(dims: list, types: list, concrete: list | None = None) -> Cost:
    """aten::_weight_int4pack_mm(self[M, K], mat2 int32 [N/8, K/(16t), 32, t/2], qGroupSize,
    qScaleAndZeros[K/g, N, 2]) and its `_for_cpu` variant (mat2 uint8 [N, K/2]): tinygemm's
    packed int4, N*K/2 bytes whatever the tiling; a scale and a zero per group of g."""
    x, w, sz = tensor(dims, types, 0), tensor(dims, types, 1), tensor(dims, types, 3)
    if x is None or w is None or sz is None or len(sz.shape) != 3:
        return unknown(W4A16, "int4pack operands not recorded")
    k, n = x.shape[-1], sz.shape[1]
    if 2 * w.nbytes != n * k:
        return unknown(W4A16, "int4pack weight size is not N*K/2 bytes")
    group = concrete_int(concrete or [], 2) or k // sz.shape[0]
    m = prod(x.shape[:-1])
    return _result(x.numel, m, n, k, x.size, w.nbytes, sz.nbytes, x.dtype,
                   weight_format(4, group))


def weight_int8pack_mm(dims: list, types: list, concrete: list | None = None) -> Cost:
    """aten::_weight_int8pack_mm(self[M, K], mat2 int8 [N, K], scales[N]): per-output-channel
    int8 weights."""
    x, w, s = tensor(dims, types, 0), tensor(dims, types, 1), tensor(dims, types, 2)
    if x is None or w is None or len(w.shape) != 2 or w.shape[1] != x.shape[-1]:
        return unknown(W8A16, "int8pack operands not recorded or inconsistent")
    (n, k), m = w.shape, prod(x.shape[:-1])
    return _result(x.numel, m, n, k, x.size, w.nbytes, s.nbytes if s else 0.0, x.dtype,
                   weight_format(8, None))


def awq_gemm(m: int, n: int, k: int, dtype: str, size: float, out_numel: int,
             group: int = AWQ_GROUP) -> Cost:
    """An AWQ-packed int4 GEMM (Triton awq_gemm_kernel: qweight int32 [K, N/8], qzeros int32
    [K/g, N/8], scales [K/g, N]) of x[M, K] into an output of `out_numel` elements (split-K
    partials included), from the shapes its launch's allocations and input give."""
    groups = k / group
    weight, scales = k * n / 2, groups * n * size + groups * n / 2
    nbytes = m * k * size + weight + scales + out_numel * size
    why = (f"{weight_format(4, group)} AWQ packing (the group is not recorded: AWQ's default); "
           "M, N from the output allocation, K from the module's input")
    return Cost(nbytes, 2.0 * m * n * k, dtype, model_name(f"int4 AWQ, g{group} assumed"), why)
