"""A constant table converted every step: the rotary cos/sin cache cast fp32 -> 16 bits inside each
step (vLLM gpt-oss compiled: `triton_poi_fused__to_copy_1` over [131072, 64], 23 calls a step).

A catalog rule (`constant-table-cast-every-step`): a pure function over the attribution.
"""

from __future__ import annotations

import polars as pl

from attrib.analysis.model import Analysis
from attrib.components.rope_table import rope_table_casts
from attrib.pipeline import Attribution
from rules.finding import Finding, ns, r
from rules.thresholds import DEFAULT, Thresholds

RULE = "constant-table-cast-every-step"


def constant_casts(
    a: Attribution, an: Analysis | None = None, th: Thresholds = DEFAULT
) -> list[Finding]:
    """One finding per phase whose steps recast the rotary table (attrib.components.rope_table)."""
    ids = rope_table_casts(a.trace.ops)
    cast = pl.col("op_id").is_in(pl.lit(ids).implode()) & pl.col("step").is_not_null()
    k = a.kernels.filter(cast)
    if not k.height:
        return []
    out = []
    for (phase,), g in k.group_by("phase", maintain_order=True):
        steps = a.steps.filter(pl.col("phase") == phase).height or 1
        ms = ns(g) / 1e6 / steps
        if ms < th.constant_cast_min_ms:
            continue
        calls = g.height / steps
        nbytes = g["bytes"].sum() / steps if g["bytes"].null_count() < g.height else None
        shape = a.trace.ops.filter(pl.col("id") == g["op_id"][0])["input_dims"][0]
        out.append(Finding(
            rule=RULE, severity="medium",
            title=(f"{phase}: the rotary cos/sin table is cast to 16 bits {calls:g} times a step "
                   f"({ms:.3f} ms/step): a constant converted every step"),
            ms_per_step=ms, phase=str(phase), components=("rope",),
            evidence={"phase": phase, "calls_per_step": r(calls, 2), "ms_per_step": r(ms, 4),
                      "bytes_per_step": nbytes, "kernel": g["name"][0], "input_dims": shape,
                      "component": "rope"},
            remedy=("Cast the cos/sin cache to the model dtype once, when it is "
                    "built (or keep it in the model dtype), so the compiled "
                    "graph reads it instead of converting it."),
        ))
    return out
