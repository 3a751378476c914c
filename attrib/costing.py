"""Bytes and FLOPs per kernel, from the CPU op that launched it (shapes and dtypes).

Each kernel is charged through its innermost launching op only (nested ops such as aten::linear >
aten::mm are all priced, so charging outer ops too would count bytes twice). An op that launched
several kernels (a GEMM and its split-K reduce, an attention kernel and its combine) has its cost
shared among them by duration. Kernels with no op (graph replays, rocprof traces) or whose op has no
formula or no recorded shapes get null bytes: `bytes_known` says which kernels are priced.
"""

from __future__ import annotations

import polars as pl

from attrib.cost import op_costs
from attrib.trace import Trace


def kernel_costs(trace: Trace, kernels: pl.DataFrame) -> pl.DataFrame:
    """`kernels` (id, op_id, dur_ns, ...) with bytes, flops, dtype, cost_model added."""
    costs = op_costs(trace.ops).select(
        pl.col("id").alias("op_id"), pl.col("bytes").alias("_ob"), pl.col("flops").alias("_of"),
        "dtype", "cost_model")
    k = kernels.join(costs, on="op_id", how="left")
    share = (pl.col("dur_ns").cast(pl.Float64) / pl.col("dur_ns").sum().over("op_id").cast(pl.Float64)).fill_nan(
        1.0 / pl.len().over("op_id"))
    share = pl.when(pl.col("dur_ns").sum().over("op_id") > 0).then(share).otherwise(1.0 / pl.len().over("op_id"))
    return k.with_columns((pl.col("_ob") * share).alias("bytes"), (pl.col("_of") * share).alias("flops")).drop("_ob", "_of")
