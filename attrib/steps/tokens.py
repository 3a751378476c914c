"""Tokens per step and the phase of unannotated steps, from shapes and kernel names."""

from __future__ import annotations

import polars as pl


def fill_tokens_and_phase(spans: pl.DataFrame, shapes: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    s = spans.join(shapes.rename({"tokens": "shape_tokens"}), on="step", how="left")
    s = s.with_columns(
        pl.when(pl.col("tokens").is_null() & pl.col("shape_tokens").is_not_null())
        .then(pl.when(pl.col("per_seq").is_not_null()).then(pl.lit("embedding input shape"))
              .otherwise(pl.lit("projection GEMM input shape"))).otherwise(pl.col("tokens_from")).alias("tokens_from"),
        pl.coalesce("tokens", "shape_tokens").alias("tokens"))
    guessed = (pl.col("phase") == "unknown") & pl.col("per_seq").is_not_null()
    if s.filter(guessed).height:
        notes.append("phase of steps without a phase annotation decided from shapes (1 new token per sequence = decode)")
    s = s.with_columns(
        pl.when(guessed).then(pl.when(pl.col("per_seq") == 1).then(pl.lit("decode")).otherwise(pl.lit("prefill")))
        .otherwise(pl.col("phase")).alias("phase"))
    # decode steps replayed from a graph have no embedding op: one token per sequence of the prefill batch
    batch = s.filter((pl.col("phase") == "prefill") & pl.col("per_seq").is_not_null() & (pl.col("per_seq") > 0)).select(
        (pl.col("shape_tokens") // pl.col("per_seq")).alias("b"))
    if batch.height and s.filter((pl.col("phase") == "decode") & pl.col("tokens").is_null()).height:
        b = int(batch["b"][0])
        notes.append(f"decode tokens per step taken as the prefill batch ({b} sequences x 1 token): no shapes in decode")
        s = s.with_columns(
            pl.when((pl.col("phase") == "decode") & pl.col("tokens").is_null()).then(pl.lit("prefill batch"))
            .otherwise(pl.col("tokens_from")).alias("tokens_from"),
            pl.when((pl.col("phase") == "decode") & pl.col("tokens").is_null()).then(pl.lit(b))
            .otherwise(pl.col("tokens")).alias("tokens"))
    return s.drop("shape_tokens", "per_seq")


def tokens_from_names(steps: pl.DataFrame, named: pl.DataFrame) -> pl.DataFrame:
    """Steps still without a token count take it from llama.cpp kernels (GEMV names, norm rows)."""
    s = steps.join(named, on="step", how="left")
    use = pl.col("tokens").is_null() & pl.col("name_tokens").is_not_null()
    return s.with_columns(
        pl.when(use).then(pl.col("name_tokens_from")).otherwise(pl.col("tokens_from")).alias("tokens_from"),
        pl.when(use).then(pl.col("name_tokens")).otherwise(pl.col("tokens")).alias("tokens")).drop("name_tokens", "name_tokens_from")
