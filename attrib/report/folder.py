"""A folder of tables (one file per table of attrib.report.tables, plus index.json): the files a
folder renderer returns, written by attrib.output.write_folder."""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from attrib.analysis.model import Analysis
from attrib.report.tables import index, tables

INDEX = "index.json"


def files(an: Analysis, fmt: str, suffix: str,
          encode: Callable[[pl.DataFrame], bytes]) -> dict[str, bytes]:
    """file name -> bytes: each table as `name + suffix` (encode), then index.json."""
    frames = tables(an)
    names = {n: f"{n}{suffix}" for n in frames}
    out = {names[n]: encode(df) for n, df in frames.items()}
    return out | {INDEX: index(an, frames, names, fmt)}
