"""Cost formulas of bitsandbytes' LLM.int8() ops around its int8 GEMM: the activations'
quantization and the mixed int8 + outlier-column matmul (bitsandbytes/backends/cuda/ops.py,
bitsandbytes/backends/default/ops.py; docs/lowbit-gemms.md). The int8 GEMM, its dequantize and the
fused form are in attrib.cost.serving_lowbit.
"""

from __future__ import annotations

from math import prod

from attrib.cost.dtypes import Cost, Tensor, tensor, unknown

W8A8 = "gemm"


def _bytes(*ts: Tensor | None) -> float:
    return sum(t.nbytes for t in ts if t is not None)


def int8_vectorwise_quant(dims: list, types: list, concrete: list = ()) -> Cost:
    """bitsandbytes::int8_vectorwise_quant(A fp16 [.., K], threshold): kInt8VectorQuant reads A
    and writes it as int8 with an fp32 absmax a row (M*K*b + M*K + 4*M; 2 FLOPs an element, the
    absmax and the scaling). The outlier test (abs, ge, any, argwhere) and the zeroing of outlier
    columns are its child aten ops, priced on their own."""
    a = tensor(dims, types, 0)
    if a is None:
        return unknown("io_args", "int8_vectorwise_quant input not recorded")
    m = prod(a.shape[:-1])
    return Cost(a.nbytes + a.numel + 4.0 * m, 2.0 * a.numel, a.dtype, "io_args")


def int8_mixed_scaled_mm(dims: list, types: list, concrete: list = ()) -> Cost:
    """bitsandbytes::int8_mixed_scaled_mm(A[M, K], CA int8 [M, K], CB int8 [N, K], SCA[M],
    SCB[N], outlier_cols int64 [n]?, bias?) -> A's dtype [M, N]: the int8 GEMM with its
    dequantize and bias (int8_scaled_mm: CA, CB, scales and bias read, M*N*b written), and where
    n > 0 the outlier columns in 16 bits: A's n columns gathered (written, read), CB's read as
    int8 and written dequantized (then read), the output read and written again by the addmm:
    + 2*M*n*b + N*n*(1 + 2b) + 2*M*N*b bytes, + 2*M*N*n FLOPs. Its kernels are those of its
    child ops; this prices the whole linear where it launched them itself."""
    a, ca, cb, sca, scb, cols, bias = (tensor(dims, types, i) for i in range(7))
    if a is None or ca is None or cb is None or len(cb.shape) != 2 or cb.shape[1] != ca.shape[-1]:
        return unknown(W8A8, "int8_mixed_scaled_mm operands not recorded or inconsistent")
    m, (n, k), b = prod(ca.shape[:-1]), cb.shape, a.size
    nbytes = _bytes(ca, cb, sca, scb, bias) + m * n * b
    flops = 2.0 * m * n * k
    outliers = cols.numel if cols is not None else 0
    if outliers:
        nbytes += 2 * m * outliers * b + n * outliers * (1 + 2 * b) + 2 * m * n * b
        flops += 2.0 * m * n * outliers
    why = f"{outliers} outlier columns (outlier_cols' recorded shape)"
    return Cost(nbytes, flops, ca.dtype, W8A8, why)
