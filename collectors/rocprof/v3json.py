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

from ._common import (COPY_DIRECTIONS, agent_dict, clean_kernel_name, container, finish, merge,
                      parse_int, read_bytes, workgroups)

FORMAT = "rocprofv3-json"


def _dicts(value) -> list[dict]:
    """The dict entries of a list (anything else: none)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _sub(d: dict, key: str) -> dict:
    value = d.get(key)
    return value if isinstance(value, dict) else {}


def _ops(strings: dict, kind_name: str) -> tuple[int | None, list[str]]:
    """(enum value, operation names) of a buffer-record kind, from the file's strings table."""
    for i, entry in enumerate(_dicts(strings.get("buffer_records"))):
        if entry.get("kind") == kind_name:
            ops = entry.get("operations")
            return i, [str(o) for o in ops] if isinstance(ops, list) else []
    return None, []


def _records(path: Path, proc: dict, key: str) -> pl.DataFrame:
    """buffer_records[key] as a frame; a value of the wrong shape is a TraceError naming it."""
    records = _sub(proc, "buffer_records").get(key)
    if records is None:
        return pl.DataFrame()
    if not isinstance(records, list):
        raise TraceError(path, f"buffer_records.{key} is a JSON {type(records).__name__}, "
                               "expected a list of records")
    records = _dicts(records)
    if not records:
        return pl.DataFrame()
    try:
        return pl.DataFrame(records, infer_schema_length=None)
    except (pl.exceptions.PolarsError, TypeError, ValueError, OverflowError) as exc:
        raise TraceError(path, f"buffer_records.{key}: records of mixed shapes "
                               f"({str(exc).splitlines()[0][:120]})") from None


def _field(df: pl.DataFrame, *path: str) -> pl.Expr:
    """Nested struct field by path, as Int64 (see parse_int); a null literal when any level is
    absent."""
    dtype = df.schema.get(path[0])
    if dtype is None:
        return pl.lit(None, dtype=pl.Int64)
    expr = pl.col(path[0])
    for key in path[1:]:
        fields = {f.name: f.dtype for f in dtype.fields} if isinstance(dtype, pl.Struct) else {}
        if key not in fields:
            return pl.lit(None, dtype=pl.Int64)
        expr, dtype = expr.struct.field(key), fields[key]
    return parse_int(expr, dtype)


def _of_kind(df: pl.DataFrame, kind: int | None) -> pl.DataFrame:
    if kind is None or "kind" not in df.columns:
        return df
    return df.filter(_field(df, "kind") == kind)


def _times(df: pl.DataFrame) -> dict[str, pl.Expr]:
    start, end = _field(df, "start_timestamp"), _field(df, "end_timestamp")
    return {"start_ns": start, "dur_ns": end - start}


def _kernels(path: Path, proc: dict, agents: pl.DataFrame) -> pl.DataFrame:
    df = _records(path, proc, "kernel_dispatch")
    if df.height == 0:
        return df
    kind, _ = _ops(_sub(proc, "strings"), "KERNEL_DISPATCH")
    df = _of_kind(df, kind)
    symbols = pl.DataFrame(
        [(s.get("kernel_id"), s.get("formatted_kernel_name") or s.get("kernel_name"),
          s.get("arch_vgpr_count"), s.get("accum_vgpr_count"), s.get("sgpr_count"))
         for s in _dicts(proc.get("kernel_symbols"))],
        schema={"kernel_id": pl.Int64, "name": pl.Utf8, "registers": pl.Int64,
                "accum_registers": pl.Int64, "sgprs": pl.Int64}, orient="row", strict=False,
    ).unique("kernel_id", keep="first")
    d = ("dispatch_info",)
    wg = [_field(df, *d, "workgroup_size", a) for a in "xyz"]
    grid = [_field(df, *d, "grid_size", a) for a in "xyz"]
    out = df.select(
        id=_field(df, *d, "dispatch_id"), kernel_id=_field(df, *d, "kernel_id"), **_times(df),
        agent=_field(df, *d, "agent_id", "handle"), queue=_field(df, *d, "queue_id", "handle"),
        stream=_field(df, "stream_id", "handle"),
        correlation=_field(df, "correlation_id", "internal"),
        external_id=_field(df, "correlation_id", "external"), tid=_field(df, "thread_id"),
        grid=pl.concat_list([workgroups(g, w) for g, w in zip(grid, wg)]),
        block=pl.concat_list(wg), lds_bytes=_field(df, *d, "group_segment_size"),
        scratch_bytes=_field(df, *d, "private_segment_size"),
    )
    out = out.join(symbols, on="kernel_id", how="left", maintain_order="left")
    out = out.join(agents, on="agent", how="left", maintain_order="left").drop("agent")
    return out.with_columns(name=clean_kernel_name(pl.col("name"))).sort("start_ns")


def _api(path: Path, proc: dict, key: str, kind_name: str, **extra: str) -> pl.DataFrame:
    """API-shaped records (hip_api, marker_api) with `name` = the operation's name."""
    df = _records(path, proc, key)
    if df.height == 0:
        return df
    kind, ops = _ops(_sub(proc, "strings"), kind_name)
    ops_df = pl.DataFrame({"operation": range(len(ops)), "name": ops},
                          schema={"operation": pl.Int64, "name": pl.Utf8})
    corr = df.schema.get("correlation_id")
    internal = ("internal",) if isinstance(corr, pl.Struct) else ()
    cexpr = _field(df, "correlation_id", *internal)
    out = _of_kind(df, kind).select(operation=_field(df, "operation"), **_times(df),
                                    tid=_field(df, "thread_id"), correlation=cexpr,
                                    **{name: _field(df, src) for name, src in extra.items()})
    return out.join(ops_df, on="operation", how="left", maintain_order="left").sort("start_ns")


def _markers(path: Path, proc: dict) -> pl.DataFrame | None:
    kinds = ("MARKER_CORE_RANGE_API", "MARKER_CORE_API")
    parts = [_api(path, proc, "marker_api", k) for k in kinds]
    parts = [p for p in parts if p.height]
    if not parts:
        return None
    messages = pl.DataFrame(
        [(m.get("key"), m.get("value")) for m in _dicts(_sub(proc, "strings").get("marker_api"))],
        schema={"correlation": pl.Int64, "message": pl.Utf8}, orient="row", strict=False,
    ).unique("correlation", keep="first")
    df = pl.concat(parts, how="diagonal_relaxed")
    df = df.join(messages, on="correlation", how="left", maintain_order="left")
    return (df.filter(pl.col("message").is_not_null())
            .with_columns(name=pl.col("message"), side=pl.lit("cpu")).drop("message", "operation"))


def _copies(path: Path, proc: dict) -> pl.DataFrame | None:
    df = _api(path, proc, "memory_copy", "MEMORY_COPY", bytes="bytes")
    if df.height == 0:
        return None
    direction = pl.col("name").str.replace(r"^MEMORY_COPY_", "")
    return df.with_columns(
        kind=pl.lit("memcpy"),
        direction=direction.replace_strict(COPY_DIRECTIONS, default=None, return_dtype=pl.Utf8),
    ).drop("operation", "tid")


def _agents(proc: dict) -> tuple[pl.DataFrame, tuple[dict, ...]]:
    """(handle -> logical node id table, one row per handle; GPU device dicts)."""
    rows, devices = [], []
    for a in _dicts(proc.get("agents")):
        logical = a.get("logical_node_id", a.get("node_id"))
        rows.append((_sub(a, "id").get("handle"), logical))
        if a.get("type") == 2:
            devices.append(agent_dict(a, id=logical, type_index=a.get("logical_node_type_id")))
    table = pl.DataFrame(rows, schema={"agent": pl.Int64, "device": pl.Int64}, orient="row",
                         strict=False)
    return table.unique("agent", keep="first"), tuple(devices)


def _process(path: Path, proc: dict) -> Trace:
    agents, devices = _agents(proc)
    kernels = _kernels(path, proc, agents)
    launches = _api(path, proc, "hip_api", "HIP_RUNTIME_API_EXT")
    meta = _sub(proc, "metadata")
    top = {"pid": meta.get("pid"), "command": meta.get("command"),
           "hostname": _sub(meta, "node").get("hostname")}
    warnings = ([] if proc.get("kernel_symbols")
                else ["no kernel_symbols table: kernel names unknown"])
    return finish(path, FORMAT, devices=devices, vendor_from="rocprofv3 JSON agents", top=top,
                  runtime={"profiler": "rocprofv3"}, kernels=kernels, warnings=warnings,
                  launches=launches.drop("operation") if launches.height else None,
                  markers=_markers(path, proc), copies=_copies(path, proc))


def _invalid(data: bytes, exc: orjson.JSONDecodeError) -> str:
    """What is wrong where orjson stopped: a NaN/Infinity literal, the end of the data, or the
    error."""
    at = data[exc.pos:exc.pos + 9]
    literal = next((w for w in ("NaN", "-Infinity", "Infinity") if at.startswith(w.encode())), None)
    if literal:
        return (f"invalid JSON: a {literal} literal at byte {exc.pos} "
                f"(JSON has no {literal}; the writer emitted a bare float)")
    if not data[exc.pos:].strip():
        return f"invalid JSON: it ends at byte {exc.pos} inside a value (file cut short?)"
    return f"invalid JSON ({exc.msg} at byte {exc.pos})"


def read(path: Path) -> Trace:
    """A rocprofv3 JSON file (plain or .gz); several processes in one file are stacked."""
    data = read_bytes(path)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TraceError(path, _invalid(data, exc)) from None
    procs = doc.get("rocprofiler-sdk-tool") if isinstance(doc, dict) else None
    if isinstance(procs, dict):
        procs = [procs]
    if not procs:
        raise TraceError(path, "JSON has no 'rocprofiler-sdk-tool' records (not rocprofv3 JSON)")
    if not isinstance(procs, list) or not all(isinstance(p, dict) for p in procs):
        what = type(procs).__name__ if not isinstance(procs, list) else "list holding non-objects"
        raise TraceError(path, f"'rocprofiler-sdk-tool' is a JSON {what}, "
                               "expected a list of process records")
    return merge(path, FORMAT, [_process(path, p) for p in procs])


def sniff(path: Path, head: bytes) -> bool:
    return container(path, head) == "json" and b'"rocprofiler-sdk-tool"' in head
