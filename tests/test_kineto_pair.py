"""A worker process decoding pieces beside the reader (collectors.kineto.pair) gives the tables,
event indices, notes and warnings of the reader alone: on the demo trace, plain and gzip, in
memory and to disk (the bounded-memory sink), with the worker answering, killed, failing to
start, or handed a piece cut inside a string (bad variants derived from the real trace inside
each test)."""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from attrib.trace import TABLES, Trace
from collectors import kineto
from collectors.kineto import Read, events, pair, sinks
from collectors.kineto.sinks import Files
from conftest import EXAMPLE_TRACE

BLOCK = 1 << 18  # the demo trace's 19 MB of JSON in ~75 pieces
SLOW_S = 0.01  # a pause before each piece, so the worker is ready while pieces remain
READY_S = 60.0  # the longest a test waits for its worker to start


@pytest.fixture(scope="module")
def text() -> bytes:
    return gzip.decompress(EXAMPLE_TRACE.read_bytes())


def _file(tmp_path: Path, text: bytes, name: str = "t.json") -> Path:
    p = tmp_path / name
    p.write_bytes(gzip.compress(text, 1) if name.endswith(".gz") else text)
    return p


def _read(p: Path, worker: str, monkeypatch) -> Trace:
    monkeypatch.setenv(pair.ENV, worker)
    return kineto.read(p, block=BLOCK)


def _same(a: Trace, b: Trace) -> None:
    for t in TABLES:
        assert_frame_equal(getattr(a, t), getattr(b, t))
    assert a.meta == b.meta


def _counted(monkeypatch) -> dict[str, int]:
    """Pieces handed to the worker and reads that fell back to the whole text; the reader
    waits for a started worker to be ready and pauses before each piece (a busy reader)."""
    seen: dict = {"handed": 0, "whole": 0}
    piece, hand, whole, start = sinks.Decoder.piece, pair.Worker.hand, kineto.whole, pair.Worker.start

    def started(path):
        worker = start(path)
        if worker is not None:
            seen.setdefault("folders", []).append(Path(worker.folder))
            # ready before the reader goes on, however slowly this machine starts a process
            # (the reader would decode every piece itself and hand none); ended: it never will be
            deadline = time.monotonic() + READY_S
            while not worker.ready and worker.alive and time.monotonic() < deadline:
                worker._drain(0.1)
        return worker

    def slow_piece(self, text, at=None):
        time.sleep(SLOW_S)
        return piece(self, text, at)

    def counted_hand(self, j, text, at):
        seen["handed"] += 1
        return hand(self, j, text, at)

    def counted_whole(path, dec):
        seen["whole"] += 1
        return whole(path, dec)

    monkeypatch.setattr(sinks.Decoder, "piece", slow_piece)
    monkeypatch.setattr(pair.Worker, "hand", counted_hand)
    monkeypatch.setattr(kineto, "whole", counted_whole)
    monkeypatch.setattr(pair.Worker, "start", staticmethod(started))
    return seen


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_the_worker_gives_the_readers_own_tables(tmp_path, text, monkeypatch, name):
    p = _file(tmp_path, text, name)
    alone = _read(p, "0", monkeypatch)
    seen = _counted(monkeypatch)
    both = _read(p, "1", monkeypatch)
    _same(both, alone)
    assert seen["handed"] >= 10 and seen["whole"] == 0, seen
    kernels = len(re.findall(rb'"cat": "kernel"', text))  # each kept with its index
    assert both.kernels.height == kernels and both.kernels["event"].is_sorted()
    assert seen["folders"] and not any(map(Path.exists, seen["folders"]))  # removed


def _files(p: Path, folder: Path, monkeypatch, worker: str) -> tuple[Read, dict[str, pl.DataFrame]]:
    monkeypatch.setenv(pair.ENV, worker)
    folder.mkdir()
    sink = Files(folder, rows=4096)
    got = events(p, sink, BLOCK, worker=True)
    sink.flush()
    return got, {t: pl.concat([pl.read_ipc(part.path) for part in parts])
                 for t, parts in sink.parts.items() if parts}


def test_the_bounded_memory_sink_gets_the_same_files(tmp_path, text, monkeypatch):
    p = _file(tmp_path, text)
    got, alone = _files(p, tmp_path / "a", monkeypatch, "0")
    seen = _counted(monkeypatch)
    got2, both = _files(p, tmp_path / "b", monkeypatch, "1")
    assert seen["handed"] >= 10
    assert (got.events, got.notes, got.warnings) == (got2.events, got2.notes, got2.warnings)
    assert alone.keys() == both.keys()
    for t in alone:
        assert_frame_equal(alone[t], both[t])


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])  # ranges of the file, copies
def test_a_worker_killed_after_its_first_answer_leaves_the_rest_to_the_reader(
        tmp_path, text, monkeypatch, name):
    p = _file(tmp_path, text, name)
    alone = _read(p, "0", monkeypatch)
    drain = pair.Worker._drain

    def killing(self, timeout):
        drain(self, timeout)
        if self.done:
            self.proc.kill()  # SIGKILL: no word; the pieces it holds are decoded from their files

    monkeypatch.setattr(pair.Worker, "_drain", killing)
    seen = _counted(monkeypatch)
    _same(_read(p, "1", monkeypatch), alone)
    assert seen["handed"] >= 1 and seen["whole"] == 0


def test_a_worker_that_fails_at_once_is_handed_nothing(tmp_path, text, monkeypatch):
    p = _file(tmp_path, text)
    alone = _read(p, "0", monkeypatch)
    monkeypatch.setattr(pair, "__name__", "os")  # the worker runs `from os import serve`
    seen = _counted(monkeypatch)
    _same(_read(p, "1", monkeypatch), alone)
    assert (seen["handed"], seen["whole"]) == (0, 0)


def test_a_worker_that_cannot_start_changes_nothing(tmp_path, text, monkeypatch):
    p = _file(tmp_path, text)
    alone = _read(p, "0", monkeypatch)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    seen = _counted(monkeypatch)
    _same(_read(p, "1", monkeypatch), alone)
    assert (seen["handed"], seen["whole"]) == (0, 0)


def test_a_piece_cut_inside_a_string_is_read_whole(tmp_path, text, monkeypatch):
    """Every op name ends in `}, {`: the stream's last cut in a buffer falls inside a name.
    A piece of its own it cuts again; a handed one does not parse in the worker, and the
    document is read whole: the same tables as the reader alone."""
    bad = re.sub(rb'("name": "[^"\\]*)(", "pid")', rb"\1}, {\2", text)
    assert bad.count(b'}, {", "pid"') > 1000
    p = _file(tmp_path, bad)
    alone = _read(p, "0", monkeypatch)
    seen = _counted(monkeypatch)
    _same(_read(p, "1", monkeypatch), alone)
    assert seen["handed"] >= 1 and seen["whole"] == 1, seen


def test_a_cut_tried_after_a_failed_one_names_its_own_bytes(tmp_path, text, monkeypatch):
    """After a cut inside a name fails, the reader tries an earlier cut of the same buffer: that
    piece names where its bytes lie in the file, as the worker would read them (not where the
    failed piece broke). Checked on every piece the reader gives its decoder."""
    bad = re.sub(rb'("name": "[^"\\]*)(", "pid")', rb"\1}, {\2", text)
    p = _file(tmp_path, bad)
    given: list[tuple[int, bool, bool]] = []  # (at, names its bytes, tried after a failure)
    piece = sinks.Decoder.piece

    def checked(self, t, at=None):
        if at is None:  # the tail's events, re-encoded: a copy, not a range of the file
            return piece(self, t, at)
        retry = bool(given) and given[-1][2] is None
        given.append((at, bytes(t[1:-1]) == bad[at: at + len(t) - 2], None))
        try:
            piece(self, t, at)
        except Exception:
            given[-1] = given[-1][:2] + (None,)
            raise
        given[-1] = given[-1][:2] + (retry,)

    monkeypatch.setattr(sinks.Decoder, "piece", checked)
    _read(p, "0", monkeypatch)
    assert sum(1 for *_, retry in given if retry) > 5, "no cut was tried after a failed one"
    assert all(ok for _, ok, _ in given), [at for at, ok, _ in given if not ok][:3]


def test_salvaged_events_in_the_workers_pieces_keep_their_indices(tmp_path, text, monkeypatch):
    """Invalid UTF-8 and a string timestamp near the end: the warnings name the same event."""
    n = len(text)
    m = re.compile(rb'"name": "([^"\\]{3})').search(text, int(n * 0.85))
    t = re.compile(rb'"ts": ([\d.]+)').search(text, int(n * 0.9))
    assert m is not None and t is not None
    bad = (text[: m.start(1)] + b"\xff" + text[m.start(1) + 1: t.start(1)] + b'"' + t.group(1)
           + b'"' + text[t.end(1):])
    p = _file(tmp_path, bad)
    alone = _read(p, "0", monkeypatch)
    seen = _counted(monkeypatch)
    both = _read(p, "1", monkeypatch)
    _same(both, alone)
    assert seen["handed"] >= 10
    said = " ".join(str(w) for w in both.meta.warnings)
    assert "invalid UTF-8" in said and "set to null" in said


def test_a_file_cut_short_keeps_its_salvage(tmp_path, text, monkeypatch):
    p = _file(tmp_path, text[: int(len(text) * 0.8)])
    alone = _read(p, "0", monkeypatch)
    seen = _counted(monkeypatch)
    both = _read(p, "1", monkeypatch)
    _same(both, alone)
    assert seen["handed"] >= 1
    assert any(w.kind == "truncated" for w in both.meta.warnings)


def test_a_worker_whose_reader_has_gone_ends(tmp_path, text):
    """The reader's end (its pipe closed) ends the worker."""
    code = "from collectors.kineto.pair import serve; serve()"
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "t.json"),
                             str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            cwd=Path(pair.__file__).parents[2])
    out, _ = proc.communicate(timeout=60)  # stdin closed at once, no line written
    assert proc.returncode == 0 and out == b'{"ready":true}\n'


def test_when_the_worker_starts(tmp_path, text, monkeypatch):
    plain, packed = _file(tmp_path, text), _file(tmp_path, text, "t.json.gz")
    monkeypatch.setenv(pair.ENV, "1")
    monkeypatch.delenv("ATTRIB_THREADS", raising=False)
    if not pair.second_cpu():
        assert pair.start_at(plain, BLOCK) is None
        return
    assert pair.start_at(plain, BLOCK) == 0  # 75 pieces of a plain file: at once
    assert pair.start_at(plain, len(text) // 4) == pair.START_AT  # 4 pieces
    assert pair.start_at(packed, BLOCK) == pair.START_AT  # its size says little
    assert pair.start_at(tmp_path / "missing.json", BLOCK) is None
    monkeypatch.setenv("ATTRIB_THREADS", "1")
    assert pair.start_at(plain, BLOCK) is None
    monkeypatch.delenv("ATTRIB_THREADS")
    monkeypatch.setenv(pair.ENV, "0")
    assert pair.start_at(plain, BLOCK) is None


def test_the_reader_waits_on_what_a_piece_took_the_worker(tmp_path, text, monkeypatch):
    """Each answer says how long its piece took the worker: more than nothing, less than the
    time from its hand to its answer's arrival; the reader waits on the latest of them (its
    pace), not on the gap between two answers (1 us where two arrive in one read)."""
    p = _file(tmp_path, text)
    handed: dict[int, float] = {}
    seen: list[tuple[float, float, float]] = []  # (took, hand to arrival, pace after it)
    _counted(monkeypatch)  # a busy reader: the worker gets pieces however loaded the machine
    hand, drain = pair.Worker.hand, pair.Worker._drain

    def timed_hand(self, j, text, at):
        handed[j] = time.monotonic()
        return hand(self, j, text, at)

    def timed_drain(self, timeout):
        before = set(self.done)
        drain(self, timeout)
        now = time.monotonic()
        seen.extend((self.done[j].took, now - handed[j], self.pace)
                    for j in sorted(set(self.done) - before))

    monkeypatch.setattr(pair.Worker, "hand", timed_hand)
    monkeypatch.setattr(pair.Worker, "_drain", timed_drain)
    _read(p, "1", monkeypatch)
    assert len(seen) >= 5, seen
    assert all(0 < took < since for took, since, _ in seen), seen
    assert seen[-1][2] == seen[-1][0]  # the pace is the last answer's own time
