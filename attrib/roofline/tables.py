"""Per-phase roofline figures of the analysis document: achieved GB/s, gap, ceiling.

They read the cost stage's per-component bytes and FLOPs (attrib.cost.component_bytes: from shapes, or
from a model budget). Achieved figures and gaps are computed over the kernel time whose bytes are known;
`bytes_known_share` says how much of the time that is.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from attrib.roofline.arch import Arch
from attrib.roofline.model import kernel_roofline, phase_ceiling


MIN_KNOWN = 0.5  # share of a phase's kernel time that must be priced for per-step bytes to be given


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
