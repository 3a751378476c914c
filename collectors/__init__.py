"""Collectors: everything that turns a run into a normalized `attrib.trace.Trace`.

`load(path)` sniffs the format (a file or a directory of profiler outputs) with the readers of
collectors.registry and calls the one that claims it. Readers raise `attrib.errors.TraceError` for
input they cannot read.
"""

from __future__ import annotations

from pathlib import Path

from attrib.errors import TraceError
from attrib.trace import Trace
from collectors import limits
from collectors.reader import Reader
from collectors.registry import READERS, reader
from collectors.rocprof._common import head_bytes
from collectors.torch_capture import capture, wrap

__all__ = ["load", "sniff", "resolve", "reader", "Reader", "READERS", "capture", "wrap"]


def claim(path: Path, head: bytes) -> Reader | None:
    """The first reader whose sniff claims the file."""
    return next((r for r in READERS if r.sniff(path, head)), None)


def _folder_files(directory: Path) -> dict[str, list[Path]]:
    """{format: files} of the profiler outputs directly inside a directory, each file named as
    its reader reads them (a torch trace `.json`/`.json.gz`; rocprof `.db`, `.csv`, ...)."""
    suffixes = tuple({s for r in READERS for s in r.suffixes})
    found: dict[str, list[Path]] = {}
    for p in sorted(directory.iterdir()):
        name = p.name.lower()
        if not name.endswith(suffixes) or not p.is_file():
            continue
        r = claim(p, head_bytes(p))
        if r is not None and name.endswith(r.suffixes):
            found.setdefault(r.name, []).append(p)
    return found


def _folder(p: Path) -> tuple[Reader, Path, list[Path]]:
    found = _folder_files(p)
    r = next((r for r in READERS if r.name in found), None)
    if r is None:
        raise TraceError(p, "is a directory with no profiler output attrib can read")
    files = found[r.name]
    if r.read_folder is not None:
        return r, p, files
    if len(files) == 1:
        return r, files[0], files
    names = ", ".join(f.name for f in files[:4]) + (", ..." if len(files) > 4 else "")
    raise TraceError(p, f"is a directory holding {len(files)} {r.title} ({names}); attrib analyzes "
                        f"one trace at a time: pass one of them, e.g. attrib analyze {files[0]}")


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


def _resolve(path: str | Path) -> tuple[Reader, Path, list[Path]]:
    p = Path(path)
    limits.check_path(p)
    if p.is_dir():
        return _folder(p)
    head = limits.head(p)
    if not head:
        with limits.open_file(p) as fh:
            kind = limits.compression(fh.read(8))
        if kind is not None:
            raise TraceError(p, f"corrupt {kind} data (not a {kind} stream attrib can read)")
        raise TraceError(p, "empty file")
    r = claim(p, head)
    if r is None:
        raise _unknown(p, head)
    return r, p, [p]


def resolve(path: str | Path) -> tuple[str, Path]:
    """(format name, the file or directory to read) for `path` (see the analysis JSON's `source.format`)."""
    r, p, _ = _resolve(path)
    return r.name, p


def sniff(path: str | Path) -> str:
    """The format name of `path` (see the analysis JSON's `source.format`)."""
    return resolve(path)[0]


def load(path: str | Path) -> Trace:
    """Read any supported trace into the normalized Trace."""
    r, p, files = _resolve(path)
    if p.is_dir() and r.read_folder is not None:
        return r.read_folder(p, files)
    return r.read(p)
