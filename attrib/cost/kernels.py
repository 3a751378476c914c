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
from attrib.cost.dtypes import TYPES
from attrib.cost.ops import op_costs
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
PAGED_ATTENTION = r"^vllm::unified_attention|^_rocm_C::paged_attention|^aiter::paged_attention|^_C::paged_attention"


def _paged_attention_costs(trace: Trace, kernels: pl.DataFrame, steps: pl.DataFrame | None,
                           costs: pl.DataFrame) -> pl.DataFrame:
    """Price paged-attention ops from their q/k shapes and the step's Σk and Σq·k (vLLM annotation):
    K/V read at every request's full context (sliding-window layers read less: an upper bound)."""
    if steps is None or "marker" not in steps.columns:
        return costs
    sums = {s: v for s, v in ((s, vllm_sums(m)) for s, m in steps.select("step", "marker").iter_rows()) if v}
    ops = trace.ops.filter(pl.col("name").str.contains(PAGED_ATTENTION))
    if not sums or ops.height == 0:
        return costs
    op_step = (kernels.filter(pl.col("op_id").is_in(ops["id"].implode()) & pl.col("step").is_not_null())
               .select("op_id", "step").unique("op_id"))
    rows = []
    for op_id, step, dims, types in op_step.join(ops.select(pl.col("id").alias("op_id"), "input_dims", "input_types"),
                                                on="op_id").iter_rows():  # one row per attention call
        got = _paged(dims, types, sums.get(step))
        if got:
            rows.append((op_id, *got))
    if not rows:
        return costs
    priced = pl.DataFrame(rows, schema={"op_id": pl.Int64, "_pb": pl.Float64, "_pf": pl.Float64, "_pd": pl.Utf8},
                          orient="row")
    use = pl.col("_ob").is_null() & pl.col("_pb").is_not_null()
    return costs.join(priced, on="op_id", how="left").with_columns(
        pl.when(use).then(pl.col("_pb")).otherwise(pl.col("_ob")).alias("_ob"),
        pl.when(use).then(pl.col("_pf")).otherwise(pl.col("_of")).alias("_of"),
        pl.when(use).then(pl.col("_pd")).otherwise(pl.col("dtype")).alias("dtype"),
        pl.when(use).then(pl.lit("paged attention (vLLM step annotation Σk, Σq·k)"))
        .otherwise(pl.col("cost_model")).alias("cost_model")).drop("_pb", "_pf", "_pd")


def _paged(dims: str | None, types: str | None, sums: dict[str, int] | None) -> tuple[float, float, str] | None:
    """(bytes, flops, dtype) of one paged-attention call: q [T, H, D], k [T, KVH, D] as inputs 0 and 1."""
    if not sums or not dims or not types:
        return None
    d, t = orjson.loads(dims), orjson.loads(types)
    if len(d) < 2 or len(d[0]) != 3 or len(d[1]) != 3 or t[0] not in TYPES:
        return None
    (tokens, heads, hd), (_, kv_heads, kd) = d[0], d[1]
    dtype, elt = TYPES[t[0]]
    kv_read = sums["sk"] * 2 * kv_heads * kd * elt
    qo = 2 * tokens * heads * hd * elt
    return float(kv_read + qo), float(4 * sums["sqsk"] * heads * hd), dtype


def kernel_costs(trace: Trace, kernels: pl.DataFrame, steps: pl.DataFrame | None = None) -> pl.DataFrame:
    """`kernels` (id, op_id, step, dur_ns, ...) with bytes, flops, dtype, cost_model added."""
    costs = op_costs(trace.ops).select(
        pl.col("id").alias("op_id"), pl.col("bytes").alias("_ob"), pl.col("flops").alias("_of"),
        "dtype", "cost_model")
    costs = _cat_costs(trace, kernels, costs)
    costs = _paged_attention_costs(trace, kernels, steps, costs)
    k = kernels.join(costs, on="op_id", how="left")
    share = (pl.col("dur_ns").cast(pl.Float64) / pl.col("dur_ns").sum().over("op_id").cast(pl.Float64)).fill_nan(
        1.0 / pl.len().over("op_id"))
    share = pl.when(pl.col("dur_ns").sum().over("op_id") > 0).then(share).otherwise(1.0 / pl.len().over("op_id"))
    return k.with_columns((pl.col("_ob") * share).alias("bytes"), (pl.col("_of") * share).alias("flops")).drop("_ob", "_of")
