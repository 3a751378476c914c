"""Draft and verify passes of a speculative (assisted) generate loop.

When one annotation split into forward passes (`phases._split_forwards`, markers `NAME forward i`)
holds the forward passes of two model instances (their outermost `nn.Module:` frames, with_stack
traces), the smaller one (fewer nn.Module frames in a forward pass) is the draft model: its
passes get role `draft`, the other model's `verify`; each model's first pass (its prefill) gets no
role. `apply_roles` then puts draft passes in phase `draft` and verify passes in `decode`.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from attrib.link.launches import module_paths

_PIECE = r"^(?P<parent>.+) forward \d+$"


def mark_roles(spans: pl.DataFrame, frames: pl.DataFrame) -> pl.DataFrame:
    """spans + `role`: "draft" | "verify" | null (see the module docstring)."""
    out = spans.with_columns(pl.lit(None, pl.Utf8).alias("role"))
    pieces = out.with_columns(pl.col("marker").str.extract(_PIECE, 1).alias("parent")).filter(
        pl.col("parent").is_not_null())
    if pieces.height < 4 or frames.height == 0:
        return out
    mods = module_paths(frames)
    roots = mods.filter(~pl.col("module_path").str.contains("/"))
    if roots.height == 0:
        return out
    # a model's size: the nn.Module frames inside one of its forward passes
    starts = mods["start_ns"].sort().to_numpy()
    r0, r1 = roots["start_ns"].to_numpy(), (roots["start_ns"] + roots["dur_ns"]).to_numpy()
    roots = roots.select(pl.col("start_ns").alias("t0"), (pl.col("start_ns") + pl.col("dur_ns")).alias("t1"),
                         pl.col("module_path").alias("model"),
                         pl.Series("size", np.searchsorted(starts, r1) - np.searchsorted(starts, r0)))
    # each piece's model: the root frame that overlaps it most
    p = pieces.join(roots, how="cross").with_columns(
        (pl.min_horizontal("t1", "cpu_end") - pl.max_horizontal("t0", "cpu_start")).alias("_ov"))
    p = p.filter(pl.col("_ov") > 0).sort("_ov", descending=True).unique("step", keep="first")
    roles = []
    for _, g in p.group_by("parent"):
        size = g.group_by("model").agg(pl.col("size").median()).sort("size")
        if size.height != 2:
            continue
        draft = size["model"][0]
        g = g.sort("cpu_start").with_columns(pl.int_range(pl.len()).over("model").alias("_i"))
        roles.append(
            g.filter(pl.col("_i") > 0).select(
                "step",
                pl.when(pl.col("model") == draft)
                .then(pl.lit("draft"))
                .otherwise(pl.lit("verify"))
                .alias("_r"),
            )
        )
    if not roles:
        return out
    got = pl.concat(roles)
    return (
        out.join(got, on="step", how="left")
        .with_columns(pl.coalesce("_r", "role").alias("role"))
        .drop("_r")
    )


def apply_roles(steps: pl.DataFrame) -> pl.DataFrame:
    """Draft passes in phase `draft`, verify passes in `decode` (their tokens stay as their shapes say)."""
    if "role" not in steps.columns:
        return steps
    return steps.with_columns(pl.when(pl.col("role") == "draft").then(pl.lit("draft"))
                              .when(pl.col("role") == "verify").then(pl.lit("decode"))
                              .otherwise(pl.col("phase")).alias("phase"))
