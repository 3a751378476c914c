"""Helpers shared by the rocprof readers: file access, CSV columns, agents, table finishing."""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import polars as pl

from attrib.errors import TraceError
from attrib.trace import TRUNCATED, Meta, Trace, TraceWarning, mark_graph_replays
from collectors import limits, validate

if TYPE_CHECKING:
    import sqlite3

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
# rocprofv3 memory-copy directions (CSV and JSON) -> the contract's copies.direction
COPY_DIRECTIONS = {"HOST_TO_DEVICE": "HtoD", "DEVICE_TO_HOST": "DtoH",
                   "DEVICE_TO_DEVICE": "DtoD", "HOST_TO_HOST": "HtoH"}

# Agent keys kept in Meta.devices (rocprofiler / HSA names), in this order.
AGENT_KEYS = (
    "id", "name", "product_name", "model_name", "vendor_name", "cu_count", "simd_per_cu",
    "wave_front_size", "max_engine_clk_fcompute", "gfx_target_version", "num_xcc",
    "max_waves_per_simd", "lds_size_in_kb", "device_id", "node_id", "logical_node_id",
    "type_index",
)


def is_gzip(path: Path) -> bool:
    with limits.open_file(path) as fh:
        return fh.read(2) == GZIP_MAGIC


def head_bytes(path: Path, n: int = 65536) -> bytes:
    """Up to n leading bytes of the file, gunzipped if it is gzip (b"" if unreadable)."""
    try:
        return limits.head(path, n)
    except TraceError:
        return b""


def read_bytes(path: Path) -> bytes:
    """The whole file, gunzipped (with bounds) if it is gzip; a cut-short gzip is a
    TraceError."""
    data, cut = limits.read_bytes(path)
    if cut:
        raise TraceError(path, "gzip data is truncated (the file was cut short); "
                               "copy it again")
    return bytes(data) if isinstance(data, bytearray) else data


# SQLite's journals: a database with one beside it holds changes that only a writable open applies
JOURNALS = ("-wal", "-journal")


def _journals(db: Path) -> list[Path]:
    side = (db.with_name(db.name + s) for s in JOURNALS)
    return [p for p in side if p.is_file() and p.stat().st_size > 0]


@contextlib.contextmanager
def local_file(path: Path) -> Iterator[Path]:
    """`path` itself, or a private copy in the temp directory (removed afterwards, also on
    Ctrl-C and on the CLI's SIGTERM/SIGHUP): gunzipped, or with the journals beside it (they
    need a writable open, which must never touch the user's files)."""
    journals = [] if is_gzip(path) else _journals(path)
    if not journals and not is_gzip(path):
        yield path
        return
    folder = tempfile.mkdtemp(prefix="attrib-rocprof-")
    try:
        copy = Path(folder) / plain_name(path)
        if journals:
            for src in (path, *journals):
                shutil.copyfile(src, copy.with_name(copy.name + src.name[len(path.name):]))
        else:
            copy.write_bytes(read_bytes(path))
        yield copy
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def connect(db: Path) -> sqlite3.Connection:
    """A SQLite connection that never writes beside `db`: read-only and immutable (no -wal/-shm
    files, no locks); a private copy with journals (local_file) is opened writable to apply
    them."""
    import sqlite3  # here, not at the top: only a SQLite input needs it (a fast start)

    uri = f"file:{urllib.parse.quote(str(db.resolve()))}"
    return sqlite3.connect(uri if _journals(db) else uri + "?mode=ro&immutable=1", uri=True)


# A reader's queries on one database may run this long, plus as long again per GB of it: a real
# rocpd file scans at hundreds of MB/s, so only a view that never ends (or a pathological join)
# reaches it.
QUERY_S = 120.0
QUERY_S_PER_GB = 120.0
_PROGRESS_OPS = 20_000  # SQLite VM steps between checks (~1 ms)
_STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


def query_limit_s(db: Path) -> float:
    """The time a reader's queries on `db` may take, all together (QUERY_S, QUERY_S_PER_GB)."""
    return QUERY_S + QUERY_S_PER_GB * db.stat().st_size / 1e9


@contextlib.contextmanager
def opened(path: Path, db: Path, limit_s: float | None = None) -> Iterator[sqlite3.Connection]:
    """`connect(db)` (`db` is `path` or its local copy), closed afterwards, its queries bounded:
    past `limit_s` (default `query_limit_s`) a query is interrupted and the reader fails with a
    TraceError naming `path`. SIGINT/SIGTERM/SIGHUP, whose Python handlers cannot run inside
    SQLite's C code, are noted meanwhile, interrupt the query within ~1 ms and are then delivered
    to the handlers there were (the CLI's: exit 128+N, nothing half-written)."""
    import sqlite3  # here, not at the top: only a SQLite input needs it (a fast start)

    limit = query_limit_s(db) if limit_s is None else limit_s
    deadline = time.monotonic() + limit
    got: list[int] = []
    con = connect(db)
    old = _note_signals(got)
    con.set_progress_handler(lambda: 1 if got or time.monotonic() > deadline else 0,
                             _PROGRESS_OPS)
    try:
        yield con
    except sqlite3.OperationalError as exc:
        if got or "interrupted" not in str(exc):
            raise
        raise TraceError(path, f"a query ran past {limit:.0f} s and was stopped (a view that "
                               "never ends, or a pathological join)") from None
    finally:
        con.close()
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if got:
            signal.raise_signal(got[0])


def _note_signals(got: list[int]) -> dict[signal.Signals, Any]:
    """Replace the stop signals' handlers (main thread only) by one that appends to `got`; the
    old handlers, to restore. Signals whose handler is SIG_IGN stay ignored."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    old: dict[signal.Signals, Any] = {}
    for name in _STOP_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) not in (signal.SIG_IGN, None):
            old[sig] = signal.signal(sig, lambda signum, _frame: got.append(signum))
    return old


def plain_name(path: Path) -> str:
    """The file name without a trailing .gz, .xz or .zst."""
    return path.name.removesuffix(".gz").removesuffix(".xz").removesuffix(".zst")


# --------------------------------------------------------------------------------------------
# sniffing: each reader claims files of one container kind by their head (collectors.registry)


def container(path: Path, head: bytes) -> str | None:
    """"sqlite", "json", "pftrace" (by name, content neither), "csv" (by name or a comma in the
    first line), or None: the kind of file `head` (its first bytes, decompressed) starts."""
    if head.startswith(SQLITE_MAGIC):
        return "sqlite"
    if head.lstrip()[:1] in (b"{", b"["):
        return "json"
    name = plain_name(path).lower()
    if name.endswith((".pftrace", ".perfetto-trace")):
        return "pftrace"
    if name.endswith(".csv") or b"," in head.split(b"\n", 1)[0]:
        return "csv"
    return None


def csv_columns(path: Path, head: bytes) -> set[str]:
    """The lower-case column names of a CSV's header line (empty if not a CSV)."""
    if container(path, head) != "csv":
        return set()
    line = head.removeprefix(UTF8_BOM).split(b"\n", 1)[0].decode("utf-8", "replace").lower()
    return {c.strip().strip('"').strip() for c in line.split(",")}


def sqlite_format(path: Path, head: bytes) -> str | None:
    """"rocpd" or "rocprof-v1" (tblextr KERN table) for a SQLite file, None for other files;
    unidentified SQLite is left to the rocpd reader."""
    if not head.startswith(SQLITE_MAGIC):
        return None
    if b"rocpd_" in head:
        return "rocpd"
    if b"CREATE TABLE KERN" in head:
        return "rocprof-v1"
    import sqlite3  # a SQLite file none of the above names: only now (a fast start)

    try:
        with local_file(path) as db, opened(path, db) as con:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    except (sqlite3.Error, TraceError):
        return "rocpd"
    v1 = "KERN" in names and not any(n.startswith("rocpd") for n in names)
    return "rocprof-v1" if v1 else "rocpd"


def merging(fmt: str, read: Callable[[Path], Trace]) -> Callable[[Path, list[Path]], Trace]:
    """A folder reader: every file read, stacked as one run (`merge`)."""
    return lambda folder, files: merge(folder, fmt, [read(p) for p in files])


# --------------------------------------------------------------------------------------------
# CSV


UTF8_BOM = b"\xef\xbb\xbf"


def is_utf16(head: bytes) -> bool:
    """UTF-16 text: its byte-order mark, or a NUL in every other byte of ASCII text (the bytes
    between them not NUL: a run of NULs, or a tar header, is no text)."""
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return True
    even, odd = head[0:80:2], head[1:80:2]
    return any(a.count(0) > 30 and len(b) - b.count(0) > 30 for a, b in ((even, odd), (odd, even)))


def utf16_error(path: Path) -> TraceError:
    return TraceError(path, "UTF-16 text; attrib reads UTF-8 (rocprof writes it): convert it, "
                            f"e.g. iconv -f UTF-16 -t UTF-8 {path.name} > utf8-{path.name}")


def read_csv(path: Path, warnings: list[str]) -> pl.DataFrame:
    """A rocprof CSV as all-string columns with lower-case names.

    Quoted or bare values both work; a UTF-8 byte-order mark is skipped. A file cut mid-row keeps
    its complete rows and records a warning; blank lines (rocprofv2 writes one after the header)
    are skipped.
    """
    data = read_bytes(path)
    if is_utf16(data[:80]):
        raise utf16_error(path)
    data = data.removeprefix(UTF8_BOM)
    if not data.strip():
        raise TraceError(path, "empty CSV file")
    if not data.endswith(b"\n"):
        cut = data.rfind(b"\n")
        if cut < 0:
            raise TraceError(path, "CSV has a header only, cut short")
        dropped = data[cut + 1:]
        data = data[: cut + 1]
        if dropped.strip():
            warnings.append(TraceWarning(f"{path.name}: file ends mid-row; "
                                         "the incomplete last row was dropped", TRUNCATED))
    try:
        df = pl.read_csv(data, infer_schema=False, truncate_ragged_lines=True,
                         raise_if_empty=False)
    except pl.exceptions.PolarsError as exc:
        raise TraceError(path, f"unreadable CSV ({str(exc).splitlines()[0]})") from None
    except (MemoryError, pl.exceptions.PanicException) as exc:  # PanicException: BaseException
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise TraceError(path, f"the CSV parser ran out of memory or failed on {len(data) / 1e6:.0f} "
                               f"MB ({first[:120]}); under a memory limit (ulimit -v) run with "
                               "POLARS_MAX_THREADS=2, or raise the limit") from None
    return df.rename({c: c.strip().lower() for c in df.columns})


def pick(df: pl.DataFrame, *names: str) -> str | None:
    """The first of `names` (lower-case) that is a column of df."""
    return next((n for n in names if n in df.columns), None)


# How rocprof spells the columns whose absence is reported (names are matched lower-case).
_SPELLING = {"kernelname": "KernelName", "beginns": "BeginNs", "endns": "EndNs",
             "kernel_name": "Kernel_Name", "start_timestamp": "Start_Timestamp",
             "end_timestamp": "End_Timestamp", "function": "Function"}


def require(df: pl.DataFrame, path: Path, what: str, *names: str) -> str:
    """The column for `what` (first of names present) or a TraceError naming it as rocprof
    spells it."""
    col = pick(df, *names)
    if col is None:
        found = ", ".join(df.columns[:12]) + (", ..." if df.width > 12 else "")
        spelt = _SPELLING.get(names[0], names[0])
        raise TraceError(path, f"{what} lacks the required column {spelt!r} "
                               f"(columns found: {found or 'none'})")
    return col


# An integer as text: optional label ("Agent 3"), decimal digits only (not 1e5, 0x10, 1.5), 64-bit.
_INT_TEXT = r"^\s*(?:[A-Za-z_]+\s+)?(-?\d{1,19})\s*$"


def parse_int(c: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    """An integer column from any column: text by `_INT_TEXT`, numbers that fit Int64, else null."""
    if dtype == pl.Utf8:
        c = c.str.extract(_INT_TEXT, 1)
    elif dtype.is_float():
        c = pl.when(c == c.round(0)).then(c)
    elif not dtype.is_integer() and dtype != pl.Null:
        return pl.lit(None, dtype=pl.Int64)
    return c.cast(pl.Int64, strict=False)


def int_col(df: pl.DataFrame, *names: str) -> pl.Expr:
    """Integer column from the first present name ("Agent 3" style values give 3), else null."""
    col = pick(df, *names)
    if col is None:
        return pl.lit(None, dtype=pl.Int64)
    return parse_int(pl.col(col), df.schema[col])


# a timestamp in a CSV: integer ns, nothing else (not 1e5, -0, 0x10, " 12 ")
_NS_TEXT = r"^\d{1,19}$"


def strict_times(df: pl.DataFrame, path: Path, cols: list[str],
                 warnings: list[str]) -> pl.DataFrame:
    """Timestamp columns (text, as read) with every value that is not integer ns set to null (its
    row is then dropped by validation), said in one warning per column naming the first row; a
    column without one integer is a TraceError."""
    for c in cols:
        if df.schema[c] != pl.Utf8:
            continue
        bad = df.select(pl.col(c).is_not_null() & ~pl.col(c).str.contains(_NS_TEXT)).to_series()
        n = int(bad.sum())
        if not n:
            continue
        row = int(bad.arg_max())
        value = df[c][row]
        col = _SPELLING.get(c, c)
        where = f"{col} row {row + 2} ({value!r})"  # row 1 is the header
        kind = (
            "written in E-notation"
            if re.fullmatch(r"\s*-?[\d.]+[eE][-+]?\d+\s*", value)
            else "not integer ns"
        )
        if n == df[c].drop_nulls().len():
            raise TraceError(path, f"every {col} value is {kind}, first {where}: rocprof writes "
                                   "integer nanoseconds (re-export the CSV without reformatting "
                                   "its numbers)")
        warnings.append(f"{path.name}: {n} {col} values are {kind} (first: {where}); "
                        "their rows are dropped")
        df = df.with_columns(pl.when(bad).then(None).otherwise(pl.col(c)).alias(c))
    return df


def str_col(df: pl.DataFrame, *names: str) -> pl.Expr:
    col = pick(df, *names)
    return pl.col(col).cast(pl.Utf8) if col else pl.lit(None, dtype=pl.Utf8)


def workgroups(grid: pl.Expr, wg: pl.Expr) -> pl.Expr:
    """Work-items per dimension -> workgroups (partial workgroups count)."""
    return pl.when(wg > 0).then((grid + wg - 1) // wg).otherwise(None)


def total_dims(grid_items: pl.Expr, wg_items: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(grid, block) lists from x*y*z products: [total workgroups, 1, 1], [wg items, 1, 1]."""
    one = pl.lit(1, dtype=pl.Int64)
    known = (wg_items > 0) & grid_items.is_not_null()
    grid = pl.when(known).then(pl.concat_list((grid_items + wg_items - 1) // wg_items, one, one))
    block = pl.when(wg_items > 0).then(pl.concat_list(wg_items, one, one))
    return grid, block


def dims(*exprs: pl.Expr) -> pl.Expr:
    return pl.concat_list([e.cast(pl.Int64) for e in exprs])


def clean_kernel_name(expr: pl.Expr) -> pl.Expr:
    """Strip quotes, the legacy `.kd` suffix and ` [clone .kd]` so all formats agree."""
    return (expr.str.strip_chars().str.strip_chars('"').str.replace(r" \[clone \.kd\]$", "")
            .str.replace(r"\.kd$", ""))


# --------------------------------------------------------------------------------------------
# agents


def agent_dict(raw: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A device dict with the HSA agent keys this project uses (absent keys left out)."""
    merged = {**raw, **{k: v for k, v in extra.items() if v is not None}}
    out = {k: merged[k] for k in AGENT_KEYS if merged.get(k) not in (None, "")}
    for k in AGENT_KEYS[5:]:
        if k in out:
            with contextlib.suppress(TypeError, ValueError):
                out[k] = int(out[k])
    return out


_ROCMINFO_FIELDS = {
    "Name": "name", "Marketing Name": "product_name", "Vendor Name": "vendor_name",
    "Device Type": "type", "Compute Unit": "cu_count", "SIMDs per CU": "simd_per_cu",
    "Wavefront Size": "wave_front_size", "Max Clock Freq. (MHz)": "max_engine_clk_fcompute",
    "Node": "node_id", "Chip ID": "device_id", "Max Waves Per CU": "max_waves_per_cu",
}


def rocminfo_agents(text: str) -> tuple[dict[str, Any], ...]:
    """GPU agents of a rocminfo dump (rocprof v1 `results.sysinfo.txt`), id = GPU ordinal."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    blocks = re.split(r"\*{5,}\s*\n\s*Agent \d+\s*\n\s*\*{5,}", text)[1:]
    gpus = []
    for block in blocks:
        fields: dict[str, Any] = {}
        for line in block.splitlines():
            if not line.startswith("  ") or line.startswith("    "):
                continue  # agent-level keys only (ISA and pool entries are indented deeper)
            key, sep, value = line.strip().partition(":")
            field = _ROCMINFO_FIELDS.get(key.strip())
            if sep and field is not None and field not in fields:
                fields[field] = value.strip().split("(")[0].strip()
        if fields.get("type") == "GPU":
            gpus.append(agent_dict(fields, id=len(gpus)))
    return tuple(gpus)


# --------------------------------------------------------------------------------------------
# finishing


def link_launches(kernels: pl.DataFrame, launches: pl.DataFrame | None) -> pl.DataFrame:
    """kernels.launch_id from the launch sharing its correlation id; graph replays marked by the
    contract's one rule (attrib.trace.mark_graph_replays)."""
    if kernels.height == 0 or "correlation" not in kernels.columns:
        return kernels
    kernels = mark_graph_replays(kernels, launches)
    if launches is None or launches.height == 0 or "correlation" not in launches.columns:
        return kernels
    ids = (launches.filter(pl.col("correlation").is_not_null())
           .group_by("correlation").agg(pl.col("id").min().alias("launch_id")))
    return kernels.drop("launch_id", strict=False).join(ids, on="correlation", how="left",
                                                        maintain_order="left")


def with_ids(df: pl.DataFrame | None) -> pl.DataFrame | None:
    """Give a table a 0-based row id when it has none."""
    if df is None or "id" in df.columns:
        return df
    return df.with_row_index("id").with_columns(pl.col("id").cast(pl.Int64))


def finish(path: Path, fmt: str, *, devices=(), vendor_from: str, warnings=(), top=None,
           runtime=None, events: int | None = None, **tables: pl.DataFrame | None) -> Trace:
    """The Trace with AMD vendor metadata; events defaults to the rows read. Tables pass the
    reader-boundary checks (collectors.validate) before kernels are linked to their launches."""
    warnings = list(warnings)
    tables = validate.tables({k: with_ids(v) for k, v in tables.items()}, warnings, path)
    if "kernels" in tables and tables["kernels"] is not None:
        tables["kernels"] = link_launches(tables["kernels"], tables.get("launches"))
    if events is None:
        events = sum(t.height for t in tables.values() if t is not None)
    meta = Meta(path=str(path), format=fmt, events=events, vendor="amd", vendor_from=vendor_from,
                devices=tuple(devices), runtime=runtime or {}, top=top or {},
                warnings=tuple(warnings))
    return Trace.build(meta, **tables)


_KEYED = {"kernels": ("id", "launch_id", "correlation"), "launches": ("id", "correlation"),
          "copies": ("id", "correlation"), "markers": ("id",)}


def _shifted(traces: list[Trace], name: str) -> pl.DataFrame | None:
    """One table of every trace stacked, its ids and correlation ids moved apart per trace (each
    process numbers its own from 0), so that no key of one process meets another's."""
    parts, offset = [], {"id": 0, "launch": 0, "correlation": 0}
    for t in traces:
        df = getattr(t, name)
        cols = {"id": "launch" if name == "launches" else "id", "launch_id": "launch",
                "correlation": "correlation"}
        if df.height:
            shifted = [(pl.col(c) + offset[cols[c]]).alias(c) for c in _KEYED.get(name, ())]
            parts.append(df.with_columns(shifted))
        offset["id"] += int(t.kernels["id"].max() or 0) + 1 if t.kernels.height else 0
        offset["launch"] += int(t.launches["id"].max() or 0) + 1 if t.launches.height else 0
        corr = [getattr(t, n)["correlation"].max() for n in ("kernels", "launches", "copies")]
        offset["correlation"] += max((int(c) for c in corr if c is not None), default=-1) + 1
    if name in ("markers", "copies", "ops", "frames"):  # ids only need to be distinct
        return pl.concat(parts, how="diagonal_relaxed").drop("id") if parts else None
    return pl.concat(parts, how="diagonal_relaxed") if parts else None


def _span(kernels: pl.DataFrame) -> tuple[Any, Any]:
    """(first start, last end) of a kernels table, in ns."""
    return kernels["start_ns"].min(), (kernels["start_ns"] + kernels["dur_ns"]).max()


def _one_session(path: Path, traces: list[Trace], names: list[str]) -> None:
    """Files of one run overlap in time (processes run together); a file whose kernels all start
    after the others' have ended is another session: refused, naming both."""
    spans = sorted((*_span(t.kernels), n) for t, n in zip(traces, names) if t.kernels.height)
    if not spans:
        return
    end, last = spans[0][1], spans[0][2]
    for start, stop, name in spans[1:]:
        if start > end:
            raise TraceError(
                path,
                f"holds two profiling sessions: {name} starts {(start - end) / 1e9:.1f} s after "
                f"{last} ends (the files of one run overlap in time); pass one of them",
            )
        if stop > end:
            end, last = stop, name


def merge(path: Path, fmt: str, traces: list[Trace], names: list[str] | None = None) -> Trace:
    """One Trace from several (one per process / file, `names` saying which): tables stacked with
    their keys kept apart, rows that are exact copies across files dropped (collectors.validate),
    devices de-duplicated; files that do not overlap in time are two sessions, a TraceError."""
    if len(traces) == 1:
        return traces[0].with_meta(path=str(path))
    _one_session(path, traces, names or [Path(t.meta.path).name for t in traces])
    warnings = [w for t in traces for w in t.meta.warnings]
    tables = {name: _shifted(traces, name)
              for name in ("kernels", "ops", "frames", "launches", "markers", "copies")}
    tables = validate.tables({k: with_ids(v) for k, v in tables.items()}, warnings)
    devices: list[dict] = []
    for t in traces:
        devices += [d for d in t.meta.devices if d not in devices]
    meta = Meta(path=str(path), format=fmt, events=sum(t.meta.events for t in traces),
                vendor="amd", vendor_from=traces[0].meta.vendor_from, devices=tuple(devices),
                runtime=traces[0].meta.runtime,
                top={"files": [t.meta.path for t in traces], **traces[0].meta.top},
                warnings=tuple(warnings))
    return Trace.build(meta, **tables)
