"""Per-phase roofline figures of the analysis document: bytes, FLOPs, achieved GB/s, gap, ceiling.

Bytes come from shapes (attrib.cost.kernels) or, for components a trace gives no shapes for, from a
model-config budget (attrib.cost.budget) when the user passes one. Achieved figures and gaps are computed
over the kernel time whose bytes are known; `bytes_known_share` says how much of the time that is.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from attrib.cost.budget import Budget
from attrib.roofline.arch import Arch
from attrib.roofline.model import kernel_roofline, phase_ceiling


MIN_KNOWN = 0.5  # share of a phase's kernel time that must be priced for per-step bytes to be given


def component_table(k: pl.DataFrame, steps: pl.DataFrame, budget: Budget | None, phase: str) -> pl.DataFrame:
    """Per component, medians over the phase's steps: ms, kernels, bytes, flops, ms of priced kernels."""
    known = pl.col("bytes").is_not_null()
    per = k.group_by("step", "component").agg(
        pl.col("dur_ns").sum().alias("ns"), pl.len().alias("n"),
        pl.col("bytes").sum().alias("bytes"), pl.col("flops").sum().alias("flops"),
        pl.col("dur_ns").filter(known).sum().alias("known_ns"), known.any().alias("any_known"))
    grid = steps.select("step").join(per.select("component").unique(), how="cross").join(
        per, on=["step", "component"], how="left").with_columns(
        *[pl.col(c).fill_null(0) for c in ("ns", "n", "bytes", "flops", "known_ns")], pl.col("any_known").fill_null(False))
    dtype = (k.filter(pl.col("dtype").is_not_null()).group_by("component", "dtype").agg(pl.col("dur_ns").sum())
             .sort("dur_ns", descending=True).unique("component", keep="first").select("component", "dtype"))
    comp = grid.group_by("component").agg(
        (pl.col("ns").median() / 1e6).alias("ms"), pl.col("n").median().alias("kernels"),
        pl.when(pl.col("any_known").any()).then(pl.col("bytes").median()).alias("bytes"),
        pl.when(pl.col("any_known").any()).then(pl.col("flops").median()).alias("flops"),
        (pl.col("known_ns").median() / 1e6).alias("known_ms")).join(dtype, on="component", how="left")
    comp = comp.with_columns(pl.lit("shapes").alias("bytes_from"))
    tokens = steps["tokens"].drop_nulls()
    if budget is not None and phase == "decode" and tokens.len():
        b = budget.table(int(tokens.median())).select("component", pl.col("bytes").alias("_bb"), pl.col("flops").alias("_bf"))
        comp = comp.join(b, on="component", how="left")
        use = pl.col("bytes").is_null() & pl.col("_bb").is_not_null()
        comp = comp.with_columns(
            pl.when(use).then(pl.col("_bb")).otherwise(pl.col("bytes")).alias("bytes"),
            pl.when(use).then(pl.col("_bf")).otherwise(pl.col("flops")).alias("flops"),
            pl.when(use).then(pl.col("ms")).otherwise(pl.col("known_ms")).alias("known_ms"),
            pl.when(use).then(pl.lit(budget.source)).when(pl.col("bytes").is_null()).then(None)
            .otherwise(pl.col("bytes_from")).alias("bytes_from")).drop("_bb", "_bf")
    comp = comp.with_columns(pl.when(pl.col("bytes").is_null()).then(None).otherwise(pl.col("bytes_from")).alias("bytes_from"))
    return comp


def roofline_rows(comp: pl.DataFrame, arch: Arch | None) -> pl.DataFrame:
    """Add achieved_gbs, roofline_ms, gap_ms, bound, inconsistent, computed over each row's priced time."""
    rows = kernel_roofline(comp.rename({"ms": "_total_ms"}).with_columns(pl.col("known_ms").alias("ms")), arch)
    return rows.drop("ms").rename({"_total_ms": "ms"})


def phase_figures(steps: pl.DataFrame, k: pl.DataFrame, comp: pl.DataFrame, arch: Arch | None) -> dict[str, Any]:
    """bytes_per_step, gb_per_token, ceiling_tok_s and the share of kernel time with known bytes."""
    tokens = steps["tokens"].drop_nulls()
    tps = int(tokens.median()) if tokens.len() else None
    total_ms = float(comp["ms"].sum() or 0)
    known_ms = float(comp.filter(pl.col("bytes").is_not_null())["known_ms"].sum() or 0)
    nbytes = comp["bytes"].drop_nulls()
    share = (known_ms / total_ms) if total_ms else None
    # a sum over a small priced part of the step would read as the step's traffic: leave it unknown
    bytes_per_step = float(nbytes.sum()) if (nbytes.len() and share is not None and share >= MIN_KNOWN) else None
    gbt, ceiling = phase_ceiling(bytes_per_step, tps, arch)
    return {"bytes_per_step": bytes_per_step, "gb_per_token": gbt, "ceiling_tok_s": ceiling,
            "bytes_known_share": share}
