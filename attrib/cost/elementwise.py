"""Cost formulas of the memory-bound families: embedding, index writes / KV-cache writes,
elementwise, activations, norms, copies, softmax, top-k, reductions, ops with output args.

Bytes = tensors read + tensors written; FLOPs are nominal (about one per output element) and only
matter for telling these ops are memory-bound.
"""

from __future__ import annotations

import re
from math import prod

from attrib.cost.dtypes import (Cost, Tensor, broadcast, concrete_bool, concrete_dtype,
                                concrete_int, concrete_str, promote, size_of, tensor, tensors,
                                unknown)


def embedding(dims: list, types: list, concrete: list = ()) -> Cost:
    """aten::embedding(weight[V, H], indices[...]): the gathered rows are read and written, not
    the table."""
    w, idx = tensor(dims, types, 0), tensor(dims, types, 1)
    if w is None or idx is None or len(w.shape) != 2:
        return unknown("embedding", "embedding operands not recorded")
    rows = idx.numel * w.shape[1] * w.size
    return Cost(2 * rows + idx.nbytes, 0.0, w.dtype, "embedding")


def index_select(dims: list, types: list, concrete: list = ()) -> Cost:
    """aten::index_select(self, dim, index[n]): n slices along `dim` gathered and written."""
    src, idx = tensor(dims, types, 0), tensor(dims, types, 2)
    dim = concrete_int(concrete, 1)
    if src is None or idx is None or dim is None:
        return unknown("embedding", "index_select operands not recorded")
    out = src.numel // src.shape[dim] * idx.numel
    return Cost(2 * out * src.size + idx.nbytes, 0.0, src.dtype, "embedding")


def gather(dims: list, types: list, concrete: list = ()) -> Cost:
    """aten::gather(self, dim, index, sparse_grad): as many elements read from self as written out.
    A row gather (dim 0, index [T, H] over self [V, H], e.g. an embedding lookup) has its index
    expanded from [T] (stride 0 along H): only T indices are read from memory."""
    src, idx = tensor(dims, types, 0), tensor(dims, types, 2)
    dim = concrete_int(concrete, 1)
    if src is None or idx is None:
        return unknown("gather", "gather operands not recorded")
    row = dim == 0 and len(src.shape) == 2 and len(idx.shape) == 2 and idx.shape[1] == src.shape[1]
    idx_bytes = idx.shape[0] * idx.size if row else idx.nbytes
    model = "embedding" if row else "gather"
    return Cost(2 * idx.numel * src.size + idx_bytes, 0.0, src.dtype, model)


def index_copy(dims: list, types: list, concrete: list = ()) -> Cost:
    """aten::index_copy_(self, dim, index[n], source): source read, the same amount written into
    self (a static KV-cache write), index read."""
    idx, src = tensor(dims, types, 2), tensor(dims, types, 3)
    if src is None:
        return unknown("index_write", "index_copy source not recorded")
    return Cost(2 * src.nbytes + (idx.nbytes if idx else 0), 0.0, src.dtype, "index_write")


def index_put(dims: list, types: list, concrete: list = ()) -> Cost:
    """aten::index_put_(self, indices, values, accumulate): values read and scattered
    (read-modify-write when accumulating). The indices TensorList is not recorded, so its bytes
    are left out."""
    vals = tensor(dims, types, 2)
    if vals is None:
        return unknown("index_write", "index_put values not recorded or scalar")
    times = 3 if concrete_bool(concrete, 3) else 2
    why = "index tensor bytes not recorded"
    return Cost(times * vals.nbytes, 0.0, vals.dtype, "index_write", why)


def reshape_and_cache(dims: list, types: list, concrete: list = ()) -> Cost:
    """vLLM reshape_and_cache[_flash](key[T, H, D], value, key_cache, value_cache,
    slot_mapping[T], ...): new K/V read, written into the cache at the cache's element size,
    slot mapping read."""
    key, value, cache, slots = (tensor(dims, types, i) for i in (0, 1, 2, 4))
    return cache_write(key, value, cache, slots)


def cache_write(a: Tensor | None, b: Tensor | None, cache: Tensor | None, index: Tensor | None,
                missing: str = "key/value not recorded") -> Cost:
    """Two new tensors (K and V, or a latent and its rope part) read and written into cache rows at
    the cache's element size; the row index read."""
    if a is None or b is None:
        return unknown("kv_write", missing)
    out = cache.size if cache else a.size
    nbytes = a.nbytes + b.nbytes + (a.numel + b.numel) * out + (index.nbytes if index else 0)
    return Cost(nbytes, 0.0, cache.dtype if cache else a.dtype, "kv_write")


COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "logical_not",
                         "logical_and", "logical_or"})
_BASE = re.compile(r"^aten::_?([a-z_]+?)_?$")


def _base(name: str) -> str:
    m = _BASE.match(name)
    return m.group(1) if m else name


def elementwise(dims: list, types: list, concrete: list = (), name: str = "aten::add") -> Cost:
    """Pointwise ops: every tensor input read once, the broadcast output written once.

    In-place variants (trailing `_`) write into self; comparisons produce bool; otherwise the result
    dtype is torch's promotion of the tensor inputs (0-dim tensors count as scalars).
    """
    ins = tensors(dims, types)
    if not ins:
        return unknown("elementwise", "no tensor input recorded (TensorList or scalars)")
    base = _base(name)
    shape = broadcast(*(t.shape for t in ins))
    if name.endswith("_") or base in ("masked_fill", "clamp", "fill"):
        out = ins[0].dtype
    elif base in COMPARISONS:
        out = "bool"
    elif base == "where":
        out = promote([t.dtype for t in ins[1:]]) or ins[-1].dtype
    else:
        out = promote([t.dtype for t in ins])
    n = prod(shape)
    if base in ("fill", "zero"):                        # writes only
        return Cost(n * ins[0].size, 0.0, ins[0].dtype, "elementwise")
    nbytes = sum(t.nbytes for t in ins) + n * (size_of(out) or ins[0].size)
    return Cost(nbytes, float(n), out, "elementwise")


def activation(dims: list, types: list, concrete: list = (), name: str = "aten::silu") -> Cost:
    """aten::silu/gelu/relu/...: input read, output written."""
    c = elementwise(dims, types, concrete, name)
    return c._replace(model="activation")


def io_args(dims: list, types: list, concrete: list = (), name: str = "") -> Cost:
    """Custom ops that take their outputs as arguments (vLLM `_C::silu_and_mul(out, x)`,
    `_C::rms_norm(out, x, w, eps)`, fp8 quant, aiter fused norms): each tensor argument is read
    or written once."""
    ts = tensors(dims, types)
    if not ts:
        return unknown("io_args", "no tensor argument recorded")
    return Cost(sum(t.nbytes for t in ts), float(max(t.numel for t in ts)), ts[0].dtype, "io_args")


def norm(dims: list, types: list, concrete: list = (), name: str = "aten::rms_norm") -> Cost:
    """rms_norm / layer_norm (input, normalized_shape, weight?, bias?, eps): input read, weight
    and bias read, output (input's shape and dtype) written."""
    x = tensor(dims, types, 0)
    if x is None:
        return unknown("norm", "norm input not recorded")
    params = [t for t in (tensor(dims, types, i) for i in range(1, len(dims))) if t is not None]
    return Cost(2 * x.nbytes + sum(p.nbytes for p in params), 4.0 * x.numel, x.dtype, "norm")


def fused_add_norm(dims: list, types: list, concrete: list = ()) -> Cost:
    """In-place residual add + RMSNorm (x, residual, weight, eps): x and residual read and
    written, weight read."""
    x, res, w = (tensor(dims, types, i) for i in range(3))
    if x is None or res is None:
        return unknown("norm", "fused add-norm operands not recorded")
    nbytes = 2 * x.nbytes + 2 * res.nbytes + (w.nbytes if w else 0)
    return Cost(nbytes, 5.0 * x.numel, x.dtype, "norm")


def copy_(dims: list, types: list, concrete: list = ()) -> Cost:
    """aten::copy_(self, src): src read (its dtype), self written (its dtype, broadcast shape)."""
    dst, src = tensor(dims, types, 0), tensor(dims, types, 1)
    if dst is None or src is None:
        return unknown("copy", "copy operands not recorded")
    return Cost(src.nbytes + dst.nbytes, 0.0, dst.dtype, "copy")


def clone(dims: list, types: list, concrete: list = (), name: str = "aten::clone") -> Cost:
    """aten::clone / contiguous: one read and one write of the tensor. contiguous only launches a
    copy when its input is not contiguous (ops without kernels carry no time anyway)."""
    x = tensor(dims, types, 0)
    if x is None:
        return unknown("copy", "tensor not recorded")
    why = "a copy happens only for a non-contiguous input" if name == "aten::contiguous" else None
    return Cost(2 * x.nbytes, 0.0, x.dtype, "copy", why)


def to_copy(dims: list, types: list, concrete: list = (), name: str = "aten::_to_copy") -> Cost:
    """aten::to / _to_copy: read in the source dtype, write in the target dtype (from the dtype
    argument).

    aten::to to its own dtype returns self (no copy; 0 bytes).
    """
    x = tensor(dims, types, 0)
    if x is None:
        return unknown("copy", "tensor not recorded")
    ts = list(types)
    target = None
    if len(ts) > 1 and ts[1] == "Scalar":
        target = concrete_dtype(concrete, 1)
    elif len(ts) > 2 and ts[1] == "" and ts[2] == "Scalar":
        target = concrete_dtype(concrete, 2)
    elif (other := tensor(dims, types, 1)) is not None:
        target = other.dtype
    if target is None and name == "aten::_to_copy" and concrete_str(concrete, 1) == "":
        target = x.dtype
    if target is None:
        return unknown("copy", "target dtype not recorded")
    if name == "aten::to" and target == x.dtype:
        why = "same dtype: aten::to returns self unless a copy or device move is asked"
        return Cost(0.0, 0.0, x.dtype, "copy", why)
    return Cost(x.nbytes + x.numel * (size_of(target) or x.size), 0.0, target, "copy")


def cat(dims: list, types: list, concrete: list = ()) -> Cost:
    """aten::cat: the profiler records the inputs as a TensorList without element dtype, so bytes
    are unknown (the kernel name, e.g. CatArrayBatchedCopy<OpaqueType<2u>>, reveals the element
    size)."""
    return unknown("copy", "TensorList element dtype not recorded")


def softmax(dims: list, types: list, concrete: list = (), name: str = "aten::softmax") -> Cost:
    """softmax / log_softmax (self, dim, dtype?) and _softmax (self, dim, half_to_float): read +
    write."""
    x = tensor(dims, types, 0)
    if x is None:
        return unknown("softmax", "input not recorded")
    if name.startswith("aten::_"):
        out = "fp32" if concrete_bool(concrete, 2) else x.dtype
    else:
        out = concrete_dtype(concrete, 2) or x.dtype
    return Cost(x.nbytes + x.numel * (size_of(out) or x.size), 5.0 * x.numel, x.dtype, "softmax")


def topk(dims: list, types: list, concrete: list = ()) -> Cost:
    """aten::topk(self, k, dim, ...): input read, k values + int64 indices written per row."""
    x, k = tensor(dims, types, 0), concrete_int(concrete, 1)
    dim = concrete_int(concrete, 2)
    if x is None or k is None:
        return unknown("topk", "input or k not recorded")
    rows = x.numel // x.shape[dim if dim is not None else -1]
    return Cost(x.nbytes + rows * k * (x.size + 8), float(x.numel), x.dtype, "topk")


def sort(dims: list, types: list, concrete: list = ()) -> Cost:
    """aten::sort(self, dim, descending): input read once, sorted values and int64 indices written
    once (the lower bound; a radix sort makes several passes)."""
    x = tensor(dims, types, 0)
    if x is None:
        return unknown("sort", "input not recorded")
    return Cost(2 * x.nbytes + x.numel * 8, float(x.numel), x.dtype, "sort")


def scan(dims: list, types: list, concrete: list = ()) -> Cost:
    """aten::cumsum / cumprod (self, dim, dtype?): input read, the running result (dtype if given)
    written."""
    x = tensor(dims, types, 0)
    if x is None:
        return unknown("scan", "input not recorded")
    out = concrete_dtype(concrete, 2) or x.dtype
    return Cost(x.nbytes + x.numel * (size_of(out) or x.size), float(x.numel), x.dtype, "scan")


def histc(dims: list, types: list, concrete: list = ()) -> Cost:
    """aten::histc(self, bins, min, max): input read, `bins` counts of its dtype written (MoE
    routing counts tokens per expert this way)."""
    x, bins = tensor(dims, types, 0), concrete_int(concrete, 1)
    if x is None or bins is None:
        return unknown("histc", "input or bins not recorded")
    return Cost(x.nbytes + bins * x.size, float(x.numel), x.dtype, "histc")


def reduction(dims: list, types: list, concrete: list = (), name: str = "aten::sum") -> Cost:
    """sum / mean / amax / argmax / any ... (self, dim, keepdim, ...): input read, reduced output
    written (any / all: bool)."""
    x = tensor(dims, types, 0)
    if x is None:
        return unknown("reduction", "input not recorded")
    spec = concrete_str(concrete, 1).strip("[]")
    try:
        axes = [int(a) for a in spec.split(",") if a.strip()] if spec else list(range(len(x.shape)))
        kept = prod(x.shape) // prod(x.shape[a] for a in axes)
    except (ValueError, IndexError):
        return unknown("reduction", "reduced dims not recorded")
    out = {"aten::argmax": "int64", "aten::argmin": "int64", "aten::any": "bool",
           "aten::all": "bool"}.get(name, x.dtype)
    return Cost(x.nbytes + kept * (size_of(out) or x.size), float(x.numel), x.dtype, "reduction")
