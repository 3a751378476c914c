"""rocprof / rocprofv3 outputs: format sniffing and readers into the normalized Trace.

Formats (the names `sniff` returns and `read` takes):
  rocpd           rocprofv3 SQLite `<pid>_results.db` (default since ROCm 7.0), also `.db.gz`
  rocprofv3-csv   `<prefix>_kernel_trace.csv` and its siblings (hip_api, marker_api, memory_copy,
                  agent_info), or `rocpd convert` CSV
  rocprofv3-json  JSON with top-level `rocprofiler-sdk-tool`
  pftrace         Perfetto protobuf `.pftrace`
  rocprof-v1      legacy `results.csv` / `results.json` (quoted ts/dur) / `results.db` (KERN table)
  rocprof-v2      rocprofv2 kernel CSV
A directory is read as the format it holds (every process's files of that format are stacked).
Capture: `collectors.rocprof.run`; ROCTx ranges from Python: `collectors.rocprof.roctx`.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from attrib.errors import TraceError
from attrib.trace import Trace

from . import legacy, pftrace, rocpd, v3csv, v3json
from ._common import SQLITE_MAGIC, connect, head_bytes, local_file, merge, plain_name  # noqa: F401 (head_bytes)

__all__ = ["sniff", "read", "FORMATS"]

FORMATS = ("rocpd", "rocprofv3-csv", "rocprofv3-json", "pftrace", "rocprof-v1", "rocprof-v2")
_EXTENSIONS = (".db", ".csv", ".json", ".pftrace", ".perfetto-trace", ".gz")


def _csv_format(head: bytes) -> str | None:
    line = head.split(b"\n", 1)[0].decode("utf-8", "replace").lower()
    cols = {c.strip().strip('"').strip() for c in line.split(",")}
    if {"index", "kernelname"} <= cols:
        return "rocprof-v1"
    if {"dispatch_id", "gpu_id", "kernel_name", "grid_size"} <= cols:
        return "rocprof-v2"
    if "start_timestamp" in cols and cols & {"kernel_name", "function", "direction"}:
        return "rocprofv3-csv"
    if {"node_id", "agent_type"} <= cols or {"counter_name", "dispatch_id"} <= cols:
        return "rocprofv3-csv"
    return None


def _sqlite_format(path: Path, head: bytes) -> str:
    """rocpd or rocprof-v1 (tblextr KERN table); unidentified SQLite is left to the rocpd reader."""
    if b"rocpd_" in head:
        return "rocpd"
    if b"CREATE TABLE KERN" in head:
        return "rocprof-v1"
    try:
        with local_file(path) as db:
            con = connect(db)
            try:
                names = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
            finally:
                con.close()
    except (sqlite3.Error, TraceError):
        return "rocpd"
    return "rocprof-v1" if "KERN" in names and not any(n.startswith("rocpd") for n in names) else "rocpd"


def _sniff_file(path: Path, head: bytes) -> str | None:
    name = plain_name(path).lower()
    if head.startswith(SQLITE_MAGIC):
        return _sqlite_format(path, head)
    text = head.lstrip()
    if text[:1] in (b"{", b"["):
        if b'"rocprofiler-sdk-tool"' in head:
            return "rocprofv3-json"
        if b'"traceEvents"' in head:
            quoted_ts = re.search(rb'"ts"\s*:\s*"\d', head) is not None
            torch_like = b'"schemaVersion"' in head or b'"deviceProperties"' in head
            if quoted_ts or (name.split(".")[0] == "results" and not torch_like):
                return "rocprof-v1"
        return None
    if name.endswith((".pftrace", ".perfetto-trace")):  # by name, once the content is not JSON/SQLite
        return "pftrace"
    if name.endswith(".csv") or b"," in head.split(b"\n", 1)[0]:
        # a rocprofv3 file name (`*_kernel_trace.csv`) is read as such: its reader names a missing column
        return _csv_format(head) or ("rocprofv3-csv" if v3csv.split_name(path) else None)
    return None


_DIR_PRIORITY = ("rocpd", "rocprofv3-json", "rocprofv3-csv", "rocprof-v1", "rocprof-v2", "pftrace")


def _dir_files(directory: Path) -> dict[str, list[Path]]:
    """{format: files} for the profiler outputs directly inside a directory."""
    found: dict[str, list[Path]] = {}
    for p in sorted(directory.iterdir()):
        if p.name.lower().endswith(_EXTENSIONS) and p.is_file():
            fmt = _sniff_file(p, head_bytes(p))
            if fmt:
                found.setdefault(fmt, []).append(p)
    return found


def sniff(path: Path, head: bytes) -> str | None:
    """The rocprof format of `path` (file or directory), or None if it is not rocprof output."""
    path = Path(path)
    if path.is_dir():
        found = _dir_files(path)
        return next((f for f in _DIR_PRIORITY if f in found), None)
    return _sniff_file(path, head or head_bytes(path))


def _read_file(path: Path, fmt: str) -> Trace:
    if fmt == "rocpd":
        return rocpd.read(path)
    if fmt == "rocprofv3-csv":
        return v3csv.read(path)
    if fmt == "rocprofv3-json":
        return v3json.read(path)
    if fmt == "pftrace":
        return pftrace.read(path)
    if fmt in ("rocprof-v1", "rocprof-v2"):
        return legacy.read(path, fmt)
    raise TraceError(path, f"unknown rocprof format {fmt!r} (expected one of {', '.join(FORMATS)})")


def read(path: Path, fmt: str, **options) -> Trace:
    """Read `path` (a file, or a directory of one run's outputs) as `fmt` into a Trace.

    No options are defined yet; unknown ones are ignored so callers can pass common ones.
    """
    path = Path(path)
    if not path.is_dir():
        return _read_file(path, fmt)
    if fmt == "rocprofv3-csv":
        return v3csv.read(path)
    files = _dir_files(path).get(fmt, [])
    if not files:
        raise TraceError(path, f"directory holds no {fmt} output")
    if fmt == "rocprof-v1":  # results.csv / .db / .json hold the same dispatches: read one
        order = {".csv": 0, ".db": 1, ".json": 2}
        files = sorted(files, key=lambda p: order.get(Path(plain_name(p)).suffix, 3))[:1]
    return merge(path, fmt, [_read_file(p, fmt) for p in files])
