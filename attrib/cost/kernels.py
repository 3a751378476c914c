"""Bytes and FLOPs per kernel, from the CPU op that launched it (shapes and dtypes).

Each kernel is charged through its innermost launching op only (nested ops such as aten::linear >
aten::mm are all priced, so charging outer ops too would count bytes twice). An op that launched
several kernels (a GEMM and its split-K reduce, an attention kernel and its combine) has its cost
shared among them by duration. Kernels with no op (graph replays, rocprof traces) or whose op has no
formula or no recorded shapes get null bytes: `bytes_known` says which kernels are priced.
"""

from __future__ import annotations

import math

import orjson
import polars as pl

from attrib.components.patterns import CAT_ELEMENT_BYTES
from attrib.cost import opaque
from attrib.cost import serving as sv
from attrib.cost.budget import Budget
from attrib.cost.ops import op_costs
from attrib.cost.strides import stored_dims
from attrib.steps.phases import vllm_sums
from attrib.trace import Trace


# aten::cat records its inputs as a TensorList with no element type; the kernel names it
# (CatArrayBatchedCopy<OpaqueType<2u>, ...>): element bytes from the kernel, counts from the shapes.


def _cat_costs(trace: Trace, kernels: pl.DataFrame, costs: pl.DataFrame) -> pl.DataFrame:
    """Price aten::cat ops the shape model could not, from their kernel's element size."""
    cat = trace.ops.filter(pl.col("name") == "aten::cat").select(pl.col("id").alias("op_id"), "input_dims")
    elem = (kernels.filter(pl.col("op_id").is_in(cat["op_id"].implode()))
            .select("op_id", pl.col("name").str.extract(CAT_ELEMENT_BYTES, 1).cast(pl.Int64).alias("elem"))
            .drop_nulls().unique("op_id"))
    if elem.height == 0:
        return costs
    rows = []
    for op_id, dims, size in cat.join(elem, on="op_id").iter_rows():  # one row per distinct cat op
        tensors = (orjson.loads(dims) or [[]])[0] if dims else []
        numel = sum(math.prod(t) for t in tensors if isinstance(t, list))
        rows.append((op_id, 2.0 * numel * size))  # every input element read once, written once
    priced = pl.DataFrame(rows, schema={"op_id": pl.Int64, "_cat": pl.Float64}, orient="row")
    use = pl.col("_ob").is_null() & pl.col("_cat").is_not_null()
    return costs.join(priced, on="op_id", how="left").with_columns(
        pl.when(use).then(pl.col("_cat")).otherwise(pl.col("_ob")).alias("_ob"),
        pl.when(use).then(pl.lit("cat (element size from kernel name)")).otherwise(pl.col("cost_model")).alias("cost_model"),
    ).drop("_cat")


# Paged attention ops get the KV cache from the forward context, not as an input: what they read
# depends on every request's context length, which vLLM's detailed step annotation sums up.
PAGED_ATTENTION = (r"^vllm::unified_(?:mla_)?attention|^_rocm_C::paged_attention|^aiter::paged_attention"
                   r"|^_C::paged_attention")


_PRICED = {"op_id": pl.Int64, "_fb": pl.Float64, "_ff": pl.Float64, "_fd": pl.Utf8}


def _fill(costs: pl.DataFrame, priced: pl.DataFrame) -> pl.DataFrame:
    """Ops still unpriced take the price in `priced` (op_id, _fb bytes, _ff flops, _fd dtype, _fm model)."""
    use = pl.col("_ob").is_null() & pl.col("_fb").is_not_null()
    return costs.join(priced, on="op_id", how="left").with_columns(
        pl.when(use).then(pl.col("_fb")).otherwise(pl.col("_ob")).alias("_ob"),
        pl.when(use).then(pl.col("_ff")).otherwise(pl.col("_of")).alias("_of"),
        pl.when(use).then(pl.col("_fd")).otherwise(pl.col("dtype")).alias("dtype"),
        pl.when(use).then(pl.col("_fm")).otherwise(pl.col("cost_model")).alias("cost_model")
    ).drop("_fb", "_ff", "_fd", "_fm")


def _paged_attention_costs(trace: Trace, kernels: pl.DataFrame, steps: pl.DataFrame | None,
                           costs: pl.DataFrame) -> pl.DataFrame:
    """Price paged-attention ops (attrib.cost.serving.paged_attention) with their step's sums."""
    if steps is None or "marker" not in steps.columns:
        return costs
    sums = {s: v for s, v in ((s, vllm_sums(m)) for s, m in steps.select("step", "marker").iter_rows()) if v}
    ops = trace.ops.filter(pl.col("name").str.contains(PAGED_ATTENTION))
    if not sums or ops.height == 0:
        return costs
    op_step = (kernels.filter(pl.col("op_id").is_in(ops["id"].implode()) & pl.col("step").is_not_null())
               .select("op_id", "step").unique("op_id"))
    rows = []
    for op_id, step, name, dims, types, conc in op_step.join(
            ops.select(pl.col("id").alias("op_id"), "name", "input_dims", "input_types", "concrete_inputs"),
            on="op_id").iter_rows():  # one row per attention call
        if step in sums and dims and types:
            c = sv.paged_attention(name, orjson.loads(dims), orjson.loads(types),
                                   orjson.loads(conc) if conc else [], sums[step])
            if c.bytes is not None:
                rows.append((op_id, c.bytes, c.flops, c.dtype))
    if not rows:
        return costs
    return _fill(costs, pl.DataFrame(rows, schema=_PRICED, orient="row").with_columns(
        pl.lit("paged attention (vLLM step annotation Σk, Σq·k)").alias("_fm")))


def _opaque_costs(trace: Trace, costs: pl.DataFrame, budget: Budget | None) -> pl.DataFrame:
    """Price ops whose weights are not arguments (attrib.cost.opaque) from the model config."""
    ops = trace.ops.filter(pl.col("name").is_in(opaque.OPAQUE_MOE))
    if budget is None or ops.height == 0:
        return costs
    rows = []
    for dims, types in ops.select("input_dims", "input_types").unique().iter_rows():
        c = opaque.moe_forward(orjson.loads(dims or "[]"), orjson.loads(types or "[]"), budget)
        rows.append((dims, types, c.bytes, c.flops, c.dtype, c.model))
    priced = ops.select(pl.col("id").alias("op_id"), "input_dims", "input_types").join(
        pl.DataFrame(rows, schema={"input_dims": pl.Utf8, "input_types": pl.Utf8, "_fb": pl.Float64, "_ff": pl.Float64,
                                   "_fd": pl.Utf8, "_fm": pl.Utf8}, orient="row"),
        on=["input_dims", "input_types"], how="left", nulls_equal=True).drop("input_dims", "input_types")
    return _fill(costs, priced)


def _collective_costs(trace: Trace, kernels: pl.DataFrame, costs: pl.DataFrame) -> pl.DataFrame:
    """Price collectives (attrib.cost.serving.collective) from record_param_comms' shapes, the kernel
    name's collective and element type, and the process group's world size."""
    info = (trace.meta.top or {}).get("distributedInfo") or {}
    world = info.get("world_size") if isinstance(info, dict) else None
    ops = trace.ops.filter(pl.col("name") == "record_param_comms")
    if not isinstance(world, int) or ops.height == 0:
        return costs
    k = (kernels.filter(pl.col("op_id").is_in(ops["id"].implode()))
         .select("op_id", pl.col("name").str.extract_groups(sv.COLLECTIVE).alias("g"))
         .unnest("g").drop_nulls().unique("op_id"))
    if k.height == 0:
        return costs
    rows = []
    for op_id, coll, elt, dims in k.join(ops.select(pl.col("id").alias("op_id"), "input_dims"), on="op_id").iter_rows():
        c = sv.collective(orjson.loads(dims or "[]"), coll, elt, world)
        if c.bytes is not None:
            rows.append((op_id, c.bytes, c.flops, c.dtype))
    if not rows:
        return costs
    return _fill(costs, pl.DataFrame(rows, schema=_PRICED, orient="row").with_columns(
        pl.lit("collective (bus bytes)").alias("_fm")))


def kernel_costs(trace: Trace, kernels: pl.DataFrame, steps: pl.DataFrame | None = None,
                 budget: Budget | None = None) -> pl.DataFrame:
    """`kernels` (id, op_id, step, dur_ns, ...) with bytes, flops, dtype, cost_model added.

    budget: a model config (`--model`) that prices ops whose weights the trace does not show."""
    costs = op_costs(stored_dims(trace.ops)).select(
        pl.col("id").alias("op_id"), pl.col("bytes").alias("_ob"), pl.col("flops").alias("_of"),
        "dtype", "cost_model")
    costs = _cat_costs(trace, kernels, costs)
    costs = _paged_attention_costs(trace, kernels, steps, costs)
    costs = _opaque_costs(trace, costs, budget)
    costs = _collective_costs(trace, kernels, costs)
    k = kernels.join(costs, on="op_id", how="left")
    share = (pl.col("dur_ns").cast(pl.Float64) / pl.col("dur_ns").sum().over("op_id").cast(pl.Float64)).fill_nan(
        1.0 / pl.len().over("op_id"))
    share = pl.when(pl.col("dur_ns").sum().over("op_id") > 0).then(share).otherwise(1.0 / pl.len().over("op_id"))
    return k.with_columns((pl.col("_ob") * share).alias("bytes"), (pl.col("_of") * share).alias("flops")).drop("_ob", "_of")
