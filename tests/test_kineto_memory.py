"""The Kineto reader's compact text columns (attrib.trace.interned): each distinct
name or shape text is stored once and rows share it, with the values, dtype and figures of
plain text columns, on real traces."""

from __future__ import annotations

import gzip
import io
import random
from typing import Any

import orjson
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from attrib.app import analysis
from attrib.pipeline import attribute
from attrib.trace import TABLES, Trace
from collectors import kineto, validate
from collectors.kineto import columns
from attrib.trace import interned
from conftest import EXAMPLE_TRACE, FIXTURES


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


def _interned_read(monkeypatch: pytest.MonkeyPatch) -> Trace:
    """The demo trace read as events past the first PLAIN_EVENTS are (its ~50 k events are
    fewer: read as they come, they are plain)."""
    monkeypatch.setattr(columns, "PLAIN_EVENTS", 0)
    return kineto.read(EXAMPLE_TRACE)


def test_interned_values_and_sharing_on_real_names(monkeypatch: pytest.MonkeyPatch) -> None:
    first = kineto.read(EXAMPLE_TRACE).kernels["name"]  # as it comes: fewer than PLAIN_EVENTS
    tr = _interned_read(monkeypatch)
    names = tr.kernels["name"].to_list() + [None]
    col = interned(names)
    assert col.dtype == pl.Utf8 and col.to_list() == names
    plain = pl.Series(names, dtype=pl.Utf8)
    # 4,977 launches of 62 kernels with names of ~480 bytes: the text once, 16 bytes a row
    assert tr.kernels["name"].n_unique() < 100
    assert _ipc_bytes(col) < _ipc_bytes(plain) / 5
    assert _ipc_bytes(tr.kernels["name"]) < _ipc_bytes(plain) / 5  # as the reader built it
    # the first PLAIN_EVENTS events are plain: the same values, each row its own bytes
    assert first.to_list() == names[:-1] and _ipc_bytes(first) > _ipc_bytes(plain) / 2


def test_figures_same_as_plain_text_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    tr = _interned_read(monkeypatch)
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


_SMALL = FIXTURES / "torch" / "h100_hf_qwen1.5-0.5b-chat.json.gz"


def _key(df: pl.DataFrame, table: str) -> list[str]:
    return [c for c in validate._SAME_EVENT[table] if c in df.columns]


def _hashed_first(df: pl.DataFrame, table: str) -> pl.DataFrame:
    """The rows validate keeps of `df` (their identifying columns), found by hashing every row
    (the check without its shortcut through sorted start times)."""
    key = _key(df, table)
    return df.filter(pl.struct(key).is_first_distinct()).select(key)


def _kept(df: pl.DataFrame, table: str) -> pl.DataFrame:
    got = validate.table(table, df, [])
    assert got is not None
    return got.select(_key(df, table))


def test_copies_found_through_start_times_as_by_hashing_every_row() -> None:
    """Copies and near-copies (same start, another stream or name) placed where a reader puts
    them (sorted by start): validate drops exactly the rows that hashing all rows drops."""
    tr = kineto.read(_SMALL)
    for table in ("kernels", "launches"):
        df = getattr(tr, table)
        rows = df.gather(list(range(0, df.height, 9)))
        near = rows.head(20).with_columns(pl.col("name") + "'")  # same start, not a copy
        mixed = pl.concat([df, rows, rows.head(5), near]).sort("start_ns", maintain_order=True)
        assert mixed["start_ns"].is_sorted()
        want = _hashed_first(mixed, table)
        assert want.height == df.height + near.height  # the copies really are copies
        assert_frame_equal(_kept(mixed, table), want)
        unsorted = pl.concat([mixed.tail(50), mixed.head(-50)])  # the hashing path
        assert_frame_equal(_kept(unsorted, table), _hashed_first(unsorted, table))


def test_unsorted_and_unlinked_events_give_one_table_every_way(tmp_path) -> None:
    """Events shuffled (the reader sorts) and a third of the kernels without a correlation (the
    flow arrows give it back): streamed in small pieces and read whole, the same tables, and
    each kernel's correlation the one its raw event had."""
    doc = orjson.loads(gzip.decompress(_SMALL.read_bytes()))
    events = doc["traceEvents"]
    random.Random(7).shuffle(events)
    lost = 0
    for i, e in enumerate(events):
        if e.get("cat") == "kernel" and i % 3 == 0:
            e["args"] = {k: v for k, v in e["args"].items() if k != "correlation"}
            lost += 1
    p = tmp_path / "shuffled.json"
    p.write_bytes(orjson.dumps(doc))
    got = kineto.read(p, block=1 << 16)
    whole = kineto.read(p, block=0)
    for t in TABLES:
        assert_frame_equal(getattr(got, t), getattr(whole, t))
    assert lost > 100 and got.kernels["start_ns"].is_sorted()
    key = ["start_ns", "stream", "name", "correlation"]
    want = kineto.read(_SMALL).kernels.select(key).sort(key)
    assert_frame_equal(got.kernels.select(key).sort(key), want)


def test_ids_repeated_across_a_chunk_boundary_are_found() -> None:
    """A reader's table is its pieces joined (one chunk each): a correlation id or start time
    repeated just across the boundary of two chunks is seen as a hash of every row sees it."""
    launches = kineto.read(_SMALL).launches
    a, b = launches.head(500), launches.slice(500, 500)
    last = a["correlation"][-1]
    b = b.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(last)
                       .otherwise(pl.col("correlation")).alias("correlation"))
    joined = pl.concat([a, b], rechunk=False)
    assert joined["correlation"].n_chunks() == 2
    warnings: list[str] = []
    validate.table("launches", joined, warnings)
    shared = int(joined["correlation"].is_duplicated().sum())
    assert shared == 2 and warnings == [
        "2 runtime calls share their correlation id with another; their kernels are left "
        "unlinked (which call launched them cannot be told)"]
    again = a.tail(1).with_columns(pl.lit(10**9, dtype=pl.Int64).alias("id"))
    copy = pl.concat([a, again], rechunk=False)
    kept = validate.table("launches", copy, [])
    assert kept is not None and kept.height == a.height  # the copy across the boundary dropped
