"""Collectors: everything that turns a run into a normalized `attrib.trace.Trace`.

`load(path)` sniffs the format (a file or a directory of profiler outputs) and calls the reader.
Readers raise `attrib.errors.TraceError` for input they cannot read.
"""

from __future__ import annotations

from pathlib import Path

from attrib.errors import TraceError
from attrib.trace import Trace
from collectors import limits, rocprof
from collectors.kineto import read as read_kineto
from collectors.torch_capture import capture, wrap

__all__ = ["load", "sniff", "capture", "wrap"]


def _torch_json(head: bytes) -> bool:
    stripped = head.lstrip()
    return stripped[:1] in (b"{", b"[") and (b'"traceEvents"' in head or b'"schemaVersion"' in head
                                             or b'"deviceProperties"' in head)


def _torch_files(directory: Path) -> list[Path]:
    """The torch-profiler traces directly inside a directory."""
    out = []
    for p in sorted(directory.iterdir()):
        if p.name.lower().endswith((".json", ".json.gz")) and p.is_file():
            head = rocprof.head_bytes(p)
            if _torch_json(head) and not rocprof.sniff(p, head):
                out.append(p)
    return out


def _sniff_dir(p: Path) -> tuple[str, Path]:
    fmt = rocprof.sniff(p, b"")
    if fmt:
        return fmt, p
    found = _torch_files(p)
    if len(found) == 1:
        return "torch-json", found[0]
    if found:
        names = ", ".join(f.name for f in found[:4]) + (", ..." if len(found) > 4 else "")
        raise TraceError(p, f"is a directory holding {len(found)} torch-profiler traces ({names}); attrib "
                            f"analyzes one trace at a time: pass one of them, e.g. attrib analyze {found[0]}")
    raise TraceError(p, "is a directory with no profiler output attrib can read")


def _unknown(p: Path, head: bytes) -> TraceError:
    """The error for a file no reader claims, as exact as the head allows."""
    stripped = head.lstrip()
    if stripped[:1] in (b"{", b"["):
        return TraceError(p, "JSON, but not a torch-profiler or rocprof trace (no traceEvents)")
    line = head.split(b"\n", 1)[0][:300].decode("utf-8", "replace").strip()
    if not line.isprintable():
        return TraceError(p, "binary data, not a trace attrib can read (expected torch-profiler JSON or rocprof output)")
    if p.name.lower().removesuffix(".gz").endswith(".csv") or "," in line or ";" in line or "\t" in line:
        sep = next((c for c in ";\t|" if c in line and "," not in line), None)
        hint = f" (separated by {sep!r}; rocprof writes ',')" if sep else ""
        return TraceError(p, f"CSV header{hint} has no known rocprof columns (rocprofv3: Kernel_Name, "
                             f"Start_Timestamp, End_Timestamp; rocprof v1: Index, KernelName): {line[:120]!r}")
    return TraceError(p, "not a trace attrib can read (expected torch-profiler JSON or rocprof output)")


def resolve(path: str | Path) -> tuple[str, Path]:
    """(format name, the file or directory to read) for `path` (see the analysis JSON's `source.format`)."""
    p = Path(path)
    limits.check_path(p)
    if p.is_dir():
        return _sniff_dir(p)
    head = limits.head(p)
    if not head:
        with limits.open_file(p) as fh:
            if fh.read(2) == limits.GZIP_MAGIC:
                raise TraceError(p, "corrupt gzip data (not a gzip stream attrib can read)")
        raise TraceError(p, "empty file")
    fmt = rocprof.sniff(p, head)
    if fmt:
        return fmt, p
    if _torch_json(head):
        return "torch-json", p
    raise _unknown(p, head)


def sniff(path: str | Path) -> str:
    """The format name of `path` (see the analysis JSON's `source.format`)."""
    return resolve(path)[0]


def load(path: str | Path, **options) -> Trace:
    """Read any supported trace into the normalized Trace."""
    fmt, p = resolve(path)
    if fmt == "torch-json":
        return read_kineto(p, **options)
    return rocprof.read(p, fmt, **options)
