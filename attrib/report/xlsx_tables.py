"""`--format xlsx`: one workbook, a sheet per table and an `index` sheet (polars' write_excel;
the `xlsx` extra: xlsxwriter)."""

from __future__ import annotations

import io

import polars as pl

from attrib.analysis.model import Analysis
from attrib.errors import UsageError
from attrib.report.tables import DESCRIBE, tables

MISSING = "xlsx needs the xlsx extra: pip install 'attrib[xlsx]' (xlsxwriter)"


def check() -> None:
    """A UsageError when xlsxwriter (the xlsx extra) is not installed."""
    try:
        import xlsxwriter  # noqa: F401
    except ImportError:
        raise UsageError(MISSING) from None


def render(an: Analysis) -> bytes:
    """The workbook's bytes; a UsageError when xlsxwriter is not installed."""
    check()
    from xlsxwriter import Workbook

    frames = tables(an)
    idx = pl.DataFrame({"sheet": list(frames), "rows": [df.height for df in frames.values()],
                        "description": [DESCRIBE[n] for n in frames]})
    buf = io.BytesIO()
    # names come from the trace (untrusted): a cell of text is text, never a formula or a link
    options = {"in_memory": True, "strings_to_formulas": False, "strings_to_urls": False}
    with Workbook(buf, options) as wb:
        idx.write_excel(wb, worksheet="index", autofit=True)
        for name, df in frames.items():
            df.write_excel(wb, worksheet=name, autofit=True)
    return buf.getvalue()
