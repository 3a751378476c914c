"""Collectors: everything that turns a run into a normalized `attrib.trace.Trace`.

`load(path)` sniffs the format (a file or a directory of profiler outputs) with the readers of
collectors.registry and calls the one that claims it. Readers raise `attrib.errors.TraceError` for
input they cannot read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attrib.errors import TraceError
from attrib.trace import Trace
from collectors import limits
from collectors.reader import Reader
from collectors.registry import READERS, reader
from collectors.rocprof._common import head_bytes, is_utf16, utf16_error

if TYPE_CHECKING:
    from collectors.calibrate import measure as measure_device
    from collectors.sampled import capture
    from collectors.torch_capture import wrap

__all__ = ["load", "sniff", "resolve", "reader", "Reader", "READERS", "capture", "wrap",
           "measure_device", "traces_in"]


def __getattr__(name: str) -> Any:
    """capture, wrap and measure_device load their modules on first use: reading a trace needs
    none of them (a fast start)."""
    if name == "capture":
        from collectors.sampled import capture

        return capture
    if name == "wrap":
        from collectors.torch_capture import wrap

        return wrap
    if name == "measure_device":
        from collectors.calibrate import measure

        return measure
    raise AttributeError(f"module 'collectors' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def claim(path: Path, head: bytes) -> Reader | None:
    """The first reader whose sniff claims the file."""
    return next((r for r in READERS if r.sniff(path, head)), None)


TORCH = "torch-json"  # the torch-profiler reader's name (collectors.registry)


def _folder_files(directory: Path) -> dict[str, list[Path]]:
    """{format: files} of the profiler outputs directly inside a directory, each file named as
    its reader reads them (a torch trace `.json`/`.json.gz`; rocprof `.db`, `.csv`, ...)."""
    suffixes = tuple({s for r in READERS for s in r.suffixes})
    found: dict[str, list[Path]] = {}
    for p in sorted(directory.iterdir()):
        name = p.name.lower()
        if not name.endswith(suffixes):
            continue
        if p.is_symlink():
            limits.check_path(p)  # a loop or a broken link is named, not skipped
        if not p.is_file():
            continue
        r = claim(p, head_bytes(p))
        if r is not None and name.endswith(r.suffixes):
            found.setdefault(r.name, []).append(p)
    return found


def traces_in(directory: str | Path) -> list[Path]:
    """Every trace file directly inside `directory` that a reader claims, by name."""
    return sorted(f for files in _folder_files(Path(directory)).values() for f in files)


def _folder(p: Path) -> tuple[Reader, Path, list[Path]]:
    found = _folder_files(p)
    r = next((r for r in READERS if r.name in found), None)
    if r is None:
        raise TraceError(p, "is a directory with no profiler output attrib can read")
    torch = [f for name, files in found.items() if name == TORCH for f in files]
    if torch and len(found) > 1:  # two profilers' outputs: which run is meant is not ours to pick
        other = next(f for name, files in found.items() if name != TORCH for f in files)
        raise TraceError(p, f"is a directory holding both torch-profiler traces ({torch[0].name}"
                            f"{', ...' if len(torch) > 1 else ''}) and rocprof output "
                            f"({other.name}): pass the file or folder of the run to analyze")
    files = found[r.name]
    if r.read_folder is not None:
        return r, p, files
    if len(files) == 1:
        return r, files[0], files
    names = ", ".join(f.name for f in files[:4]) + (", ..." if len(files) > 4 else "")
    raise TraceError(p, f"is a directory holding {len(files)} {r.title} ({names}); attrib analyzes "
                        f"one trace at a time: pass one of them, e.g. attrib analyze {files[0]}")


_HEADER_FIELD = re.compile(r'^\s*"?[A-Za-z_][\w .()/%-]*"?\s*$')  # a CSV column name


def _depth(head: bytes) -> int:
    """How deep JSON brackets nest in `head` (strings not parsed: a bound, for the error
    message)."""
    depth = top = 0
    for c in head.translate(None, b"\" \t\r\n:,0123456789"):  # brackets (and other text) only
        depth += (c in b"[{") - (c in b"]}")
        top = max(top, depth)
    return top


def _text(head: bytes) -> str | None:
    """`head` as text, or None for binary data (a NUL byte, or not UTF-8 before its last 3
    bytes)."""
    if b"\0" in head:
        return None
    try:
        return head[: len(head) - 3 if len(head) > 3 else None].decode("utf-8")
    except UnicodeDecodeError:
        return None


def _unknown(p: Path, head: bytes) -> TraceError:
    """The error for a file no reader claims, as exact as the head allows."""
    stripped = head.lstrip()
    if stripped[:1] in (b"{", b"["):
        deep = _depth(head[:65536])
        if deep > 1000:
            return TraceError(p, f"JSON nested {deep:,}+ levels deep in its first 64 kB "
                                 "(a profiler trace nests a few): not a trace attrib can read")
        return TraceError(p, "JSON, but not a torch-profiler or rocprof trace (no traceEvents)")
    if is_utf16(head):
        return utf16_error(p)
    if not head.strip(b"\0"):
        return TraceError(p, f"holds only NUL bytes in its first {len(head):,} bytes (a file never "
                             "written, or a disk image): not a trace")
    if head[257:262] == b"ustar":
        return TraceError(p, "a tar archive: unpack it (tar -xf) and pass the trace inside")
    text = _text(head)
    if text is None:
        return TraceError(p, "binary data, not a trace attrib can read "
                             "(expected torch-profiler JSON or rocprof output)")
    line = text.removeprefix("\ufeff").split("\n", 1)[0][:300].strip()
    sep = next((c for c in ",;\t|" if c in line), None)
    header = sep is not None and all(_HEADER_FIELD.match(f) for f in line.split(sep))
    if header or (p.name.lower().removesuffix(".gz").endswith(".csv") and sep is not None):
        hint = f" (separated by {sep!r}; rocprof writes ',')" if sep != "," else ""
        return TraceError(p, f"CSV header{hint} has no known rocprof columns "
                             "(rocprofv3: Kernel_Name, Start_Timestamp, End_Timestamp; "
                             f"rocprof v1: Index, KernelName): {line[:120]!r}")
    return TraceError(p, "not a trace attrib can read: text that is neither JSON nor a CSV with a "
                         "header (expected torch-profiler JSON or rocprof output)")


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
    """(format name, the file or directory to read) for `path` (see the analysis JSON's
    `source.format`)."""
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
