"""Cost models that need more than an op's recorded shapes: a kernel's name (its element type or
collective), the step annotation (paged attention's context sums), a model config (ops whose
weights are not arguments) or the world size. Each is `price(call) -> Cost` (attrib.cost.registry).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from attrib.components.patterns import CAT_ELEMENT_BYTES
from attrib.cost import opaque
from attrib.cost import serving as sv
from attrib.cost.budget import Budget, model_shape
from attrib.cost.dtypes import Cost, unknown

if TYPE_CHECKING:
    from attrib.cost.registry import Call

# aten::cat records its inputs as a TensorList with no element type; the kernel names it
# (CatArrayBatchedCopy<OpaqueType<2u>, ...>): element bytes from the kernel, counts from the shapes.
CAT_KERNEL = CAT_ELEMENT_BYTES
# Paged attention ops get the KV cache from the forward context, not as an input: what they read
# depends on every request's context length, which vLLM's detailed step annotation sums up.
PAGED_ATTENTION = (r"^vllm::unified_(?:mla_)?attention|^_rocm_C::paged_attention"
                   r"|^aiter::paged_attention|^_C::paged_attention")
OPAQUE_MOE = opaque.OPAQUE_MOE
COLLECTIVE_KERNEL = sv.COLLECTIVE
SYMM_ALL_REDUCE = sv.SYMM_ALL_REDUCE


def cat_from_kernel(call: Call) -> Cost:
    """aten::cat: every input element read once and written once, at the kernel's element size."""
    size = int((call.kernel or {}).get("1") or 0)
    tensors = call.dims[0] if call.dims and isinstance(call.dims[0], list) else []
    if not size:
        return unknown("copy", "element size not in the kernel name")
    numel = sum(math.prod(t) for t in tensors if isinstance(t, list))
    return Cost(2.0 * numel * size, None, None, "copy")


def sliding(budget: Budget | None) -> tuple[float, int] | None:
    """(share of layers with a sliding window, the window) from a model config, or None."""
    if budget is None:
        return None
    try:
        m = model_shape(budget.config)
    except (KeyError, TypeError, ValueError):
        return None
    if not (m.sliding_layers and m.sliding_window and m.layers):
        return None
    return m.sliding_layers / m.layers, m.sliding_window


def paged_attention(call: Call) -> Cost:
    """A paged-attention call priced with its step's Σk, Σq·k (attrib.cost.serving); with a model
    config of sliding-window layers, those read at most their window (attrib.cost.serving)."""
    if not call.dims or not call.types or not call.sums:
        return unknown("attention", "paged-attention shapes or step sums not recorded")
    return sv.paged_attention(call.name, call.dims, call.types, call.concrete, dict(call.sums),
                              window=sliding(call.budget))


def moe_forward(call: Call) -> Cost:
    """vllm::moe_forward from the model config (attrib.cost.opaque)."""
    if call.budget is None:
        return unknown("moe", "no model config")
    return opaque.moe_forward(call.dims, call.types, call.budget)


def collective(call: Call) -> Cost:
    """A collective: shapes from record_param_comms, the collective from the kernel, the element
    type from the kernel (older NCCL names) or the recorded input."""
    groups = call.kernel or {}
    if call.world is None or not groups.get("1"):
        return unknown("collective", "collective or world size not recorded")
    return sv.collective(call.dims, groups["1"], groups.get("2"), call.world, call.types)


def symm_all_reduce(call: Call) -> Cost:
    """A symmetric-memory all-reduce from its buffer (attrib.cost.serving)."""
    if call.world is None:
        return unknown("collective", "world size not recorded")
    return sv.symm_all_reduce(call.dims, call.types, call.world)
