"""rocprofv3 rocpd SQLite (`<pid>_results.db`, default output since ROCm 7.0), schema v3.

Reads the un-suffixed views (`rocpd_kernel_dispatch`, `rocpd_info_agent`, `regions`, ...), never the
`<table>_<uuid>` tables. Timestamps are integer ns (CLOCK_BOOTTIME). Kernel key: dispatch_id;
correlation: the event's `stack_id` (internal correlation id; `corr_id` is the external one).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import orjson
import polars as pl

from attrib.errors import TraceError
from attrib.trace import Trace

from ._common import (agent_dict, dims, finish, local_file, opened, parse_int, sqlite_format,
                      workgroups)

if TYPE_CHECKING:
    import sqlite3

FORMAT = "rocpd"

_KERNELS = """
SELECT K.id AS _row, K.dispatch_id AS id, S.display_name AS name, S.kernel_name AS mangled,
       CASE WHEN typeof(K.start) = 'integer' THEN K.start END AS start,
       CASE WHEN typeof(K."end") = 'integer' THEN K."end" END AS "end",
       A.logical_index AS device, A.type_index AS gpu_index, K.stream_id AS stream,
       K.queue_id AS queue, E.stack_id AS correlation, E.correlation_id AS external_id,
       K.tid, K.pid, K.grid_size_x, K.grid_size_y, K.grid_size_z,
       K.workgroup_size_x, K.workgroup_size_y, K.workgroup_size_z,
       K.group_segment_size AS lds_bytes, K.private_segment_size AS scratch_bytes,
       S.arch_vgpr_count AS registers, S.accum_vgpr_count AS accum_registers,
       S.sgpr_count AS sgprs, RS.string AS region {graph}
FROM rocpd_kernel_dispatch K
LEFT JOIN rocpd_info_kernel_symbol S ON S.id = K.kernel_id AND S.guid = K.guid
LEFT JOIN rocpd_info_agent A ON A.id = K.agent_id AND A.guid = K.guid
LEFT JOIN rocpd_event E ON E.id = K.event_id AND E.guid = K.guid
LEFT JOIN rocpd_string RS ON RS.id = K.region_name_id AND RS.guid = K.guid
ORDER BY K.start
"""

_REGIONS = """
SELECT name, json_extract(extdata, '$.message') AS message, start, "end", pid, tid,
       stack_id AS correlation, corr_id AS external_id, category
FROM {view} WHERE category LIKE ?
"""

_COPIES = """
SELECT name, start, "end", dst_agent_log_index AS device, stream_id AS stream,
       stack_id AS correlation, corr_id AS external_id, size AS bytes, src_agent_type,
       dst_agent_type
FROM memory_copies
"""

_DIRECTION = {"CPU>GPU": "HtoD", "GPU>CPU": "DtoH", "GPU>GPU": "DtoD", "CPU>CPU": "HtoH"}


def _objects(con: sqlite3.Connection) -> set[str]:
    query = "SELECT name FROM sqlite_master WHERE type IN ('table','view')"
    return {r[0] for r in con.execute(query)}


_TEXT = {"name", "mangled", "region", "message", "category", "src_agent_type", "dst_agent_type"}
# Columns each query reads: a database without them is named, not failed on mid-query.
_NEEDS = {"rocpd_kernel_dispatch": ("id", "dispatch_id", "kernel_id", "guid", "start", "end",
                                    "agent_id", "event_id", "grid_size_x", "workgroup_size_x"),
          "rocpd_info_kernel_symbol": ("id", "guid", "display_name", "kernel_name"),
          "rocpd_info_agent": ("id", "guid", "logical_index", "type")}


def _query(con: sqlite3.Connection, sql: str, *args) -> pl.DataFrame:
    """Rows as a frame: text columns Utf8, the others Int64 (a value of another type is null)."""
    cur = con.execute(sql, args)
    cols = [d[0] for d in cur.description]
    rows = cur.fetchall()
    df = pl.DataFrame(rows, schema=cols, orient="row", infer_schema_length=None)
    fixes = [pl.col(c).cast(pl.Utf8) if c in _TEXT else parse_int(pl.col(c), t).alias(c)
             for c, t in df.schema.items() if t != (pl.Utf8 if c in _TEXT else pl.Int64)]
    return df.with_columns(fixes) if fixes else df


def _check_columns(path: Path, con: sqlite3.Connection) -> None:
    for view, needed in _NEEDS.items():
        have = {r[1] for r in con.execute(f"PRAGMA table_info({view})")}
        missing = [c for c in needed if c not in have]
        if missing:
            names = ", ".join(repr(c) for c in missing)
            raise TraceError(path, f"rocpd view {view} has no column {names} "
                                   "(renamed, or another rocpd schema)")


def _kernels(con: sqlite3.Connection, warnings: list[str]) -> pl.DataFrame:
    kcols = {r[1] for r in con.execute("PRAGMA table_info(rocpd_kernel_dispatch)")}
    graph = ", K.graph_exec_id AS graph_exec_id" if "graph_exec_id" in kcols else ""
    df = _query(con, _KERNELS.format(graph=graph))
    if df.height == 0:
        return df
    extra = df.height - df["_row"].n_unique()
    # a joined table (symbols, agents, events, strings) repeats an id: one row per dispatch
    if extra:
        warnings.append(f"{extra} kernel rows repeated by duplicate ids in a joined rocpd table; "
                        "dropped")
        df = df.unique("_row", keep="first", maintain_order=True)
    df = df.drop("_row")
    g = [pl.col(f"grid_size_{a}").cast(pl.Int64) for a in "xyz"]
    w = [pl.col(f"workgroup_size_{a}").cast(pl.Int64) for a in "xyz"]
    out = df.with_columns(
        start_ns=pl.col("start"), dur_ns=pl.col("end") - pl.col("start"),
        grid=dims(*(workgroups(a, b) for a, b in zip(g, w))), block=dims(*w),
        name=pl.col("name").fill_null(pl.col("mangled")),
        region=pl.col("region").replace("", None),
    )
    if graph:
        out = out.with_columns(graph=pl.col("graph_exec_id").fill_null(0) > 0)
    return out.drop([c for c in out.columns if c.startswith(("grid_size", "workgroup_size"))]
                    + ["start", "end", "mangled"])


def _regions(con: sqlite3.Connection, objs: set[str], like: str) -> pl.DataFrame | None:
    parts = [_query(con, _REGIONS.format(view=v), like) for v in ("regions", "sample_regions")
             if v in objs]
    parts = [p for p in parts if p.height]
    if not parts:
        return None
    df = pl.concat(parts, how="diagonal_relaxed").sort("start")
    return df.with_columns(start_ns=pl.col("start"), dur_ns=pl.col("end") - pl.col("start")).drop(
        "start", "end")


def _copies(con: sqlite3.Connection, objs: set[str]) -> pl.DataFrame | None:
    if "memory_copies" not in objs:
        return None
    df = _query(con, _COPIES)
    if df.height == 0:
        return None
    direction = pl.concat_str("src_agent_type", pl.lit(">"), "dst_agent_type").replace_strict(
        _DIRECTION, default=None, return_dtype=pl.Utf8)
    return df.with_columns(start_ns=pl.col("start"), dur_ns=pl.col("end") - pl.col("start"),
                           kind=pl.lit("memcpy"), direction=direction).drop(
        "start", "end", "src_agent_type", "dst_agent_type")


def _devices(con: sqlite3.Connection) -> tuple[dict, ...]:
    rows = con.execute(
        "SELECT logical_index, type_index, absolute_index, name, product_name, model_name, "
        "vendor_name, extdata FROM rocpd_info_agent WHERE type = 'GPU' ORDER BY logical_index"
    ).fetchall()
    out = []
    for logical, type_index, absolute, name, product, model, vendor, ext in rows:
        try:
            extra = orjson.loads(ext) if ext else {}
        except (orjson.JSONDecodeError, TypeError):
            extra = {}
        extra = extra if isinstance(extra, dict) else {}
        out.append(agent_dict(extra, id=logical, name=name, product_name=product,
                              model_name=model, vendor_name=vendor, node_id=absolute,
                              logical_node_id=logical, type_index=type_index))
    return tuple(out)


def _top(con: sqlite3.Connection, objs: set[str]) -> dict:
    meta = dict(con.execute("SELECT tag, value FROM rocpd_metadata").fetchall()) \
        if "rocpd_metadata" in objs else {}
    top = {"schema_version": meta.get("schema_version"), "guid": meta.get("guid")}
    if "rocpd_info_process" in objs:
        row = con.execute("SELECT pid, command FROM rocpd_info_process LIMIT 1").fetchone()
        if row:
            top.update(pid=row[0], command=row[1])
    return top


def read(path: Path) -> Trace:
    """One rocpd database (plain or .gz) into the normalized Trace."""
    import sqlite3  # here, not at the top: only a SQLite input needs it (a fast start)

    with local_file(path) as db:
        try:
            with opened(path, db) as con:
                return _read(path, con)
        except sqlite3.DatabaseError as exc:
            raise TraceError(path, f"unreadable rocpd database ({exc})") from None


def _read(path: Path, con: sqlite3.Connection) -> Trace:
    objs = _objects(con)
    if not objs:
        raise TraceError(path, "SQLite database has no tables "
                               "(empty, or not rocprofv3 rocpd output)")
    missing = {"rocpd_kernel_dispatch", "rocpd_info_agent"} - objs
    if missing:
        raise TraceError(path, f"not a rocpd database: no {', '.join(sorted(missing))} view")
    _check_columns(path, con)
    top = _top(con, objs)
    warnings: list[str] = []
    version = top.get("schema_version")
    if version not in (None, "3") and not str(version).startswith("3"):
        warnings.append(f"rocpd schema version {top['schema_version']} (reader written for 3)")
    kernels = _kernels(con, warnings)
    launches = _regions(con, objs, "HIP%")
    if launches is not None:
        launches = launches.drop("message")
    markers = _regions(con, objs, "MARKER%")
    if markers is not None:  # ROCTx text is in extdata.message; other marker API calls are dropped
        markers = (markers.filter(pl.col("message").is_not_null())
                   .with_columns(name=pl.col("message"), side=pl.lit("cpu")).drop("message"))
    return finish(path, FORMAT, devices=_devices(con), vendor_from="rocpd agent table",
                  warnings=warnings, top=top, runtime={"profiler": "rocprofv3"},
                  kernels=kernels, launches=launches, markers=markers, copies=_copies(con, objs))


def sniff(path: Path, head: bytes) -> bool:
    """A SQLite file that is not a rocprof v1 database."""
    return sqlite_format(path, head) == FORMAT
