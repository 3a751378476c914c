"""The streaming Kineto reader with its worker process (collectors.kineto_stream, kineto_worker):
the frames, notes, warnings and errors of the reader alone, on the real demo trace cut into 76
pieces and on bad variants of it made here; a worker that dies or stops leaves its pieces to the
reader."""

from __future__ import annotations

import gzip
import json
import os
import signal

import orjson
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from attrib.errors import TraceError
from collectors import kineto, kineto_stream, kineto_worker, limits
from collectors.kineto_spill import Spill
from collectors.kineto_stream import Streamed
from collectors.kineto_worker import Worker

from conftest import EXAMPLE_TRACE

BLOCK = 1 << 18  # pieces of 256 kB: the demo trace (20 MB of JSON) is cut 76 times


def _tables(got: Streamed) -> dict[str, pl.DataFrame]:
    return {t: pl.concat(p, how="diagonal_relaxed") for t, p in got.parts.items() if p}


def _same(got: Streamed, want: Streamed) -> None:
    assert (got.events, got.notes, got.warnings) == (want.events, want.notes, want.warnings)
    mine, theirs = _tables(got), _tables(want)
    assert mine.keys() == theirs.keys()
    for t in mine:
        assert_frame_equal(mine[t], theirs[t])
    assert got.doc == want.doc


@pytest.fixture
def spy(monkeypatch):
    """The workers started and the pieces handed to them, as they happen."""
    seen: dict[str, list] = {"workers": [], "pieces": [], "put": []}
    start, hand, put = Worker.start, Worker.hand, kineto_stream._Ahead.put

    def started(source):
        w = start(source)
        seen["workers"].append(w)
        return w

    def handed(self, j, base, text, start=None):
        seen["pieces"].append((j, base, start))
        return hand(self, j, base, text, start)

    def putting(self, made):
        seen["put"].append(self.count)
        return put(self, made)

    monkeypatch.setattr(Worker, "start", staticmethod(started))
    monkeypatch.setattr(Worker, "hand", handed)
    monkeypatch.setattr(kineto_stream._Ahead, "put", putting)
    return seen


def _gone(seen) -> None:
    """Every worker has exited and its folder is removed."""
    assert seen["workers"]
    for w in seen["workers"]:
        assert w.proc.poll() is not None and not w.folder.exists()


@pytest.mark.parametrize("every", [False, True])
def test_the_worker_gives_the_frames_of_the_reader_alone(spy, monkeypatch, every):
    """As it runs (fewer than IN_FLIGHT pending), and with every piece handed to it."""
    alone = kineto_stream.read_events(EXAMPLE_TRACE, BLOCK, parallel=False)
    assert not spy["workers"]
    spy["put"].clear()
    if every:
        monkeypatch.setattr(kineto_worker, "IN_FLIGHT", 1 << 20)
    both = kineto_stream.read_events(EXAMPLE_TRACE, BLOCK, parallel=True)
    _same(both, alone)
    pieces, handed = len(spy["put"]), len(spy["pieces"])
    assert pieces >= 70
    assert (handed == pieces) if every else (0 < handed < pieces)
    # each piece's first event is the count of the events before it
    assert [p[1] for p in spy["pieces"]] == sorted(p[1] for p in spy["pieces"])
    assert all(p[2] is None for p in spy["pieces"])  # gzip: each piece written for the worker
    _gone(spy)


def test_parallel_means_a_worker_beside_the_reader_streamed_or_whole(spy):
    """kineto.read(parallel=True) streams with a worker, as read_events does; block=0 reads
    whole with one; parallel=False starts none. The same trace every way."""
    alone = kineto.read(EXAMPLE_TRACE, block=BLOCK, parallel=False)
    assert not spy["workers"]
    streamed = kineto.read(EXAMPLE_TRACE, block=BLOCK, parallel=True)
    assert len(spy["workers"]) == 1 and spy["pieces"]  # the streamed reader handed it pieces
    spy["pieces"].clear()
    whole = kineto.read(EXAMPLE_TRACE, block=0, parallel=True)
    assert len(spy["workers"]) == 2 and not spy["pieces"]  # the whole-text reader's worker
    for t in (streamed, whole):
        assert t.meta == alone.meta
        for name in ("kernels", "ops", "frames", "launches", "markers", "copies"):
            assert_frame_equal(getattr(t, name), getattr(alone, name))
    _gone(spy)


def _plain(tmp_path):
    p = tmp_path / "plain.json"
    p.write_bytes(gzip.decompress(EXAMPLE_TRACE.read_bytes()))
    return p


def test_a_plain_files_pieces_are_read_by_the_worker_from_the_file(spy, monkeypatch, tmp_path):
    """Each piece handed over is a region of the file: the bytes at its offset are its events."""
    p = _plain(tmp_path)
    text = p.read_bytes()
    monkeypatch.setattr(kineto_worker, "IN_FLIGHT", 1 << 20)
    starts = []
    hand = Worker.hand

    def handed(self, j, base, piece, start=None):
        assert bytes(piece[1:-1]) == text[start:start + len(piece) - 2]
        starts.append(start)
        return hand(self, j, base, piece, start)

    monkeypatch.setattr(Worker, "hand", handed)
    alone = kineto_stream.read_events(p, BLOCK, parallel=False)
    _same(kineto_stream.read_events(p, BLOCK, parallel=True), alone)
    assert len(starts) >= 70 and starts == sorted(starts)
    _gone(spy)


def test_a_plain_file_changed_while_it_is_read_is_decoded_here(spy, monkeypatch, tmp_path):
    """Its mtime moved once the first piece was handed over: the worker declines every region
    (the file may no longer hold what the reader read), and the reader decodes them all."""
    p = _plain(tmp_path)
    monkeypatch.setattr(kineto_worker, "IN_FLIGHT", 1 << 20)
    here = []
    hand, mine = Worker.hand, kineto_stream._Ahead._here

    def handed(self, j, base, piece, start=None):
        if not j:
            st = p.stat()
            os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        return hand(self, j, base, piece, start)

    def decoded(self, given):
        here.append(given.base)
        return mine(self, given)

    monkeypatch.setattr(Worker, "hand", handed)
    monkeypatch.setattr(kineto_stream._Ahead, "_here", decoded)
    alone = kineto_stream.read_events(p, BLOCK, parallel=False)
    _same(kineto_stream.read_events(p, BLOCK, parallel=True), alone)
    assert len(here) >= 70
    _gone(spy)


def _written(tmp_path, doc) -> object:
    p = tmp_path / "variant.json"
    p.write_text(json.dumps(doc))  # json: orjson refuses an int past 64 bits
    return p


def test_bad_values_in_the_workers_pieces_are_salvaged_here(spy, monkeypatch, tmp_path):
    """Wrong-typed values, an id past 64 bits and events without ph: the worker's typed decode
    fails on those pieces, the reader salvages them, with the reader-alone notes."""
    doc = orjson.loads(gzip.decompress(EXAMPLE_TRACE.read_bytes()))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    for e in kernels[::500]:
        e["ts"] = "soon"
    kernels[100]["args"]["correlation"] = 2**70
    for e in kernels[7::900]:
        del e["ph"]
    p = _written(tmp_path, doc)
    alone = kineto_stream.read_events(p, BLOCK, parallel=False)
    nulled = {"correlation": 1, "ts": len(kernels[::500])}
    assert alone.notes.nulled == nulled and alone.notes.no_ph == len(kernels[7::900])
    monkeypatch.setattr(kineto_worker, "IN_FLIGHT", 1 << 20)
    _same(kineto_stream.read_events(p, BLOCK, parallel=True), alone)
    _gone(spy)


def test_an_oversized_event_in_a_workers_piece_is_the_same_error(spy, monkeypatch, tmp_path):
    doc = orjson.loads(gzip.decompress(EXAMPLE_TRACE.read_bytes()))
    doc["traceEvents"][40000].setdefault("args", {})["pad"] = "x" * 200_000
    p = _written(tmp_path, doc)
    monkeypatch.setattr(limits, "EVENT_LIMIT", 150_000)
    monkeypatch.setattr(kineto_worker, "IN_FLIGHT", 1 << 20)
    errors = []
    for parallel in (False, True):
        with pytest.raises(TraceError) as e:
            kineto_stream.read_events(p, BLOCK, parallel=parallel)
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "event 40000 is 0 MB long" in errors[0]
    _gone(spy)


def test_invalid_json_inside_the_list_falls_back_either_way(spy, monkeypatch, tmp_path):
    """Its piece's cut is checked before it is handed over: the whole-text reader reads it."""
    monkeypatch.setattr(kineto_worker, "IN_FLIGHT", 1 << 20)
    text = gzip.decompress(EXAMPLE_TRACE.read_bytes())
    at = text.index(b'"ph": "X"', len(text) // 2)  # an event past the middle: "ph": @"X"
    p = tmp_path / "broken.json"
    p.write_bytes(text[:at + 6] + b"@" + text[at + 6:])
    for parallel in (False, True):
        with pytest.raises(kineto_stream.Fallback):
            kineto_stream.read_events(p, BLOCK, parallel=parallel)
    _gone(spy)


@pytest.mark.parametrize("how", ["killed", "stopped"])
def test_a_worker_that_dies_or_stops_leaves_its_pieces_here(monkeypatch, how):
    """Killed at its start, or stopped (SIGSTOP) with its pieces pending: given up after
    _PATIENCE_S (lowered here), every piece is decoded by the reader."""
    start = Worker.start
    workers = []

    def crippled(source):
        w = start(source)
        os.kill(w.proc.pid, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
        workers.append(w)
        return w

    monkeypatch.setattr(Worker, "start", staticmethod(crippled))
    monkeypatch.setattr(kineto_worker, "_PATIENCE_S", 0.5)
    alone = kineto_stream.read_events(EXAMPLE_TRACE, BLOCK, parallel=False)
    _same(kineto_stream.read_events(EXAMPLE_TRACE, BLOCK, parallel=True), alone)
    assert workers and workers[0].proc.poll() is not None and not workers[0].folder.exists()


def _place(p) -> tuple:
    return p.first, p.rows, p.t0, p.t1, p.c0, p.c1


def _spilled(spill: Spill) -> dict[str, pl.DataFrame]:
    return {t: pl.concat([pl.read_ipc(p.path) for p in parts]) for t, parts in spill.parts.items()
            if parts}


def test_a_spill_read_with_the_worker_holds_the_same_rows(spy, tmp_path):
    with Spill.read(EXAMPLE_TRACE, tmp_path, BLOCK, rows=4096, parallel=False) as alone:
        want = _spilled(alone)
        with Spill.read(EXAMPLE_TRACE, tmp_path, BLOCK, rows=4096, parallel=True) as both:
            got = _spilled(both)
            assert both.meta == alone.meta
            assert [_place(p) for p in both.parts["kernels"]] == list(
                map(_place, alone.parts["kernels"]))
    assert got.keys() == want.keys()
    for t in want:
        assert_frame_equal(got[t], want[t])
    assert spy["pieces"]
    _gone(spy)
