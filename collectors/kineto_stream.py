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

A document this reader cannot cut cleanly (invalid JSON inside the list, a key repeated, no
list near the start) raises `Fallback`: the whole-text reader reads it, so warnings, salvage and
errors are always that reader's, and this one only bounds memory.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass
from pathlib import Path

import msgspec
import polars as pl

from attrib.errors import TraceError
from attrib.trace import TRUNCATED
from collectors import limits
from collectors.kineto_doc import DOC, Doc, check_sizes, cut_warning, decode_doc
from collectors.kineto_events import CHUNK, DECODE_ERRORS, Notes, decode_chunk, decode_fast
from collectors.kineto_tables import TABLES, chunk_frames

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


@dataclass
class Streamed:
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


@dataclass
class _Broken:
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


@dataclass
class _Cut:
    """The next piece: its frames and events (None where no cut held), where the rest of the
    buffer starts, and whether the event list ends in the buffer."""

    frames: Frames | None = None
    events: int = 0
    rest: int = 0
    ended: bool = False


def _closed(path: Path, buf: bytearray, end: int, base: int,
            notes: Notes) -> tuple[Frames, int] | _Broken:
    """`_piece` of the buffer's `[` and events up to `end`, closed by a `]` written in place of
    the byte at `end` (a comma or a space between two events) while it is read: no copy."""
    was = buf[end]
    buf[end] = ord("]")
    try:
        return _piece(path, memoryview(buf)[: end + 1], base, notes)
    finally:
        buf[end] = was


def _next_piece(path: Path, buf: bytearray, base: int, notes: Notes) -> _Cut:
    """Cut the buffer (`[` and the events after it) at its last `}, {` that holds (at most
    _TRIES tried). JSON broken before the end of a piece is invalid inside the list (Fallback)
    or the list's end (a cut before it is tried, and the caller reads the rest as the tail)."""
    hi, ended = len(buf), False
    for _ in range(_TRIES):
        cut = _last_cut(buf, hi)
        if cut is None:
            break
        end, rest = cut
        got = _closed(path, buf, end, base, notes)
        if not isinstance(got, _Broken):
            return _Cut(got[0], got[1], rest, ended)
        at = got.at  # in the buffer: the piece is its head
        if at < end and not got.ended:
            raise Fallback  # invalid JSON inside the list: the whole-text reader repairs or names it
        if at < end:
            ended = True
        hi = min(at, end - 1)
    return _Cut(ended=ended)


class _Blocks:
    """The file's content block by block; `more` is false once it has all been given."""

    def __init__(self, inflow: limits.Inflow) -> None:
        self._it = iter(inflow)
        self.more = True

    def take(self) -> bytes:
        part = next(self._it, None)
        if part is None:
            self.more = False
            return b""
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


def read_events(path: Path, block: int = BLOCK,
                parts: dict[str, list[pl.DataFrame]] | None = None) -> Streamed:
    """Stream the document's events into frames (see the module docstring); Fallback where it
    must be read whole. parts: where each table's frames go, in event order (by default, lists
    in memory; collectors.kineto_spill writes them to disk)."""
    inflow = limits.Inflow(path, block)
    blocks = _Blocks(inflow)
    head, view = _header(path, blocks)
    notes, base, pieces = Notes(), 0, 0
    if parts is None:
        parts = {t: [] for t in TABLES}
    want, ended = block, False
    buf: bytearray | memoryview = view
    while blocks.more and not ended:
        buf = _fill(buf, want, blocks)
        if not blocks.more:
            break
        cut = _next_piece(path, buf, base, notes)
        ended = cut.ended
        if cut.frames is None and not ended:  # no clean cut: a longer event, or JSON to read whole
            if len(buf) - 1 > limits.EVENT_LIMIT + 2 * block:
                raise Fallback
            want = 2 * (len(buf) - 1)
            continue
        for t, df in (cut.frames or {}).items():
            parts[t].append(df)
        base += cut.events
        pieces += 1
        if pieces % TRIM_EVERY == 0:
            trim()
        if cut.rest:
            buf = buf[cut.rest - 1:]
            buf[0] = ord("[")  # in place of the comma (or space) before the next event
        want = block
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
