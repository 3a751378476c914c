"""Reader for PyTorch-profiler (Kineto) Chrome-trace JSON, CUDA and ROCm, plain or compressed.

How it stays fast and lean: the file is streamed (collectors.kineto_stream): the event list is
cut into pieces of a few MB, each decoded at once into small typed structs holding only the
fields attrib uses, turned into columns and dropped, so memory is bounded by the tables, not the
file. A document that cannot be cut cleanly (invalid JSON inside the list, a repeated key) is read
whole: msgspec splits `traceEvents` into raw byte slices (collectors.kineto_doc, with its salvage
and repairs), decoded chunk by chunk the same way, by a worker process too where it pays.
Timestamps (float microseconds) become integer nanoseconds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import msgspec
from msgspec.structs import replace
import orjson
import polars as pl

from attrib.bounds import MAX_WORLD, count
from attrib.errors import TraceError
from attrib.trace import Meta, Trace, mark_graph_replays
from collectors import kineto_stream, validate
from collectors.kineto_doc import DOC, Doc, check_sizes, decode_doc, read_bytes, repair_names
from collectors.kineto_events import CHUNK, Notes, decode_chunk
from collectors.kineto_stream import Streamed
from collectors.kineto_tables import TABLES, chunk_frames
from collectors.kineto_worker import PARALLEL_BYTES, Claims, Others, Worker, likely_big
from collectors.provenance import read_sidecar, stamp_numbers

_DOC = DOC  # the document decoder under its former name (tests split a trace with it)
__all__ = ["read", "read_document", "repair_names", "sniff"]
_RUNTIME_KEYS = ("cuda_runtime_version", "cuda_driver_version", "cupti_version",
                 "roctracer_version", "hip_runtime_version", "hip_driver_version")
_FLAG_KEYS = ("schemaVersion", "record_shapes", "with_stack", "with_modules", "with_flops",
              "profile_memory", "trace_id", "displayTimeUnit", "baseTimeNanoseconds", "traceName")


# ---------------------------------------------------------------- events to columns


_Frames = dict[str, pl.DataFrame]


def _chunk_tables(path: Path, raws: list[msgspec.Raw], base: int, notes: Notes) -> _Frames:
    check_sizes(path, raws, base)
    return chunk_frames(decode_chunk(raws, base, notes), notes, base)


def _serial(path: Path, chunks: list[list[msgspec.Raw]], notes: Notes) -> list[_Frames]:
    return [_chunk_tables(path, c, i * CHUNK, notes) for i, c in enumerate(chunks)]


def _parallel(path: Path, chunks: list[list[msgspec.Raw]], notes: Notes,
              worker: Worker) -> list[_Frames]:
    """The chunks' frames, the worker decoding from the back while this process decodes from the
    front (collectors.kineto_worker); chunks it did not answer are decoded here. Notes keep the
    first event of each kind whatever the order, so frames, notes and errors are the serial
    path's."""
    # an oversized event is refused before any decoding, as in the serial path
    for i, c in enumerate(chunks):
        check_sizes(path, c, i * CHUNK)
    claims = Claims(len(chunks))
    out: dict[int, _Frames] = {}
    while True:
        worker.pump(chunks, claims)
        j = claims.front()
        if j is None:
            break
        out[j] = chunk_frames(decode_chunk(chunks[j], j * CHUNK, notes), notes, j * CHUNK)
    for j in worker.take_back(keep=2):
        out[j] = chunk_frames(decode_chunk(chunks[j], j * CHUNK, notes), notes, j * CHUNK)
    answers = worker.finish()
    for j in range(len(chunks)):
        if j in out:
            continue
        answer = answers.get(j)
        if answer is None:
            out[j] = chunk_frames(decode_chunk(chunks[j], j * CHUNK, notes), notes, j * CHUNK)
        else:
            out[j] = answer[0]
            notes.no_ph += answer[1]
            notes.no_ts += answer[2]
    return [out[j] for j in range(len(chunks))]


_DIMS = r"^\[\s*\d{1,15}\s*(,\s*\d{1,15}\s*){0,2}\]$"  # grid/block: up to 3 non-negative ints


def _dims(col: str) -> pl.Expr:
    """A grid/block JSON list as List[Int64]; anything else (a string, floats, nesting) is null."""
    c = pl.col(col)
    return pl.when(c.str.contains(_DIMS)).then(c).otherwise(None).str.json_decode(pl.List(pl.Int64))


def _decode_dims(df: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    """The frame with its grid/block JSON decoded (`_dims`), and how many values were bad."""
    bad: dict[str, int] = {}
    for c in ("grid", "block"):
        if c in df.columns:
            wrong = pl.col(c).is_not_null() & ~pl.col(c).str.contains(_DIMS)
            bad[c] = df.select(wrong.sum()).item()
            df = df.with_columns(_dims(c))
    return df, bad


def _finish(parts: list[pl.DataFrame], notes: Notes) -> pl.DataFrame | None:
    """One table from its chunks' frames (times already in ns: collectors.kineto_tables), which
    it takes over: decoded piece by piece (only a piece's transients at a time), joined without
    a copy (the pieces become the table's chunks) and emptied."""
    if not parts:
        return None
    bad: dict[str, int] = {}
    for i, part in enumerate(parts):
        parts[i], wrong = _decode_dims(part)
        for c, n in wrong.items():
            bad[c] = bad.get(c, 0) + n
    for c, n in bad.items():
        if n:
            notes.nulled[c] = notes.nulled.get(c, 0) + n
            notes.first.setdefault("nulled", 0)
    df = pl.concat(parts, how="diagonal_relaxed")
    parts.clear()
    if (
        df["start_ns"].null_count() or not df["start_ns"].is_sorted()
    ):  # a stable sort of sorted rows is those rows: no copy then
        df = df.sort("start_ns", maintain_order=True)
    row = pl.int_range(pl.len(), dtype=pl.Int64).alias("id")  # not via UInt32: no second column
    return df.select(row, pl.all())


# ---------------------------------------------------------------- metadata


def _vendor(doc: Doc) -> tuple[str | None, str | None]:
    if doc.hip_runtime_version is not None or doc.roctracer_version is not None:
        return "amd", "top-level keys (hip_runtime_version/roctracer_version)"
    if doc.cuda_runtime_version is not None or doc.cupti_version is not None:
        return "nvidia", "top-level keys (cuda_runtime_version/cupti_version)"
    return None, None


def _devices(doc: Doc) -> tuple[dict[str, Any], ...]:
    props = doc.deviceProperties
    return tuple(p for p in props if isinstance(p, dict)) if isinstance(props, list) else ()


def _events(path: Path, doc: Doc, warnings: list[str],
            worker: Worker | None) -> tuple[int, dict[str, list[pl.DataFrame]], Notes]:
    """(events, frames per table in event order, notes) of the document's events, which it then
    drops (the raw slices hold the whole file)."""
    events = doc.traceEvents
    if not events:
        raise TraceError(path, "no events: traceEvents is missing or empty")
    notes = Notes()
    chunks = [events[i:i + CHUNK] for i in range(0, len(events), CHUNK)]
    clean = not warnings and len(chunks) > 1  # a salvaged or repaired document is read the one way
    if worker is not None and clean:
        frames = _parallel(path, chunks, notes, worker)
    else:
        frames = _serial(path, chunks, notes)
    doc.traceEvents = []
    return len(events), {t: [f[t] for f in frames if t in f] for t in TABLES}, notes


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except OSError:
        return None


def sniff(path: Path, head: bytes) -> bool:
    """A JSON document that names a torch-profiler key in its first bytes."""
    return head.lstrip()[:1] in (b"{", b"[") and (
        b'"traceEvents"' in head or b'"schemaVersion"' in head or b'"deviceProperties"' in head)


def _whole(path: Path, parallel: bool | None) -> Streamed:
    """The document read whole (the text, then its events split), decoded with a worker process
    where `parallel` asks for one (see `read`)."""
    # the worker starts up while the file is read and split; the kernel counts the RSS of the
    # reader at that moment in the worker's peak (exec after vfork), so it starts before the
    # text is in memory
    others = Others()
    worker = Worker.start(path) if parallel or (parallel is None and likely_big(path)) else None
    try:
        before = _stat(path)
        text, warnings = read_bytes(path)
        if not bytes(text[:65536]).strip():
            raise TraceError(path, "empty file")
        if worker is None and parallel is None and len(text) >= PARALLEL_BYTES:
            worker = Worker.start(path)
        doc = decode_doc(path, text, warnings)
        keys = text.count(b'"traceEvents"')  # C speed; a name holding it has its quotes escaped
        if keys > 1:
            warnings.append(f"the document holds the key 'traceEvents' {keys} times "
                            f"(a duplicated key); the last list is read "
                            f"({len(doc.traceEvents):,} events), the others are ignored")
        if (worker is not None and before is not None and isinstance(text, bytes)
                and len(text) == before.st_size):
            # a plain file read whole: the worker reads its chunks from it
            worker.file_text(text, before)
        del text
        if worker is not None and parallel is None and not others.free(worker):
            worker.close()
            worker = None
        n_events, parts, notes = _events(path, doc, warnings, worker)
    finally:
        if worker is not None:
            worker.close()
    return Streamed(doc, n_events, parts, notes, warnings)


def _streamed(path: Path, block: int, parallel: bool | None) -> Streamed | None:
    """The document streamed (collectors.kineto_stream); None where it must be read whole."""
    try:
        got = kineto_stream.read_events(path, block, parallel=parallel)
    except kineto_stream.Fallback:
        return None
    if not got.events:
        raise TraceError(path, "no events: traceEvents is missing or empty")
    return got


def read(path: str | Path, parallel: bool | None = None, block: int = kineto_stream.BLOCK) -> Trace:
    """Read a Kineto trace (`.json`, `.json.gz`, `.pt.trace.json.gz`, `.json.xz`, `.json.zst`)
    into the normalized Trace.

    The file is streamed in pieces of about `block` bytes of JSON text (collectors.kineto_stream:
    memory bounded by the tables, not the file); a document that cannot be cut cleanly is read
    whole, as it is with block=0. parallel: whether a worker process decodes beside this one
    (collectors.kineto_worker), streamed or read whole: True always, False never, None where
    the file holds PARALLEL_BYTES of JSON or more (a streamed file judged from its size, a
    document read whole from its text) and a CPU is free for it. The tables are the same
    whichever way it is read."""
    path = Path(path)
    got = None if block <= 0 else _streamed(path, block, parallel)
    if got is None:
        got = _whole(path, parallel)
    doc, n_events, parts, notes, warnings = got.doc, got.events, got.parts, got.notes, got.warnings
    meta = document_meta(path, doc, n_events, warnings)
    tables = built(path, parts, notes, warnings)
    return Trace.build(replace(meta, warnings=tuple(warnings)), **tables)


def document_meta(path: Path, doc: Doc, n_events: int, warnings: list[str]) -> Meta:
    """The trace's Meta from its top-level keys and capture stamp (its warnings: `warnings`, to
    which a bad stamp adds one)."""
    provenance = dict(read_sidecar(path))
    if "warning" in provenance:
        warnings.append(str(provenance.pop("warning")))
    if isinstance(doc.attrib, dict) and not provenance:
        bad = stamp_numbers(doc.attrib, "attrib.")
        if bad:
            warnings.append(f"{path}: embedded provenance stamp ignored: {bad}")
        else:
            provenance = doc.attrib
    _check_numbers(path, doc)
    vendor, vendor_from = _vendor(doc)
    return Meta(
        path=str(path), format="torch-json", events=n_events,
        vendor=vendor, vendor_from=vendor_from, devices=_devices(doc),
        runtime={k: getattr(doc, k) for k in _RUNTIME_KEYS if getattr(doc, k) is not None},
        provenance=provenance,
        top={k: getattr(doc, k) for k in _FLAG_KEYS if getattr(doc, k) is not None}
        | ({"distributedInfo": doc.distributedInfo} if doc.distributedInfo else {}),
        warnings=tuple(warnings),
    )


# the largest baseTimeNanoseconds: 2**62 ns since 1970 is the year 2116
_MAX_BASE_NS = 1 << 62


def _check_numbers(path: Path, doc: Doc) -> None:
    """The top-level figures the analysis computes with, each in its domain; else a TraceError
    naming the field and the value (a world size of 2**70 or 0 is not a process group)."""
    info = doc.distributedInfo
    if isinstance(info, dict):
        world = info.get("world_size")
        if world is not None:
            world = count(world, "distributedInfo.world_size", 1, MAX_WORLD, path)
        if info.get("rank") is not None:
            top = (world or MAX_WORLD) - 1
            count(info["rank"], "distributedInfo.rank", 0, top, path)
    if doc.baseTimeNanoseconds is not None:
        count(doc.baseTimeNanoseconds, "baseTimeNanoseconds", 0, _MAX_BASE_NS, path)


Renumber = Callable[[str, pl.DataFrame], pl.DataFrame]


def built(path: Path, parts: dict[str, list[pl.DataFrame]], notes: Notes, warnings: list[str],
          renumber: Renumber | None = None) -> dict[str, pl.DataFrame | None]:
    """The tables of the frames of each table in event order (emptied as they are joined), checked
    (collectors.validate) and completed; what was dropped or salvaged is added to `warnings`.
    renumber(table, df): the table with the ids of the whole trace, when `parts` are a part of it
    (collectors.kineto_spill)."""
    flow_parts = parts.pop("flows", [])
    tables = {
        t: _finish(parts.pop(t), notes) for t in list(parts)
    }  # each table's chunks freed as it is built
    if not _unlinked(tables["kernels"]):
        flow_parts.clear()  # no kernel takes its correlation from a flow arrow
    flows = _finish(flow_parts, notes)
    if renumber is not None:
        tables = {t: None if df is None else renumber(t, df) for t, df in tables.items()}
        flows = None if flows is None else renumber("flows", flows)
    warnings += notes.warnings()
    tables = validate.tables(tables, warnings, path)
    tables["kernels"] = _fill_correlation(tables["kernels"], flows)
    del flows
    # "Dispatch Task" kernels, graph launches, shared correlation ids
    if tables["kernels"] is not None:
        tables["kernels"] = mark_graph_replays(tables["kernels"], tables["launches"])
    if tables["copies"] is not None:  # "Memcpy HtoD (Pageable -> Device)" -> HtoD
        tables["copies"] = tables["copies"].with_columns(
            pl.col("name").str.extract(r"\b([HDP]to[HDP])\b", 1).alias("direction"))
    return tables


def _unlinked(kernels: pl.DataFrame | None) -> bool:
    """Whether some kernel lacks a correlation (one a flow arrow may give)."""
    return kernels is not None and kernels["correlation"].null_count() > 0


def _fill_correlation(kernels: pl.DataFrame | None,
                      flows: pl.DataFrame | None) -> pl.DataFrame | None:
    """Kernels whose args lack a correlation take it from the flow arrow that ends on them."""
    if kernels is None or flows is None or not _unlinked(kernels):
        return kernels
    key = ["pid", "tid", "start_ns"]
    f = flows.select(*key, pl.col("correlation").alias("_flow")).unique(key)
    return (kernels.join(f, on=["pid", "tid", "start_ns"], how="left")
            .with_columns(pl.col("correlation").fill_null(pl.col("_flow"))).drop("_flow"))


# ------------------------------------------------------- the document itself (for rewriting it)


def read_document(path: str | Path) -> dict[str, Any]:
    """The whole trace as parsed JSON, for tools that rewrite it (the Perfetto export); a trace cut
    short or not a Kineto document is a TraceError."""
    path = Path(path)
    text, warnings = read_bytes(path)
    if warnings:
        raise TraceError(path, f"{warnings[0]}: a cut-short trace cannot be rewritten whole")
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        try:
            doc = json.loads(repair_names(text)[0], strict=False)
        except (ValueError, RecursionError) as exc:
            raise TraceError(path, f"not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(path, "not a torch-profiler trace (no traceEvents list)")
    return doc
