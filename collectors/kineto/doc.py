"""The Kineto document's top-level keys (all but the events) and the trace's Meta from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from attrib.bounds import MAX_WORLD, count
from attrib.trace import Meta, TraceWarning
from collectors.provenance import read_sidecar, stamp_numbers

KEY = b'"traceEvents"'
_RUNTIME_KEYS = ("cuda_runtime_version", "cuda_driver_version", "cupti_version",
                 "roctracer_version", "hip_runtime_version", "hip_driver_version")
_FLAG_KEYS = ("schemaVersion", "record_shapes", "with_stack", "with_modules", "with_flops",
              "profile_memory", "trace_id", "displayTimeUnit", "baseTimeNanoseconds", "traceName")
# the largest baseTimeNanoseconds: 2**62 ns since 1970 is the year 2116
_MAX_BASE_NS = 1 << 62


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


def _vendor(doc: Doc) -> tuple[str | None, str | None]:
    if doc.hip_runtime_version is not None or doc.roctracer_version is not None:
        return "amd", "top-level keys (hip_runtime_version/roctracer_version)"
    if doc.cuda_runtime_version is not None or doc.cupti_version is not None:
        return "nvidia", "top-level keys (cuda_runtime_version/cupti_version)"
    return None, None


def _devices(doc: Doc) -> tuple[dict[str, Any], ...]:
    props = doc.deviceProperties
    return tuple(p for p in props if isinstance(p, dict)) if isinstance(props, list) else ()


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
        warnings=tuple(map(TraceWarning, warnings)),
    )
