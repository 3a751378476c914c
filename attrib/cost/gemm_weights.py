"""The weight bytes a step's dense GEMMs read, from their ops' shapes and dtypes: the operand that
is a layer's weight, read once a call whatever kernels the call launched (a GEMM and its split-K
reduce share one op).

The weight is `aten::linear`'s weight[N, K], `aten::mm`'s and `aten::matmul`'s second operand and
`aten::addmm`'s mat2 ([K, N], 2-D: a batched operand is an activation), vLLM's
`rocm_unquantized_gemm`'s and `_rocm_C::wvSplitK`'s weight[N, K]. A kernel is charged through its
innermost op (attrib.cost.kernels), so aten::linear > aten::mm counts the mm once. Low-bit GEMM ops
(int4pack, int8pack) are not here: their packed weights are priced by attrib.cost.lowbit.
"""

from __future__ import annotations

import orjson
import polars as pl

from attrib.cost.dtypes import tensor

# op name -> the argument that is the weight (vLLM ROCm's skinny GEMMs take the weight[N, K] first:
# csrc/rocm/torch_bindings.cpp, in_a)
WEIGHT_ARG = {"aten::linear": 1, "aten::mm": 1, "aten::matmul": 1, "aten::addmm": 2,
              "vllm::rocm_unquantized_gemm": 1, "_rocm_C::wvSplitK": 0, "_rocm_C::wvSplitKrc": 0}


def weight_bytes(op: str, dims: str | None, types: str | None) -> float | None:
    """The bytes of the weight operand of one call of `op` (its recorded Input Dims and Input
    type, JSON text); None when the op is no dense GEMM or the operand is not a 2-D tensor."""
    i = WEIGHT_ARG.get(op)
    if i is None or not dims or not types:
        return None
    w = tensor(orjson.loads(dims), orjson.loads(types), i)
    return w.nbytes if w is not None and len(w.shape) == 2 else None


def per_step(kernels: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """step, component, weight_bytes: the weights of the dense GEMM ops behind `kernels` (step,
    component, op_id), each op once; `ops` the trace's (id, name, input_dims, input_types)."""
    calls = kernels.lazy().select("step", "component", "op_id").drop_nulls().unique()
    named = ops.lazy().select(pl.col("id").alias("op_id"), pl.col("name").cast(pl.String),
                              "input_dims", "input_types")
    shaped = (calls.join(named, on="op_id", how="inner")
              .filter(pl.col("name").is_in(list(WEIGHT_ARG)), pl.col("input_dims").is_not_null(),
                      pl.col("input_types").is_not_null())
              .collect(engine="in-memory"))
    sigs = (shaped.lazy().select("name", "input_dims", "input_types").unique()
            .collect(engine="in-memory"))
    sized = sigs.with_columns(pl.Series("weight_bytes", [
        weight_bytes(*row) for row in sigs.iter_rows()], dtype=pl.Float64))
    return (shaped.lazy().join(sized.lazy(), on=["name", "input_dims", "input_types"], how="left")
            .filter(pl.col("weight_bytes").is_not_null())
            .group_by("step", "component").agg(pl.col("weight_bytes").sum())
            .collect(engine="in-memory"))


def median_per_step(per: pl.DataFrame, steps: pl.Series) -> dict[str, float]:
    """component -> the median over `steps` of its per-step weight bytes (a step without its
    GEMMs counts 0), as the component table takes its bytes."""
    if not per.height or not steps.len():
        return {}
    grid = (pl.LazyFrame({"step": steps}).unique()
            .join(per.lazy().select("component").unique(), how="cross")
            .join(per.lazy(), on=["step", "component"], how="left")
            .with_columns(pl.col("weight_bytes").fill_null(0.0)))
    med = grid.group_by("component").agg(pl.col("weight_bytes").median()).collect(
        engine="in-memory")
    return {str(c): float(b) for c, b in med.iter_rows() if b}
