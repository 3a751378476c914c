"""Position in the layer: name GEMMs that nothing else named, from the attention kernels around them.

Within a step, in time order, the GEMMs between two attention kernels are: o_proj (first after
attention), the MLP (gate/up, then down), then the next layer's qkv projection(s). The number of
qkv GEMMs per layer is learnt from the GEMMs before the step's first attention kernel; the MLP
takes the rest, its last GEMM being mlp_down. After the last attention kernel, o_proj, the MLP and
finally lm_head.
"""

from __future__ import annotations

import polars as pl


def _label(seq: list[tuple[int, str]]) -> dict[int, str]:
    """seq: (kernel id, 'G' gemm | 'A' attention) in time order -> gemm id -> component."""
    out: dict[int, str] = {}
    segments: list[list[int]] = [[]]
    for kid, kind in seq:
        if kind == "A":
            if segments[-1] or len(segments) == 1:
                segments.append([])
        else:
            segments[-1].append(kid)
    if len(segments) == 1:  # no attention kernel: nothing to anchor on
        return out
    head, body, tail = segments[0], segments[1:-1], segments[-1]
    q = max(len(head), 1)
    for kid in head:
        out[kid] = "qkv_proj"
    for seg in body:
        if not seg:
            continue
        out[seg[0]] = "o_proj"
        rest = seg[1:]
        qkv = rest[-q:] if len(rest) > q else []
        mlp = rest[: len(rest) - len(qkv)]
        for kid in qkv:
            out[kid] = "qkv_proj"
        for i, kid in enumerate(mlp):
            out[kid] = "mlp_down" if i == len(mlp) - 1 and len(mlp) > 1 else "mlp_gate_up"
    if tail:
        out[tail[0]] = "o_proj"
        rest = tail[1:]
        if len(rest) >= 3:
            out[rest[-1]] = "lm_head"
            rest = rest[:-1]
        for i, kid in enumerate(rest):
            out[kid] = "mlp_down" if i == len(rest) - 1 and len(rest) > 1 else "mlp_gate_up"
    return out


def gemm_positions(k: pl.DataFrame) -> pl.DataFrame:
    """Fill `comp` for rows flagged `_gemm` from their position; evidence 'position'."""
    todo = k.filter(pl.col("_gemm") | (pl.col("comp") == "attention")).filter(pl.col("step").is_not_null())
    steps = todo.filter(pl.col("_gemm"))["step"].unique().to_list()
    labels: dict[int, str] = {}
    for step in steps:  # one Python pass per step, over its GEMM and attention kernels only
        seq = todo.filter(pl.col("step") == step).sort("start_ns")
        kinds = ["G" if g else "A" for g in seq["_gemm"].to_list()]
        labels.update(_label(list(zip(seq["id"].to_list(), kinds))))
    if not labels:
        return k.drop("_gemm")
    lab = pl.DataFrame({"id": list(labels), "_pos": list(labels.values())}, schema={"id": pl.Int64, "_pos": pl.Utf8})
    k = k.join(lab, on="id", how="left")
    return k.with_columns(
        pl.coalesce("comp", "_pos").alias("comp"),
        pl.when(pl.col("comp").is_null() & pl.col("_pos").is_not_null()).then(pl.lit("position"))
        .otherwise(pl.col("evidence")).alias("evidence")).drop("_pos", "_gemm")
