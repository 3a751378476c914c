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

import math
import re
import struct
from pathlib import Path
from typing import Iterator

import polars as pl

from attrib.errors import TraceError
from attrib.trace import Trace
from collectors import limits

from ._common import clean_kernel_name, container, finish, total_dims

FORMAT = "pftrace"
_SLICE_BEGIN, _SLICE_END, _INSTANT = 1, 2, 3


class _Truncated(ValueError):
    pass


def _varint(buf: bytes, i: int, end: int) -> tuple[int, int]:
    """(value, next offset) of the base-128 varint at i: at most 10 bytes, below 2**64 (a longer
    one is no protobuf, a ValueError)."""
    value = shift = 0
    start = i
    while True:
        if i >= end:
            raise _Truncated(i)
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if value >> 64:
                raise ValueError(f"varint of more than 64 bits at byte {start}")
            return value, i
        shift += 7
        if shift >= 70:
            raise ValueError(f"varint of more than 64 bits at byte {start}")


def fields(buf: bytes, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) of one message; LEN values are (start, end) offsets."""
    end = len(buf) if end is None else end
    i = start
    while i < end:
        key = buf[i]
        if key < 0x80:  # one-byte keys and values (most of them) without a call
            i += 1
        else:
            key, i = _varint(buf, i, end)
        num, wt = key >> 3, key & 7
        if wt == 0:
            if i < end and buf[i] < 0x80:
                value, i = buf[i], i + 1
            else:
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


# The columns each category's table takes from the slices' debug annotations: column -> the
# annotation names that give it, first present wins (rocprofv3's names, older ones after them).
COLUMNS: dict[str, dict[str, tuple[str, ...]]] = {
    "kernel_dispatch": {
        "correlation": ("corr_id",), "device": ("agent",), "queue": ("queue",),
        "stream": ("stream_ID",), "tid": ("tid",), "kernel_id": ("kernel_id",),
        "lds_bytes": ("group_segment_size", "LDS_Block_Size"),
        "scratch_bytes": ("private_segment_size", "Scratch_Size"),
        "registers": ("VGPR_Count",), "sgprs": ("SGPR_Count",),
        "grid_items": ("grid_size",), "block_items": ("workgroup_size",)},
    "hip_api": {"correlation": ("corr_id",), "tid": ("tid",)},
    "marker_api": {"tid": ("tid",)},
    "memory_copy": {"correlation": ("corr_id",), "bytes": ("copy_bytes",),
                    "stream": ("stream_ID",)},
}


_CHUNK = 50_000  # rows held as Python objects before they become a frame (bounds their memory)


def slices(buf: bytes) -> tuple[dict[str, pl.DataFrame | None], int, int]:
    """The complete slices of each category in COLUMNS as a table (`_frame`; None without
    slices), the number of slices of every category and the packet count."""
    interned: dict[int, dict[int, dict[int, str]]] = {}
    open_: dict[int, list[dict]] = {}
    out: dict[str, list[tuple]] = {cat: [] for cat in COLUMNS}
    done: dict[str, list[pl.DataFrame]] = {cat: [] for cat in COLUMNS}
    n_slices = packets = 0
    for num, wt, span in fields(buf):
        if num != 1 or wt != 2:
            continue
        packets += 1
        ts, seq, ev_span, clock_scoped, cleared = None, 0, None, False, False
        spans = []
        for n, w, v in fields(buf, *span):
            if n == 8 and w == 0:
                ts = v
            elif n == 58 and w == 0 and v >= 64:  # a sequence-scoped (maybe incremental) clock
                clock_scoped = True
            elif n == 10 and w == 0:
                seq = v
            elif (n == 13 and w == 0 and v & 1) or (n == 41 and w == 0 and v):
                cleared = True
            elif n == 12 and w == 2:
                spans.append(v)
            elif n == 11 and w == 2:
                ev_span = v
        if cleared:  # before this packet's own interned data (field 12 precedes flags, 13)
            interned[seq] = {}
        for v in spans:
            _interned(buf, v, interned.setdefault(seq, {}))
        if ev_span is None:
            continue
        ev = _event(buf, ev_span, interned.get(seq, {}))
        ev["ts"] = None if clock_scoped else ts  # only absolute ns are used
        if ev["type"] == _SLICE_BEGIN:
            open_.setdefault(ev["track"], []).append(ev)
            continue
        if ev["type"] == _SLICE_END and open_.get(ev["track"]):
            begin = open_[ev["track"]].pop()
        elif ev["type"] == _INSTANT:
            begin = ev
        else:
            continue
        n_slices += 1
        cols = COLUMNS.get(begin["cat"] or "")
        if cols is not None:
            rows = out[begin["cat"]]
            rows.append(_row(begin, ev["ts"], cols))
            if len(rows) >= _CHUNK:
                done[begin["cat"]].append(_frame(rows, cols))
                rows.clear()
    tables = {}
    for cat, cols in COLUMNS.items():
        parts = done[cat] + ([_frame(out[cat], cols)] if out[cat] else [])
        tables[cat] = (pl.concat(parts).sort("start_ns", nulls_last=True, maintain_order=True)
                       if parts else None)
    return tables, n_slices, packets


def _row(begin: dict, end_ts: int | None, cols: dict[str, tuple[str, ...]]) -> tuple:
    args = begin["args"]
    start = _num(args.get("begin_ns", begin["ts"]))
    end = _num(args.get("end_ns", end_ts))
    values = (_num(next((args[k] for k in keys if k in args), None)) for keys in cols.values())
    return (begin["name"], start, _dur(start, end), *values)


_INT64 = (-(1 << 63), (1 << 63) - 1)
# an integer as text: bare, or after a label ("Agent-1", "GPU 0": the writer's agent index)
_INT_TEXT = re.compile(r"\s*(?:[A-Za-z_]+[- ]?)?(-?\d{1,19})\s*")


def _num(value: object) -> int | None:
    """An annotation value as an Int64: integers in range, integral finite doubles, integer text
    (a label before it allowed); anything else (a uint64 past 2**63-1 included) is None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            return None
        value = int(value)
    elif isinstance(value, str):
        m = _INT_TEXT.fullmatch(value)
        if m is None:
            return None
        value = int(m.group(1))
    if not isinstance(value, int) or not _INT64[0] <= value <= _INT64[1]:
        return None
    return value


def _dur(start: int | None, end: int | None) -> int | None:
    """end - start, None where either is missing or the difference leaves Int64."""
    if start is None or end is None:
        return None
    return _num(end - start)


def _frame(rows: list[tuple], cols: dict[str, tuple[str, ...]]) -> pl.DataFrame:
    """Slice rows (`_row`) -> a table: name, start_ns, dur_ns, then `cols`. A time or value that is
    missing or not an Int64 is null (the reader boundary, collectors.validate, drops such rows
    with a warning)."""
    names = ["name", "start_ns", "dur_ns", *cols]
    schema = {c: (pl.Utf8 if c == "name" else pl.Int64) for c in names}
    return pl.DataFrame(rows, schema=schema, orient="row")


# The pure-Python decoder reads ~3.5-4.5 MB of trace a second and peaks at ~8 MB of memory per MB
# read (its tables included), measured on 2 cores with a rocprofv3-layout trace of a real run
# (tests/test_pftrace.py builds it): past this size a read would take more than ~30 s and ~1 GB
# (the 364 MB trace that ran for minutes towards 3 GB), so it is refused up front.
SIZE_LIMIT = 100_000_000


def _bounded_bytes(path: Path) -> bytes | bytearray:
    """The file's content (decompressed), refused past SIZE_LIMIT: a plain file by its size before
    it is read, a compressed one as soon as its content passes the limit."""
    flow = limits.Inflow(path)
    if flow.kind is None:
        size = limits.check_path(path).st_size
        if size > SIZE_LIMIT:
            raise _too_big(path, size)
        data, _ = limits.read_bytes(path)
        return data
    out = bytearray()
    for part in flow:
        out += part
        if len(out) > SIZE_LIMIT:
            raise _too_big(path, len(out), at_least=True)
    if flow.cut:
        raise TraceError(path, f"{flow.kind} data is truncated (the file was cut short); "
                               "copy it again")
    return out


def _too_big(path: Path, size: int, at_least: bool = False) -> TraceError:
    what = f"{'over ' if at_least else ''}{size / 1e6:.0f} MB"
    return TraceError(path, f"Perfetto trace of {what} is past the {SIZE_LIMIT / 1e6:.0f} MB this "
                            "pure-Python reader decodes in reasonable time and memory; record "
                            "with rocprofv3 --output-format rocpd (or csv) instead")


def read(path: Path) -> Trace:
    buf = _bounded_bytes(path)
    try:
        tables, n_slices, packets = slices(buf)
    except _Truncated as exc:
        raise TraceError(path, f"Perfetto trace is truncated (a record runs past the end at byte "
                               f"{exc.args[0]} of {len(buf)}; file cut short?)") from None
    except ValueError as exc:
        raise TraceError(path, f"not a Perfetto protobuf trace ({exc})") from None
    del buf
    if packets == 0:
        raise TraceError(path, "Perfetto trace has no packets")
    kernels, launches = tables["kernel_dispatch"], tables["hip_api"]
    markers, copies = tables["marker_api"], tables["memory_copy"]
    if kernels is not None:  # products only: total workgroups as [n, 1, 1]
        grid, block = total_dims(pl.col("grid_items"), pl.col("block_items"))
        kernels = kernels.with_row_index("id").with_columns(
            id=pl.col("id").cast(pl.Int64), grid=grid, block=block,
            name=clean_kernel_name(pl.col("name")))
        kernels = kernels.drop("grid_items", "block_items")
    if markers is not None:
        markers = markers.with_columns(side=pl.lit("cpu"))
    if copies is not None:
        copies = copies.with_columns(kind=pl.lit("memcpy"))
    warnings = [] if kernels is not None else ["no kernel_dispatch slices in this Perfetto trace"]
    return finish(path, FORMAT, vendor_from="rocprofv3 pftrace", warnings=warnings,
                  runtime={"profiler": "rocprofv3"}, events=n_slices, kernels=kernels,
                  launches=launches, markers=markers, copies=copies)


def sniff(path: Path, head: bytes) -> bool:
    """By name (`.pftrace`, `.perfetto-trace`), once the content is neither JSON nor SQLite."""
    return container(path, head) == "pftrace"
