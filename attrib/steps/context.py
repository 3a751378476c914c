"""Context length (K/V positions read per sequence) of each step: from the attention ops' shapes,
the vLLM step annotation, or the capture's provenance stamp plus the decode steps since the
prefill.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
import polars as pl

from attrib.components.patterns import SDPA, SDPA_ARGS, SDPA_CPU_FLASH
from attrib.reads import Reads
from attrib.steps.phases import vllm_sums

# Ops whose input 1 is K laid out [batch, kv_heads, positions, head_dim]: positions = dims[1][-2].
# (the public op and its backends' aten::_scaled_dot_product_* ops, the math fallback aside)
SDPA_OPS = (SDPA, SDPA_CPU_FLASH,
            *(n for n in SDPA_ARGS
              if n.startswith("aten::_scaled_dot_product_") and not n.endswith("_math")))
READS = Reads(ops=tuple(f"^{re.escape(o)}$" for o in SDPA_OPS))  # attention ops with K
_STEP_CONTEXT = {"step": pl.Int64, "context": pl.Int64}


def _k_positions(dims: str | None) -> int | None:
    try:
        k = orjson.loads(dims)[1] if dims else None
    except (orjson.JSONDecodeError, IndexError, TypeError):
        return None
    return int(k[-2]) if isinstance(k, list) and len(k) == 4 and isinstance(k[-2], int) else None


def from_shapes(ops: pl.DataFrame | None, steps: pl.DataFrame) -> pl.DataFrame:
    """step, context: the median K length of the SDPA ops inside each step's CPU window."""
    empty = pl.DataFrame(schema=_STEP_CONTEXT)
    if ops is None or "input_dims" not in ops.columns or "cpu_start" not in steps.columns:
        return empty
    att = ops.filter(pl.col("name").is_in(SDPA_OPS) & pl.col("input_dims").is_not_null())
    if not att.height:
        return empty
    # a Python loop, not map_elements: polars inspects a map_elements function's bytecode on
    # each call (~3 ms CPU at a start, importing its udfs module)
    k_len = pl.Series("context", [_k_positions(d) for d in att["input_dims"]], dtype=pl.Int64)
    win = (steps.lazy().filter(pl.col("cpu_start").is_not_null())
           .select("step", "cpu_start", "cpu_end").sort("cpu_start"))
    hit = (att.lazy().select("start_ns", k_len).drop_nulls().sort("start_ns")
           .join_asof(win, left_on="start_ns", right_on="cpu_start", strategy="backward")
           .filter(pl.col("start_ns") < pl.col("cpu_end")))
    median = pl.col("context").median().round(0).cast(pl.Int64)
    return hit.group_by("step").agg(median).collect(engine="in-memory")


def from_annotation(steps: pl.DataFrame) -> pl.DataFrame:
    """step, context: in decode steps (one query token per request, so Σq counts the requests),
    vLLM's Σk over the step's requests divided by Σq: the mean context per sequence."""
    rows = []
    for step, phase, marker in steps[["step", "phase", "marker"]].iter_rows():
        sums = vllm_sums(marker) if phase == "decode" else None
        if sums and sums["sk"] and sums["sq"]:
            rows.append((step, round(sums["sk"] / sums["sq"])))
    return pl.DataFrame(rows, schema=_STEP_CONTEXT, orient="row")


def from_provenance(steps: pl.DataFrame, provenance: dict[str, Any]) -> pl.DataFrame:
    """step, context: the stamp's context_length (the prompt) plus the decode steps since the last
    prefill (decode step n after a prefill of P positions reads P + n); the prefill reads P."""
    base = provenance.get("context_length")
    if not isinstance(base, int) or base <= 0:
        return pl.DataFrame(schema=_STEP_CONTEXT)
    generation = (pl.col("phase") == "prefill").cum_sum().alias("_gen")
    s = steps.lazy().sort("window_start").with_columns(generation)
    s = s.with_columns(pl.when(pl.col("phase") == "decode")
                       .then(pl.lit(base) + pl.col("phase").eq("decode").cum_sum().over("_gen"))
                       .otherwise(pl.lit(base)).cast(pl.Int64).alias("context"))
    return s.select("step", "context").collect(engine="in-memory")


def step_context(steps: pl.DataFrame, ops: pl.DataFrame | None,
                 provenance: dict[str, Any]) -> pl.DataFrame:
    """step, context, context_from: shapes first, then the vLLM annotation, then the provenance
    stamp."""
    out = steps.lazy().select("step", pl.lit(None, pl.Int64).alias("context"),
                              pl.lit(None, pl.Utf8).alias("context_from"))
    sources = (("attention shapes", from_shapes(ops, steps)),
               ("step annotation", from_annotation(steps)),
               ("provenance context_length", from_provenance(steps, provenance)))
    for name, got in sources:
        out = out.join(got.lazy().rename({"context": "_c"}), on="step", how="left")
        out = out.with_columns(
            pl.when(pl.col("context").is_null() & pl.col("_c").is_not_null()).then(pl.lit(name))
            .otherwise(pl.col("context_from")).alias("context_from"),
            pl.coalesce("context", "_c").alias("context"))
        out = out.drop("_c")
    return out.collect(engine="in-memory")
