"""Element types and shapes as the torch profiler records them ("Input type", "Input Dims").

Canonical dtype names are short (bf16, fp16, fp32, fp8_e4m3fn, int64, ...). Sizes are bytes per
element of the recorded container: packed sub-byte formats (fp4x2, int4 packed into uint8/int32)
are recorded in containers, so container bytes x recorded dims is already the packed size.
"""

from __future__ import annotations

from math import prod
from typing import Any, NamedTuple

# profiler "Input type" string -> (canonical name, bytes per element)
TYPES: dict[str, tuple[str, float]] = {
    "c10::BFloat16": ("bf16", 2), "c10::Half": ("fp16", 2), "float": ("fp32", 4),
    "double": ("fp64", 8), "long int": ("int64", 8), "long": ("int64", 8), "int": ("int32", 4),
    "short int": ("int16", 2), "short": ("int16", 2), "bool": ("bool", 1),
    "signed char": ("int8", 1), "unsigned char": ("uint8", 1),
    "unsigned short": ("uint16", 2), "unsigned int": ("uint32", 4), "unsigned long": ("uint64", 8),
    "c10::Float8_e4m3fn": ("fp8_e4m3fn", 1), "c10::Float8_e5m2": ("fp8_e5m2", 1),
    "c10::Float8_e4m3fnuz": ("fp8_e4m3fnuz", 1), "c10::Float8_e5m2fnuz": ("fp8_e5m2fnuz", 1),
    "c10::Float8_e8m0fnu": ("e8m0", 1), "c10::Float4_e2m1fn_x2": ("fp4x2", 1),
    "c10::qint8": ("qint8", 1), "c10::quint8": ("quint8", 1), "c10::qint32": ("qint32", 4),
    "c10::complex<float>": ("complex64", 8), "c10::complex<double>": ("complex128", 16),
    "c10::ComplexHalf": ("complex32", 4),
}

# c10::ScalarType codes as they appear in "Concrete Inputs" (dtype arguments), -> canonical.
SCALAR_TYPES: dict[int, str] = {
    0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "fp16", 6: "fp32", 7: "fp64",
    8: "complex32", 9: "complex64", 10: "complex128", 11: "bool", 12: "qint8", 13: "quint8",
    14: "qint32", 15: "bf16", 23: "fp8_e5m2", 24: "fp8_e4m3fn", 25: "fp8_e5m2fnuz",
    26: "fp8_e4m3fnuz",
}

SIZES: dict[str, float] = {name: size for name, size in TYPES.values()}

# Integer and mask types of indices, positions and token ids: never what a model computes in.
INDEX_TYPES = frozenset({"bool", "int16", "int32", "int64", "uint16", "uint32", "uint64"})

# canonical dtypes -> the key of the devices' TFLOP/s tables (attrib/data/archs.toml)
PEAK_KEY = {"fp8_e4m3fn": "fp8", "fp8_e5m2": "fp8", "fp8_e4m3fnuz": "fp8", "fp8_e5m2fnuz": "fp8",
            "fp4x2": "mxfp4", "uint8": "int8", "qint8": "int8", "quint8": "int8"}

# NCCL's element-type tag -> the canonical dtype, which gives its size
NCCL_TYPES = {"bf16": "bf16", "f16": "fp16", "half": "fp16", "f32": "fp32", "float": "fp32",
              "f8e4m3": "fp8_e4m3fn", "f8e5m2": "fp8_e5m2", "i8": "int8", "u8": "uint8"}

# Bits per weight of quantized formats, scales included, for model-config budgets.
WEIGHT_BITS: dict[str, float] = {
    "bf16": 16, "fp16": 16, "fp32": 32, "fp8": 8, "int8": 8, "int4": 4,
    "mxfp4": 4.25,      # 4-bit E2M1 + one 8-bit E8M0 scale per 32 values
    "nvfp4": 4.5,       # 4-bit E2M1 + one E4M3 scale per 16 values
    "mxfp8": 8.25,      # 8-bit E4M3 + one 8-bit E8M0 scale per 32 values
    "q4_0": 4.5,        # GGUF: 32 x 4 bit + fp16 scale per block of 32
    "q8_0": 8.5,        # GGUF: 32 x 8 bit + fp16 scale per block of 32
}

# Weight formats of a what-if projection (`--what-if weights=int4`), bits per weight, scales
# included.
INT4_GROUP = 128   # int4: one fp16 scale per group of 128 weights (GPTQ/AWQ-style, symmetric)
WHAT_IF_BITS: dict[str, float] = {
    "int4": 4 + 16 / INT4_GROUP,   # 0.5 B + 2/128 B = 0.515625 B per weight
    "int8": 8, "fp8": 8,           # per-channel scales: negligible (1 per row of thousands)
    "mxfp4": WEIGHT_BITS["mxfp4"],  # 0.5 B + 1 E8M0 byte per 32 = 0.53125 B
    "bf16": 16, "fp16": 16,
}

# KV-cache element types a model budget accepts, in bytes per element (the same formats' bits / 8).
_KV_TYPES = ("bf16", "fp16", "fp32", "fp8", "int8", "q8_0", "q4_0")
KV_BYTES: dict[str, float] = {k: WEIGHT_BITS[k] / 8 for k in _KV_TYPES}

# Promotion order for elementwise results (bf16 + fp16 promotes to fp32, handled separately).
_RANK = {"bool": 0, "uint8": 1, "int8": 1, "int16": 2, "int32": 3, "int64": 4,
         "fp8_e4m3fn": 5, "fp8_e5m2": 5, "fp16": 6, "bf16": 6, "fp32": 7, "fp64": 8}


class Tensor(NamedTuple):
    """One tensor argument: shape, canonical dtype, bytes per element."""

    shape: tuple[int, ...]
    dtype: str
    size: float

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> float:
        return self.numel * self.size


def dtype_of(type_str: Any) -> tuple[str, float] | None:
    """(canonical, bytes/element) of a profiler type string, None for non-tensors and unknown
    types."""
    return TYPES.get(type_str) if isinstance(type_str, str) else None


def tensor(dims: list, types: list, i: int) -> Tensor | None:
    """Argument `i` as a Tensor when it is a tensor of known dtype with >= 1 dimension.

    0-dim tensors are treated as scalars (they travel as kernel arguments or are CPU wrapped
    numbers).
    """
    if i >= len(dims) or i >= len(types):
        return None
    shape, dt = dims[i], dtype_of(types[i])
    ints = isinstance(shape, list) and bool(shape) and all(isinstance(x, int) for x in shape)
    if dt is None or not ints:
        return None
    return Tensor(tuple(shape), dt[0], dt[1])


def tensors(dims: list, types: list) -> list[Tensor]:
    """All tensor arguments of known dtype (TensorList elements are skipped: their dtype is not
    recorded)."""
    return [t for t in (tensor(dims, types, i) for i in range(len(dims))) if t is not None]


def concrete_dtype(concrete: list, i: int) -> str | None:
    """The canonical dtype of a ScalarType code at `concrete[i]` ("15" -> bf16), None if absent."""
    if i >= len(concrete):
        return None
    v = concrete[i]
    if isinstance(v, str) and v.lstrip("-").isdigit():
        return SCALAR_TYPES.get(int(v))
    return SCALAR_TYPES.get(v) if isinstance(v, int) else None


def concrete_str(concrete: list, i: int) -> str:
    return str(concrete[i]) if i < len(concrete) and concrete[i] is not None else ""


def concrete_int(concrete: list, i: int) -> int | None:
    s = concrete_str(concrete, i)
    return int(s) if s.lstrip("-").isdigit() else None


def concrete_ints(concrete: list, i: int) -> list[int] | None:
    """An int list argument recorded as text ("[1, 1]"); None when absent or not a list of ints."""
    s = concrete_str(concrete, i).strip()
    if not (s.startswith("[") and s.endswith("]")):
        return None
    parts = [p.strip() for p in s[1:-1].split(",") if p.strip()]
    return [int(p) for p in parts] if all(p.lstrip("-").isdigit() for p in parts) else None


def concrete_bool(concrete: list, i: int) -> bool | None:
    s = concrete_str(concrete, i)
    return {"True": True, "False": False, "1": True, "0": False}.get(s)


def broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """Numpy-style broadcast shape (no validation beyond taking the larger extent)."""
    n = max((len(s) for s in shapes), default=0)
    padded = [(1,) * (n - len(s)) + tuple(s) for s in shapes]
    return tuple(max(col) for col in zip(*padded)) if padded else ()


def promote(dtypes: list[str]) -> str | None:
    """Result dtype of an elementwise op over tensors of `dtypes` (torch's category/width order)."""
    if not dtypes:
        return None
    if {"bf16", "fp16"} <= set(dtypes) and max(_RANK.get(d, 0) for d in dtypes) == 6:
        return "fp32"
    return max(dtypes, key=lambda d: _RANK.get(d, -1))


def size_of(dtype: str | None) -> float | None:
    return SIZES.get(dtype) if dtype else None


class Cost(NamedTuple):
    """Bytes read + written and FLOPs of one op call.

    bytes/flops None = not knowable from what was recorded. dtype: the compute dtype (what picks
    the roofline ceiling). model: the formula family. assumption: what the figure rests on, when
    not exact.
    """

    bytes: float | None
    flops: float | None
    dtype: str | None
    model: str
    assumption: str | None = None


def unknown(model: str, why: str) -> Cost:
    return Cost(None, None, None, model, why)
