"""The MoE router GEMM by shape, where no module scope names it (with_stack off).

A router projects the hidden state [T, K] to one logit per expert [T, E] (E < K), and the next
thing done with its output is routing: a softmax or top-k over exactly E values, before any other
GEMM on the thread (vLLM's `topk_softmax` / `grouped_topk` take those logits as one of their
inputs). Other GEMMs with N = E are not routed: Qwen3-Next's `in_proj_ba` (N = 2 x value heads,
16 there as the expert count) feeds the delta rule (sigmoid, softplus over 8 values), never a
top-k.
"""

from __future__ import annotations

import orjson
import polars as pl

from attrib.components.patterns import GEMM_OPS, GEMM_WEIGHTS, ROUTING_OPS


def gemm_nk(name: str, dims: str | None) -> tuple[int, int] | None:
    """(N, K) of a 2-D GEMM op call from its recorded input dims (the weight's place and layout:
    patterns.GEMM_WEIGHTS); None when not recorded or not such an op."""
    if name not in GEMM_WEIGHTS:
        return None
    at, layout = GEMM_WEIGHTS[name]
    try:
        w = orjson.loads(dims or "[]")[at]
        n, k = (w[0], w[1]) if layout == "NK" else (w[-1], w[-2])
        return int(n), int(k)
    except (orjson.JSONDecodeError, IndexError, TypeError, ValueError):
        return None


def _last_dims(dims: str | None) -> list[int]:
    """The last dim of every tensor input (softmax/topk route their one input; vLLM's topk_softmax
    and grouped_topk take the gating output [T, E] beside [T, k] outputs and the hidden state)."""
    try:
        d = orjson.loads(dims or "[]")
    except orjson.JSONDecodeError:
        return []
    return sorted({int(t[-1]) for t in d if isinstance(t, list) and t and isinstance(t[-1], int)})


def routers(ops: pl.DataFrame, k: pl.DataFrame) -> pl.Series:
    """Ids of the kernels in `k` (id, op_id, op, comp) that are an unnamed (comp null) router
    GEMM."""
    route = ops.filter(pl.col("name").str.contains(ROUTING_OPS))
    if route.height == 0:  # most traces: no routing op, no GEMM to look at
        return pl.Series("id", [], pl.Int64)
    gemm_k = k.filter(pl.col("op").is_in(list(GEMM_OPS)).fill_null(False))
    if gemm_k.filter(pl.col("comp").is_null()).height == 0:
        return pl.Series("id", [], pl.Int64)
    g = (ops.filter(pl.col("id").is_in(gemm_k["op_id"].unique().implode()))
         .select("id", "name", "input_dims", "start_ns", "pid", "tid").sort("start_ns")
         .with_columns(pl.col("start_ns").shift(-1).over("pid", "tid").alias("_next")))
    sig = g.select("name", "input_dims").unique()
    nk = [gemm_nk(n, d) for n, d in sig.iter_rows()]  # one parse per distinct GEMM signature
    sig = sig.with_columns(pl.Series("_n", [x[0] if x else None for x in nk], pl.Int64),
                           pl.Series("_k", [x[1] if x else None for x in nk], pl.Int64))
    g = g.join(sig, on=["name", "input_dims"], how="left", nulls_equal=True)
    g = g.filter(pl.col("_n") < pl.col("_k"))
    dims = route.select("input_dims").unique()
    last = pl.Series("_n", [_last_dims(d) for d in dims["input_dims"]], pl.List(pl.Int64))
    dims = dims.with_columns(last).explode("_n")
    r = route.join(dims, on="input_dims", how="inner", nulls_equal=True).select(
        "pid", "tid", "_n", pl.col("start_ns").alias("_r"))
    before_next = pl.col("_next").is_null() | (pl.col("_r") < pl.col("_next"))
    hit = g.join(r, on=["pid", "tid", "_n"]).filter(
        (pl.col("_r") > pl.col("start_ns")) & before_next)
    ids = hit["id"].unique().implode()
    return k.filter(pl.col("comp").is_null() & pl.col("op_id").is_in(ids))["id"]
