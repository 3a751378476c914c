"""rocprofv3 JSON output (`-f json`, `<pid>_results.json`, top-level `rocprofiler-sdk-tool`).

`kind`/`operation` are enum integers whose values change across ROCm versions: they are resolved
through the file's own `strings.buffer_records` table. Kernel names come from `kernel_symbols`
(formatted name, as in CSV/rocpd). `grid_size` is in work-items and converted to workgroups.
"""

from __future__ import annotations

from pathlib import Path
import orjson
import polars as pl

from attrib.errors import TraceError
from attrib.trace import Trace

from ._common import agent_dict, clean_kernel_name, finish, merge, read_bytes, workgroups

FORMAT = "rocprofv3-json"
_DIRECTIONS = {"HOST_TO_DEVICE": "HtoD", "DEVICE_TO_HOST": "DtoH", "DEVICE_TO_DEVICE": "DtoD",
               "HOST_TO_HOST": "HtoH"}


def _ops(strings: dict, kind_name: str) -> tuple[int | None, list[str]]:
    """(enum value, operation names) of a buffer-record kind, from the file's strings table."""
    for i, entry in enumerate(strings.get("buffer_records") or ()):
        if entry.get("kind") == kind_name:
            return i, list(entry.get("operations") or ())
    return None, []


def _frame(records: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(records, infer_schema_length=None) if records else pl.DataFrame()


def _field(df: pl.DataFrame, *path: str) -> pl.Expr:
    """Nested struct field by path; a null literal when any level is absent."""
    dtype = df.schema.get(path[0])
    expr = pl.col(path[0])
    for key in path[1:]:
        fields = {f.name: f.dtype for f in dtype.fields} if isinstance(dtype, pl.Struct) else {}
        if key not in fields:
            return pl.lit(None, dtype=pl.Int64)
        expr, dtype = expr.struct.field(key), fields[key]
    return expr if dtype is not None else pl.lit(None, dtype=pl.Int64)


def _kernels(proc: dict, agents: pl.DataFrame) -> pl.DataFrame:
    df = _frame(proc.get("buffer_records", {}).get("kernel_dispatch") or [])
    if df.height == 0:
        return df
    strings = proc.get("strings") or {}
    kind, _ = _ops(strings, "KERNEL_DISPATCH")
    if kind is not None and "kind" in df.columns:
        df = df.filter(pl.col("kind") == kind)
    symbols = pl.DataFrame(
        [(s.get("kernel_id"), s.get("formatted_kernel_name") or s.get("kernel_name"),
          s.get("arch_vgpr_count"), s.get("accum_vgpr_count"), s.get("sgpr_count"))
         for s in proc.get("kernel_symbols") or ()],
        schema={"kernel_id": pl.Int64, "name": pl.Utf8, "registers": pl.Int64,
                "accum_registers": pl.Int64, "sgprs": pl.Int64}, orient="row",
    ).unique("kernel_id", keep="first")
    d = ("dispatch_info",)
    wg = [_field(df, *d, "workgroup_size", a).cast(pl.Int64) for a in "xyz"]
    grid = [_field(df, *d, "grid_size", a).cast(pl.Int64) for a in "xyz"]
    out = df.select(
        id=_field(df, *d, "dispatch_id"), kernel_id=_field(df, *d, "kernel_id"),
        start_ns=pl.col("start_timestamp"), dur_ns=pl.col("end_timestamp") - pl.col("start_timestamp"),
        agent=_field(df, *d, "agent_id", "handle"), queue=_field(df, *d, "queue_id", "handle"),
        stream=_field(df, "stream_id", "handle"), correlation=_field(df, "correlation_id", "internal"),
        external_id=_field(df, "correlation_id", "external"), tid=pl.col("thread_id"),
        grid=pl.concat_list([workgroups(g, w) for g, w in zip(grid, wg)]),
        block=pl.concat_list(wg), lds_bytes=_field(df, *d, "group_segment_size"),
        scratch_bytes=_field(df, *d, "private_segment_size"),
    )
    out = out.join(symbols, on="kernel_id", how="left", maintain_order="left")
    out = out.join(agents, on="agent", how="left", maintain_order="left").drop("agent")
    return out.with_columns(name=clean_kernel_name(pl.col("name"))).sort("start_ns")


def _api(proc: dict, key: str, kind_name: str, **extra: str) -> pl.DataFrame:
    """API-shaped records (hip_api, marker_api) with `name` = the operation's name."""
    df = _frame(proc.get("buffer_records", {}).get(key) or [])
    if df.height == 0:
        return df
    kind, ops = _ops(proc.get("strings") or {}, kind_name)
    ops_df = pl.DataFrame({"operation": range(len(ops)), "name": ops},
                          schema={"operation": pl.Int64, "name": pl.Utf8})
    corr = df.schema.get("correlation_id")
    cexpr = (pl.col("correlation_id").struct.field("internal") if isinstance(corr, pl.Struct)
             else pl.col("correlation_id"))
    if kind is not None and "kind" in df.columns:
        df = df.filter(pl.col("kind") == kind)
    out = df.select(operation=pl.col("operation").cast(pl.Int64), start_ns=pl.col("start_timestamp"),
                    dur_ns=pl.col("end_timestamp") - pl.col("start_timestamp"),
                    tid=_field(df, "thread_id"), correlation=cexpr,
                    **{name: _field(df, src) for name, src in extra.items()})
    return out.join(ops_df, on="operation", how="left", maintain_order="left").sort("start_ns")


def _markers(proc: dict) -> pl.DataFrame | None:
    parts = [_api(proc, "marker_api", k) for k in ("MARKER_CORE_RANGE_API", "MARKER_CORE_API")]
    parts = [p for p in parts if p.height]
    if not parts:
        return None
    messages = pl.DataFrame(
        [(m.get("key"), m.get("value")) for m in (proc.get("strings") or {}).get("marker_api") or ()],
        schema={"correlation": pl.Int64, "message": pl.Utf8}, orient="row")
    df = pl.concat(parts).join(messages, on="correlation", how="left", maintain_order="left")
    return (df.filter(pl.col("message").is_not_null())
            .with_columns(name=pl.col("message"), side=pl.lit("cpu")).drop("message", "operation"))


def _copies(proc: dict) -> pl.DataFrame | None:
    df = _api(proc, "memory_copy", "MEMORY_COPY", bytes="bytes")
    if df.height == 0:
        return None
    direction = pl.col("name").str.replace(r"^MEMORY_COPY_", "")
    return df.with_columns(
        kind=pl.lit("memcpy"),
        direction=direction.replace_strict(_DIRECTIONS, default=None, return_dtype=pl.Utf8),
    ).drop("operation", "tid")


def _agents(proc: dict) -> tuple[pl.DataFrame, tuple[dict, ...]]:
    """(handle -> logical node id table, GPU device dicts)."""
    rows, devices = [], []
    for a in proc.get("agents") or ():
        logical = a.get("logical_node_id", a.get("node_id"))
        rows.append(((a.get("id") or {}).get("handle"), logical))
        if a.get("type") == 2:
            devices.append(agent_dict(a, id=logical, type_index=a.get("logical_node_type_id")))
    table = pl.DataFrame(rows, schema={"agent": pl.Int64, "device": pl.Int64}, orient="row")
    return table, tuple(devices)


def _process(path: Path, proc: dict) -> Trace:
    agents, devices = _agents(proc)
    kernels = _kernels(proc, agents)
    launches = _api(proc, "hip_api", "HIP_RUNTIME_API_EXT")
    meta = proc.get("metadata") or {}
    top = {"pid": meta.get("pid"), "command": meta.get("command"),
           "hostname": (meta.get("node") or {}).get("hostname")}
    return finish(path, FORMAT, devices=devices, vendor_from="rocprofv3 JSON agents", top=top,
                  runtime={"profiler": "rocprofv3"}, kernels=kernels,
                  launches=launches.drop("operation") if launches.height else None,
                  markers=_markers(proc), copies=_copies(proc))


def read(path: Path) -> Trace:
    """A rocprofv3 JSON file (plain or .gz); several processes in one file are stacked."""
    try:
        doc = orjson.loads(read_bytes(path))
    except orjson.JSONDecodeError as exc:
        raise TraceError(path, f"invalid JSON ({exc.msg} at byte {exc.pos}; file cut short?)") from None
    procs = doc.get("rocprofiler-sdk-tool") if isinstance(doc, dict) else None
    if isinstance(procs, dict):
        procs = [procs]
    if not procs:
        raise TraceError(path, "JSON has no 'rocprofiler-sdk-tool' records (not rocprofv3 JSON)")
    return merge(path, FORMAT, [_process(path, p) for p in procs])
