"""Polars helpers the stages share."""

from __future__ import annotations

import polars as pl


def grouped(df: pl.DataFrame, keys: list[str], *aggs: pl.Expr) -> pl.DataFrame:
    """`df.group_by(keys).agg(aggs)`, text keys grouped by their category codes: a group-by on
    text keys copies every row's key bytes (millions of kernel names at a time), codes are 4
    bytes a row. The keys come back as text."""
    text = [c for c in keys if df.schema[c] == pl.String]
    by = [pl.col(c).cast(pl.Categorical) if c in text else pl.col(c) for c in keys]
    out = df.group_by(by).agg(*aggs)
    return out.with_columns(pl.col(text).cast(pl.String)) if text else out
