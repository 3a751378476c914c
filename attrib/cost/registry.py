"""The cost models: one registry, one signature.

Every model prices one op call, `price(call: Call) -> Cost`, and is registered (one `CostModel`
line in `MODELS`) against op names, op-name prefixes or an op-name pattern, and optionally a
kernel-name pattern whose named groups the call receives (`call.kernel`). A model that needs
more than the recorded shapes says so in `needs` (`step`: the step annotation's sums, `budget`:
a model config, `world`: the process group's size) and is tried only when that is known.
Models are tried in order; the first that prices an op (bytes not null) wins, so a model that
guesses less comes first (the shape formula of aten::cat before its kernel-name fallback).

A new cost model: a module with its `price` function, and one line in `MODELS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import msgspec
from msgspec import field

from attrib.components.patterns import SDPA_ARGS
from attrib.cost import bnb_int8 as bi8
from attrib.cost import elementwise as ew
from attrib.cost import inductor
from attrib.cost import lowbit as lb
from attrib.cost import matmul as mm
from attrib.cost import moe_lowbit as ml
from attrib.cost import name_models as nm
from attrib.cost import serving as sv
from attrib.cost import serving_lowbit as slb
from attrib.cost.budget import Budget
from attrib.cost.dtypes import Cost


class Call(msgspec.Struct, frozen=True):
    """One op call as the trace recorded it, and what a model may need beyond it."""

    name: str
    dims: list
    types: list
    concrete: list
    kernel: Mapping[str, str] | None = None  # the kernel pattern's named groups
    sums: Mapping[str, int] | None = None    # the step annotation's Σk, Σq·k (vLLM)
    budget: Budget | None = None
    world: int | None = None
    top_k: int | None = None                 # the MoE router's k (grouped GEMMs)
    tokens: int | None = None                # the router's token count T (grouped GEMMs)


Price = Callable[[Call], Cost]


class CostModel(msgspec.Struct, frozen=True):
    """A cost model and the names it prices."""

    price: Price
    ops: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()
    op_pattern: str | None = None
    kernel_pattern: str | None = None
    needs: frozenset[str] = field(default_factory=frozenset)
    label: str | None = None   # the cost_model written for its rows (else the Cost's model)

    @property
    def from_shapes(self) -> bool:
        """Prices from the recorded shapes alone (no kernel name, no context)."""
        return self.kernel_pattern is None and not self.needs


def shapes(fn: Callable[..., Cost], **kw: object) -> Price:
    """A shape formula `fn(dims, types, concrete, **kw)` as a cost model."""
    return lambda c: fn(c.dims, c.types, c.concrete, **kw)


def _grouped(c: Call) -> Cost:
    return mm.grouped_mm(c.dims, c.types, c.concrete, top_k=c.top_k, tokens=c.tokens)


def _scaled_grouped(c: Call) -> Cost:
    return mm.scaled_grouped_mm(c.dims, c.types, c.concrete, top_k=c.top_k, tokens=c.tokens)


def _triton(c: Call) -> Cost:
    return inductor.triton_kernel(c.dims, c.types, c.concrete, name=c.name)


_ACTIVATIONS = ("silu", "gelu", "relu", "sigmoid", "tanh", "mish", "hardswish", "elu",
                "leaky_relu", "softplus")
_ELEMENTWISE = ("add", "sub", "mul", "div", "neg", "exp", "log", "sqrt", "rsqrt", "reciprocal",
                "pow", "abs", "sin", "cos", "erf", "clamp", "maximum", "minimum", "where",
                "masked_fill", "floor_divide", "remainder", "eq", "ne", "lt", "le", "gt", "ge",
                "logical_not", "logical_and", "bitwise_and", "fill", "zero")
_IO_ARGS = ("_C::silu_and_mul", "_C::gelu_and_mul", "_C::gelu_tanh_and_mul", "_C::mul_and_silu",
            "_C::rms_norm", "_C::static_scaled_fp8_quant", "_C::dynamic_scaled_fp8_quant",
            "_C::dynamic_per_token_scaled_fp8_quant", "aiter::rmsnorm2d_fwd_with_add_ck",
            "sgl_kernel::silu_and_mul", "sgl_kernel::gelu_and_mul", "sgl_kernel::gelu_tanh_and_mul",
            "sgl_kernel::rmsnorm", "aiter::rmsnorm", "aiter::add_rmsnorm",
            "aiter::rmsnorm2d_fwd_with_add", "_moe_C::topk_softmax")
TRITON = ("triton_poi_", "triton_red_", "triton_per_", "triton_tem_")


def _each(names: tuple[str, ...], fn: Callable[..., Cost], **kw: object) -> list[CostModel]:
    """One model per name for a formula that takes the op's name."""
    return [CostModel(shapes(fn, name=n, **kw), ops=(n,)) for n in names]


def _with_inplace(ops: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"aten::{op}{s}" for op in ops for s in ("", "_"))


def _shape_models() -> list[CostModel]:
    one = CostModel
    out = [
        one(shapes(mm.linear), ops=("aten::linear", "aiter::gemm_a16w16")),
        one(shapes(mm.addmm), ops=("aten::addmm",)), one(shapes(mm.mm), ops=("aten::mm",)),
        one(shapes(mm.matmul), ops=("aten::matmul",)), one(shapes(mm.bmm), ops=("aten::bmm",)),
        one(shapes(mm.baddbmm), ops=("aten::baddbmm",)),
        one(shapes(mm.scaled_mm), ops=("aten::_scaled_mm",)),
        one(shapes(lb.weight_int4pack_mm), ops=("aten::_weight_int4pack_mm",
                                                "aten::_weight_int4pack_mm_for_cpu")),
        one(shapes(lb.weight_int8pack_mm), ops=("aten::_weight_int8pack_mm",)),
        one(shapes(mm.unquantized_gemm), ops=("vllm::rocm_unquantized_gemm",)),
        # serving stacks' low-bit and skinny GEMMs (attrib.cost.serving_lowbit)
        one(shapes(slb.awq_gemm), ops=("_C::awq_gemm",)),
        one(shapes(slb.gptq_gemm), ops=("_C::gptq_gemm",)),
        one(shapes(slb.marlin_gemm), ops=("_C::marlin_gemm", "_C::gptq_marlin_gemm")),
        one(shapes(slb.machete_mm), ops=("_C::machete_mm",)),
        one(shapes(slb.cutlass_scaled_mm), ops=("_C::cutlass_scaled_mm", "_C::cutlass_scaled_mm_azp")),
        one(shapes(slb.wv_split_k), ops=("_rocm_C::wvSplitK", "_rocm_C::wvSplitKrc")),
        one(shapes(slb.wv_split_kq), ops=("_rocm_C::wvSplitKQ",)),
        one(shapes(slb.wv_split_k_int4), ops=("_rocm_C::wvSplitK_int4_g",)),
        one(shapes(slb.aiter_gemm_a8w8_bpreshuffle_asm),
            ops=("aiter::_gemm_a8w8_blockscale_bpreshuffle_asm",)),
        one(shapes(slb.bnb_int8_matmul), ops=("bitsandbytes::int8_linear_matmul",)),
        one(shapes(slb.bnb_int8_scaled_mm), ops=("bitsandbytes::int8_scaled_mm",)),
        one(shapes(slb.bnb_int8_mm_dequant), ops=("bitsandbytes::int8_mm_dequant",)),
        one(_grouped, ops=("aten::_grouped_mm",)),
        one(_scaled_grouped, ops=("aten::_scaled_grouped_mm",)),
        one(shapes(bi8.int8_vectorwise_quant), ops=("bitsandbytes::int8_vectorwise_quant",)),
        one(shapes(bi8.int8_mixed_scaled_mm), ops=("bitsandbytes::int8_mixed_scaled_mm",)),
        one(shapes(ml.vllm_fused_experts), ops=("vllm::fused_experts", "vllm::inplace_fused_experts",
                                                "vllm::outplace_fused_experts")),
        one(shapes(ml.aiter_fused_moe), ops=("aiter::fused_moe_",)),
        one(shapes(ew.embedding), ops=("aten::embedding",)),
        one(shapes(ew.index_select), ops=("aten::index_select",)),
        one(shapes(ew.gather), ops=("aten::gather",)),
        one(shapes(ew.index_copy), ops=("aten::index_copy_", "aten::index_copy")),
        one(shapes(ew.index_put), ops=("aten::index_put_", "aten::_index_put_impl_")),
        one(shapes(ew.reshape_and_cache), ops=("_C_cache_ops::reshape_and_cache_flash",
                                               "_C_cache_ops::reshape_and_cache")),
        one(shapes(ew.norm), ops=("aten::rms_norm", "aten::_fused_rms_norm", "aten::layer_norm",
                                  "aten::native_layer_norm", "aiter::rms_norm",
                                  "vllm::rocm_aiter_rms_norm", "aiter::rmsnorm2d_fwd")),
        one(shapes(ew.fused_add_norm), ops=("_C::fused_add_rms_norm",
                                            "vllm::rocm_aiter_rmsnorm2d_fwd_with_add",
                                            "sgl_kernel::fused_add_rmsnorm")),
        one(shapes(ew.copy_), ops=("aten::copy_",)), one(shapes(ew.cat), ops=("aten::cat",)),
        one(shapes(ew.topk), ops=("aten::topk",)),
        one(shapes(sv.rotary), ops=("_C::rotary_embedding", "sgl_kernel::rotary_embedding")),
        one(shapes(sv.store_cache), ops=("sglang::store_cache",)),
        one(shapes(sv.concat_and_cache_mla), ops=("_C_cache_ops::concat_and_cache_mla",)),
        one(shapes(sv.mha_batch_prefill), ops=("aiter::mha_batch_prefill",)),
        one(shapes(sv.fwd_kvcache_mla), ops=("_flashmla_C::fwd_kvcache_mla",)),
        one(shapes(mm.attention, layout="blhd", causal_index=5, mask_index=None),
            ops=("aiter::mha_fwd",)),
        one(shapes(sv.fmoe), ops=("aiter::fmoe",)),
        one(shapes(sv.router_topk), ops=("TopK",)),
        one(shapes(sv.sort_tokens), ops=("SortTokens",)),
        one(shapes(ew.sort), ops=("aten::sort",)),
        one(shapes(ew.scan), ops=("aten::cumsum", "aten::cumprod")),
        one(shapes(ew.histc), ops=("aten::histc",)),
        one(shapes(mm.convolution, stride=4, bias=3), ops=("aten::_conv_depthwise2d",)),
        one(shapes(mm.convolution), ops=("aten::convolution", "aten::_convolution", "aten::conv1d",
                                         "aten::conv2d")),
        # cudnn_convolution(self, weight, padding, stride, dilation, groups, ...): no bias
        one(shapes(mm.convolution, stride=3, padding=2, dilation=4, bias=None),
            ops=("aten::cudnn_convolution",)),
        # miopen_convolution(self, weight, bias?, padding, stride, dilation, groups, ...)
        one(shapes(mm.convolution, stride=4, padding=3, dilation=5, bias=2),
            ops=("aten::miopen_convolution", "aten::miopen_depthwise_convolution")),
    ]
    out += _each(("aten::clone", "aten::contiguous"), ew.clone)
    out += _each(("aten::to", "aten::_to_copy"), ew.to_copy)
    out += _each(tuple(f"aten::{op}" for op in ("softmax", "_softmax", "log_softmax",
                                                 "_log_softmax")), ew.softmax)
    out += _each(tuple(f"aten::{op}" for op in ("sum", "mean", "amax", "amin", "argmax", "argmin",
                                                 "max", "min", "any", "all")), ew.reduction)
    out += _each(_with_inplace(_ACTIVATIONS), ew.activation)
    out += _each(_with_inplace(_ELEMENTWISE), ew.elementwise)
    out += _each(_IO_ARGS, ew.io_args)
    out += _each(("_moe_C::moe_wna16_marlin_gemm", "_moe_C::marlin_gemm_moe"), ml.marlin_moe)
    out += _each(tuple(slb.AITER_A8W8), slb.aiter_a8w8) + _each(tuple(slb.AITER_A4W4), slb.aiter_a4w4)
    out += [one(shapes(mm.attention, layout=lay, causal_index=causal, mask_index=mask), ops=(n,))
            for n, (lay, causal, mask) in SDPA_ARGS.items()]
    out.append(one(_triton, prefixes=TRITON))
    return out


def _context_models() -> list[CostModel]:
    """Models that need a kernel name or context the shapes do not give."""
    return [
        CostModel(nm.cat_from_kernel, ops=("aten::cat",), kernel_pattern=nm.CAT_KERNEL,
                  label="cat (element size from kernel name)"),
        CostModel(nm.paged_attention, op_pattern=nm.PAGED_ATTENTION, needs=frozenset({"step"}),
                  label="paged attention (vLLM step annotation Σk, Σq·k)"),
        CostModel(nm.moe_forward, ops=nm.OPAQUE_MOE, needs=frozenset({"budget"})),
        CostModel(nm.collective, ops=("record_param_comms",), kernel_pattern=nm.COLLECTIVE_KERNEL,
                  needs=frozenset({"world"}), label="collective (bus bytes)"),
        CostModel(slb.bnb_4bit_by_kernel, ops=("bitsandbytes::gemv_4bit", "bitsandbytes::gemm_4bit"),
                  kernel_pattern=slb.BNB4_KERNEL),
        CostModel(nm.symm_all_reduce, ops=nm.SYMM_ALL_REDUCE, needs=frozenset({"world"}),
                  label="collective (bus bytes)"),
    ]


MODELS: tuple[CostModel, ...] = tuple(_shape_models() + _context_models())
# op name -> its shape model (the fast path of attrib.cost.ops.op_costs)
BY_NAME: Mapping[str, CostModel] = {n: m for m in MODELS if m.from_shapes for n in m.ops}
PREFIXED: tuple[CostModel, ...] = tuple(m for m in MODELS if m.from_shapes and m.prefixes)
CONTEXT: tuple[CostModel, ...] = tuple(m for m in MODELS if not m.from_shapes)


def shape_model(name: str) -> CostModel | None:
    """The shape model registered for an op name (exact name, else prefix)."""
    hit = BY_NAME.get(name)
    return hit or next((m for m in PREFIXED if name.startswith(m.prefixes)), None)



def model_for(name: str) -> CostModel | None:
    """The cost model registered for an op name: its shape model, else one that needs more than the
    shapes (a kernel name, the step's sums, a model config, the world size); None: no model."""
    return shape_model(name) or next(
        (m for m in CONTEXT if name in m.ops or (m.op_pattern and re.search(m.op_pattern, name))),
        None)
