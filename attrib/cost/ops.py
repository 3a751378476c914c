"""Bytes and FLOPs per CPU op from its recorded shapes and dtypes.

`op_cost(name, dims, types, concrete)` prices one call; `op_costs(ops)` prices a whole `ops` table,
parsing the raw "Input Dims" JSON (orjson) only for ops that have a formula and only once per
distinct (name, dims, types, concrete) signature. Unknown stays null, never guessed.

Nested ops (aten::linear > aten::mm, sdpa > _cudnn_attention_forward, aten::to > _to_copy > copy_)
are each priced; charge a kernel to the innermost op that launched it, not to its ancestors too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from functools import partial

import orjson
import polars as pl

from attrib.cost import matmul as mm
from attrib.cost import elementwise as ew
from attrib.cost import inductor
from attrib.cost import serving as sv
from attrib.cost.dtypes import Cost, concrete_int, unknown

Formula = Callable[[list, list, list], Cost]

_ACTIVATIONS = ("silu", "gelu", "relu", "sigmoid", "tanh", "mish", "hardswish", "elu", "leaky_relu", "softplus")
_ELEMENTWISE = ("add", "sub", "mul", "div", "neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "pow", "abs",
                "sin", "cos", "erf", "clamp", "maximum", "minimum", "where", "masked_fill", "floor_divide",
                "remainder", "eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and", "bitwise_and",
                "fill", "zero")
_IO_ARGS = ("_C::silu_and_mul", "_C::gelu_and_mul", "_C::gelu_tanh_and_mul", "_C::mul_and_silu", "_C::rms_norm",
            "_C::static_scaled_fp8_quant", "_C::dynamic_scaled_fp8_quant",
            "_C::dynamic_per_token_scaled_fp8_quant", "aiter::rmsnorm2d_fwd_with_add_ck",
            "sgl_kernel::silu_and_mul", "sgl_kernel::gelu_and_mul", "sgl_kernel::gelu_tanh_and_mul",
            "sgl_kernel::rmsnorm", "aiter::rmsnorm", "aiter::add_rmsnorm", "aiter::rmsnorm2d_fwd_with_add",
            "_moe_C::topk_softmax")


def _registry() -> dict[str, Formula]:
    reg: dict[str, Formula] = {
        "aten::linear": mm.linear, "aten::addmm": mm.addmm, "aten::mm": mm.mm, "aten::matmul": mm.matmul,
        "aten::bmm": mm.bmm, "aten::baddbmm": mm.baddbmm, "aten::_scaled_mm": mm.scaled_mm,
        "vllm::rocm_unquantized_gemm": mm.unquantized_gemm,
        "aten::_grouped_mm": mm.grouped_mm,
        "vllm::fused_experts": mm.fused_experts, "vllm::inplace_fused_experts": mm.fused_experts,
        "vllm::outplace_fused_experts": mm.fused_experts,
        "aten::embedding": ew.embedding, "aten::index_select": ew.index_select, "aten::gather": ew.gather,
        "aten::index_copy_": ew.index_copy, "aten::index_copy": ew.index_copy,
        "aten::index_put_": ew.index_put, "aten::_index_put_impl_": ew.index_put,
        "_C_cache_ops::reshape_and_cache_flash": ew.reshape_and_cache,
        "_C_cache_ops::reshape_and_cache": ew.reshape_and_cache,
        "aten::rms_norm": ew.norm, "aten::_fused_rms_norm": ew.norm, "aten::layer_norm": ew.norm,
        "aten::native_layer_norm": ew.norm, "aiter::rms_norm": ew.norm, "vllm::rocm_aiter_rms_norm": ew.norm,
        "_C::fused_add_rms_norm": ew.fused_add_norm, "vllm::rocm_aiter_rmsnorm2d_fwd_with_add": ew.fused_add_norm,
        "aten::copy_": ew.copy_, "aten::cat": ew.cat,
        "aten::clone": partial(ew.clone, name="aten::clone"),
        "aten::contiguous": partial(ew.clone, name="aten::contiguous"),
        "aten::to": partial(ew.to_copy, name="aten::to"), "aten::_to_copy": partial(ew.to_copy, name="aten::_to_copy"),
        "aten::topk": ew.topk, "_C::rotary_embedding": sv.rotary, "sgl_kernel::rotary_embedding": sv.rotary,
        "aiter::rmsnorm2d_fwd": ew.norm, "sgl_kernel::fused_add_rmsnorm": ew.fused_add_norm,
        "sglang::store_cache": sv.store_cache, "_C_cache_ops::concat_and_cache_mla": sv.concat_and_cache_mla,
        "aiter::mha_batch_prefill": sv.mha_batch_prefill, "_flashmla_C::fwd_kvcache_mla": sv.fwd_kvcache_mla,
        "aiter::mha_fwd": partial(mm.attention, layout="blhd", causal_index=5, mask_index=None),
        "aiter::gemm_a16w16": mm.linear, "aiter::fmoe": sv.fmoe, "aiter::fused_moe_": mm.fused_experts,
        "TopK": sv.router_topk, "SortTokens": sv.sort_tokens,
        "aten::sort": ew.sort, "aten::cumsum": ew.scan, "aten::cumprod": ew.scan, "aten::histc": ew.histc,
        "aten::_conv_depthwise2d": partial(mm.convolution, stride=4, bias=3),
        "aten::convolution": mm.convolution, "aten::_convolution": mm.convolution, "aten::conv1d": mm.convolution,
        "aten::conv2d": mm.convolution,
    }
    for op in ("softmax", "_softmax", "log_softmax", "_log_softmax"):
        reg[f"aten::{op}"] = partial(ew.softmax, name=f"aten::{op}")
    for op in ("sum", "mean", "amax", "amin", "argmax", "argmin", "max", "min"):
        reg[f"aten::{op}"] = partial(ew.reduction, name=f"aten::{op}")
    for op in _ACTIVATIONS:
        for n in (f"aten::{op}", f"aten::{op}_"):
            reg[n] = partial(ew.activation, name=n)
    for op in _ELEMENTWISE:
        for n in (f"aten::{op}", f"aten::{op}_"):
            reg[n] = partial(ew.elementwise, name=n)
    for n in _IO_ARGS:
        reg[n] = partial(ew.io_args, name=n)
    for n, (layout, causal, mask) in mm.SDPA.items():
        reg[n] = partial(mm.attention, layout=layout, causal_index=causal, mask_index=mask)
    return reg


FORMULAS: Mapping[str, Formula] = _registry()
_TRITON = ("triton_poi_", "triton_red_", "triton_per_", "triton_tem_")
GROUPED = frozenset({"aten::_grouped_mm"})


def has_formula(name: str) -> bool:
    return name in FORMULAS or name.startswith(_TRITON)


def _load(text: str | None) -> list:
    if not text:
        return []
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return []
    return value if isinstance(value, list) else []


def op_cost(name: str, dims: list | str | None, types: list | str | None, concrete: list | str | None = None,
            top_k: int | None = None) -> Cost:
    """Price one op call. dims/types/concrete: the parsed lists or their raw JSON text."""
    d = _load(dims) if isinstance(dims, str) or dims is None else dims
    t = _load(types) if isinstance(types, str) or types is None else types
    c = _load(concrete) if isinstance(concrete, str) or concrete is None else concrete
    if name.startswith(_TRITON):
        return inductor.triton_kernel(d, t, c, name=name)
    fn = FORMULAS.get(name)
    if fn is None:
        return unknown("none", f"no cost formula for {name}")
    if not d:
        return unknown(fn([], [], []).model, "shapes not recorded (record_shapes off or graph replay)")
    try:
        return fn(d, t, c, top_k=top_k) if name in GROUPED else fn(d, t, c)
    except (TypeError, ValueError, IndexError, ZeroDivisionError):
        return unknown("malformed", "recorded shapes do not fit the op's signature")


def moe_top_k(ops: pl.DataFrame) -> dict[int, int]:
    """{num_experts: k}: the most common k of aten::topk calls, keyed by the last dim they select from
    (the router's expert count). Lets grouped-GEMM pricing use T = rows / k."""
    rows = ops.filter(pl.col("name") == "aten::topk").select("input_dims", "concrete_inputs").unique()
    votes: dict[int, Counter[int]] = {}
    for dims, conc in rows.iter_rows():
        d, c = _load(dims), _load(conc)
        k = concrete_int(c, 1)
        if d and isinstance(d[0], list) and d[0] and k:
            votes.setdefault(int(d[0][-1]), Counter())[k] += 1
    return {e: c.most_common(1)[0][0] for e, c in votes.items()}


_OUT = {"id": pl.Int64, "bytes": pl.Float64, "flops": pl.Float64, "dtype": pl.Utf8,
        "cost_model": pl.Utf8, "assumption": pl.Utf8}
_KEYS = ["name", "input_dims", "input_types", "concrete_inputs"]


def op_costs(ops: pl.DataFrame, top_k: int | Mapping[int, int] | None = None) -> pl.DataFrame:
    """One row per op of `ops`: id, bytes, flops, dtype, cost_model, assumption.

    Ops without a formula get cost_model null; ops with one but no recorded shapes get null bytes.
    top_k: the MoE router's k for grouped GEMMs (an int, or {num_experts: k}); inferred from the
    aten::topk calls in `ops` when None.
    """
    if ops.height == 0:
        return pl.DataFrame(schema=_OUT)
    ks = moe_top_k(ops) if top_k is None else top_k
    base = ops.select("id", *[pl.col(c).cast(pl.Utf8).fill_null("") for c in _KEYS])
    triton = pl.any_horizontal([pl.col("name").str.starts_with(p) for p in _TRITON])
    named = base.filter(pl.col("name").is_in(list(FORMULAS)) | triton)
    sigs = named.select(_KEYS).unique()
    rows = []
    for name, dims, types, conc in sigs.iter_rows():
        k = None
        d = _load(dims)
        if name in GROUPED:
            experts = d[1][0] if len(d) > 1 and isinstance(d[1], list) and d[1] else None
            k = ks if isinstance(ks, int) else ks.get(experts) if experts else None
        c = op_cost(name, d, _load(types), _load(conc), top_k=k)
        rows.append((name, dims, types, conc, c.bytes, c.flops, c.dtype, c.model, c.assumption))
    priced = pl.DataFrame(rows, schema={**{c: pl.Utf8 for c in _KEYS}, **{k: v for k, v in _OUT.items() if k != "id"}},
                          orient="row")
    # the string-keyed join over the ops that have a formula only; every op by its integer id
    got = named.join(priced, on=_KEYS, how="left").select(list(_OUT))
    out = ops.select("id").join(got, on="id", how="left", maintain_order="left")
    return out.select(list(_OUT)).cast(_OUT)  # type: ignore[arg-type]
