"""A large plain file read from both ends (collectors.kineto.pair) gives the tables, event indices,
notes and warnings of the one-process stream: on the demo trace cut into many pieces, with the
worker doing pieces, dying at once, or meeting pieces that do not parse (bad variants derived
from the real trace inside each test)."""

from __future__ import annotations

import gzip
import os
import re
import sys
import time
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

from attrib.trace import TABLES, Trace
from collectors import kineto
from collectors.kineto import pair
from conftest import EXAMPLE_TRACE

BLOCK = 1 << 18  # the demo trace's 19 MB of JSON in ~70 pieces
SLOW_S = 0.02  # a pause the reader takes per piece, so the worker surely gets pieces


def _read(p: Path, worker: str, monkeypatch) -> Trace:
    monkeypatch.setenv(pair.ENV, worker)
    return kineto.read(p, block=BLOCK)


def _same(a: Trace, b: Trace) -> None:
    for t in TABLES:
        assert_frame_equal(getattr(a, t), getattr(b, t))
    assert a.meta == b.meta


def _counted(monkeypatch, slow: bool = True) -> dict[str, int]:
    """How many pieces each side decoded; with `slow`, the reader pauses before each of its
    own (a busy reader), so the worker gets pieces however fast its start."""
    seen = {"own": 0, "theirs": 0}
    own, theirs = pair._Pair._own, pair._Pair._theirs

    def counted_own(self, k, base):
        seen["own"] += 1
        if slow:
            time.sleep(SLOW_S)
        return own(self, k, base)

    def counted_theirs(self, j, base):
        seen["theirs"] += 1
        return theirs(self, j, base)

    monkeypatch.setattr(pair._Pair, "_own", counted_own)
    monkeypatch.setattr(pair._Pair, "_theirs", counted_theirs)
    return seen


@pytest.fixture(scope="module")
def text() -> bytes:
    return gzip.decompress(EXAMPLE_TRACE.read_bytes())


def _plain(tmp_path: Path, text: bytes, name: str = "t.json") -> Path:
    p = tmp_path / name
    p.write_bytes(text)
    return p


def test_both_ends_give_the_one_process_tables(tmp_path, text, monkeypatch):
    p = _plain(tmp_path, text)
    alone = _read(p, "0", monkeypatch)
    seen = _counted(monkeypatch)
    both = _read(p, "1", monkeypatch)
    _same(both, alone)
    assert seen["theirs"] >= 5 and seen["own"] >= 1, seen  # each side decoded pieces
    assert seen["own"] + seen["theirs"] == len(_grid(p, text).starts) - 1  # each piece once, the tail apart
    # the kernels keep their index in traceEvents (export aligns by it)
    kernel_at = [m.start() for m in re.finditer(rb'"cat": "kernel"', text)]
    assert both.kernels.height == len(kernel_at)
    assert both.kernels["event"].is_sorted()


def test_the_worker_leaves_no_files(tmp_path, text, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR read again
    seen = _counted(monkeypatch)
    _read(_plain(tmp_path, text), "1", monkeypatch)
    assert seen["theirs"] >= 5
    assert not list((tmp_path / "tmp").iterdir())


def test_a_worker_killed_after_its_first_piece_leaves_the_rest_to_the_reader(
        tmp_path, text, monkeypatch):
    p = _plain(tmp_path, text)
    alone = _read(p, "0", monkeypatch)
    drain = pair._Pair._drain

    def killing(self, proc, timeout):
        alive = drain(self, proc, timeout)
        if self.done:
            proc.kill()  # SIGKILL: no word, files it was writing left half done
        return alive

    monkeypatch.setattr(pair._Pair, "_drain", killing)
    seen = _counted(monkeypatch)
    _same(_read(p, "1", monkeypatch), alone)
    assert seen["theirs"] >= 1 and seen["own"] >= 1, seen


def test_a_worker_that_fails_at_once_leaves_every_piece_to_the_reader(
        tmp_path, text, monkeypatch):
    p = _plain(tmp_path, text)
    alone = _read(p, "0", monkeypatch)
    monkeypatch.setattr(pair, "__name__", "os")  # the worker runs `from os import serve`
    seen = _counted(monkeypatch, slow=False)
    _same(_read(p, "1", monkeypatch), alone)
    assert seen["theirs"] == 0 and seen["own"] > 0


def test_a_worker_that_cannot_start_changes_nothing(tmp_path, text, monkeypatch):
    p = _plain(tmp_path, text)
    alone = _read(p, "0", monkeypatch)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    seen = _counted(monkeypatch, slow=False)
    _same(_read(p, "1", monkeypatch), alone)
    assert seen == {"own": 0, "theirs": 0}  # streamed: the pair path gave up at the start


def _grid(p: Path, text: bytes) -> pair.Grid:
    h = os.open(p, os.O_RDONLY)
    try:
        first = re.search(rb'"traceEvents"\s*:\s*\[', text).end()  # type: ignore[union-attr]
        g = pair.grid(h, p, first, len(text), BLOCK)
    finally:
        os.close(h)
    assert g is not None
    return g


_NAME = re.compile(rb'"name": "([^"\\]*)"')


@pytest.mark.parametrize("where", [0.1, 0.9])  # the reader's pieces, the worker's
def test_a_cut_inside_a_string_goes_back_to_the_stream(tmp_path, text, monkeypatch, where):
    """An op name ending in `}, {` between a grid line and the cut after it: the grid cuts
    inside the string (at its closing quote), and that piece does not parse."""
    g = _grid(_plain(tmp_path, text), text)
    k = int(len(g.starts) * where)
    while not (m := _NAME.search(text, k * BLOCK, g.ends[k - 1])):
        k += 1
    bad = text[: m.end(1)] + b"}, {" + text[m.end(1):]
    p = _plain(tmp_path, bad, "bad.json")
    assert _grid(p, bad).starts[k] < g.starts[k]  # the grid cut inside the string
    alone = _read(p, "0", monkeypatch)
    seen = _counted(monkeypatch)
    _same(_read(p, "1", monkeypatch), alone)
    assert seen["own"] >= 1
    names = [n for t in TABLES if (df := getattr(alone, t)) is not None and "name" in df.columns
             for n in df["name"].to_list()]
    assert sum(n.endswith("}, {") for n in names) == 1


def test_salvaged_events_in_the_workers_pieces_keep_their_indices(tmp_path, text, monkeypatch):
    """Invalid UTF-8 and a string timestamp near the end: the warnings name the same event."""
    n = len(text)
    m = re.compile(rb'"name": "([^"\\]{3})').search(text, int(n * 0.85))
    t = re.compile(rb'"ts": ([\d.]+)').search(text, int(n * 0.9))
    assert m is not None and t is not None
    bad = (text[: m.start(1)] + b"\xff" + text[m.start(1) + 1: t.start(1)] + b'"' + t.group(1)
           + b'"' + text[t.end(1):])
    p = _plain(tmp_path, bad)
    alone = _read(p, "0", monkeypatch)
    seen = _counted(monkeypatch)
    both = _read(p, "1", monkeypatch)
    _same(both, alone)
    assert seen["theirs"] >= 5
    said = " ".join(str(w) for w in both.meta.warnings)
    assert "invalid UTF-8" in said and "set to null" in said


def test_a_file_cut_short_keeps_its_salvage(tmp_path, text, monkeypatch):
    p = _plain(tmp_path, text[: int(len(text) * 0.8)])
    alone = _read(p, "0", monkeypatch)
    seen = _counted(monkeypatch)
    both = _read(p, "1", monkeypatch)
    _same(both, alone)
    assert seen["theirs"] >= 1
    assert any(w.kind == "truncated" for w in both.meta.warnings)


def test_a_small_or_compressed_file_or_one_cpu_reads_alone(tmp_path, text, monkeypatch):
    p = _plain(tmp_path, text)
    size = len(text)
    monkeypatch.setenv(pair.ENV, "1")
    assert pair.worth(p, size, BLOCK)
    assert not pair.worth(p, size, size // 4)  # 4 pieces
    assert not pair.worth(EXAMPLE_TRACE, size, BLOCK)  # gzip: its pieces cannot be read apart
    monkeypatch.setenv("ATTRIB_THREADS", "1")
    assert not pair.worth(p, size, BLOCK)
    monkeypatch.delenv("ATTRIB_THREADS")
    monkeypatch.setenv(pair.ENV, "0")
    assert not pair.worth(p, size, BLOCK)


def test_a_worker_whose_reader_has_gone_stops(tmp_path, text):
    """The reader's end (its pipe closed, no line) stops the worker before its next piece."""
    import subprocess

    import msgspec

    p = _plain(tmp_path, text)
    g = msgspec.structs.replace(_grid(p, text), folder=str(tmp_path))
    code = "from collectors.kineto.pair import serve; serve()"
    proc = subprocess.Popen([sys.executable, "-c", code, msgspec.json.encode(g)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            cwd=Path(pair.__file__).parents[2])
    out, _ = proc.communicate(timeout=60)  # stdin closed at once, no line written
    assert proc.returncode == 0
    assert out.count(b'"done"') <= 1  # at most the piece it had started
