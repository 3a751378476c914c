"""The Kineto reader's compact text columns (collectors.kineto_tables.interned): each distinct
name or shape text is stored once and rows share it, with the values, dtype and figures of
plain text columns, on real traces."""

from __future__ import annotations

import io
from typing import Any

import orjson
import polars as pl
from polars.testing import assert_frame_equal

from attrib.app import analysis
from attrib.pipeline import attribute
from attrib.trace import TABLES, Trace
from collectors import kineto, validate
from collectors.kineto_tables import interned
from conftest import EXAMPLE_TRACE


def _ipc_bytes(s: pl.Series) -> int:
    """The column as Arrow IPC: shared text is written once (estimated_size counts it per row)."""
    out = io.BytesIO()
    s.to_frame().write_ipc(out)
    return len(out.getvalue())


def _plain(trace: Trace) -> Trace:
    """The trace with every text column rebuilt from Python strings: no text shared."""
    def flat(df: pl.DataFrame) -> pl.DataFrame:
        text = [c for c, t in df.schema.items() if t == pl.Utf8]
        return df.with_columns(pl.Series(c, df[c].to_list(), dtype=pl.Utf8) for c in text)
    return trace.with_tables(**{t: flat(getattr(trace, t)) for t in TABLES})


def _canonical(x: Any) -> Any:
    """Lists of rows in one order: ledger rows of equal time come in hash order (a tie)."""
    if isinstance(x, dict):
        return {k: _canonical(v) for k, v in x.items()}
    if isinstance(x, list):
        items = [_canonical(v) for v in x]
        return sorted(items, key=orjson.dumps) if all(isinstance(v, dict) for v in items) else items
    return x


def test_interned_values_and_sharing_on_real_names() -> None:
    tr = kineto.read(EXAMPLE_TRACE)
    names = tr.kernels["name"].to_list() + [None]
    col = interned(names)
    assert col.dtype == pl.Utf8 and col.to_list() == names
    plain = pl.Series(names, dtype=pl.Utf8)
    # 4,977 launches of 62 kernels with names of ~480 bytes: the text once, 16 bytes a row
    assert tr.kernels["name"].n_unique() < 100
    assert _ipc_bytes(col) < _ipc_bytes(plain) / 5
    assert _ipc_bytes(tr.kernels["name"]) < _ipc_bytes(plain) / 5  # as the reader built it


def test_figures_same_as_plain_text_columns() -> None:
    tr = kineto.read(EXAMPLE_TRACE)
    flat = _plain(tr)
    for t in TABLES:
        assert_frame_equal(getattr(tr, t), getattr(flat, t))
    a, b = analysis(attribute(tr)), analysis(attribute(flat))
    assert _canonical(a.to_dict()) == _canonical(b.to_dict())
    assert a.to_dict()["phases"], "the demo trace has phases to compare"


def test_duplicate_rows_compared_by_exact_text() -> None:
    """validate compares names by category id: a row equal to a real kernel but for one byte of
    its name is kept, an exact copy is dropped."""
    k = kineto.read(EXAMPLE_TRACE).kernels
    row = k.slice(7, 1)
    near = row.with_columns(pl.col("name") + " ")  # one byte more, same time, stream, device
    warnings: list[str] = []
    kept = validate.table("kernels", pl.concat([k, near]), warnings)
    assert kept.height == k.height + 1
    assert not any("exact copies" in w for w in warnings), warnings  # its id is renumbered
    warnings.clear()
    dropped = validate.table("kernels", pl.concat([k, row]), warnings)
    assert dropped.height == k.height
    assert warnings == ["1 kernels are exact copies of another row (the same event written twice); "
                        "dropped"]
