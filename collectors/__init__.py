"""Collectors: everything that turns a run into a normalized `attrib.trace.Trace`.

`load(path)` sniffs the format (a file or a directory of profiler outputs) and calls the reader.
Readers raise `attrib.errors.TraceError` for input they cannot read.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from attrib.errors import TraceError
from attrib.trace import Trace
from collectors import rocprof
from collectors.kineto import read as read_kineto
from collectors.torch_capture import capture, wrap

__all__ = ["load", "sniff", "capture", "wrap"]


def _head(path: Path, n: int = 65536) -> bytes:
    """The first n bytes of the file, decompressed if gzip'd (possibly cut short)."""
    with open(path, "rb") as fh:
        raw = fh.read(n)
    if raw[:2] == b"\x1f\x8b":
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            return d.decompress(raw, n)
        except zlib.error:
            return b""
    return raw


def sniff(path: str | Path) -> str:
    """The format name of `path` (see the analysis JSON's `source.format`)."""
    p = Path(path)
    if not p.exists():
        raise TraceError(p, "no such file or directory")
    if p.is_dir():
        fmt = rocprof.sniff(p, b"")
        if fmt:
            return fmt
        raise TraceError(p, "is a directory with no profiler output attrib can read")
    try:
        head = _head(p)
    except OSError as exc:
        raise TraceError(p, f"cannot read: {exc.strerror or exc}") from None
    if not head:
        raise TraceError(p, "empty file")
    fmt = rocprof.sniff(p, head)
    if fmt:
        return fmt
    stripped = head.lstrip()
    if stripped[:1] in (b"{", b"[") and (b'"traceEvents"' in head or b'"schemaVersion"' in head
                                         or b'"deviceProperties"' in head):
        return "torch-json"
    if stripped[:1] in (b"{", b"["):
        raise TraceError(p, "JSON, but not a torch-profiler or rocprof trace (no traceEvents)")
    raise TraceError(p, "not a trace attrib can read (expected torch-profiler JSON or rocprof output)")


def load(path: str | Path, **options) -> Trace:
    """Read any supported trace into the normalized Trace."""
    p = Path(path)
    fmt = sniff(p)
    if fmt == "torch-json":
        return read_kineto(p, **options)
    return rocprof.read(p, fmt, **options)
