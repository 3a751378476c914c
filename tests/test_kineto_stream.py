"""The Kineto reader streamed (collectors.kineto.pieces.stream) gives the tables, warnings and
errors of the document read whole: on every Kineto fixture, cut into many small pieces, and on bad
variants derived from a real trace (cut short, gzip cut short, bad values inside a piece, invalid
JSON inside the list, an oversized event, a repeated key)."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import orjson
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from attrib.errors import TraceError
from attrib.trace import TABLES, Trace
from collectors import kineto, limits
from collectors.kineto import Read, events, pair
from collectors.kineto.sinks import Parts
from conftest import EXAMPLE_TRACE, FIXTURES

BLOCK = 1 << 18  # pieces of 256 kB: every fixture (2-25 MB of JSON) is cut 8-100 times


@pytest.fixture(autouse=True)
def _one_process(monkeypatch):
    """The stream alone: tests/test_kineto_pair.py reads large plain files from both ends."""
    monkeypatch.setenv(pair.ENV, "0")


def _kineto_fixtures() -> list[Path]:
    files = sorted(p for p in FIXTURES.rglob("*.json*") if p.name.endswith((".json", ".json.gz")))
    head = {p: limits.head(p, 4096) for p in files}
    return [p for p in files if kineto.sniff(p, head[p])]


def _same(a: Trace, b: Trace) -> None:
    for t in TABLES:
        assert_frame_equal(getattr(a, t), getattr(b, t))
    assert a.meta == b.meta


def _events(p: Path, block: int) -> tuple[Read, dict[str, pl.DataFrame]]:
    """What the path made of the file, and each table's frames joined."""
    sink = Parts()
    got = events(p, sink, block=block)
    return got, {t: pl.concat(f, how="diagonal_relaxed") for t, f in sink.parts.items() if f}


def test_every_kineto_fixture_streams_to_the_whole_text_tables():
    """The frames of every table (the reader's last step before sorting and validating, which
    are the same code either way), the event count, the notes and the warnings."""
    files = _kineto_fixtures()
    assert len(files) >= 30
    for p in files:
        got, mine = _events(p, BLOCK)  # streamed, not fallen back to the whole text
        want, theirs = _events(p, 0)
        assert (got.events, got.notes, got.warnings) == (want.events, want.notes, want.warnings), p
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
    """Wrong-typed values, an id past 64 bits, events without ph: the same notes and warnings
    streamed as read whole."""
    doc = orjson.loads(_text())
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    for e in kernels[::7]:
        e["ts"] = "soon"
    for e in kernels[3::11]:
        e["args"]["correlation"] = "c7"
    kernels[100]["args"]["External id"] = 2**70
    for e in kernels[5::900]:
        del e["ph"]
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc, indent=2))  # json: orjson refuses an int past 64 bits
    got, _ = _events(p, BLOCK)
    want, _ = _events(p, 0)
    assert (got.notes, got.warnings) == (want.notes, want.warnings)
    assert got.notes.no_ph == len(kernels[5::900]) and got.notes.nulled["external_id"] == 1
    tr = _both(p)
    assert any("correlation x" in w for w in tr.meta.warnings)
    assert any("without a 'ph'" in w for w in tr.meta.warnings)


def _errors(p: Path) -> list[str]:
    """The one-line errors of reading `p` whole and streamed."""
    errors = []
    for block in (0, BLOCK):
        with pytest.raises(TraceError) as e:
            kineto.read(p, block=block)
        errors.append(str(e.value))
    return errors


def test_invalid_json_inside_the_list_is_read_whole(tmp_path):
    """An event past the middle made invalid: the stream cannot cut there (Fallback), and the
    whole text names the problem, as read whole."""
    text = _text()
    at = text.index(b'"ph": "X"', len(text) // 2)  # "ph": @"X"
    p = tmp_path / "broken.json"
    p.write_bytes(text[:at + 6] + b"@" + text[at + 6:])
    with pytest.raises(kineto.Fallback):
        _events(p, BLOCK)
    errors = _errors(p)
    assert errors[0] == errors[1] and "not valid JSON" in errors[0]


def test_an_oversized_event_is_the_same_error(tmp_path, monkeypatch):
    doc = orjson.loads(_text())
    doc["traceEvents"][40000].setdefault("args", {})["pad"] = "x" * 200_000
    p = tmp_path / "big.json.gz"
    p.write_bytes(gzip.compress(orjson.dumps(doc)))
    monkeypatch.setattr(limits, "EVENT_LIMIT", 150_000)
    errors = _errors(p)
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
    with pytest.raises(kineto.Fallback):
        _events(p, BLOCK)
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
    assert _events(p, BLOCK)[0].events == 63739  # streamed
    assert _both(p).meta.events == 63739
