"""Reader for PyTorch-profiler (Kineto) Chrome-trace JSON, CUDA and ROCm, plain or compressed.

One path from the file's bytes to the normalized tables (`events`, then tables.built):

    pieces: the event list cut into JSON arrays -> sinks.Decoder: decode (typed events), then
    columns (a frame per table) -> a sink (sinks.Parts in memory, or sinks.Files on disk: the
    bounded-memory mode, read back by spill) -> tables.built

pieces.stream cuts the list as the file is read (memory bounded by the tables, not the file); a
document it cannot cut cleanly is read whole by pieces.whole (repair: salvage, Kineto's name
bugs) into the same decoder. Times (float microseconds) become integer nanoseconds. Once a read
has cut a few pieces, a worker process decodes some of them beside it (pair).
"""

from __future__ import annotations

from pathlib import Path

import msgspec
from msgspec.structs import replace

from attrib.errors import TraceError
from attrib.trace import Trace
from collectors.kineto import pair
from collectors.kineto.decode import Fallback, Notes
from collectors.kineto.doc import Doc, document_meta
from collectors.kineto.pieces import BLOCK, stream, whole
from collectors.kineto.repair import read_document, repair_names
from collectors.kineto.sinks import Decoder, Parts, Sink
from collectors.kineto.tables import built

__all__ = ["read", "events", "sniff", "read_document", "repair_names", "Fallback", "BLOCK"]


class Read(msgspec.Struct):
    """What the path made of a document beside its frames: its top-level keys (`doc`, events
    emptied), the event count, the salvage notes and the warnings."""

    doc: Doc
    events: int
    notes: Notes
    warnings: list[str]


def sniff(path: Path, head: bytes) -> bool:
    """A JSON document that names a torch-profiler key in its first bytes."""
    return head.lstrip()[:1] in (b"{", b"[") and (
        b'"traceEvents"' in head or b'"schemaVersion"' in head or b'"deviceProperties"' in head)


def events(path: Path, sink: Sink, block: int = BLOCK, worker: bool = False) -> Read:
    """The document's events, as frames put to `sink` in event order: streamed in pieces of
    about `block` bytes (Fallback where it must be read whole), or read whole where block <= 0.
    worker: a streamed read may have a worker process decode pieces (pair)."""
    at = pair.start_at(path, block) if worker and block > 0 else None
    with Decoder(path, sink, at) as dec:
        doc, n, warnings = stream(path, block, dec) if block > 0 else whole(path, dec)
    if not n:
        raise TraceError(path, "no events: traceEvents is missing or empty")
    return Read(doc, n, dec.notes, warnings)


def read(path: str | Path, block: int = BLOCK) -> Trace:
    """Read a Kineto trace (`.json`, `.json.gz`, `.pt.trace.json.gz`, `.json.xz`, `.json.zst`)
    into the normalized Trace: streamed (`events`), or read whole where it cannot be, as it is
    with block=0. The tables are the same whichever way it is read."""
    path = Path(path)
    sink = Parts()
    try:
        got = events(path, sink, block, worker=True)
    except Fallback:
        sink = Parts()
        got = events(path, sink, 0)
    meta = document_meta(path, got.doc, got.events, got.warnings)
    tables = built(path, sink.parts, got.notes, got.warnings)
    return Trace.build(replace(meta, warnings=tuple(got.warnings)), **tables)
