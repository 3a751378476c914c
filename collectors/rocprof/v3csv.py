"""rocprofv3 CSV output (`-f csv`) and `rocpd convert -f csv` files.

Files are `<prefix>_<kind>.csv`: kernel_trace, hip_api_trace, marker_api_trace, memory_copy_trace,
agent_info (tool output) or regions_trace (rocpd convert). Reading one file also reads its siblings
with the same prefix; reading a directory reads every prefix that has a kernel trace (one per
process). Columns are matched by name, case-insensitively, so ROCm 6.2/6.3 layouts (no Stream_Id,
Private/Group_Segment_Size), the title-case rocpd-convert headers and fully quoted files all work.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from attrib.errors import TraceError
from attrib.trace import Trace

from ._common import (COPY_DIRECTIONS, agent_dict, container, csv_columns, dims, finish, int_col,
                      merge, pick, plain_name, read_csv, require, str_col, strict_times,
                      workgroups)

FORMAT = "rocprofv3-csv"

KINDS = ("kernel_trace", "hip_api_trace", "marker_api_trace", "memory_copy_trace", "agent_info",
         "regions_trace", "hsa_api_trace", "rccl_api_trace", "memory_allocation_trace",
         "scratch_memory_trace", "counter_collection", "counter_collection_trace")
_KIND_RE = re.compile(r"^(?:(.*)_)?(" + "|".join(KINDS) + r")\.csv$", re.IGNORECASE)


def split_name(path: Path) -> tuple[str, str] | None:
    """(prefix, kind) of a rocprofv3 CSV file name, or None."""
    m = _KIND_RE.match(plain_name(path))
    return (m.group(1) or "", m.group(2).lower()) if m else None


def groups(directory: Path) -> dict[str, dict[str, Path]]:
    """{prefix: {kind: path}} for the rocprofv3 CSV files in a directory."""
    out: dict[str, dict[str, Path]] = {}
    for p in sorted(directory.iterdir()):
        parts = split_name(p) if p.is_file() else None
        if parts:
            out.setdefault(parts[0], {})[parts[1]] = p
    return out


def _kernels(df: pl.DataFrame, path: Path, warnings: list[str]) -> pl.DataFrame:
    name = require(df, path, "kernel trace CSV", "kernel_name")
    start = require(df, path, "kernel trace CSV", "start_timestamp")
    end = require(df, path, "kernel trace CSV", "end_timestamp")
    df = strict_times(df, path, [start, end], warnings)
    wg = [int_col(df, f"workgroup_size_{a}") for a in "xyz"]
    grid = [int_col(df, f"grid_size_{a}") for a in "xyz"]
    if pick(df, "dispatch_id") is None:
        warnings.append(f"{path.name}: no Dispatch_Id column; kernels are keyed by row order")
        kid = pl.int_range(pl.len(), dtype=pl.Int64)
    else:
        kid = int_col(df, "dispatch_id")
    out = df.select(
        id=kid, name=pl.col(name), start_ns=int_col(df, start), end=int_col(df, end),
        device=int_col(df, "agent_id"), stream=int_col(df, "stream_id"),
        queue=int_col(df, "queue_id"), correlation=int_col(df, "correlation_id"),
        tid=int_col(df, "thread_id"), kernel_id=int_col(df, "kernel_id"),
        grid=dims(*(workgroups(g, w) for g, w in zip(grid, wg))), block=dims(*wg),
        lds_bytes=int_col(df, "lds_block_size", "group_segment_size"),
        scratch_bytes=int_col(df, "scratch_size", "private_segment_size"),
        registers=int_col(df, "vgpr_count", "arch_vgpr_count"),
        accum_registers=int_col(df, "accum_vgpr_count"), sgprs=int_col(df, "sgpr_count"),
    )
    bad = out.filter(pl.col("start_ns").is_null() | pl.col("end").is_null()).height
    if bad:
        warnings.append(f"{path.name}: {bad} rows without timestamps dropped")
        out = out.filter(pl.col("start_ns").is_not_null() & pl.col("end").is_not_null())
    return out.with_columns(dur_ns=pl.col("end") - pl.col("start_ns")).drop("end").sort("start_ns")


def _api(df: pl.DataFrame, path: Path) -> pl.DataFrame:
    """API/marker rows: name, times, pid/tid, correlation, domain."""
    fn = require(df, path, "API trace CSV", "function")
    start = require(df, path, "API trace CSV", "start_timestamp")
    end = require(df, path, "API trace CSV", "end_timestamp")
    out = df.select(
        name=pl.col(fn), start_ns=int_col(df, start), dur_ns=int_col(df, end) - int_col(df, start),
        pid=int_col(df, "process_id"), tid=int_col(df, "thread_id"),
        correlation=int_col(df, "correlation_id"), domain=str_col(df, "domain").fill_null(""),
    )
    return out.filter(pl.col("start_ns").is_not_null()).sort("start_ns")


def _markers(api: pl.DataFrame) -> pl.DataFrame:
    """ROCTx rows: the Function column holds the message; plain roctx API calls are dropped."""
    return (api.filter(~pl.col("name").str.starts_with("roctx"))
            .with_columns(side=pl.lit("cpu")).drop("correlation", "domain"))


def _copies(df: pl.DataFrame, path: Path) -> pl.DataFrame:
    start = require(df, path, "memory copy trace CSV", "start_timestamp")
    end = require(df, path, "memory copy trace CSV", "end_timestamp")
    direction = str_col(df, "direction").str.replace(r"^MEMORY_COPY_", "")
    return df.select(
        name=str_col(df, "direction"), start_ns=int_col(df, start),
        dur_ns=int_col(df, end) - int_col(df, start), device=int_col(df, "destination_agent_id"),
        stream=int_col(df, "stream_id"), correlation=int_col(df, "correlation_id"),
        bytes=int_col(df, "size", "bytes", "copy_bytes"), kind=pl.lit("memcpy"),
        direction=direction.replace_strict(COPY_DIRECTIONS, default=None, return_dtype=pl.Utf8),
    ).sort("start_ns")


def _devices(df: pl.DataFrame) -> tuple[dict, ...]:
    if "agent_type" in df.columns:
        df = df.filter(pl.col("agent_type").str.to_uppercase() == "GPU")
    out = []
    for row in df.iter_rows(named=True):  # one row per agent
        logical = row.get("logical_node_id")
        out.append(agent_dict(row, id=int(logical) if logical not in (None, "") else None))
    return tuple(out)


def read_group(path: Path, files: dict[str, Path]) -> Trace:
    """One process's files ({kind: path}) into a Trace; `path` names it in errors and Meta."""
    timing = {"kernel_trace", "hip_api_trace", "regions_trace", "marker_api_trace",
              "memory_copy_trace"}
    if not timing & set(files):
        raise TraceError(path, "no timing trace here (need a *_kernel_trace.csv or an API/marker/"
                               "memory-copy trace with the same prefix)")
    warnings: list[str] = []
    tables: dict[str, pl.DataFrame | None] = {}
    if "kernel_trace" in files:
        p = files["kernel_trace"]
        tables["kernels"] = _kernels(read_csv(p, warnings), p, warnings)
    launches, markers = [], []
    for kind in ("hip_api_trace", "regions_trace", "marker_api_trace"):
        if kind not in files:
            continue
        api = _api(read_csv(files[kind], warnings), files[kind])
        if kind == "marker_api_trace":
            markers.append(_markers(api))
            continue
        launches.append(api.filter(pl.col("domain").str.starts_with("HIP")).drop("domain"))
        markers.append(_markers(api.filter(pl.col("domain").str.starts_with("MARKER"))))
    tables["launches"] = pl.concat(launches).sort("start_ns") if launches else None
    tables["markers"] = pl.concat(markers).sort("start_ns") if markers else None
    if "memory_copy_trace" in files:
        p = files["memory_copy_trace"]
        tables["copies"] = _copies(read_csv(p, warnings), p)
    devices: tuple[dict, ...] = ()
    if "agent_info" in files:
        devices = _devices(read_csv(files["agent_info"], warnings))
    else:
        parts = split_name(files.get("kernel_trace") or next(iter(files.values())))
        want = f"{parts[0]}_agent_info.csv" if parts and parts[0] else "agent_info.csv"
        warnings.append(f"no {want} beside the trace (rocprofv3 writes one per process): the "
                        "trace does not record the device it ran on")
    return finish(path, FORMAT, devices=devices, vendor_from="rocprofv3 CSV output",
                  warnings=warnings, runtime={"profiler": "rocprofv3"}, **tables)


def read(path: Path) -> Trace:
    """A rocprofv3 CSV file (with its same-prefix siblings) or a directory of them."""
    if path.is_dir():
        found = groups(path)
        chosen = {k: v for k, v in found.items() if "kernel_trace" in v}
        if not chosen:
            raise TraceError(path, "no *_kernel_trace.csv in this directory")
        traces = [read_group(path, files) for _, files in sorted(chosen.items())]
        ignored = sorted(p.name for k, v in found.items() if k not in chosen for p in v.values())
        names = [files["kernel_trace"].name for _, files in sorted(chosen.items())]
        trace = merge(path, FORMAT, traces, names)
        if ignored:
            trace = trace.with_meta(warnings=trace.meta.warnings + (
                f"ignored (no kernel trace with the same prefix): {', '.join(ignored)}",))
        return trace
    parts = split_name(path)
    if parts is None:
        return read_group(path, {"kernel_trace": path})
    prefix, kind = parts
    siblings = groups(path.parent).get(prefix, {kind: path})
    siblings[kind] = path
    return read_group(path, siblings)


def sniff(path: Path, head: bytes) -> bool:
    """rocprofv3's CSV columns; a rocprofv3 file name (`*_kernel_trace.csv`) is read as such (its
    reader names a missing column)."""
    cols = csv_columns(path, head)
    return bool(("start_timestamp" in cols and cols & {"kernel_name", "function", "direction"})
                or {"node_id", "agent_type"} <= cols or {"counter_name", "dispatch_id"} <= cols
                or (container(path, head) == "csv" and split_name(path)))


def read_folder(folder: Path, files: list[Path]) -> Trace:
    """Every prefix with a kernel trace in the folder (see `read`)."""
    return read(folder)
