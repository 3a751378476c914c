"""The Kineto reader's worker process (collectors.kineto_worker): same tables, warnings and errors as
the serial path, on the real demo trace (two chunks of events) and on bad variants of it made here."""

from __future__ import annotations

import gzip
import json
import os
import signal
import time

import orjson
import pytest

from attrib.errors import TraceError
from collectors import kineto, limits
from collectors.kineto_events import CHUNK, Notes, decode_chunk
from collectors.kineto_tables import chunk_frames
from collectors.kineto_worker import Claims, Worker

from conftest import EXAMPLE_TRACE

TABLES = ("kernels", "ops", "frames", "launches", "markers", "copies")


def _same(a, b) -> None:
    for t in TABLES:
        x, y = getattr(a, t), getattr(b, t)
        assert x.equals(y), t
    assert a.meta == b.meta


def _chunks(text: bytes) -> list:
    events = kineto._DOC.decode(text).traceEvents
    return [events[i:i + CHUNK] for i in range(0, len(events), CHUNK)]


def test_parallel_read_equals_serial_read():
    serial = kineto.read(EXAMPLE_TRACE, parallel=False)
    assert serial.meta.events > CHUNK  # at least two chunks, so the worker has one to take
    _same(kineto.read(EXAMPLE_TRACE, block=0, parallel=True), serial)


def test_worker_answers_every_chunk_with_the_serial_frames():
    """The worker alone (the reader claims nothing): each chunk's frames as the reader builds them."""
    chunks = _chunks(gzip.decompress(EXAMPLE_TRACE.read_bytes()))
    worker = Worker.start(EXAMPLE_TRACE)
    assert worker is not None
    claims = Claims(len(chunks))
    try:
        while claims.lo < claims.hi:
            worker.pump(chunks, claims)
            time.sleep(0.01)
        answers = worker.finish()
    finally:
        worker.close()
    assert not worker.folder.exists()
    assert sorted(answers) == list(range(len(chunks)))
    for j, c in enumerate(chunks):
        notes = Notes()
        want = chunk_frames(decode_chunk(c, j * CHUNK, notes), notes, j * CHUNK)
        got = answers[j][0]
        assert list(got) == list(want)
        assert all(got[t].equals(want[t]) for t in want)
        assert answers[j][1:] == (notes.no_ph, notes.no_ts)


def test_chunks_handed_over_and_not_started_are_taken_back():
    """The worker stopped before it reads a request: both chunks handed to it are taken back by the
    reader (it removes their files first); resumed, the worker skips them and ends cleanly."""
    chunks = _chunks(gzip.decompress(EXAMPLE_TRACE.read_bytes()))
    worker = Worker.start(EXAMPLE_TRACE)
    os.kill(worker.proc.pid, signal.SIGSTOP)
    try:
        worker.pump(chunks, Claims(len(chunks)))
        assert worker.pending == [1, 0]  # from the back
        back = worker.take_back()
        os.kill(worker.proc.pid, signal.SIGCONT)
        answers = worker.finish()
        assert worker.proc.wait(timeout=30) == 0
    finally:
        worker.close()
    assert back == [0, 1] and answers == {}


def test_a_dead_worker_leaves_its_chunks_to_the_reader():
    text = gzip.decompress(EXAMPLE_TRACE.read_bytes())
    chunks = _chunks(text)
    worker = Worker.start(EXAMPLE_TRACE)
    worker.proc.kill()
    worker.proc.wait()
    try:
        got = kineto._parallel(EXAMPLE_TRACE, chunks, Notes(), worker)
    finally:
        worker.close()
    assert not worker.folder.exists()
    want = kineto._serial(EXAMPLE_TRACE, chunks, Notes())
    assert [list(f) for f in got] == [list(f) for f in want]
    assert all(g[t].equals(w[t]) for g, w in zip(got, want) for t in w)


def test_bad_events_in_the_workers_chunk_are_salvaged_as_in_the_serial_path(tmp_path):
    """Wrong-typed values and an event without ph in the last chunk: the worker's fast decode fails,
    the reader salvages the chunk itself, and tables and warnings are the serial path's."""
    doc = orjson.loads(gzip.decompress(EXAMPLE_TRACE.read_bytes()))
    events = doc["traceEvents"]
    last = [i for i, e in enumerate(events) if i >= CHUNK and e.get("cat") in ("kernel", "cpu_op")]
    events[last[0]]["ts"] = "NaN"
    events[last[1]]["args"]["External id"] = 2**70
    del events[last[2]]["ph"]
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))  # orjson refuses the 2^70
    serial = kineto.read(p, parallel=False)
    assert any("set to null" in w for w in serial.meta.warnings)
    assert any("without a 'ph'" in w for w in serial.meta.warnings)
    _same(kineto.read(p, block=0, parallel=True), serial)


def test_an_oversized_event_in_the_workers_chunk_is_the_serial_error(tmp_path, monkeypatch):
    """An event past the size limit in the last chunk (the limit lowered to just above the longest
    real event): refused with the same message whichever process would have decoded it."""
    doc = orjson.loads(gzip.decompress(EXAMPLE_TRACE.read_bytes()))
    longest = max(len(orjson.dumps(e)) for e in doc["traceEvents"])
    doc["traceEvents"][-1].setdefault("args", {})["pad"] = "x" * longest
    p = tmp_path / "big.json"
    p.write_bytes(orjson.dumps(doc))
    monkeypatch.setattr(limits, "EVENT_LIMIT", longest)
    errors = []
    for parallel in (False, True):
        with pytest.raises(TraceError) as exc:
            kineto.read(p, parallel=parallel)
        errors.append(str(exc.value))
    assert errors[0] == errors[1] and f"event {len(doc['traceEvents']) - 1} is" in errors[0]


def test_a_salvaged_document_is_read_serially(tmp_path):
    """A cut-short document never reaches the worker: same tables, same warning."""
    text = gzip.decompress(EXAMPLE_TRACE.read_bytes())
    p = tmp_path / "cut.json"
    p.write_bytes(text[: len(text) * 9 // 10])
    serial = kineto.read(p, parallel=False)
    assert serial.meta.warnings and serial.kernels.height > 0
    _same(kineto.read(p, block=0, parallel=True), serial)


def _plain(tmp_path):
    text = gzip.decompress(EXAMPLE_TRACE.read_bytes())
    p = tmp_path / "plain.json"
    p.write_bytes(text)
    return p, p.read_bytes()


def _answers(worker: Worker, chunks: list) -> dict:
    claims = Claims(len(chunks))
    try:
        while claims.lo < claims.hi:
            worker.pump(chunks, claims)
            time.sleep(0.01)
        return worker.finish()
    finally:
        worker.close()


def test_a_plain_file_is_read_by_the_worker_from_the_file_itself(tmp_path):
    """Uncompressed, the reader's text is the file's bytes: the worker reads each chunk's region of the
    file (nothing is copied for it) and answers the frames the reader builds."""
    p, text = _plain(tmp_path)
    chunks = _chunks(text)
    worker = Worker.start(p)
    worker.file_text(text, p.stat())
    assert all(worker._region(c)[1] > 0 for c in chunks)
    answers = _answers(worker, chunks)
    assert sorted(answers) == list(range(len(chunks)))
    for j, c in enumerate(chunks):
        want = chunk_frames(decode_chunk(c, j * CHUNK, Notes()), Notes(), j * CHUNK)
        assert all(answers[j][0][t].equals(want[t]) for t in want)
    _same(kineto.read(p, block=0, parallel=True), kineto.read(p, parallel=False))


def test_a_file_changed_after_it_was_read_is_not_decoded_by_the_worker(tmp_path):
    """The file's mtime moved after the reader read it: the worker declines every region (the reader
    decodes them), whatever the file now holds."""
    p, text = _plain(tmp_path)
    chunks = _chunks(text)
    worker = Worker.start(p)
    worker.file_text(text, p.stat())
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    answers = _answers(worker, chunks)
    assert sorted(answers) == list(range(len(chunks))) and all(a is None for a in answers.values())
