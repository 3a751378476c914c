"""Ops whose weights are not among their arguments, priced from a model config when one is given.

vLLM's `vllm::moe_forward(hidden[T, H'], router_logits[T, E], ...)` reaches its expert weights
through the layer (MXFP4 `matmul_ogs` kernels, fused MoE): only T and E are in the trace. With a
HF config (`--model`), a call reads the expected active experts' gate/up/down weights at the
experts' bits per weight, and moves the routed activations through both GEMMs.
"""

from __future__ import annotations

from math import prod

from attrib.cost.budget import Budget
from attrib.cost.dtypes import Cost, tensor, unknown
from attrib.cost.matmul import expected_active_experts
from attrib.cost.weights import bits_for

OPAQUE_MOE = ("vllm::moe_forward", "vllm::moe_forward_shared")


def moe_forward(dims: list, types: list, budget: Budget) -> Cost:
    """One vllm::moe_forward call: weights of E_active experts (uniform routing) at the experts'
    bits (model H and I), activations at the traced (possibly padded) hidden H': T*H' read and
    written plus T*k*(3H' + 2I) through gate_up (SwiGLU fused), down and the combine (a
    convention). FLOPs = 6*T*k*H*I."""
    x, logits = tensor(dims, types, 0), tensor(dims, types, 1)
    m = budget.shape()   # the rank's shard under tensor parallelism
    if x is None or not m.experts or not m.top_k:
        return unknown("moe", "hidden states not recorded, or the model config has no experts")
    t = prod(x.shape[:-1])
    e, k, h, i = (logits.shape[-1] if logits else m.experts), m.top_k, m.hidden, m.moe_intermediate
    bits = bits_for(budget.weight_bits, "experts")
    active = expected_active_experts(e, k, t)
    hx = x.shape[-1]
    nbytes = active * 3 * h * i * bits / 8 + 2 * t * hx * x.size + t * k * (3 * hx + 2 * i) * x.size
    tp = f", one rank of TP={budget.tp} (I split)" if budget.tp > 1 else ""
    why = (
        f"model config ({budget.source}){tp}: E_active = {active:.2f} of {e} "
        f"(uniform routing, T={t}, k={k}), "
        f"H={h}, I={i}, {bits:g} bits per expert weight"
    )
    return Cost(nbytes, 6.0 * t * k * h * i, x.dtype, "moe (model config)", why)
