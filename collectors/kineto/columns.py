"""Typed events to table columns: one piece's events routed by category into polars frames."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

import msgspec
import polars as pl

from attrib.trace import interned
from collectors.kineto.decode import Event, Notes

TABLES = ("kernels", "copies", "ops", "frames", "launches", "markers", "flows")
Frames = dict[str, pl.DataFrame]  # a piece's frame per table
Text = Callable[[list[Any]], pl.Series]  # a text column of Python values
# the events of a trace whose text columns are built as they come (`_plain`: each row its own
# bytes, 3x faster than interned); later ones are interned (each distinct value held once)
PLAIN_EVENTS = 1 << 16
_plain: Text = partial(pl.Series, dtype=pl.Utf8)
_TABLE_OF = {"kernel": "kernels", "gpu_memcpy": "copies", "gpu_memset": "copies", "cpu_op": "ops",
             "python_function": "frames", "cuda_runtime": "launches", "cuda_driver": "launches",
             "user_annotation": "markers", "gpu_user_annotation": "markers"}
_DTYPES = {"name": pl.Utf8, "ts": pl.Float64, "dur": pl.Float64, "side": pl.Utf8, "kind": pl.Utf8,
           "kernel_name": pl.Utf8, "graph": pl.Boolean}


def _raw(rs: list[msgspec.Raw], text: Text) -> pl.Series:
    """Raw JSON slices as text (null where absent), a column by `text`. Joined at C speed and
    split as one string (JSON text holds no NUL byte): about 30% faster than a bytes object per
    slice; one slice at a time where that does not give them back one for one."""
    try:
        texts = b"\0".join(rs).decode().split("\0")
    except UnicodeDecodeError:
        texts = []
    if len(texts) != len(rs):
        return pl.Series([bytes(r) or None for r in rs], dtype=pl.Binary).cast(pl.Utf8)
    return text([t or None for t in texts])


def _columns(table: str, evs: list[Event], text: Text, at: list[int]) -> dict[str, Any]:
    """A table's columns of its events (`at`: the kernels' indices in traceEvents)."""
    if table == "flows":  # flow ends (`ac2g` ph f) sit on the GPU event, their id its correlation
        return {"pid": [e.pid for e in evs], "tid": [e.tid for e in evs], "ts": [e.ts for e in evs],
                "correlation": [e.id for e in evs]}  # no duration: only start and id are read
    cols = {"name": text([e.name for e in evs]), "ts": [e.ts for e in evs],
            "dur": [e.dur for e in evs], "pid": [e.pid for e in evs], "tid": [e.tid for e in evs]}
    if table == "frames":
        return cols
    cols["external_id"] = [e.args.external_id for e in evs]
    if table in ("kernels", "copies"):
        cols["device"] = [e.args.device for e in evs]
        cols["stream"] = [e.args.stream for e in evs]
        cols["correlation"] = [e.args.correlation for e in evs]
    if table == "kernels":
        cols["event"] = at
        cols["grid"] = _raw([e.args.grid for e in evs], text)
        cols["block"] = _raw([e.args.block for e in evs], text)
        cols["registers"] = [e.args.registers for e in evs]
        cols["lds_bytes"] = [e.args.shared_mem for e in evs]
        cols["graph"] = [e.args.kind == "Dispatch Task" for e in evs]
    elif table == "copies":
        cols["bytes"] = [e.args.bytes for e in evs]
        cols["kind"] = ["memset" if e.cat == "gpu_memset" else "memcpy" for e in evs]
    elif table == "ops":
        cols["input_dims"] = _raw([e.args.input_dims for e in evs], text)
        cols["input_types"] = _raw([e.args.input_types for e in evs], text)
        cols["concrete_inputs"] = _raw([e.args.concrete for e in evs], text)
        cols["input_strides"] = _raw([e.args.input_strides for e in evs], text)
    elif table == "launches":
        cols["correlation"] = [e.args.correlation for e in evs]
        cols["kernel_name"] = [e.args.kernel for e in evs]
        cols["grid"] = _raw([e.args.grid for e in evs], text)
        cols["block"] = _raw([e.args.block for e in evs], text)
    elif table == "markers":
        cols["side"] = ["gpu" if e.cat == "gpu_user_annotation" else "cpu" for e in evs]
    return cols


def _series(name: str, values: list[Any]) -> pl.Series:
    """A column of its dtype; values of an unexpected type become null (strict=False). The strict
    conversion is tried first: it is faster, holds for the typed fields, and where it succeeds it
    gives what the lenient one gives."""
    dtype = _DTYPES.get(name, pl.Int64)
    try:
        return pl.Series(name, values, dtype=dtype)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        return pl.Series(name, values, dtype=dtype, strict=False)


def _frame(cols: dict[str, Any]) -> pl.DataFrame:
    """The piece's columns, its times (`ts`, `dur`: float us) as integer `start_ns`, `dur_ns` at
    the end (a value that does not fit, 1e300, null: dropped by validation): converted piece by
    piece, so no table-sized float column or transient is ever held."""
    df = pl.DataFrame(
        [v.alias(k) if isinstance(v, pl.Series) else _series(k, v) for k, v in cols.items()])
    us = [c for c in ("ts", "dur") if c in df.columns]
    named = {"ts": "start_ns", "dur": "dur_ns"}
    return df.with_columns(
        (pl.col(c).cast(pl.Float64, strict=False) * 1000.0).round(0).cast(pl.Int64, strict=False)
        .alias(named[c]) for c in us).drop(us)


def frames(evs: list[Event], notes: Notes, base: int, plain: bool | None = None) -> Frames:
    """One piece's events (evs[i] is traceEvents[base + i]) as a frame per table (tables without
    events left out): complete events (`ph` X) with a start time go to their category's table, flow
    ends (`ac2g` f) to `flows`; profiler events without `ph` or `ts` are counted in `notes`. Kernels
    keep their index in traceEvents (`event`: export aligns by it). Text columns: plain for a piece
    that starts in the first PLAIN_EVENTS events, interned after (or as `plain` says)."""
    groups: dict[str, list[Event]] = {t: [] for t in TABLES}
    # bound appends: the loop runs per event
    add: dict[str | None, Callable[[Event], None]] = {
        cat: groups[t].append for cat, t in _TABLE_OF.items()}
    flow = groups["flows"].append
    kernel = add["kernel"]
    at: list[int] = []
    for i, e in enumerate(evs, base):
        a = add.get(e.cat)
        if a is None:
            if e.cat == "ac2g" and e.ph == "f":
                flow(e)
        elif e.ph == "X":
            if e.ts is not None:
                a(e)
                if a is kernel:
                    at.append(i)
            else:
                notes.no_ts += 1
        elif e.ph is None:
            notes.no_ph += 1
    text = _plain if (base < PLAIN_EVENTS if plain is None else plain) else interned
    return {t: _frame(_columns(t, groups[t], text, at)) for t in TABLES if groups[t]}
