"""`--format parquet`: a folder with one Parquet file per table (the dtypes kept)."""

from __future__ import annotations

import io

import polars as pl

from attrib.analysis.model import Analysis
from attrib.report.folder import files


def _parquet(df: pl.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.write_parquet(buf)
    return buf.getvalue()


def render(an: Analysis) -> dict[str, bytes]:
    return files(an, "parquet", ".parquet", _parquet)
