"""One piece of the event list (a JSON array) decoded into typed events, bad events salvaged.

The fast path decodes the whole array into small structs holding only the fields attrib reads.
A piece that fails (a string timestamp, an id past 64 bits, an object as category, invalid UTF-8)
is decoded event by event: invalid UTF-8 is replaced (U+FFFD), values of the wrong type or range
become null, an event that still cannot be read is dropped; each is counted in `Notes` with its
first event's index, so the reader says what it changed in one warning per kind.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
from pathlib import Path
from typing import Annotated, Any

import msgspec
from msgspec import field

from attrib.errors import TraceError
from collectors import limits

_NONE = msgspec.Raw(b"")
_Int = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
_RAW_ARGS = ("grid", "block", "input_dims", "input_types", "concrete", "input_strides")
_FIELDS = {"ph": str, "cat": str, "name": str, "ts": float, "dur": float}  # Event's typed ones
_INT_ARGS = ("external_id", "correlation", "device", "stream", "registers", "shared_mem", "bytes")


# gc=False on every event struct: decoded JSON holds no reference cycles, and structs the cyclic
# GC does not track spare it repeated walks over every live event (about 1 s of CPU on 1 M events).
class _Args(msgspec.Struct, frozen=True, gc=False):
    external_id: _Int | None = field(name="External id", default=None)
    correlation: _Int | None = None
    device: _Int | None = None
    stream: _Int | None = None
    grid: msgspec.Raw = _NONE
    block: msgspec.Raw = _NONE
    kind: Any = None
    kernel: Any = None
    registers: _Int | None = field(name="registers per thread", default=None)
    shared_mem: _Int | None = field(name="shared memory", default=None)
    bytes: _Int | str | None = None  # ROCm runtime memcpy calls write it as a string
    input_dims: msgspec.Raw = field(name="Input Dims", default=_NONE)
    input_types: msgspec.Raw = field(name="Input type", default=_NONE)
    concrete: msgspec.Raw = field(name="Concrete Inputs", default=_NONE)
    input_strides: msgspec.Raw = field(name="Input Strides", default=_NONE)


_NO_ARGS = _Args()


class Event(msgspec.Struct, frozen=True, gc=False):
    ph: str | None = None
    cat: str | None = None
    name: str | None = ""
    pid: Any = None
    tid: Any = None
    ts: float | None = None
    dur: float | None = None
    id: Any = None
    args: _Args = _NO_ARGS


# Event's fields, each of any type: an event whose typed decode failed, read field by field
_Loose = msgspec.defstruct(
    "_Loose", [(f.name, Any, f.default) for f in msgspec.structs.fields(Event)], gc=False)

DROPPED = Event(cat=None)  # the place of an event that could not be read: in no table

# what invalid JSON raises: msgspec 0.18 (the declared floor) raises UnicodeDecodeError for
# invalid UTF-8 in a string, later versions msgspec.DecodeError
DECODE_ERRORS = (msgspec.DecodeError, UnicodeDecodeError)
ERRORS = (*DECODE_ERRORS, RecursionError)  # JSON that is not a list of whole events
_EVENTS = msgspec.json.Decoder(list[Event])
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_LOOSE: msgspec.json.Decoder[Any] = msgspec.json.Decoder(_Loose)
_ARG_KEYS = {f.name: f.encode_name for f in msgspec.structs.fields(_Args)}  # field -> JSON key
_LIMIT = 2**63


class Fallback(Exception):
    """The document is not one the stream cuts cleanly; read it whole."""


def trim() -> None:
    """Give the C heap's free pages back to the system (glibc `malloc_trim`; nothing elsewhere). A
    piece's events live in Python's heap and the frames in polars' own allocator, so the pages the
    events leave free are not reused for the tables and stay resident (40 MB per 0.5 GB of JSON)."""
    with contextlib.suppress(OSError, AttributeError, TypeError):
        getattr(ctypes.CDLL(None), "malloc_trim")(0)  # the process's own symbols: libc's


class Notes(msgspec.Struct):
    """What salvaging changed: counts and the first event index of each kind."""

    utf8: int = 0
    dropped: int = 0
    nulled: dict[str, int] = field(default_factory=dict)
    first: dict[str, int] = field(default_factory=dict)
    no_ph: int = 0
    no_ts: int = 0

    def note(self, kind: str, index: int) -> None:
        self.first[kind] = min(self.first.get(kind, index), index)  # pieces come in any order

    def add(self, other: Notes, base: int) -> None:
        """Count in `other`: a piece's notes, event indices from 0 (its first event is `base`)."""
        self.utf8 += other.utf8
        self.dropped += other.dropped
        self.no_ph += other.no_ph
        self.no_ts += other.no_ts
        for name, n in other.nulled.items():
            self.nulled[name] = self.nulled.get(name, 0) + n
        for kind, index in other.first.items():
            self.note(kind, base + index)

    def warnings(self) -> list[str]:
        out = []
        if self.utf8:
            out.append(f"{self.utf8} events hold invalid UTF-8 "
                       f"(first: event {self.first['utf8']}); the bad bytes are shown as U+FFFD")
        if self.nulled:
            what = ", ".join(f"{k} x{n}" for k, n in sorted(self.nulled.items()))
            out.append(f"values of the wrong type or out of range set to null: {what} "
                       f"(first: event {self.first['nulled']})")
        if self.dropped:
            out.append(f"{self.dropped} malformed events dropped "
                       f"(first: event {self.first['dropped']})")
        if self.no_ph:
            out.append(f"{self.no_ph} profiler events without a 'ph' phase field ignored")
        if self.no_ts:
            out.append(f"{self.no_ts} profiler events without a timestamp ('ts') ignored")
        return out


def _clean(value: Any, kind: type, name: str, bad: list[str]) -> Any:
    """`value` where it is None or of its kind (str; float: a finite number; int: an int64, or a
    str for `bytes`), else None with `name` added to `bad`."""
    t = type(value)
    if value is None or (name == "bytes" and t is str):
        return value
    if kind is str:
        ok = t is str
    elif kind is float:
        ok = t in (int, float) and math.isfinite(value)
    else:
        ok = t is int and -_LIMIT <= value < _LIMIT
    if ok:
        return value
    bad.append(name)
    return None


def _loose_event(raw: bytes, index: int, notes: Notes) -> Event:
    """An event whose typed decode failed: each bad field null, counted."""
    ev = _LOOSE.decode(raw)
    bad: list[str] = []
    fields = {name: _clean(getattr(ev, name), kind, name, bad) for name, kind in _FIELDS.items()}
    args = _NO_ARGS
    if isinstance(ev.args, dict):
        got = {n: ev.args.get(k) for n, k in _ARG_KEYS.items()}
        kept = {name: _clean(got[name], int, name, bad) for name in _INT_ARGS}
        raws: dict[str, Any] = {n: _NONE for n in _RAW_ARGS if _ARG_KEYS[n] not in ev.args}
        raws |= {n: msgspec.Raw(msgspec.json.encode(got[n])) for n in _RAW_ARGS if n not in raws}
        args = _Args(kind=got["kind"], kernel=got["kernel"], **kept, **raws)
    for name in bad:
        notes.nulled[name] = notes.nulled.get(name, 0) + 1
    if bad:
        notes.note("nulled", index)
    return Event(pid=ev.pid, tid=ev.tid, id=ev.id, args=args, **fields)


def _one(raw: bytes, index: int, notes: Notes) -> Event:
    """One event of a piece whose typed decode failed (DROPPED where it cannot be read)."""
    try:
        return _EVENTS.decode(b"[" + raw + b"]")[0]
    except msgspec.ValidationError:
        with contextlib.suppress(msgspec.DecodeError, TypeError, ValueError):
            return _loose_event(raw, index, notes)
    except DECODE_ERRORS:
        fixed = raw.decode("utf-8", "replace").encode()
        if fixed != raw:
            notes.utf8 += 1
            notes.note("utf8", index)
            return _one(fixed, index, notes)
    notes.dropped += 1
    notes.note("dropped", index)
    return DROPPED


def json_array(raws: list[msgspec.Raw]) -> bytes:
    """The slices as one JSON array, copied once (the brackets ride on the first and last slice)."""
    if len(raws) == 1:
        return b"[" + bytes(raws[0]) + b"]"
    return b",".join([b"[" + bytes(raws[0]), *raws[1:-1], bytes(raws[-1]) + b"]"])


def decode(path: Path, text: bytes | bytearray | memoryview, base: int,
           notes: Notes) -> list[Event]:
    """The events of a JSON array (its i-th is event base + i, and so is the i-th returned), an
    event longer than limits.EVENT_LIMIT a TraceError; bad ones salvaged, one that cannot be read
    DROPPED. ERRORS where `text` is not an array of whole JSON values (a cut in the wrong place)."""
    try:
        evs: list[Event] | None = _EVENTS.decode(text)
    except ERRORS:
        evs = None
    if evs is not None and len(text) <= limits.EVENT_LIMIT:
        return evs
    raws = _RAWS.decode(text)  # the array's structure alone: about 40% of a typed decode
    longest = max(map(len, raws), default=0)
    if longest > limits.EVENT_LIMIT:
        at = base + next(i for i, r in enumerate(raws) if len(r) == longest)
        raise TraceError(path, f"event {at} is {longest / 1e6:.0f} MB long "
                         f"(limit {limits.EVENT_LIMIT >> 20} MB): not a profiler event")
    return evs if evs is not None else [_one(bytes(r), base + i, notes) for i, r in enumerate(raws)]
