"""The streaming Kineto reader: the event list read in pieces, never the file whole.

The file's content comes in blocks (collectors.limits.Inflow: plain, gzip, xz, zstd, with the
whole-file bounds). The top-level keys before `"traceEvents": [` are kept; the event list is cut
into pieces of about `block` bytes at a `}, {` between two events. A piece is the JSON array
`[` + its events + `]`, typed-decoded at once (collectors.kineto_events) and routed into frames
(collectors.kineto_tables), then dropped: only the frames outlive it. A cut is checked by the
decode itself: JSON is parsed left to right, so `[` + text + `]` is valid only where the text
ends after a whole event of the list (a cut inside a string or a nested object fails), and an
earlier cut is tried then. The last piece and what follows the list (the closing keys) are read
as one small document by collectors.kineto_doc, with its salvage of a cut-short file.

A large file is decoded by two processes: while fewer than IN_FLIGHT pieces are pending with the
worker (collectors.kineto_worker), the next piece is handed to it, its cut checked by a decode of
the list's structure alone (msgspec.Raw: no typed fields); the others are decoded here. Frames
go to their tables in event order whoever built them; a piece the worker could not decode (bad
events to salvage) or did not answer is decoded here, so the tables are the serial reader's.

A document this reader cannot cut cleanly (invalid JSON inside the list, a key repeated, no
list near the start) raises `Fallback`: the whole-text reader reads it, so warnings, salvage and
errors are always that reader's, and this one only bounds memory.
"""

from __future__ import annotations

import ctypes
import os
import re
from collections import deque
from pathlib import Path

import msgspec
import polars as pl

from attrib.errors import TraceError
from attrib.trace import TRUNCATED
from collectors import limits
from collectors.kineto_doc import DOC, Doc, check_sizes, cut_warning, decode_doc
from collectors.kineto_events import CHUNK, DECODE_ERRORS, Notes, decode_chunk, decode_fast
from collectors.kineto_tables import TABLES, chunk_frames
from collectors.kineto_worker import Others, Worker, cpus, likely_big

BLOCK = 8 << 20  # JSON text per piece
HEADER_LIMIT = 16 << 20  # the top-level keys before the event list, at most
_TRIES = 8  # cuts tried from the back of the buffer before it grows
_KEY = b'"traceEvents"'
_LIST = re.compile(rb'"traceEvents"\s*:\s*\[')
_BETWEEN = re.compile(rb"\}\s*,\s*\{")
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_ERRORS = (*DECODE_ERRORS, RecursionError)
Frames = dict[str, pl.DataFrame]
TRIM_EVERY = 16  # pieces between two returns of the C heap's free memory to the system
AHEAD = 16  # pieces built past the oldest one still with the worker, at most


def trim() -> None:
    """Give the C heap's free pages back to the system (glibc `malloc_trim`; nothing elsewhere).
    The decoded events of a piece live in Python's heap and the frames in polars' own allocator,
    so the pages a piece's events leave free are not reused for the tables: without this they
    stay resident (about 40 MB per 0.5 GB of JSON)."""
    try:
        getattr(ctypes.CDLL(None), "malloc_trim")(0)  # the process's own symbols: libc's where glibc
    except (OSError, AttributeError, TypeError):
        pass


class Fallback(Exception):
    """The document is not one the streaming reader cuts cleanly; read it whole."""


class Streamed(msgspec.Struct):
    """What the reader made of the document: its top-level keys (`doc`, its event list emptied),
    the event count, the frames of each table in event order, the salvage notes and warnings."""

    doc: Doc
    events: int
    parts: dict[str, list[pl.DataFrame]]
    notes: Notes
    warnings: list[str]


def _last_cut(buf: bytes | bytearray, hi: int) -> tuple[int, int] | None:
    """(end of an event, start of the next) of the last `}, {` that ends before `hi`."""
    while (i := buf.rfind(b"}", 0, hi)) >= 0:
        m = _BETWEEN.match(buf, i)
        if m:
            return i + 1, m.end() - 1
        hi = i
    return None


class _Broken(msgspec.Struct):
    """Where a piece's JSON broke (a byte of the piece; its length where the input ran out) and
    whether the list closed there (text after a complete `[...]`)."""

    at: int
    ended: bool


_AT = re.compile(r"\(byte (\d+)\)")


def _broken(exc: Exception, size: int) -> _Broken:
    m = _AT.search(str(exc))
    if isinstance(exc, RecursionError) or (m is None and "truncated" not in str(exc)):
        raise Fallback from None
    return _Broken(int(m.group(1)) if m else size, "trailing characters" in str(exc))


def _piece(path: Path, text: memoryview, base: int, notes: Notes) -> tuple[Frames, int] | _Broken:
    """The frames and event count of a JSON array of events (event base onwards), or where the
    text stops being a list of whole events."""
    try:
        evs = decode_fast(text)
        if len(text) > limits.EVENT_LIMIT:
            check_sizes(path, _RAWS.decode(text), base)
    except _ERRORS:
        try:
            raws = _RAWS.decode(text)
        except _ERRORS as exc:
            return _broken(exc, len(text))
        check_sizes(path, raws, base)
        evs = decode_chunk(raws, base, notes)
    return chunk_frames(evs, notes, base), len(evs)


class _Given(msgspec.Struct):
    """A piece for the worker: the buffer it was cut from (kept, not copied: the reader goes on
    with a copy of the rest), its end there, its first event's index, and where its events
    start in the trace file (None where the buffer is not the file's bytes: compressed)."""

    buf: bytearray
    end: int
    base: int
    start: int | None

    def text(self) -> memoryview:
        """The piece's JSON array: `[`, its events, and a `]` written over the byte after them
        (the reader no longer reads it)."""
        self.buf[self.end] = ord("]")
        return memoryview(self.buf)[: self.end + 1]


def _checked(path: Path, buf: bytearray, end: int, base: int,
             origin: int | None) -> tuple[_Given, int] | _Broken:
    """The buffer's `[` and events up to `end` (closed there by a `]`) for the worker, and its
    event count, its cut checked as `_piece` checks it (by the same decoder's structure alone);
    or where the text stops being a list of whole events. origin: the buffer's place in the
    trace file (None where it is not the file's bytes)."""
    text = memoryview(buf)[: end + 1]
    try:
        raws = _RAWS.decode(text)
    except _ERRORS as exc:
        return _broken(exc, len(text))
    if len(text) > limits.EVENT_LIMIT:
        check_sizes(path, raws, base)
    return _Given(buf, end, base, None if origin is None else origin + 1), len(raws)


class _Cut(msgspec.Struct):
    """The next piece: its frames, or the piece for the worker, and its events (neither where no
    cut held), where the rest of the buffer starts, and whether the event list ends in it."""

    frames: Frames | None = None
    events: int = 0
    rest: int = 0
    ended: bool = False
    given: _Given | None = None


def _closed(path: Path, buf: bytearray, end: int, base: int, notes: Notes, give: bool,
            origin: int | None) -> tuple[Frames | _Given, int] | _Broken:
    """`_piece` (`_checked` where `give`) of the buffer's `[` and events up to `end`, closed by
    a `]` written in place of the byte at `end` (a comma or a space between two events) while
    it is read: no copy."""
    was = buf[end]
    buf[end] = ord("]")
    try:
        if give:
            return _checked(path, buf, end, base, origin)
        return _piece(path, memoryview(buf)[: end + 1], base, notes)
    finally:
        buf[end] = was


def _next_piece(path: Path, buf: bytearray, base: int, notes: Notes, give: bool,
                origin: int | None) -> _Cut:
    """Cut the buffer (`[` and the events after it) at its last `}, {` that holds (at most
    _TRIES tried); `give`: for the worker (origin: the buffer's place in the trace file, None
    where it is not the file's bytes). JSON broken before the end of a piece is invalid inside
    the list (Fallback) or the list's end (a cut before it is tried, and the caller reads the
    rest as the tail)."""
    hi, ended = len(buf), False
    for _ in range(_TRIES):
        cut = _last_cut(buf, hi)
        if cut is None:
            break
        end, rest = cut
        got = _closed(path, buf, end, base, notes, give, origin)
        if not isinstance(got, _Broken):
            made, events = got
            if isinstance(made, _Given):
                return _Cut(None, events, rest, ended, made)
            return _Cut(made, events, rest, ended)
        at = got.at  # in the buffer: the piece is its head
        if at < end and not got.ended:
            raise Fallback  # invalid JSON inside the list: the whole-text reader repairs or names it
        if at < end:
            ended = True
        hi = min(at, end - 1)
    return _Cut(ended=ended)


class _Blocks:
    """The file's content block by block; `more` is false once it has all been given, `taken`
    counts the bytes given."""

    def __init__(self, inflow: limits.Inflow) -> None:
        self._it = iter(inflow)
        self.more = True
        self.taken = 0

    def take(self) -> bytes:
        part = next(self._it, None)
        if part is None:
            self.more = False
            return b""
        self.taken += len(part)
        return part


def _header(path: Path, blocks: _Blocks) -> tuple[bytes, memoryview]:
    """(the document before its `"traceEvents"` key, the list from its `[` on: a view, not a
    copy, of the buffer)."""
    buf = b""
    while (m := _LIST.search(buf)) is None:
        if not blocks.more or len(buf) > HEADER_LIMIT:
            raise Fallback
        buf += blocks.take()
    head = buf[: m.start()]
    if head.count(_KEY):
        raise Fallback
    try:
        DOC.decode(head + _KEY + b": []}")
    except (*_ERRORS, msgspec.ValidationError):
        raise Fallback from None
    return head, memoryview(buf)[m.end() - 1:]


def _fill(buf: bytearray | memoryview, want: int, blocks: _Blocks) -> bytearray:
    """`buf` (the list's `[` or a `[` in place of a comma, then events) and the next blocks, at
    least `want` bytes of events (or all that is left), joined in one copy."""
    parts: list[bytes | bytearray | memoryview] = [buf]
    size = len(buf) - 1
    while size < want and blocks.more:
        part = blocks.take()
        parts.append(part)
        size += len(part)
    return buf if isinstance(buf, bytearray) and len(parts) == 1 else bytearray().join(parts)


def _pieces(path: Path, blocks: _Blocks, view: memoryview, block: int, ahead: _Ahead,
            plain: bool) -> tuple[bytearray | memoryview, int]:
    """Cut the list into pieces, each decoded here or given to the worker (`ahead`), until it
    ends: (what is left of the buffer, the events put). plain: the blocks are the file's bytes
    (each piece's place in the file is then known)."""
    want, ended, base, pieces = block, False, 0, 0
    buf: bytearray | memoryview = view
    origin = blocks.taken - len(view)  # in the file, of buf[0] (plain) or of the content
    while blocks.more and not ended:
        buf = _fill(buf, want, blocks)
        if not blocks.more:
            break
        where = origin if plain else None
        cut = _next_piece(path, buf, base, ahead.notes, ahead.give(), where)
        ended = cut.ended
        if cut.frames is None and cut.given is None and not ended:
            # no clean cut: a longer event, or JSON to read whole
            if len(buf) - 1 > limits.EVENT_LIMIT + 2 * block:
                raise Fallback
            want = 2 * (len(buf) - 1)
            continue
        if cut.frames is not None or cut.given is not None:
            ahead.put(cut.given or cut.frames or {})
        base += cut.events
        pieces += 1
        if pieces % TRIM_EVERY == 0:
            trim()
        if cut.rest:
            buf = buf[cut.rest - 1:]
            buf[0] = ord("[")  # in place of the comma (or space) before the next event
            origin += cut.rest - 1
        want = block
    return buf, base


class _Ahead:
    """Where the pieces' frames go, in event order: at once for a piece decoded here; for one with
    the worker, when it answers (the pieces built after it wait, AHEAD at most). A piece it did
    not answer with frames is decoded here."""

    def __init__(self, path: Path, parts: dict[str, list[pl.DataFrame]], notes: Notes,
                 worker: Worker | None, watch: bool) -> None:
        self.path, self.parts, self.notes, self.worker = path, parts, notes, worker
        self.queue: deque[tuple[int, Frames | _Given]] = deque()
        self.count = 0
        self.others = Others() if watch and worker is not None else None
        self.handing = worker is not None

    def give(self) -> bool:
        """Whether the next piece goes to the worker: it has room, and where the CPUs are
        watched, a CPU has been free for it (checked every TRIM_EVERY pieces; once not, it is
        given no more)."""
        w = self.worker
        if w is None or not self.handing:
            return False
        if self.others is not None and self.count % TRIM_EVERY == TRIM_EVERY - 1:
            self.handing = self.others.free(w)
        return self.handing and w.room()

    def put(self, made: Frames | _Given) -> None:
        """The next piece: its frames, or the piece for the worker."""
        j, self.count = self.count, self.count + 1
        if isinstance(made, _Given) and not (self.worker and self.worker.hand(
                j, made.base, made.text(), made.start)):
            made = self._here(made)
        self.queue.append((j, made))
        if self.worker is not None and len(self.queue) > AHEAD:
            self.worker.wait(self.queue[0][0])
        self._drain()

    def _here(self, given: _Given) -> Frames:
        got = _piece(self.path, given.text(), given.base, self.notes)
        assert not isinstance(got, _Broken)  # its cut was checked by the same decoder
        return got[0]

    def _drain(self) -> None:
        """Put the frames of the pieces at the front that are ready."""
        w = self.worker
        if w is not None:
            w.room()  # takes in the answers that came
        while self.queue:
            j, made = self.queue[0]
            if isinstance(made, _Given):
                assert w is not None
                if j in w.pending and w.alive:
                    return
                answer = w.answers.pop(j, None)
                if answer is None:  # its fast decode failed, it was taken back, or it died
                    made = self._here(made)
                else:
                    made = answer[0]
                    self.notes.no_ph += answer[1]
                    self.notes.no_ts += answer[2]
            self.queue.popleft()
            for t, df in made.items():
                self.parts[t].append(df)

    def finish(self) -> None:
        """Every piece's frames put: those the worker has not started decoded here, then the
        rest waited for."""
        w = self.worker
        if w is None:
            return
        back = set(w.take_back(keep=1))
        self.queue = deque((j, self._here(m) if j in back and isinstance(m, _Given) else m)
                           for j, m in self.queue)
        while self.queue:
            self._drain()
            if self.queue:
                w.wait(self.queue[0][0])


def _worker(path: Path, parallel: bool | None) -> Worker | None:
    """A worker process where `parallel` asks for one, or where it is None, the file is large
    and there are two CPUs (it is then given pieces only while a CPU is free for it)."""
    if parallel is False or (parallel is None and not (likely_big(path) and cpus() >= 2)):
        return None
    return Worker.start(path)


def read_events(path: Path, block: int = BLOCK, parts: dict[str, list[pl.DataFrame]] | None = None,
                parallel: bool | None = None) -> Streamed:
    """Stream the document's events into frames (see the module docstring); Fallback where it
    must be read whole. parts: where each table's frames go, in event order (by default, lists
    in memory; collectors.kineto_spill writes them to disk). parallel: with a worker process
    (`_worker`); the frames are the same either way."""
    inflow = limits.Inflow(path, block)
    stat = os.stat(path)  # before it is read: the worker checks the file is still this one
    blocks = _Blocks(inflow)
    head, view = _header(path, blocks)
    notes = Notes()
    if parts is None:
        parts = {t: [] for t in TABLES}
    worker = _worker(path, parallel)
    try:
        if worker is not None and inflow.kind is None:
            worker.reads(stat)  # plain: the worker reads its pieces from the file itself
        ahead = _Ahead(path, parts, notes, worker, watch=parallel is None)
        buf, base = _pieces(path, blocks, view, block, ahead, inflow.kind is None)
        ahead.finish()
    finally:
        if worker is not None:
            worker.close()
    rest = _fill(buf, 0, blocks)
    while blocks.more:  # the list has ended: the keys after it
        rest += blocks.take()
        if len(rest) - 1 > HEADER_LIMIT + 2 * block:
            raise Fallback
    return _tail(path, head, memoryview(rest)[1:], inflow, parts, notes, base)


def _tail(path: Path, head: bytes, buf: memoryview, inflow: limits.Inflow,
          parts: dict[str, list[pl.DataFrame]], notes: Notes, base: int) -> Streamed:
    """The last events and the keys after the list, read as one document with the whole-text
    reader's salvage."""
    warnings: list[str] = [cut_warning(inflow.kind)] if inflow.cut else []
    text = head + _KEY + b": [" + buf
    if text.count(_KEY) > 1:
        raise Fallback  # a repeated key: the whole-text reader says so and reads the last list
    floor = DOC.decode(head + _KEY + b": []}") if base else None
    try:
        doc = decode_doc(path, text, warnings, before=base, floor=floor)
    except TraceError:
        if base:
            raise Fallback from None  # the whole text names the problem as that reader does
        raise
    if base and any(getattr(w, "kind", "") != TRUNCATED for w in warnings):
        raise Fallback  # repaired or read leniently: the whole text is, as the other reader does
    events = doc.traceEvents
    doc.traceEvents = []
    for i in range(0, len(events), CHUNK):
        raws = events[i:i + CHUNK]
        check_sizes(path, raws, base + i)
        for t, df in chunk_frames(decode_chunk(raws, base + i, notes), notes, base + i).items():
            parts[t].append(df)
    total = base + len(events)
    trim()
    return Streamed(doc, total, parts, notes, warnings)
