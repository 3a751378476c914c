"""rocprofv3 Perfetto output (`-f pftrace`, `<pid>_results.pftrace`), decoded in pure Python.

A minimal protobuf walker over Trace.packet: TrackEvent slices (begin/end per track), interned
names/categories/annotation names (reset per sequence when its incremental state is cleared) and
debug annotations. rocprofv3 writes absolute `begin_ns`/`end_ns` annotations on every slice, which
are used as the times; packet timestamps are the fallback (assumed absolute ns). Categories follow
the writer: kernel_dispatch -> kernels, hip_api -> launches, marker_api -> markers,
memory_copy -> copies. Note: rocprofv3 may move overlapping kernel ends to a midpoint in this
format, so rocpd/JSON/CSV are preferred for kernel timing. No dispatch id is recorded: kernel ids
are row numbers in time order.

Field numbers (perfetto_trace.proto): TracePacket timestamp 8, sequence id 10, track_event 11,
interned_data 12, sequence_flags 13, incremental_state_cleared 41, track_descriptor 60.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Iterator

import polars as pl

from attrib.errors import TraceError
from attrib.trace import Trace

from ._common import container, finish, read_bytes, total_dims

FORMAT = "pftrace"
_SLICE_BEGIN, _SLICE_END, _INSTANT = 1, 2, 3


class _Truncated(ValueError):
    pass


def _varint(buf: bytes, i: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= end:
            raise _Truncated(i)
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7
        if shift > 70:
            raise ValueError(f"bad varint at byte {i}")


def fields(buf: bytes, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) of one message; LEN values are (start, end) offsets."""
    end = len(buf) if end is None else end
    i = start
    while i < end:
        key, i = _varint(buf, i, end)
        num, wt = key >> 3, key & 7
        if wt == 0:
            value, i = _varint(buf, i, end)
        elif wt == 1:
            if i + 8 > end:
                raise _Truncated(i)
            value, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(buf, i, end)
            if i + n > end:
                raise _Truncated(i)
            value, i = (i, i + n), i + n
        elif wt == 5:
            if i + 4 > end:
                raise _Truncated(i)
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wt} at byte {i} is not protobuf")
        if num == 0:
            raise ValueError(f"field number 0 at byte {i}")
        yield num, wt, value


def _text(buf: bytes, span) -> str:
    return buf[span[0]:span[1]].decode("utf-8", "replace")


def _interned(buf: bytes, span, tables: dict[int, dict[int, str]]) -> None:
    for num, wt, val in fields(buf, *span):
        if wt == 2 and num in (1, 2, 3, 29):  # categories, event names, annotation names, strings
            iid, name = 0, ""
            for n2, w2, v2 in fields(buf, *val):
                if n2 == 1 and w2 == 0:
                    iid = v2
                elif n2 == 2 and w2 == 2:
                    name = _text(buf, v2)
            tables.setdefault(num, {})[iid] = name


def _annotation(buf: bytes, span, tables) -> tuple[str, object]:
    name, value = "", None
    for num, wt, val in fields(buf, *span):
        if num == 1 and wt == 0:
            name = tables.get(3, {}).get(val, "")
        elif num == 10 and wt == 2:
            name = _text(buf, val)
        elif num in (2, 3) and wt == 0:
            value = val
        elif num == 4 and wt == 0:
            value = val - (1 << 64) if val >= 1 << 63 else val
        elif num == 5 and wt == 1:
            value = struct.unpack("<d", val)[0]
        elif num == 6 and wt == 2:
            value = _text(buf, val)
        elif num == 17 and wt == 0:
            value = tables.get(29, {}).get(val)
    return name, value


def _event(buf: bytes, span, tables) -> dict:
    ev: dict = {"type": None, "track": 0, "name": None, "cat": None, "args": {}}
    for num, wt, val in fields(buf, *span):
        if num == 9 and wt == 0:
            ev["type"] = val
        elif num == 11 and wt == 0:
            ev["track"] = val
        elif num == 10 and wt == 0:
            ev["name"] = tables.get(2, {}).get(val)
        elif num == 23 and wt == 2:
            ev["name"] = _text(buf, val)
        elif num == 3 and wt == 0:
            ev["cat"] = tables.get(1, {}).get(val)
        elif num == 3 and wt == 2:  # packed category iids
            iid, _ = _varint(buf, val[0], val[1])
            ev["cat"] = tables.get(1, {}).get(iid)
        elif num == 22 and wt == 2:
            ev["cat"] = _text(buf, val)
        elif num == 4 and wt == 2:
            k, v = _annotation(buf, val, tables)
            ev["args"][k] = v
    return ev


def slices(buf: bytes) -> tuple[list[dict], int]:
    """All complete slices (name, cat, track, start_ns, end_ns, args) and the packet count."""
    interned: dict[int, dict[int, dict[int, str]]] = {}
    open_: dict[int, list[dict]] = {}
    out: list[dict] = []
    packets = 0
    for num, wt, span in fields(buf):
        if num != 1 or wt != 2:
            continue
        packets += 1
        ts, seq, ev_span = None, 0, None
        for n, w, v in fields(buf, *span):
            if n == 8 and w == 0:
                ts = v
            elif n == 10 and w == 0:
                seq = v
            elif (n == 13 and w == 0 and v & 1) or (n == 41 and w == 0 and v):
                interned[seq] = {}
            elif n == 12 and w == 2:
                _interned(buf, v, interned.setdefault(seq, {}))
            elif n == 11 and w == 2:
                ev_span = v
        if ev_span is None:
            continue
        ev = _event(buf, ev_span, interned.get(seq, {}))
        ev["ts"] = ts
        if ev["type"] == _SLICE_BEGIN:
            open_.setdefault(ev["track"], []).append(ev)
        elif ev["type"] == _SLICE_END and open_.get(ev["track"]):
            begin = open_[ev["track"]].pop()
            out.append(_slice(begin, ts))
        elif ev["type"] == _INSTANT:
            out.append(_slice(ev, ts))
    return out, packets


def _slice(begin: dict, end_ts: int | None) -> dict:
    args = begin["args"]
    start = args.get("begin_ns", begin["ts"])
    end = args.get("end_ns", end_ts)
    return {"name": begin["name"], "cat": begin["cat"], "track": begin["track"],
            "start_ns": start, "end_ns": end, "args": args}


def _num(value) -> int | None:
    m = re.search(r"-?\d+", str(value)) if value is not None else None
    return int(m.group()) if m else None


def _table(rows: list[dict], cols: dict[str, str]) -> pl.DataFrame | None:
    """Slice rows -> table: fixed columns plus annotation columns renamed by `cols`."""
    if not rows:
        return None
    data = {
        "name": [r["name"] for r in rows],
        "start_ns": [_num(r["start_ns"]) for r in rows],
        "dur_ns": [(_num(r["end_ns"]) or 0) - (_num(r["start_ns"]) or 0) for r in rows],
    }
    for key, col in cols.items():
        data[col] = [_num(r["args"].get(key)) for r in rows]
    schema = {c: (pl.Utf8 if c == "name" else pl.Int64) for c in data}
    return pl.DataFrame(data, schema=schema).sort("start_ns")


def read(path: Path) -> Trace:
    buf = read_bytes(path)
    try:
        rows, packets = slices(buf)
    except _Truncated as exc:
        raise TraceError(path, f"Perfetto trace is truncated (a record runs past the end at byte "
                               f"{exc.args[0]} of {len(buf)}; file cut short?)") from None
    except ValueError as exc:
        raise TraceError(path, f"not a Perfetto protobuf trace ({exc})") from None
    if packets == 0:
        raise TraceError(path, "Perfetto trace has no packets")
    by_cat: dict[str, list[dict]] = {}
    for r in rows:
        by_cat.setdefault(r["cat"] or "", []).append(r)
    kernels = _table(by_cat.get("kernel_dispatch", []), {
        "corr_id": "correlation", "agent": "device", "queue": "queue", "stream_ID": "stream",
        "tid": "tid", "kernel_id": "kernel_id", "LDS_Block_Size": "lds_bytes",
        "Scratch_Size": "scratch_bytes", "VGPR_Count": "registers", "SGPR_Count": "sgprs",
        "grid_size": "grid_items", "workgroup_size": "block_items"})
    if kernels is not None:  # products only: total workgroups as [n, 1, 1]
        grid, block = total_dims(pl.col("grid_items"), pl.col("block_items"))
        kernels = kernels.with_row_index("id").with_columns(
            id=pl.col("id").cast(pl.Int64), grid=grid, block=block)
        kernels = kernels.drop("grid_items", "block_items")
    launches = _table(by_cat.get("hip_api", []), {"corr_id": "correlation", "tid": "tid"})
    markers = _table(by_cat.get("marker_api", []), {"tid": "tid"})
    if markers is not None:
        markers = markers.with_columns(side=pl.lit("cpu"))
    copies = _table(by_cat.get("memory_copy", []), {"corr_id": "correlation",
                                                    "copy_bytes": "bytes", "stream_ID": "stream"})
    if copies is not None:
        copies = copies.with_columns(kind=pl.lit("memcpy"))
    warnings = [] if kernels is not None else ["no kernel_dispatch slices in this Perfetto trace"]
    return finish(path, FORMAT, vendor_from="rocprofv3 pftrace", warnings=warnings,
                  runtime={"profiler": "rocprofv3"}, events=len(rows), kernels=kernels,
                  launches=launches, markers=markers, copies=copies)


def sniff(path: Path, head: bytes) -> bool:
    """By name (`.pftrace`, `.perfetto-trace`), once the content is neither JSON nor SQLite."""
    return container(path, head) == "pftrace"
