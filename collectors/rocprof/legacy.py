"""Legacy rocprof v1 (`results.csv`, `results.json`, `results.db`) and rocprofv2 CSV.

v1 kernel rows carry `Index` (the dispatch key), `KernelName` (with `.kd` / ` [clone .kd]`),
`gpu-id`, `grd`/`wgr` (work-item products, not per-dimension) and BeginNs/EndNs. Its JSON is a
Chrome trace whose `ts`/`dur` are quoted strings in us; the exact ns are in each event's args.
Devices come from the sibling `<stem>.sysinfo.txt` (rocminfo), or the JSON's `otherData`.
rocprofv2 CSV (`results_<pid>.csv`, a blank line after the header) has the same kind of fields.
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import polars as pl

from attrib.errors import TraceError
from attrib.trace import Trace

from ._common import (agent_dict, clean_kernel_name, container, csv_columns, finish,
                      head_bytes, int_col, local_file, merge, opened, plain_name, read_bytes, read_csv,
                      require, rocminfo_agents, sqlite_format, str_col, strict_times, total_dims)

V1, V2 = "rocprof-v1", "rocprof-v2"


def _v1_kernels(df: pl.DataFrame, path: Path, warnings: list[str],
                source: str = "CSV") -> pl.DataFrame:
    """Kernel rows from v1 columns (lower-case names), from CSV, SQLite or JSON args
    (`source`)."""
    what = f"rocprof kernel {source}"
    name = require(df, path, what, "kernelname", "kernel_name")
    begin = require(df, path, what, "beginns", "start_timestamp")
    end = require(df, path, what, "endns", "end_timestamp")
    df = strict_times(df, path, [begin, end], warnings) if source == "CSV" else df
    grid, block = total_dims(int_col(df, "grd", "grid_size"), int_col(df, "wgr", "workgroup_size"))
    out = df.select(
        id=int_col(df, "index", "dispatch_id"), name=clean_kernel_name(pl.col(name).cast(pl.Utf8)),
        start_ns=int_col(df, begin), dur_ns=int_col(df, end) - int_col(df, begin),
        device=int_col(df, "gpu-id", "gpu_id"), queue=int_col(df, "queue-id", "queue_id"),
        tid=int_col(df, "tid"), pid=int_col(df, "pid"), correlation=int_col(df, "correlation_id"),
        grid=grid, block=block,  # grd/wgr are x*y*z products: [total workgroups, 1, 1]
        lds_bytes=int_col(df, "lds", "lds_per_workgroup"),
        scratch_bytes=int_col(df, "scr", "scratch_per_workitem"),
        registers=int_col(df, "arch_vgpr", "vgpr"), accum_registers=int_col(df, "accum_vgpr"),
        sgprs=int_col(df, "sgpr"), region=str_col(df, "roctx-range"),
    )
    if out["id"].null_count() == out.height:
        out = out.with_columns(id=pl.int_range(pl.len(), dtype=pl.Int64))
    return out.sort("start_ns")  # negative durations (EndNs < BeginNs) are dropped by validation


def _stem(path: Path) -> str:
    return plain_name(path).split(".")[0]


def _sysinfo(path: Path, warnings: list[str]) -> tuple[dict, ...]:
    info = path.with_name(f"{_stem(path)}.sysinfo.txt")
    if not info.is_file():
        warnings.append(f"no {info.name} beside the trace: device properties unknown")
        return ()
    return rocminfo_agents(info.read_text(errors="replace"))


_OTHER_KEYS = {"Name": "name", "MarketingName": "product_name", "ComputeUnit": "cu_count",
               "SIMDsperCU": "simd_per_cu", "WavefrontSize": "wave_front_size",
               "MaxClockFreq.(MHz)": "max_engine_clk_fcompute", "DeviceType": "type"}


def _other_data_agents(other: dict) -> tuple[dict, ...]:
    """GPU agents from v1 JSON `otherData` (rocminfo flattened, spaces removed)."""
    agents: dict[int, dict] = {}
    for key, value in other.items():
        m = re.match(r"Agent(\d+)\.([^.]+(?:\.\(MHz\))?)$", key)
        if m and m.group(2) in _OTHER_KEYS:
            agent = agents.setdefault(int(m.group(1)), {})
            agent[_OTHER_KEYS[m.group(2)]] = str(value).split("(")[0]
    gpus = [a for _, a in sorted(agents.items()) if a.get("type") == "GPU"]
    return tuple(agent_dict(a, id=i) for i, a in enumerate(gpus))


def read_v1_csv(path: Path) -> Trace:
    warnings: list[str] = []
    kernels = _v1_kernels(read_csv(path, warnings), path, warnings)
    return finish(path, V1, devices=_sysinfo(path, warnings), vendor_from="rocprof v1 sysinfo",
                  warnings=warnings, runtime={"profiler": "rocprof"}, kernels=kernels)


def read_v1_db(path: Path) -> Trace:
    import sqlite3  # here, not at the top: only a SQLite input needs it (a fast start)

    warnings: list[str] = []
    with local_file(path) as db:
        try:
            with opened(path, db) as con:
                query = "SELECT name FROM sqlite_master WHERE type='table'"
                tables = {r[0] for r in con.execute(query)}
                if "KERN" not in tables:
                    raise TraceError(path, "rocprof v1 database without a KERN table")
                cur = con.execute("SELECT * FROM KERN")
                df = pl.DataFrame(cur.fetchall(), schema=[d[0].lower() for d in cur.description],
                                  orient="row", infer_schema_length=None)
        except sqlite3.DatabaseError as exc:
            raise TraceError(path, f"unreadable SQLite database ({exc})") from None
    kernels = _v1_kernels(df, path, warnings, "table KERN")
    return finish(path, V1, devices=_sysinfo(path, warnings), vendor_from="rocprof v1 sysinfo",
                  warnings=warnings, runtime={"profiler": "rocprof"}, kernels=kernels)


def read_v1_json(path: Path) -> Trace:
    warnings: list[str] = []
    try:
        doc = orjson.loads(read_bytes(path))
    except orjson.JSONDecodeError as exc:
        raise TraceError(path, f"invalid JSON ({exc.msg} at byte {exc.pos}; "
                               "file cut short?)") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise TraceError(path, "no traceEvents list (not a rocprof v1 JSON trace)")
    names = {e["pid"]: e["args"].get("name", "") for e in events
             if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "process_name"
             and isinstance(e.get("args"), dict) and isinstance(e.get("pid"), (int, str))}
    gpu_pids = [pid for pid, n in names.items() if re.fullmatch(r"GPU\d+", str(n))]
    slices = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    try:
        df = pl.DataFrame(slices, infer_schema_length=None) if slices else pl.DataFrame()
    except (pl.exceptions.PolarsError, TypeError, ValueError, OverflowError) as exc:
        first = str(exc).splitlines()[0][:120]
        raise TraceError(path, f"traceEvents of mixed shapes ({first})") from None
    kernels = markers = None
    pid = (pl.col("pid").cast(pl.Int64, strict=False) if "pid" in df.columns
           else pl.lit(None, pl.Int64))
    if df.height and isinstance(df.schema.get("args"), pl.Struct):
        gpu = df.filter(pid.is_in(gpu_pids))
        if gpu.height:
            args = gpu.select("args").unnest("args")
            kernels = _v1_kernels(args.rename({c: c.lower() for c in args.columns}), path, warnings,
                                  "JSON event args")
    timed = df.height and {"ts", "dur", "name"} <= set(df.columns)
    mark = df.filter(pid == 0) if 0 in names and timed else None
    if mark is not None and mark.height:  # "Markers and Ranges": ts/dur in us (strings)
        def us(c: str) -> pl.Expr:
            ns = pl.col(c).cast(pl.Float64, strict=False) * 1000
            return ns.round().cast(pl.Int64, strict=False)

        tid = pl.col("tid").cast(pl.Int64, strict=False) if "tid" in mark.columns else None
        markers = mark.select(name=pl.col("name").cast(pl.Utf8, strict=False), side=pl.lit("cpu"),
                              tid=tid, start_ns=us("ts"), dur_ns=us("dur"))
    other = doc.get("otherData") if isinstance(doc.get("otherData"), dict) else {}
    info = path.with_name(f"{_stem(path)}.sysinfo.txt")
    devices = (rocminfo_agents(info.read_text(errors="replace")) if info.is_file()
               else _other_data_agents(other))
    return finish(path, V1, devices=devices, vendor_from="rocprof v1 sysinfo", warnings=warnings,
                  runtime={"profiler": "rocprof"}, kernels=kernels, markers=markers,
                  events=len(slices))


def read_v2_csv(path: Path) -> Trace:
    warnings: list[str] = []
    kernels = _v1_kernels(read_csv(path, warnings), path, warnings)
    return finish(path, V2, vendor_from="rocprofv2 CSV output", warnings=warnings,
                  runtime={"profiler": "rocprofv2"}, kernels=kernels)


def read(path: Path, fmt: str) -> Trace:
    if fmt == V2:
        return read_v2_csv(path)
    head = head_bytes(path, 64)
    if head.startswith(b"SQLite format 3"):
        return read_v1_db(path)
    if head.lstrip()[:1] in (b"{", b"["):
        return read_v1_json(path)
    return read_v1_csv(path)


def sniff_v1(path: Path, head: bytes) -> bool:
    """`results.db` (a KERN table), `results.csv` (Index, KernelName), or `results.json`: a Chrome
    trace with quoted `ts` strings, or named results.* without torch-profiler keys."""
    kind = container(path, head)
    if kind == "sqlite":
        return sqlite_format(path, head) == V1
    if kind == "csv":
        return {"index", "kernelname"} <= csv_columns(path, head)
    if kind != "json" or b'"traceEvents"' not in head or b'"rocprofiler-sdk-tool"' in head:
        return False
    quoted_ts = re.search(rb'"ts"\s*:\s*"\d', head) is not None
    torch_like = b'"schemaVersion"' in head or b'"deviceProperties"' in head
    return quoted_ts or (plain_name(path).lower().split(".")[0] == "results" and not torch_like)


def sniff_v2(path: Path, head: bytes) -> bool:
    return {"dispatch_id", "gpu_id", "kernel_name", "grid_size"} <= csv_columns(path, head)


def read_v1(path: Path) -> Trace:
    return read(path, V1)


_V1_ORDER = {".csv": 0, ".db": 1, ".json": 2}


def read_v1_folder(folder: Path, files: list[Path]) -> Trace:
    """results.csv / .db / .json hold the same dispatches: the first of them is read."""
    first = min(files, key=lambda p: _V1_ORDER.get(Path(plain_name(p)).suffix, 3))
    return merge(folder, V1, [read(first, V1)])
