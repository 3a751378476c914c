"""Per-phase roofline figures of the analysis document: achieved GB/s, gap, ceiling.

They read the cost stage's per-component bytes and FLOPs (attrib.cost.component_bytes: from
shapes, or from a model budget). Achieved figures and gaps are computed over the kernel time
whose bytes are known; `bytes_known_share` says how much of the time that is.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from attrib.components.taxonomy import LINK_COMPONENTS
from attrib.roofline.arch import Arch
from attrib.roofline.model import dtype_peaks, phase_ceiling, roofline


MIN_KNOWN = 0.5  # share of a phase's kernel time that must be priced for per-step bytes to be given


def roofline_rows(comp: pl.DataFrame, arch: Arch | None, what_if: bool = False) -> pl.DataFrame:
    """Add achieved_gbs, roofline_ms, gap_ms, bound, inconsistent, computed over each row's
    priced time.

    A row priced for less than MIN_KNOWN of its time gets `partial` true and no achieved figures
    or gap: its bytes are a lower bound, and a rate over a sliver of its kernels is not the
    row's rate."""
    # one lazy query (the rows' dtypes priced first)
    priced_time = (comp.lazy().rename({"ms": "_total_ms"})
                   .with_columns(pl.col("known_ms").alias("ms")))
    rows = roofline(priced_time, dtype_peaks(comp, arch), arch, what_if)
    rows = rows.drop("ms").rename({"_total_ms": "ms"})
    partial = pl.col("bytes").is_not_null() & (pl.col("known_ms") < MIN_KNOWN * pl.col("ms"))
    return (rows.with_columns(partial.fill_null(False).alias("partial")).with_columns(
        *[pl.when(pl.col("partial")).then(None).otherwise(pl.col(c)).alias(c)
          for c in ("achieved_gbs", "achieved_tflops", "gap_ms")])
        .collect(engine="in-memory"))


def counted(comp: pl.DataFrame, what_if: bool = False) -> pl.Expr:
    """The rows whose bytes count in the phase's bytes per step: priced, and not above the device's
    peak (an impossible rate means wrong bytes; under a what-if the times are another device's, so
    every priced row counts)."""
    ok = pl.col("bytes").is_not_null()
    return ok if what_if else ok & pl.col("inconsistent").is_null()


def memory_traffic(comp: pl.DataFrame) -> pl.Expr:
    """The rows whose bytes are memory traffic (GB/token): all but the collectives, whose bytes
    cross the interconnect (their time still sets the step's floor, at the link's bandwidth)."""
    return ~pl.col("component").is_in(LINK_COMPONENTS)


def phase_figures(steps: pl.DataFrame, k: pl.DataFrame, comp: pl.DataFrame, arch: Arch | None,
                  what_if: bool = False) -> dict[str, Any]:
    """bytes_per_step, gb_per_token, ceiling_tok_s, the share of kernel time whose bytes count,
    and the components left out for an achieved rate above the device's peak."""
    tokens = steps["tokens"]
    tps = int(tokens.median()) if tokens.null_count() < tokens.len() else None
    total_ms = float(comp["ms"].sum() or 0)
    # the rows' masks in one query; each figure a Series filtered by one
    ok = counted(comp, what_if)
    masks = comp.select(ok.alias("use"), (pl.col("bytes").is_not_null() & ~ok).alias("left_out"),
                        (ok & memory_traffic(comp)).alias("traffic"),
                        (ok & pl.col("roofline_ms").is_not_null()).alias("roofed"))
    excluded = comp["component"].filter(masks["left_out"]).to_list()
    known_ms = float(comp["known_ms"].filter(masks["use"]).sum() or 0)
    share = (known_ms / total_ms) if total_ms else None
    # a sum over a small priced part of the step would read as the step's traffic: leave it unknown
    enough = masks["use"].any() and share is not None and share >= MIN_KNOWN
    bytes_per_step = float(comp["bytes"].filter(masks["traffic"]).sum()) if enough else None
    roof = comp["roofline_ms"].filter(masks["roofed"])
    roof_ms = float(roof.sum()) if roof.len() else None
    gbt, ceiling = phase_ceiling(bytes_per_step, tps, arch, roof_ms)
    return {"bytes_per_step": bytes_per_step, "gb_per_token": gbt, "ceiling_tok_s": ceiling,
            "bytes_known_share": share, "excluded": sorted(excluded), "known_ms": known_ms,
            "total_ms": total_ms}
