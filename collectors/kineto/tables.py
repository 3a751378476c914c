"""The frames of each table, in event order, to the normalized tables: grid/block decoded, rows
sorted by start and numbered, checked (collectors.validate), correlations filled from flow arrows,
graph replays marked, copies given their direction."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import polars as pl

from attrib.trace import mark_graph_replays
from collectors import validate
from collectors.kineto.decode import Notes

# grid/block: up to 3 non-negative ints, JSON's spaces around them (ASCII classes: Unicode's \d,
# repeated 15 times, took 1.1 ms to compile against 0.2)
_SPACE = r"[ \t\n\r]*"
_INT = rf"{_SPACE}[0-9]{{1,15}}{_SPACE}"
_DIMS = rf"^\[{_INT}(,{_INT}){{0,2}}\]$"
Renumber = Callable[[str, pl.DataFrame], pl.DataFrame]


def _finish(parts: list[pl.DataFrame], notes: Notes) -> pl.DataFrame | None:
    """One table from its frames (times already in ns), which it takes over: grid/block JSON
    decoded frame by frame (only a frame's transients at a time; a bad value null, counted),
    joined without a copy (the frames become the table's chunks) and emptied."""
    if not parts:
        return None
    bad = dict.fromkeys(("grid", "block"), 0)
    for i, part in enumerate(parts):
        for c in bad:
            if c in part.columns:
                ok = pl.col(c).str.contains(_DIMS)
                bad[c] += part.select((pl.col(c).is_not_null() & ~ok).sum()).item()
                part = part.with_columns(
                    pl.when(ok).then(pl.col(c)).otherwise(None).str.json_decode(pl.List(pl.Int64)))
        parts[i] = part
    for c, n in bad.items():
        if n:
            notes.nulled[c] = notes.nulled.get(c, 0) + n
            notes.first.setdefault("nulled", 0)
    df = pl.concat(parts, how="diagonal_relaxed")
    parts.clear()
    if df["start_ns"].null_count() or not df["start_ns"].is_sorted():
        df = df.sort("start_ns", maintain_order=True)  # sorted rows stay as they are: no copy
    row = pl.int_range(pl.len(), dtype=pl.Int64).alias("id")  # not via UInt32: no second column
    return df.select(row, pl.all())


def built(path: Path, parts: dict[str, list[pl.DataFrame]], notes: Notes, warnings: list[str],
          renumber: Renumber | None = None) -> dict[str, pl.DataFrame | None]:
    """The tables of each table's frames in event order (emptied as they are joined), checked
    (collectors.validate) and completed; what was dropped or salvaged is added to `warnings`.
    renumber(table, df): the table with the whole trace's ids, where `parts` are a part (spill)."""
    flow_parts = parts.pop("flows", [])
    tables = {t: _finish(parts.pop(t), notes) for t in list(parts)}  # each freed as it is built
    if tables["kernels"] is None or not tables["kernels"]["correlation"].null_count():
        flow_parts.clear()  # no kernel lacks a correlation (one a flow arrow may give)
    flows = _finish(flow_parts, notes)
    if renumber is not None:
        tables = {t: None if df is None else renumber(t, df) for t, df in tables.items()}
        flows = None if flows is None else renumber("flows", flows)
    warnings += notes.warnings()
    tables = validate.tables(tables, warnings, path)
    tables["kernels"] = _fill_correlation(tables["kernels"], flows)
    del flows
    # "Dispatch Task" kernels, graph launches, shared correlation ids
    if tables["kernels"] is not None:
        tables["kernels"] = mark_graph_replays(tables["kernels"], tables["launches"])
    if tables["copies"] is not None:  # "Memcpy HtoD (Pageable -> Device)" -> HtoD
        tables["copies"] = tables["copies"].with_columns(
            pl.col("name").str.extract(r"\b([HDP]to[HDP])\b", 1).alias("direction"))
    return tables


def _fill_correlation(kernels: pl.DataFrame | None,
                      flows: pl.DataFrame | None) -> pl.DataFrame | None:
    """Kernels whose args lack a correlation take it from the flow arrow that ends on them."""
    if kernels is None or flows is None or not kernels["correlation"].null_count():
        return kernels
    key = ["pid", "tid", "start_ns"]
    f = flows.select(*key, pl.col("correlation").alias("_flow")).unique(key)
    return (kernels.join(f, on=key, how="left")
            .with_columns(pl.col("correlation").fill_null(pl.col("_flow"))).drop("_flow"))
