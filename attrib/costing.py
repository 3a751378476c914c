"""Bytes and FLOPs per kernel, from the CPU op that launched it (shapes and dtypes).

Each kernel is charged through its innermost launching op only (nested ops such as aten::linear >
aten::mm are all priced, so charging outer ops too would count bytes twice). An op that launched
several kernels (a GEMM and its split-K reduce, an attention kernel and its combine) has its cost
shared among them by duration. Kernels with no op (graph replays, rocprof traces) or whose op has no
formula or no recorded shapes get null bytes: `bytes_known` says which kernels are priced.
"""

from __future__ import annotations

import orjson
import polars as pl

from attrib.cost import op_costs
from attrib.trace import Trace


# aten::cat records its inputs as a TensorList with no element type; the kernel names it
# (CatArrayBatchedCopy<OpaqueType<2u>, ...>): element bytes from the kernel, counts from the shapes.
_OPAQUE = r"OpaqueType<(\d+)u>"


def _cat_costs(trace: Trace, kernels: pl.DataFrame, costs: pl.DataFrame) -> pl.DataFrame:
    """Price aten::cat ops the shape model could not, from their kernel's element size."""
    cat = trace.ops.filter(pl.col("name") == "aten::cat").select(pl.col("id").alias("op_id"), "input_dims")
    elem = (kernels.filter(pl.col("op_id").is_in(cat["op_id"].implode()))
            .select("op_id", pl.col("name").str.extract(_OPAQUE, 1).cast(pl.Int64).alias("elem"))
            .drop_nulls().unique("op_id"))
    if elem.height == 0:
        return costs
    rows = []
    for op_id, dims, size in cat.join(elem, on="op_id").iter_rows():  # one row per distinct cat op
        tensors = (orjson.loads(dims) or [[]])[0] if dims else []
        numel = sum(_prod(t) for t in tensors if isinstance(t, list))
        rows.append((op_id, 2.0 * numel * size))  # every input element read once, written once
    priced = pl.DataFrame(rows, schema={"op_id": pl.Int64, "_cat": pl.Float64}, orient="row")
    use = pl.col("_ob").is_null() & pl.col("_cat").is_not_null()
    return costs.join(priced, on="op_id", how="left").with_columns(
        pl.when(use).then(pl.col("_cat")).otherwise(pl.col("_ob")).alias("_ob"),
        pl.when(use).then(pl.lit("cat (element size from kernel name)")).otherwise(pl.col("cost_model")).alias("cost_model"),
    ).drop("_cat")


def _prod(xs: list) -> int:
    n = 1
    for x in xs:
        n *= int(x)
    return n


def kernel_costs(trace: Trace, kernels: pl.DataFrame) -> pl.DataFrame:
    """`kernels` (id, op_id, dur_ns, ...) with bytes, flops, dtype, cost_model added."""
    costs = op_costs(trace.ops).select(
        pl.col("id").alias("op_id"), pl.col("bytes").alias("_ob"), pl.col("flops").alias("_of"),
        "dtype", "cost_model")
    costs = _cat_costs(trace, kernels, costs)
    k = kernels.join(costs, on="op_id", how="left")
    share = (pl.col("dur_ns").cast(pl.Float64) / pl.col("dur_ns").sum().over("op_id").cast(pl.Float64)).fill_nan(
        1.0 / pl.len().over("op_id"))
    share = pl.when(pl.col("dur_ns").sum().over("op_id") > 0).then(share).otherwise(1.0 / pl.len().over("op_id"))
    return k.with_columns((pl.col("_ob") * share).alias("bytes"), (pl.col("_of") * share).alias("flops")).drop("_ob", "_of")
