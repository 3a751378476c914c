"""The document's top-level keys (`Doc`: all but the events, kept as raw slices), and the document
read whole where it cannot be streamed: salvaged up to the cut when it is cut short, and read
despite the known Kineto bugs (raw quotes or control characters in names)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import orjson

from attrib.errors import TraceError
from attrib.trace import TRUNCATED, TraceWarning
from collectors import limits
from collectors.kineto.decode import DECODE_ERRORS

KEY = b'"traceEvents"'


class Doc(msgspec.Struct):
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


DOC = msgspec.json.Decoder(Doc)

# A name value on its line as Kineto writes events (`"cat": "...", "name": "<value>", "pid": ...`
# or `"name": "<value>",` alone): it ends at the first quote followed by `, "key":` or the line's
# end, so a valid name (`"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",`) stays
_NAME_LINE = re.compile(rb'("name": ")(.*?)((?<!\\)"(?=\s*,\s*"[^"\n]+"\s*:|\s*,?\s*$))', re.M)
_RAW_QUOTE = re.compile(rb'(?<!\\)"')


def cut_warning(kind: str | None) -> TraceWarning:
    """The warning for a compressed stream that ends early."""
    return TraceWarning(f"{kind or 'compressed'} stream is truncated; reading what was "
                        "decompressed", TRUNCATED)


def read_bytes(path: Path) -> tuple[bytes | bytearray, list[str]]:
    """The file's JSON text (bounded, see collectors.limits); a cut-short gzip yields what was
    decompressed, with a warning."""
    data, cut = limits.read_bytes(path)
    if not cut:
        return data, []
    with limits.open_file(path) as fh:
        kind = limits.compression(fh.read(8))
    return data, [cut_warning(kind)]


def decode_doc(path: Path, text: bytes | bytearray, warnings: list[str], before: int = 0,
               floor: Doc | None = None) -> Doc:
    """Split the document; salvage a truncated one up to its last complete event. before: events
    read ahead of `text` (the streamed ones), counted in the salvage warning; floor: the document
    to return when nothing in `text` is salvageable but those events were."""
    try:
        return DOC.decode(text)
    except msgspec.ValidationError as exc:
        raise TraceError(path, f"not a torch-profiler trace ({exc})") from None
    except DECODE_ERRORS as exc:
        problem = str(exc)
    except RecursionError:
        raise TraceError(path, "JSON nested too deeply (thousands of levels; a profiler event "
                         "has a few)") from None
    if "truncated" in problem or warnings:
        doc = _salvage(text)
        if (doc is None or not doc.traceEvents) and before and floor is not None:
            doc = floor
        if doc is not None and (doc.traceEvents or before):
            n = before + len(doc.traceEvents)
            warnings.append(TraceWarning(f"trace is truncated; salvaged {n} complete events before "
                                         "the cut", TRUNCATED))
            return doc
        raise TraceError(path, "truncated JSON with no complete event before the cut")
    text, repaired = repair_names(text)
    if repaired:
        warnings.append(f"{repaired} event names had unescaped quotes (a Kineto bug); repaired")
        try:
            return DOC.decode(text)
        except DECODE_ERRORS as exc:
            problem = str(exc)
    try:  # invalid JSON that Kineto is known to write (control characters in names)
        obj = json.loads(text, strict=False)
    except (ValueError, RecursionError):
        raise TraceError(path, f"not valid JSON ({problem})") from None
    if not isinstance(obj, dict):
        raise TraceError(path, "JSON, but not a torch-profiler trace (top level is not an object)")
    warnings.append(f"invalid JSON ({problem}); read with a lenient parser")
    return DOC.decode(orjson.dumps(obj))


def repair_names(text: bytes | bytearray) -> tuple[bytes, int]:
    """Escape raw double quotes inside `"name": "..."` values (Kineto before its quote-escaping fix
    wrote names such as `torch/profiler/_cupti_monitor.py(0): "warmup"` as they are: invalid JSON).
    Only a value with a raw quote inside changes. The text, and how many names were repaired."""
    count = 0

    def fix(m: re.Match) -> bytes:
        nonlocal count
        inner = _RAW_QUOTE.sub(rb'\\"', m.group(2))
        count += inner != m.group(2)
        return m.group(1) + inner + m.group(3)

    out = _NAME_LINE.sub(fix, text)  # only on the fallback path: the file is already invalid JSON
    return out, count


def _salvage(text: bytes | bytearray) -> Doc | None:
    """Close the document after the last `}` that ends a whole event (of the last 64 tried)."""
    start = text.find(KEY)
    if start < 0:
        return None
    end = len(text)
    for _ in range(64):
        end = text.rfind(b"}", start, end)
        if end < 0:
            return None
        try:
            return DOC.decode(text[: end + 1] + b"]}")
        except (*DECODE_ERRORS, RecursionError):
            continue
    return None


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
