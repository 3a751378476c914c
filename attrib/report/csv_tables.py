"""`--format csv`: a folder with one CSV file per table (UTF-8, header row, empty = null)."""

from __future__ import annotations

import polars as pl

from attrib.analysis.model import Analysis
from attrib.report.folder import files


def _csv(df: pl.DataFrame) -> bytes:
    return df.write_csv().encode()


def render(an: Analysis) -> dict[str, bytes]:
    return files(an, "csv", ".csv", _csv)
