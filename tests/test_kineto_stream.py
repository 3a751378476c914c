"""The streaming Kineto reader (collectors.kineto_stream) gives the whole-text reader's tables,
warnings and errors: on every Kineto fixture, cut into many small pieces, and on bad variants
derived from a real trace (cut short, gzip cut short, bad values inside a piece, an oversized event,
a repeated key)."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import orjson
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from attrib.errors import TraceError
from attrib.trace import TABLES, Trace
from collectors import kineto, kineto_stream, limits
from collectors.kineto_stream import Streamed
from conftest import EXAMPLE_TRACE, FIXTURES

BLOCK = 1 << 18  # pieces of 256 kB: every fixture (2-25 MB of JSON) is cut 8-100 times


def _kineto_fixtures() -> list[Path]:
    files = sorted(p for p in FIXTURES.rglob("*.json*") if p.name.endswith((".json", ".json.gz")))
    head = {p: limits.head(p, 4096) for p in files}
    return [p for p in files if kineto.sniff(p, head[p])]


def _same(a: Trace, b: Trace) -> None:
    for t in TABLES:
        assert_frame_equal(getattr(a, t), getattr(b, t))
    assert a.meta == b.meta


def _tables(got: Streamed) -> dict[str, pl.DataFrame]:
    return {t: pl.concat(p, how="diagonal_relaxed") for t, p in got.parts.items() if p}


def test_every_kineto_fixture_streams_to_the_whole_text_tables():
    """The frames of every table (the reader's last step before sorting and validating, which
    are the same code either way), the event count, the notes and the warnings."""
    files = _kineto_fixtures()
    assert len(files) >= 30
    for p in files:
        got = kineto_stream.read_events(p, BLOCK)  # streamed, not fallen back to the whole text
        want = kineto._whole(p, False)
        assert (got.events, got.notes, got.warnings) == (want.events, want.notes, want.warnings), p
        mine, theirs = _tables(got), _tables(want)
        assert mine.keys() == theirs.keys(), p
        for t in mine:
            assert_frame_equal(mine[t], theirs[t])
        assert got.doc == want.doc


def _text() -> bytes:
    return gzip.decompress(EXAMPLE_TRACE.read_bytes())


def _both(p: Path) -> Trace:
    whole = kineto.read(p, block=0)
    streamed = kineto.read(p, block=BLOCK)
    _same(streamed, whole)
    return streamed


def test_a_plain_file_cut_short_is_salvaged_as_before(tmp_path):
    p = tmp_path / "cut.json"
    text = _text()
    p.write_bytes(text[: int(len(text) * 0.6)])
    tr = _both(p)
    assert any(w.kind == "truncated" for w in tr.meta.warnings)
    assert 0 < tr.meta.events < 63739  # some of the demo trace's 63,739 events


def test_a_gzip_cut_short_is_salvaged_as_before(tmp_path):
    p = tmp_path / "cut.json.gz"
    raw = EXAMPLE_TRACE.read_bytes()
    p.write_bytes(raw[: int(len(raw) * 0.7)])
    tr = _both(p)
    kinds = [w for w in tr.meta.warnings if w.kind == "truncated"]
    assert "gzip stream is truncated" in kinds[0] and "salvaged" in kinds[1]


def test_bad_values_inside_a_piece_are_salvaged_with_the_same_notes(tmp_path):
    doc = orjson.loads(_text())
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    for e in kernels[::7]:
        e["ts"] = "soon"
    for e in kernels[3::11]:
        e["args"]["correlation"] = "c7"
    p = tmp_path / "bad.json"
    p.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    tr = _both(p)
    assert any("correlation x" in w for w in tr.meta.warnings)


def test_an_oversized_event_is_the_same_error(tmp_path, monkeypatch):
    doc = orjson.loads(_text())
    doc["traceEvents"][40000].setdefault("args", {})["pad"] = "x" * 200_000
    p = tmp_path / "big.json.gz"
    p.write_bytes(gzip.compress(orjson.dumps(doc)))
    monkeypatch.setattr(limits, "EVENT_LIMIT", 150_000)
    errors = []
    for block in (0, BLOCK):
        with pytest.raises(TraceError) as e:
            kineto.read(p, block=block)
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "event 40000 is 0 MB long" in errors[0]


def test_a_repeated_key_falls_back_to_the_whole_text(tmp_path):
    text = _text()
    at = text.index(b"{") + 1
    p = tmp_path / "dup.json"
    p.write_bytes(
        text[:at]
        + b'"traceEvents": ['
        + text[text.index(b'"traceEvents": [') + 16 :][:5000].rsplit(b"},", 1)[0]
        + b"}], "
        + text[at:]
    )
    with pytest.raises(kineto_stream.Fallback):
        kineto_stream.read_events(p, BLOCK)
    tr = _both(p)
    assert any("2 times" in w for w in tr.meta.warnings)


def test_a_list_padded_with_blanks_reads_as_the_whole_text(tmp_path):
    """20 MB of spaces inside the event list: no cut among them, the buffer doubles until it
    reaches events past them, and that first piece (blanks and all) reads as the whole text."""
    text = _text()
    at = text.index(b'"traceEvents": [') + 16
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    body = z.compress(text[:at]) + b"".join(z.compress(b" " * (1 << 20)) for _ in range(20))
    p = tmp_path / "blanks.json.gz"
    p.write_bytes(body + z.compress(text[at:]) + z.flush())
    assert kineto_stream.read_events(p, BLOCK).events == 63739  # streamed
    assert _both(p).meta.events == 63739
