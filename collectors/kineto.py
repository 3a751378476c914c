"""Reader for PyTorch-profiler (Kineto) Chrome-trace JSON, CUDA and ROCm, plain or gzip'd.

How it stays fast and lean: msgspec splits `traceEvents` into raw byte slices without building
Python objects for them (a C-speed bracket-depth scan); chunks of slices are then decoded into
small typed structs holding only the fields attrib uses, turned into columns, and dropped. No
per-event object outlives its chunk. Timestamps (float microseconds) become integer nanoseconds.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from pathlib import Path
from typing import Any

import msgspec
import orjson
import polars as pl

from attrib.errors import TraceError
from attrib.trace import Meta, Trace
from collectors.provenance import read_sidecar

CHUNK = 32768
_NONE = msgspec.Raw(b"")


class _Args(msgspec.Struct, frozen=True):
    external_id: Any = msgspec.field(name="External id", default=None)
    correlation: Any = None
    device: Any = None
    stream: Any = None
    grid: msgspec.Raw = _NONE
    block: msgspec.Raw = _NONE
    kind: Any = None
    kernel: Any = None
    registers: Any = msgspec.field(name="registers per thread", default=None)
    shared_mem: Any = msgspec.field(name="shared memory", default=None)
    bytes: Any = None
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=_NONE)
    input_types: msgspec.Raw = msgspec.field(name="Input type", default=_NONE)
    concrete: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=_NONE)
    py_id: Any = msgspec.field(name="Python id", default=None)
    py_parent: Any = msgspec.field(name="Python parent id", default=None)
    module_id: Any = msgspec.field(name="Python module id", default=None)


_NO_ARGS = _Args()


class _Event(msgspec.Struct):
    ph: Any = None
    cat: Any = None
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    args: _Args = _NO_ARGS


class _Doc(msgspec.Struct):
    traceEvents: list[msgspec.Raw] = []
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    cupti_version: Any = None
    roctracer_version: Any = None
    hip_runtime_version: Any = None
    hip_driver_version: Any = None
    record_shapes: Any = None
    with_stack: Any = None
    with_modules: Any = None
    with_flops: Any = None
    profile_memory: Any = None
    trace_id: Any = None
    displayTimeUnit: Any = None
    baseTimeNanoseconds: Any = None
    traceName: Any = None
    attrib: Any = None  # provenance stamp embedded by attrib's capture, if any


_EVENTS = msgspec.json.Decoder(list[_Event])
_DOC = msgspec.json.Decoder(_Doc)
_RUNTIME_KEYS = ("cuda_runtime_version", "cuda_driver_version", "cupti_version", "roctracer_version",
                 "hip_runtime_version", "hip_driver_version")
_FLAG_KEYS = ("schemaVersion", "record_shapes", "with_stack", "with_modules", "with_flops", "profile_memory",
              "trace_id", "displayTimeUnit", "baseTimeNanoseconds", "traceName")


# ---------------------------------------------------------------- bytes in


def _read_bytes(path: Path) -> tuple[bytes, list[str]]:
    """The file's JSON text; a cut-short gzip yields what was decompressed, with a warning."""
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise TraceError(path, "is a directory, expected a trace file") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    if raw[:2] != b"\x1f\x8b":
        return raw, []
    try:
        return gzip.decompress(raw), []
    except (EOFError, zlib.error, gzip.BadGzipFile, OSError):
        pass
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = d.decompress(raw)
    except zlib.error as exc:
        raise TraceError(path, f"corrupt gzip data ({exc})") from None
    if not data:
        raise TraceError(path, "truncated gzip file with no readable data")
    return data, ["gzip stream is truncated; reading what was decompressed"]


def _decode_doc(path: Path, text: bytes, warnings: list[str]) -> _Doc:
    """Split the document; salvage a truncated one up to its last complete event."""
    try:
        return _DOC.decode(text)
    except msgspec.ValidationError as exc:
        raise TraceError(path, f"not a torch-profiler trace ({exc})") from None
    except msgspec.DecodeError as exc:
        problem = str(exc)
    if "truncated" in problem or warnings:
        doc = _salvage(text)
        if doc is not None and doc.traceEvents:
            warnings.append(f"trace is truncated; salvaged {len(doc.traceEvents)} complete events before the cut")
            return doc
        raise TraceError(path, "truncated JSON with no complete event before the cut")
    text, repaired = repair_names(text)
    if repaired:
        warnings.append(f"{repaired} event names had unescaped quotes (a Kineto bug); repaired")
        try:
            return _DOC.decode(text)
        except msgspec.DecodeError as exc:
            problem = str(exc)
    return _lenient(path, text, problem, warnings)


# One field per line, as Kineto writes events: `    "name": "<value>",`
_NAME_LINE = re.compile(rb'^(\s*"name": ")(.*)("\s*,?\s*)$', re.M)
_RAW_QUOTE = re.compile(rb'(?<!\\)"')


def repair_names(text: bytes) -> tuple[bytes, int]:
    """Escape raw double quotes inside `"name": "..."` values. Kineto before its quote-escaping fix
    wrote names such as `torch/profiler/_cupti_monitor.py(0): "warmup"` as they are, which makes the
    whole file invalid JSON. Returns the text and how many names were repaired."""
    count = 0

    def fix(m: re.Match) -> bytes:
        nonlocal count
        inner = _RAW_QUOTE.sub(rb'\\"', m.group(2))
        count += inner != m.group(2)
        return m.group(1) + inner + m.group(3)

    out = _NAME_LINE.sub(fix, text)  # only on the fallback path: the file is already invalid JSON
    return out, count


def _salvage(text: bytes, tries: int = 64) -> _Doc | None:
    """Close the document after the last `}` that ends a whole event."""
    start = text.find(b'"traceEvents"')
    if start < 0:
        return None
    end = len(text)
    for _ in range(tries):
        end = text.rfind(b"}", start, end)
        if end < 0:
            return None
        try:
            return _DOC.decode(text[: end + 1] + b"]}")
        except msgspec.DecodeError:
            continue
    return None


def _lenient(path: Path, text: bytes, problem: str, warnings: list[str]) -> _Doc:
    """Fallback for invalid JSON that Kineto is known to write (control characters in names)."""
    try:
        obj = json.loads(text, strict=False)
    except (ValueError, RecursionError):
        raise TraceError(path, f"not valid JSON ({problem})") from None
    if not isinstance(obj, dict):
        raise TraceError(path, "JSON, but not a torch-profiler trace (top level is not an object)")
    warnings.append(f"invalid JSON ({problem}); read with a lenient parser")
    return _DOC.decode(orjson.dumps(obj))


# ---------------------------------------------------------------- events to columns


def _ns(col: str) -> pl.Expr:
    return (pl.col(col).cast(pl.Float64, strict=False) * 1000.0).round(0).cast(pl.Int64)


def _raw(rs: list[msgspec.Raw]) -> pl.Series:
    """Raw JSON slices as text (null where absent)."""
    return pl.Series([bytes(r) or None for r in rs], dtype=pl.Binary).cast(pl.Utf8)


def _common(evs: list[_Event]) -> dict[str, Any]:
    return {
        "name": [e.name for e in evs],
        "ts": [e.ts for e in evs],
        "dur": [e.dur for e in evs],
        "pid": [e.pid for e in evs],
        "tid": [e.tid for e in evs],
        "external_id": [e.args.external_id for e in evs],
    }


def _gpu(evs: list[_Event]) -> dict[str, Any]:
    cols = _common(evs)
    cols["device"] = [e.args.device for e in evs]
    cols["stream"] = [e.args.stream for e in evs]
    cols["correlation"] = [e.args.correlation for e in evs]
    return cols


def _kernels(evs: list[_Event]) -> dict[str, Any]:
    cols = _gpu(evs)
    cols["grid"] = _raw([e.args.grid for e in evs])
    cols["block"] = _raw([e.args.block for e in evs])
    cols["registers"] = [e.args.registers for e in evs]
    cols["lds_bytes"] = [e.args.shared_mem for e in evs]
    cols["graph"] = [e.args.kind == "Dispatch Task" for e in evs]
    return cols


def _copies(evs: list[_Event]) -> dict[str, Any]:
    cols = _gpu(evs)
    cols["bytes"] = [e.args.bytes for e in evs]
    cols["kind"] = ["memset" if e.cat == "gpu_memset" else "memcpy" for e in evs]
    return cols


def _ops(evs: list[_Event]) -> dict[str, Any]:
    cols = _common(evs)
    cols["input_dims"] = _raw([e.args.input_dims for e in evs])
    cols["input_types"] = _raw([e.args.input_types for e in evs])
    cols["concrete_inputs"] = _raw([e.args.concrete for e in evs])
    return cols


def _frames(evs: list[_Event]) -> dict[str, Any]:
    cols = _common(evs)
    del cols["external_id"]
    cols["py_id"] = [e.args.py_id for e in evs]
    cols["py_parent"] = [e.args.py_parent for e in evs]
    cols["module_id"] = [e.args.module_id for e in evs]
    return cols


def _launches(evs: list[_Event]) -> dict[str, Any]:
    cols = _common(evs)
    cols["correlation"] = [e.args.correlation for e in evs]
    cols["kernel_name"] = [e.args.kernel for e in evs]
    cols["grid"] = _raw([e.args.grid for e in evs])
    cols["block"] = _raw([e.args.block for e in evs])
    return cols


def _flows(evs: list[_Event]) -> dict[str, Any]:
    """Flow ends (`ac2g` ph f) sit on the GPU event; their id is the correlation."""
    return {"pid": [e.pid for e in evs], "tid": [e.tid for e in evs], "ts": [e.ts for e in evs],
            "dur": [0 for _ in evs], "correlation": [e.id for e in evs]}


def _markers(evs: list[_Event]) -> dict[str, Any]:
    cols = _common(evs)
    cols["side"] = ["gpu" if e.cat == "gpu_user_annotation" else "cpu" for e in evs]
    return cols


_TABLE_OF = {
    "kernel": "kernels", "gpu_memcpy": "copies", "gpu_memset": "copies", "cpu_op": "ops",
    "python_function": "frames", "cuda_runtime": "launches", "cuda_driver": "launches",
    "user_annotation": "markers", "gpu_user_annotation": "markers",
}
_COLUMNS = {"kernels": _kernels, "copies": _copies, "ops": _ops, "frames": _frames,
            "launches": _launches, "markers": _markers, "flows": _flows}
_DTYPES = {"name": pl.Utf8, "ts": pl.Float64, "dur": pl.Float64, "side": pl.Utf8, "kind": pl.Utf8,
           "kernel_name": pl.Utf8, "graph": pl.Boolean}


def _frame(cols: dict[str, Any]) -> pl.DataFrame:
    """Columns to a frame; values of an unexpected type become null (strict=False)."""
    return pl.DataFrame([
        v.alias(k) if isinstance(v, pl.Series) else pl.Series(k, v, dtype=_DTYPES.get(k, pl.Int64), strict=False)
        for k, v in cols.items()
    ])


def _chunk_tables(raws: list[msgspec.Raw]) -> dict[str, pl.DataFrame]:
    evs = _EVENTS.decode(b"[" + b",".join(raws) + b"]")
    groups: dict[str, list[_Event]] = {t: [] for t in _COLUMNS}
    table_of = _TABLE_OF
    for e in evs:
        t = table_of.get(e.cat)
        if t is not None and e.ph == "X" and e.ts is not None:
            groups[t].append(e)
        elif e.cat == "ac2g" and e.ph == "f":
            groups["flows"].append(e)
    return {t: _frame(_COLUMNS[t](g)) for t, g in groups.items() if g}


def _finish(parts: list[pl.DataFrame]) -> pl.DataFrame | None:
    if not parts:
        return None
    df = pl.concat(parts, how="diagonal_relaxed")
    df = df.with_columns(_ns("ts").alias("start_ns"), _ns("dur").fill_null(0).alias("dur_ns")).drop("ts", "dur")
    df = df.with_columns([pl.col(c).str.json_decode(pl.List(pl.Int64)) for c in ("grid", "block")
                          if c in df.columns])
    return df.sort("start_ns", maintain_order=True).with_row_index("id").with_columns(pl.col("id").cast(pl.Int64))


# ---------------------------------------------------------------- metadata


def _vendor(doc: _Doc) -> tuple[str | None, str | None]:
    if doc.hip_runtime_version is not None or doc.roctracer_version is not None:
        return "amd", "top-level keys (hip_runtime_version/roctracer_version)"
    if doc.cuda_runtime_version is not None or doc.cupti_version is not None:
        return "nvidia", "top-level keys (cuda_runtime_version/cupti_version)"
    return None, None


def _devices(doc: _Doc) -> tuple[dict[str, Any], ...]:
    props = doc.deviceProperties
    return tuple(p for p in props if isinstance(p, dict)) if isinstance(props, list) else ()


def read(path: str | Path, **_: Any) -> Trace:
    """Read a Kineto trace (`.json`, `.json.gz`, `.pt.trace.json.gz`) into the normalized Trace."""
    path = Path(path)
    text, warnings = _read_bytes(path)
    if not text[:65536].strip():
        raise TraceError(path, "empty file")
    doc = _decode_doc(path, text, warnings)
    del text
    events = doc.traceEvents
    if not events:
        raise TraceError(path, "no events: traceEvents is missing or empty")
    parts: dict[str, list[pl.DataFrame]] = {t: [] for t in _COLUMNS}
    for i in range(0, len(events), CHUNK):
        try:
            tables = _chunk_tables(events[i:i + CHUNK])
        except msgspec.DecodeError as exc:
            raise TraceError(path, f"malformed event near event {i} ({exc})") from None
        for t, df in tables.items():
            parts[t].append(df)
    n_events = len(events)
    del events
    provenance = dict(read_sidecar(path))
    if "warning" in provenance:
        warnings.append(str(provenance.pop("warning")))
    if isinstance(doc.attrib, dict) and not provenance:
        provenance = doc.attrib
    tables = {t: _finish(p) for t, p in parts.items()}
    tables["kernels"] = _fill_correlation(tables["kernels"], tables.pop("flows"))
    if tables["copies"] is not None:  # "Memcpy HtoD (Pageable -> Device)" -> HtoD
        tables["copies"] = tables["copies"].with_columns(
            pl.col("name").str.extract(r"\b([HDP]to[HDP])\b", 1).alias("direction"))
    vendor, vendor_from = _vendor(doc)
    meta = Meta(
        path=str(path), format="torch-json", events=n_events, vendor=vendor, vendor_from=vendor_from,
        devices=_devices(doc),
        runtime={k: getattr(doc, k) for k in _RUNTIME_KEYS if getattr(doc, k) is not None},
        provenance=provenance,
        top={k: getattr(doc, k) for k in _FLAG_KEYS if getattr(doc, k) is not None}
        | ({"distributedInfo": doc.distributedInfo} if doc.distributedInfo else {}),
        warnings=tuple(warnings),
    )
    return Trace.build(meta, **tables)


def _fill_correlation(kernels: pl.DataFrame | None, flows: pl.DataFrame | None) -> pl.DataFrame | None:
    """Kernels whose args lack a correlation take it from the flow arrow that ends on them."""
    if kernels is None or flows is None or kernels["correlation"].null_count() == 0:
        return kernels
    f = flows.select("pid", "tid", "start_ns", pl.col("correlation").alias("_flow")).unique(["pid", "tid", "start_ns"])
    return (kernels.join(f, on=["pid", "tid", "start_ns"], how="left")
            .with_columns(pl.col("correlation").fill_null(pl.col("_flow"))).drop("_flow"))
