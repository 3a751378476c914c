"""`--format csv`: a folder with one CSV file per table (UTF-8, header row, empty = null). Text
is written as it is in the trace: a kernel named `=HYPERLINK(...)` is that text, which a spreadsheet
opening the file may run as a formula. `--format csv-safe` is for files opened in a spreadsheet:
a text cell that starts with = + - @, a tab or a carriage return gets a leading single quote (the
OWASP advice on CSV injection); numbers are untouched."""

from __future__ import annotations

import polars as pl

from attrib.analysis.model import Analysis
from attrib.report.folder import files


def _csv(df: pl.DataFrame) -> bytes:
    return df.write_csv().encode()


# the first characters a spreadsheet reads as the start of a formula
FORMULA_START = r"^[=+\-@\t\r]"


def _safe(df: pl.DataFrame) -> bytes:
    text = [c for c, t in df.schema.items() if t == pl.Utf8]
    quoted = [pl.when(pl.col(c).str.contains(FORMULA_START)).then(pl.lit("'") + pl.col(c))
              .otherwise(pl.col(c)).alias(c) for c in text]
    return _csv(df.with_columns(quoted) if quoted else df)


def render(an: Analysis) -> dict[str, bytes]:
    return files(an, "csv", ".csv", _csv)


def render_safe(an: Analysis) -> dict[str, bytes]:
    """`render` with text cells that could start a formula neutralised (see the docstring)."""
    return files(an, "csv-safe", ".csv", _safe)
