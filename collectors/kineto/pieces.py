"""The document's bytes to pieces of its event list, each given to the decoder (`dec.piece`).

`stream` reads the file in blocks (collectors.limits.Inflow: plain, gzip, xz, zstd, bounded),
keeps the keys before `"traceEvents": [` and cuts the list at a `}, {` about every `block` bytes.
A piece is `[` + its events + `]`; its parse checks the cut (JSON is parsed left to right: a cut
inside a string or a nested object fails, and an earlier one is tried). The last piece and the
keys after the list are read as one small document, with repair's salvage of a cut-short file.
What it cannot cut cleanly (invalid JSON inside the list, a key repeated, no list near the start,
anything repaired) raises `Fallback`. `whole` reads the document whole and repaired (repair);
msgspec splits its events into raw slices, given CHUNK at a time.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from attrib.errors import TraceError
from attrib.trace import TRUNCATED
from collectors import limits
from collectors.kineto.decode import ERRORS, Fallback, json_array, trim
from collectors.kineto.repair import DOC, KEY, Doc, cut_warning, decode_doc, read_bytes
from collectors.kineto.sinks import Decoder

BLOCK = 8 << 20  # JSON text per piece
CHUNK = 32768  # events per piece of a document read whole
HEADER_LIMIT = 16 << 20  # the top-level keys before the event list, at most
TRIM_EVERY = 16  # pieces between two returns of the C heap's free memory to the system
_TRIES = 8  # cuts tried from the back of the buffer before it grows
_LIST = re.compile(rb'"traceEvents"\s*:\s*\[')
_BETWEEN = re.compile(rb"\}\s*,\s*\{")
_AT = re.compile(r"\(byte (\d+)\)")
Got = tuple[Doc, int, list[str]]  # the top-level keys (events emptied), the events, warnings


def _last_cut(buf: bytearray, hi: int) -> tuple[int, int] | None:
    """(end of an event, start of the next) of the last `}, {` that ends before `hi`."""
    while (i := buf.rfind(b"}", 0, hi)) >= 0:
        m = _BETWEEN.match(buf, i)
        if m:
            return i + 1, m.end() - 1
        hi = i
    return None


def _broken(exc: Exception, size: int) -> tuple[int, bool]:
    """Where a piece's JSON broke (its length where the input ran out) and whether the list
    closed there (text after a complete `[...]`); Fallback where it cannot be told."""
    m = _AT.search(str(exc))
    if isinstance(exc, RecursionError) or (m is None and "truncated" not in str(exc)):
        raise Fallback from None
    return int(m.group(1)) if m else size, "trailing characters" in str(exc)


def _cut(buf: bytearray, dec: Decoder, at: int | None) -> tuple[int, bool]:
    """Give the decoder the buffer (`[`, events) up to its last `}, {` that holds (of _TRIES tried),
    closed by a `]` written over the comma while it is read (no copy): (where the rest starts,
    whether the list ends in the buffer), 0 where no cut held. JSON broken inside the piece is
    Fallback; the list's end, an earlier cut; a handed piece is parsed by the worker (pair says
    why its cut holds). at: where buf[1] lies in a plain file, or None."""
    hi, ended = len(buf), False
    for _ in range(_TRIES):
        cut = _last_cut(buf, hi)
        if cut is None:
            break
        end, rest = cut
        was, buf[end] = buf[end], ord("]")
        try:
            dec.piece(memoryview(buf)[: end + 1], at)
            return rest, ended
        except ERRORS as exc:
            broke, closed = _broken(exc, end + 1)
        finally:
            buf[end] = was
        if broke < end and not closed:
            raise Fallback  # invalid JSON inside the list: the whole text repairs or names it
        ended = ended or broke < end
        hi = min(broke, end - 1)
    return 0, ended


class Blocks:
    """The file's content block by block; `more` is false once it has all been given."""

    def __init__(self, inflow: limits.Inflow) -> None:
        self._it = iter(inflow)
        self.more = True

    def take(self) -> bytes:
        """The next block (b"" once there is none)."""
        part = next(self._it, None)
        self.more = part is not None
        return part or b""


def header(blocks: Blocks) -> tuple[bytes, bytearray | memoryview, int]:
    """(the document before its `"traceEvents"` key, the list from its `[` on: a view, where that
    `[` lies in the content)."""
    buf = b""
    while (m := _LIST.search(buf)) is None:
        if not blocks.more or len(buf) > HEADER_LIMIT:
            raise Fallback
        buf += blocks.take()
    head = buf[: m.start()]
    if head.count(KEY):
        raise Fallback
    try:
        DOC.decode(head + KEY + b": []}")
    except (*ERRORS, msgspec.ValidationError):
        raise Fallback from None
    return head, memoryview(buf)[m.end() - 1:], m.end() - 1


def _fill(buf: bytearray | memoryview, want: int, blocks: Blocks) -> bytearray:
    """`buf` (a `[`, then events) and the next blocks, at least `want` bytes of events (or all
    that is left), joined in one copy."""
    parts: list[bytes | bytearray | memoryview] = [buf]
    size = len(buf) - 1
    while size < want and blocks.more:
        part = blocks.take()
        parts.append(part)
        size += len(part)
    return buf if isinstance(buf, bytearray) and len(parts) == 1 else bytearray().join(parts)


def stream(path: Path, block: int, dec: Decoder) -> Got:
    """The document streamed (see the module docstring); Fallback where it must be read whole."""
    inflow = limits.Inflow(path, block)
    blocks = Blocks(inflow)
    head, buf, at = header(blocks)
    # where buf[0] lies in the file: a piece is handed as a range of a plain file, not a copy
    off = at if inflow.kind is None else None
    want, ended, pieces = block, False, 0
    while blocks.more and not ended:
        buf = _fill(buf, want, blocks)
        if not blocks.more:
            break
        rest, ended = _cut(buf, dec, None if off is None else off + 1)
        if not rest:
            if ended:
                break
            if len(buf) - 1 > limits.EVENT_LIMIT + 2 * block:
                raise Fallback  # no clean cut this far: JSON to read whole
            want = 2 * (len(buf) - 1)  # a longer event
            continue
        pieces += 1
        if pieces % TRIM_EVERY == 0:
            trim()
        buf = buf[rest - 1:]
        off = None if off is None else off + rest - 1
        buf[0] = ord("[")  # in place of the comma (or space) before the next event
        want = block
    last = _fill(buf, 0, blocks)
    while blocks.more:  # the list has ended: the keys after it
        last += blocks.take()
        if len(last) - 1 > HEADER_LIMIT + 2 * block:
            raise Fallback
    warnings: list[str] = [cut_warning(inflow.kind)] if inflow.cut else []
    return _tail(path, head, memoryview(last)[1:], warnings, dec)


def _tail(path: Path, head: bytes, buf: memoryview, warnings: list[str], dec: Decoder) -> Got:
    """The last events (`buf`: the list's text after its last cut) and the keys after the list,
    read as one document with the whole reader's salvage; `warnings`: the read's so far."""
    base = dec.settle()
    text = head + KEY + b": [" + buf
    if text.count(KEY) > 1:
        raise Fallback  # a repeated key: the whole text says so and reads the last list
    floor = DOC.decode(head + KEY + b": []}") if base else None
    try:
        doc = decode_doc(path, text, warnings, before=base, floor=floor)
    except TraceError:
        if base:
            raise Fallback from None  # the whole text names the problem
        raise
    if base and any(getattr(w, "kind", "") != TRUNCATED for w in warnings):
        raise Fallback  # repaired or read leniently: the whole text is
    _events(doc, dec)
    trim()
    return doc, dec.settle(), warnings


def _events(doc: Doc, dec: Decoder) -> None:
    """The document's raw events given in pieces of CHUNK (then dropped)."""
    events, doc.traceEvents = doc.traceEvents, []
    for i in range(0, len(events), CHUNK):
        dec.piece(json_array(events[i:i + CHUNK]))


def whole(path: Path, dec: Decoder) -> Got:
    """The document read whole, repaired where it must be (repair)."""
    text, warnings = read_bytes(path)
    if not bytes(text[:65536]).strip():
        raise TraceError(path, "empty file")
    doc = decode_doc(path, text, warnings)
    keys = text.count(KEY)  # C speed; a name holding it has its quotes escaped
    if keys > 1:
        warnings.append(f"the document holds the key 'traceEvents' {keys} times "
                        f"(a duplicated key); the last list is read "
                        f"({len(doc.traceEvents):,} events), the others are ignored")
    del text
    _events(doc, dec)
    return doc, dec.settle(), warnings
