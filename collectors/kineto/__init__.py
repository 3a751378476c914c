"""Reader for PyTorch-profiler (Kineto) Chrome-trace JSON, CUDA and ROCm, plain or compressed.

One path from the file's bytes to the normalized tables (`events`, then tables.built), and the
trace's Meta from the document's top-level keys (`document_meta`):

    pieces: the event list cut into JSON arrays -> sinks.Decoder: decode (typed events), then
    columns (a frame per table) -> a sink (sinks.Parts in memory, or sinks.Files on disk: the
    bounded-memory mode, read back by spill) -> tables.built

pieces.stream cuts the list as the file is read (memory bounded by the tables, not the file); a
document it cannot cut cleanly is read whole by pieces.whole (repair: salvage, Kineto's name
bugs) into the same decoder. Times (float microseconds) become integer nanoseconds. Once a read
has cut a few pieces, a worker process decodes some of them beside it (pair).
"""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import msgspec
from msgspec.structs import replace

from attrib.bounds import MAX_WORLD, count
from attrib.errors import TraceError
from attrib.trace import Meta, Trace, TraceWarning
from collectors.kineto import pair
from collectors.kineto.decode import Fallback, Notes
from collectors.kineto.pieces import BLOCK, stream, whole
from collectors.kineto.repair import Doc, read_document, repair_names
from collectors.kineto.sinks import Decoder, Parts, Sink
from collectors.kineto.tables import built
from collectors.provenance import read_sidecar, stamp_numbers

__all__ = ["read", "events", "sniff", "read_document", "repair_names", "Fallback", "BLOCK"]

_RUNTIME_KEYS = ("cuda_runtime_version", "cuda_driver_version", "cupti_version",
                 "roctracer_version", "hip_runtime_version", "hip_driver_version")
_FLAG_KEYS = ("schemaVersion", "record_shapes", "with_stack", "with_modules", "with_flops",
              "profile_memory", "trace_id", "displayTimeUnit", "baseTimeNanoseconds", "traceName")
_MAX_BASE_NS = 1 << 62  # the largest baseTimeNanoseconds: 2**62 ns since 1970 is the year 2116


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
    with closing(Decoder(path, sink, at)) as dec:
        doc, n, warnings = stream(path, block, dec) if block > 0 else whole(path, dec)
    if not n:
        raise TraceError(path, "no events: traceEvents is missing or empty")
    return Read(doc, n, dec.notes, warnings)


def read(path: str | Path, block: int = BLOCK) -> Trace:
    """A Kineto trace (`.json`, `.json.gz`, `.pt.trace.json.gz`, `.json.xz`, `.json.zst`) as the
    normalized Trace: streamed (`events`), else read whole (as with block=0), the same tables."""
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


def _vendor(doc: Doc) -> tuple[str | None, str | None]:
    if doc.hip_runtime_version is not None or doc.roctracer_version is not None:
        return "amd", "top-level keys (hip_runtime_version/roctracer_version)"
    if doc.cuda_runtime_version is not None or doc.cupti_version is not None:
        return "nvidia", "top-level keys (cuda_runtime_version/cupti_version)"
    return None, None


def document_meta(path: Path, doc: Doc, n_events: int, warnings: list[str]) -> Meta:
    """The trace's Meta from its top-level keys and capture stamp (a bad stamp adds a warning to
    `warnings`, the Meta's); a TraceError naming a figure the analysis computes with that is out
    of its domain, and its value (a world size of 2**70 or 0 is not a process group)."""
    provenance = dict(read_sidecar(path))
    if "warning" in provenance:
        warnings.append(str(provenance.pop("warning")))
    if isinstance(doc.attrib, dict) and not provenance:
        bad = stamp_numbers(doc.attrib, "attrib.")
        if bad:
            warnings.append(f"{path}: embedded provenance stamp ignored: {bad}")
        else:
            provenance = doc.attrib
    info = doc.distributedInfo
    if isinstance(info, dict):
        world = info.get("world_size")
        if world is not None:
            world = count(world, "distributedInfo.world_size", 1, MAX_WORLD, path)
        if info.get("rank") is not None:
            count(info["rank"], "distributedInfo.rank", 0, (world or MAX_WORLD) - 1, path)
    if doc.baseTimeNanoseconds is not None:
        count(doc.baseTimeNanoseconds, "baseTimeNanoseconds", 0, _MAX_BASE_NS, path)
    vendor, vendor_from = _vendor(doc)
    props = doc.deviceProperties  # a list of objects, else none
    devices = tuple(p for p in props if isinstance(p, dict)) if isinstance(props, list) else ()
    return Meta(
        path=str(path), format="torch-json", events=n_events,
        vendor=vendor, vendor_from=vendor_from, devices=devices,
        runtime={k: getattr(doc, k) for k in _RUNTIME_KEYS if getattr(doc, k) is not None},
        provenance=provenance,
        top={k: getattr(doc, k) for k in _FLAG_KEYS if getattr(doc, k) is not None}
        | ({"distributedInfo": doc.distributedInfo} if doc.distributedInfo else {}),
        warnings=tuple(map(TraceWarning, warnings)),
    )
