"""Bytes and FLOPs per component and step: from the kernels' shapes, else from a model budget.

The cost stage's per-component table; the roofline (attrib.roofline.tables) reads its bytes. A
model-config budget (attrib.cost.budget) is a second source of bytes: it fills decode components
the trace gives no shapes for, and `bytes_from` says which source each row's bytes came from.
"""

from __future__ import annotations

import polars as pl

from attrib.cost.budget import Budget
from attrib.trace import grouped


# cost models whose figures are estimates (iteration-space bounds, a model config, link bytes),
# not shapes
ESTIMATES = ("inductor", "inductor_template", "moe (model config)", "collective (bus bytes)")


def over_peak(k: pl.DataFrame, peak_gbs: float | None) -> pl.Expr:
    """Kernels whose priced bytes over their own duration exceed the device's peak bandwidth: their
    bytes are wrong (or the kernel read from cache), never a measured rate."""
    if not peak_gbs or "bytes" not in k.columns:
        return pl.lit(False)
    return (pl.col("bytes").is_not_null() & (pl.col("dur_ns") > 0)
            & (pl.col("bytes") / pl.col("dur_ns") > peak_gbs)).fill_null(False)


# cost models whose FLOPs run on the matrix units (GEMMs, attention, convolutions)
MATRIX = r"^(?:gemm|grouped_gemm|moe|attention|conv|inductor_template)\b"

STEP_BATCH = 256  # steps a per-step group-by takes at a time


def _dur_where(mask: pl.Expr) -> pl.Expr:
    """The summed dur_ns of the rows `mask` holds for (elementwise: no filtered copy a group)."""
    return pl.when(mask).then(pl.col("dur_ns")).otherwise(0).sum()


def component_dtypes(k: pl.DataFrame) -> pl.DataFrame:
    """component, dtype: the dtype its compute roof and its peak check use. That of most matrix
    FLOPs (MATRIX cost models) where those are half its FLOPs or more (an fp8 GEMM beside the fp32
    kernels quantizing its input: fp8), else the dtype of most of its kernel time."""
    matrix = (pl.col("cost_model").cast(pl.String).str.contains(MATRIX).fill_null(False)
              if "cost_model" in k.columns else pl.lit(False))
    flops = pl.col("flops").fill_null(0.0)
    typed = (k.lazy().select("component", "dtype", "dur_ns", flops.alias("_f"),
                             pl.when(matrix).then(flops).otherwise(0.0).alias("_m"))
             .filter(pl.col("dtype").is_not_null()).collect(engine="in-memory"))
    per = grouped(typed, ["component", "dtype"],
                  pl.col("_f").sum(), pl.col("_m").sum(), pl.col("dur_ns").sum(), any_order=True)
    # the per-dtype table is small: one query from here
    by_time = per.lazy().sort("dur_ns", descending=True).unique("component", keep="first")
    by_flops = (per.lazy().with_columns(pl.col("_f").sum().over("component").alias("_all"))
                .filter((pl.col("_m") > 0) & (2 * pl.col("_m") >= pl.col("_all")))
                .sort("_m", descending=True).unique("component", keep="first"))
    return (by_time.select("component", pl.col("dtype").alias("_t"))
            .join(by_flops.select("component", "dtype"), on="component", how="left")
            .select("component", pl.coalesce("dtype", "_t").alias("dtype"))
            .collect(engine="in-memory"))


# components whose GEMMs multiply activations by activations (no weights): no weight format
_NO_WEIGHTS = ("attention", "linear_attention", "rope")
# a fused MoE priced with its experts' format (attrib.cost.moe_lowbit: `moe (int4 sym, g128)`),
# not the model-config estimate (`moe (model config)`)
_MOE_FORMAT = r"^moe \(((?:int|fp|nf|mx|nv|bnb)[^)]*)\)$"


def component_formats(k: pl.DataFrame) -> pl.DataFrame:
    """component, weight_format: the format its weight GEMMs run as the trace shows it, of most of
    their time: a low-bit GEMM's or fused MoE's (`gemm (int4 g128)` -> int4 g128, attrib.cost.lowbit),
    else the GEMM's dtype (bf16, fp8_e4m3fn). Components without a weight GEMM have none."""
    if "cost_model" not in k.columns:
        return pl.DataFrame(schema={"component": pl.String, "weight_format": pl.String})
    model = pl.col("cost_model").cast(pl.String)
    fmt = pl.coalesce(model.str.extract(r"^gemm \((.+)\)$"), model.str.extract(_MOE_FORMAT),
                      pl.col("dtype"))
    weighted = model.str.contains(r"^(?:gemm|grouped_gemm)\b") | model.str.contains(_MOE_FORMAT)
    gemms = (k.lazy().filter(weighted.fill_null(False)
                             & ~pl.col("component").cast(pl.String).is_in(_NO_WEIGHTS))
             .select("component", fmt.alias("weight_format"), "dur_ns")
             .filter(pl.col("weight_format").is_not_null()).collect(engine="in-memory"))
    per = grouped(gemms, ["component", "weight_format"], pl.col("dur_ns").sum(), any_order=True)
    return (per.lazy().sort(["dur_ns", "weight_format"], descending=[True, False])
            .unique("component", keep="first").select("component", "weight_format")
            .collect(engine="in-memory"))


def component_table(k: pl.DataFrame, steps: pl.DataFrame, budget: Budget | None, phase: str,
                    peak_gbs: float | None = None) -> pl.DataFrame:
    """Per component, medians over the phase's steps: ms, kernels, bytes, flops, ms of priced
    kernels, ms of kernels priced by an estimate (ESTIMATES); its dtype and weight format.

    peak_gbs: the device's peak bandwidth. A kernel priced above it adds no bytes (its time counts
    as unpriced) and its row names it in `over_peak` (kernel names, '; '-joined; null if none)."""
    hot = over_peak(k, peak_gbs)
    names = pl.col("name").cast(pl.String).unique().sort().str.join("; ")
    flagged = grouped(k.filter(hot), ["component"], names.alias("over_peak"), any_order=True)
    # a hot kernel's bytes and FLOPs are null (expressions: the kernels are not copied)
    bytes_, flops = (pl.when(hot).then(None).otherwise(pl.col(c)) for c in ("bytes", "flops"))
    known = bytes_.is_not_null()
    if "cost_model" in k.columns:
        estimated = known & pl.col("cost_model").is_in(ESTIMATES)
    else:
        estimated = pl.lit(False)
    dur = pl.col("dur_ns")
    aggs = (dur.sum().alias("ns"), pl.len().alias("n"),
            bytes_.sum().alias("bytes"), flops.sum().alias("flops"),
            _dur_where(known).alias("known_ns"), known.any().alias("any_known"),
            _dur_where(estimated).alias("est_ns"))
    # a step's groups are its own: the steps a batch at a time hold a batch's temporaries
    batches = steps.select(pl.col("step").unique().sort())["step"].to_list()
    read = k.lazy().select(c for c in k.columns if c in ("step", "component", "dur_ns", "bytes",
                                                        "flops", "cost_model"))
    parts = (read.filter(pl.col("step").is_in(batches[i:i + STEP_BATCH]))
             .collect(engine="in-memory")
             for i in range(0, max(len(batches), 1), STEP_BATCH))
    per = pl.concat([grouped(part, ["step", "component"], *aggs) for part in parts]).lazy()
    # the grid of steps and components is small: one query from here
    grid = steps.lazy().select("step").join(per.select("component").unique(), how="cross").join(
        per, on=["step", "component"], how="left").with_columns(
        *[pl.col(c).fill_null(0) for c in ("ns", "n", "bytes", "flops", "known_ns", "est_ns")],
        pl.col("any_known").fill_null(False))
    comp = grid.group_by("component").agg(
        (pl.col("ns").median() / 1e6).alias("ms"), pl.col("n").median().alias("kernels"),
        pl.when(pl.col("any_known").any()).then(pl.col("bytes").median()).alias("bytes"),
        pl.when(pl.col("any_known").any()).then(pl.col("flops").median()).alias("flops"),
        (pl.col("known_ns").median() / 1e6).alias("known_ms"),
        (pl.col("est_ns").median() / 1e6).alias("estimated_ms"))
    comp = comp.join(component_dtypes(k).lazy(), on="component", how="left").join(
        component_formats(k).lazy(), on="component", how="left")
    comp = comp.with_columns(pl.lit("shapes").alias("bytes_from"))
    tokens = steps["tokens"]
    known_tokens = tokens.len() > tokens.null_count()
    if budget is not None and budget.context is not None and phase == "decode" and known_tokens:
        comp = with_budget(comp, budget, int(tokens.median()))
    bytes_from = pl.when(pl.col("bytes").is_null()).then(None).otherwise(pl.col("bytes_from"))
    comp = comp.with_columns(bytes_from.alias("bytes_from"))
    # over_peak: null without a peak
    return comp.join(flagged.lazy(), on="component", how="left").collect(engine="in-memory")


def with_budget(comp: pl.LazyFrame, budget: Budget, tokens_per_step: int) -> pl.LazyFrame:
    """Components without bytes from shapes, or priced for under half their time (a graph replay
    whose capture lacks some ops), take the budget's bytes and FLOPs (all their time then counts
    as priced); `bytes_from` names the budget's source for them."""
    b = budget.table(tokens_per_step).lazy().select(
        "component", pl.col("bytes").alias("_bb"), pl.col("flops").alias("_bf"))
    comp = comp.join(b, on="component", how="left")
    underpriced = pl.col("bytes").is_null() | (pl.col("known_ms") < 0.5 * pl.col("ms"))
    use = underpriced & pl.col("_bb").is_not_null()
    return comp.with_columns(
        pl.when(use).then(pl.col("_bb")).otherwise(pl.col("bytes")).alias("bytes"),
        pl.when(use).then(pl.col("_bf")).otherwise(pl.col("flops")).alias("flops"),
        pl.when(use).then(pl.col("ms")).otherwise(pl.col("known_ms")).alias("known_ms"),
        pl.when(use).then(pl.lit(budget.source)).when(pl.col("bytes").is_null()).then(None)
        .otherwise(pl.col("bytes_from")).alias("bytes_from")).drop("_bb", "_bf")
