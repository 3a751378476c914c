"""Bytes and FLOPs per kernel, from the CPU op that launched it (shapes and dtypes).

Each kernel is charged through its innermost launching op only (nested ops such as aten::linear >
aten::mm are all priced, so charging outer ops too would count bytes twice). An op that launched
several kernels (a GEMM and its split-K reduce, an attention kernel and its combine) has its cost
shared among them by duration. Kernels with no op (graph replays, rocprof traces) or whose op has no
formula or no recorded shapes get null bytes (but a low-bit GEMM launched outside every op, priced
from the ops beside its launch: attrib.cost.launched): `bytes_known` says which kernels are priced.

Ops are priced by the cost models of attrib.cost.registry: the shape models over each distinct
signature (attrib.cost.ops), then each model that needs a kernel name or context, over the ops
still unpriced.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
import polars as pl

from attrib.cost.block_scale_moe import moe_kernel_costs
from attrib.cost.budget import Budget
from attrib.cost.launched import launched_costs
from attrib.cost.ops import moe_top_k, op_costs
from attrib.cost.registry import CONTEXT, Call, CostModel
from attrib.cost.strides import stored_dims
from attrib.steps.phases import vllm_requests, vllm_sums
from attrib.trace import Trace

_PRICED = {"op_id": pl.Int64, "_fb": pl.Float64, "_ff": pl.Float64, "_fd": pl.Utf8, "_fm": pl.Utf8}
_KEYS = ["name", "input_dims", "input_types", "concrete_inputs"]
_OP_COLS = ("id", *_KEYS, "input_strides")  # what the cost models read of an op


def _fill(costs: pl.DataFrame, priced: pl.DataFrame) -> pl.DataFrame:
    """Ops still unpriced take the price in `priced` (op_id, _fb bytes, _ff flops, _fd dtype,
    _fm model)."""
    use = pl.col("_ob").is_null() & pl.col("_fb").is_not_null()
    return costs.join(priced, on="op_id", how="left").with_columns(
        pl.when(use).then(pl.col("_fb")).otherwise(pl.col("_ob")).alias("_ob"),
        pl.when(use).then(pl.col("_ff")).otherwise(pl.col("_of")).alias("_of"),
        pl.when(use).then(pl.col("_fd")).otherwise(pl.col("dtype")).alias("dtype"),
        pl.when(use).then(pl.col("_fm")).otherwise(pl.col("cost_model")).alias("cost_model")
    ).drop("_fb", "_ff", "_fd", "_fm")


def world_size(trace: Trace) -> int | None:
    """The process group's size from the trace's distributedInfo, or None."""
    info = (trace.meta.top or {}).get("distributedInfo") or {}
    world = info.get("world_size") if isinstance(info, dict) else None
    return world if isinstance(world, int) else None


def _step_sums(steps: pl.DataFrame | None) -> dict[int, dict[str, int]]:
    if steps is None or "marker" not in steps.columns:
        return {}
    markers = steps.select("step", "marker").iter_rows()
    pairs = ((s, vllm_sums(m), vllm_requests(m)) for s, m in markers)
    return {s: v | {"requests": n or 0} for s, v, n in pairs if v}


def _matching(model: CostModel, ops: pl.DataFrame) -> pl.DataFrame:
    hit = pl.col("name").is_in(list(model.ops)) if model.ops else pl.lit(False)
    if model.prefixes:
        hit = hit | pl.any_horizontal([pl.col("name").str.starts_with(p) for p in model.prefixes])
    if model.op_pattern:
        hit = hit | pl.col("name").str.contains(model.op_pattern)
    return ops.filter(hit)


def _calls(model: CostModel, ops: pl.DataFrame, kernels: pl.DataFrame,
           sums: Mapping[int, Mapping[str, int]]) -> pl.DataFrame:
    """The model's ops (op_id and the keys), with the kernel pattern's groups and the step."""
    calls = ops.select(pl.col("id").alias("op_id"), *_KEYS)
    mine = kernels.filter(pl.col("op_id").is_in(calls["op_id"].implode()))
    if model.kernel_pattern:
        groups = (mine.select("op_id", pl.col("name").str.extract_groups(model.kernel_pattern)
                              .alias("g")).unnest("g"))
        cols = [c for c in groups.columns if c != "op_id"]
        # a kernel the pattern matched (an optional group may stay null)
        groups = groups.filter(pl.col(cols[0]).is_not_null()).unique("op_id")
        groups = groups.select("op_id", pl.struct(cols).alias("_kernel"))
        calls = calls.join(groups, on="op_id")
    if "step" in model.needs:
        step = (mine.filter(pl.col("step").is_not_null()).select("op_id", "step").unique("op_id"))
        calls = calls.join(step.filter(pl.col("step").is_in(list(sums))), on="op_id")
    return calls


def _price(model: CostModel, calls: pl.DataFrame, budget: Budget | None, world: int | None,
           sums: Mapping[int, Mapping[str, int]]) -> pl.DataFrame:
    """(op_id, _fb, _ff, _fd, _fm) of the calls the model prices, each distinct call priced once."""
    keys = [c for c in calls.columns if c != "op_id"]
    rows = []
    for row in calls.select(keys).unique().iter_rows(named=True):
        c = model.price(Call(
            row["name"], orjson.loads(row["input_dims"] or "[]"),
            orjson.loads(row["input_types"] or "[]"), orjson.loads(row["concrete_inputs"] or "[]"),
            kernel=row.get("_kernel"), sums=sums.get(row["step"]) if "step" in row else None,
            budget=budget, world=world))
        if c.bytes is not None:
            rows.append((*row.values(), c.bytes, c.flops, c.dtype, model.label or c.model))
    out = {k: calls.schema[k] for k in keys} | {k: v for k, v in _PRICED.items() if k != "op_id"}
    priced = pl.DataFrame(rows, schema=out, orient="row")
    return calls.join(priced, on=keys, how="inner", nulls_equal=True).select(list(_PRICED))


def _context_costs(trace: Trace, ops: pl.DataFrame, kernels: pl.DataFrame,
                   steps: pl.DataFrame | None, budget: Budget | None,
                   costs: pl.DataFrame) -> pl.DataFrame:
    """The ops still unpriced, through each model that needs a kernel name or context.

    Each model sees the ops no earlier model priced; their prices are disjoint, so the
    costs are filled once, from all of them (a join of every op per model was the peak)."""
    have = {"budget": budget is not None, "world": world_size(trace) is not None}
    sums = _step_sums(steps)
    have["step"] = bool(sums)
    found: list[pl.DataFrame] = []
    unpriced = costs.filter(pl.col("_ob").is_null())["op_id"]
    for model in CONTEXT:
        if not all(have[n] for n in model.needs):
            continue
        mine = _matching(model, ops.filter(pl.col("id").is_in(unpriced.implode())))
        if mine.height == 0:
            continue
        calls = _calls(model, mine, kernels, sums)
        if calls.height:
            found.append(_price(model, calls, budget, world_size(trace), sums))
            done = found[-1]["op_id"].implode()
            unpriced = unpriced.filter(~unpriced.is_in(done))
    return _fill(costs, pl.concat(found)) if found else costs


def kernel_costs(trace: Trace, kernels: pl.DataFrame, steps: pl.DataFrame | None = None,
                 budget: Budget | None = None) -> pl.DataFrame:
    """`kernels` (id, op_id, step, dur_ns, ...) with bytes, flops, dtype, cost_model added.

    budget: a model config (`--model`) that prices ops whose weights the trace does not show."""
    # only an op that launched a kernel is charged: the others are not priced
    launched = kernels["op_id"].drop_nulls().unique().implode()
    ops = trace.ops.select(pl.col(c) for c in _OP_COLS if c in trace.ops.columns)
    ops = ops.filter(pl.col("id").is_in(launched))
    top_k = moe_top_k(trace.ops) if ops.height else None  # the router's k, from every op
    costs = op_costs(stored_dims(ops), top_k=top_k).select(
        pl.col("id").alias("op_id"), pl.col("bytes").alias("_ob"), pl.col("flops").alias("_of"),
        "dtype", "cost_model")
    costs = _context_costs(trace, ops, kernels, steps, budget, costs)
    # each window once, as a column: an eager query does not share repeated subexpressions
    k = kernels.join(costs, on="op_id", how="left", maintain_order="left").with_columns(
        pl.col("dur_ns").sum().over("op_id").alias("_total"), pl.len().over("op_id").alias("_n"))
    total, n = pl.col("_total"), pl.col("_n")
    share = (pl.col("dur_ns").cast(pl.Float64) / total.cast(pl.Float64)).fill_nan(1.0 / n)
    k = k.with_columns(pl.when(total > 0).then(share).otherwise(1.0 / n).alias("_share"))
    k = k.with_columns((pl.col("_ob") * pl.col("_share")).alias("bytes"),
                       (pl.col("_of") * pl.col("_share")).alias("flops")).drop(
        "_ob", "_of", "_total", "_n", "_share")
    k = _with_moe(k, moe_kernel_costs(trace.ops, kernels))
    return _with_launched(k, launched_costs(trace, kernels))


def _with_moe(k: pl.DataFrame, got: pl.DataFrame) -> pl.DataFrame:
    """The kernels of a fused MoE op priced kernel by kernel (attrib.cost.block_scale_moe) take
    those prices, over the op's shared (model-config) estimate: null where it priced none."""
    if not got.height:
        return k
    return k.join(got.with_columns(pl.lit(True).alias("_in")), on="id", how="left",
                  maintain_order="left").with_columns(
        pl.col("_in").fill_null(False)).with_columns(
        *[pl.when(pl.col("_in")).then(pl.col(f)).otherwise(pl.col(c)).alias(c)
          for f, c in (("_mb", "bytes"), ("_mf", "flops"), ("_md", "dtype"), ("_mm", "cost_model"))]
    ).drop("_mb", "_mf", "_md", "_mm", "_in")


def _with_launched(k: pl.DataFrame, got: pl.DataFrame) -> pl.DataFrame:
    """Kernels launched with no op take the price their launch's ops give (attrib.cost.launched)."""
    if not got.height:
        return k
    use = pl.col("_lb").is_not_null() & pl.col("bytes").is_null()
    return k.join(got, on="id", how="left", maintain_order="left").with_columns(
        *[pl.when(use).then(pl.col(f)).otherwise(pl.col(c)).alias(c)
          for f, c in (("_lb", "bytes"), ("_lf", "flops"), ("_ld", "dtype"), ("_lm", "cost_model"))]
    ).drop("_lb", "_lf", "_ld", "_lm")
