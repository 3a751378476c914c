"""rocprofv3 Perfetto output (collectors/rocprof/pftrace.py) on a real run.

No pftrace of a real run is among the fixtures; the REAL rocpd database of the gfx1201 llama.cpp run
holds every record rocprofv3's Perfetto writer (rocprofiler-sdk source/lib/output/generatePerfetto.cpp)
draws from: its kernel dispatches (and HIP API calls and ROCTx markers, none in this run) are written
here with the official Perfetto protos (the `perfetto` package's perfetto_trace_pb2) as that writer
lays them out: one trusted packet sequence, a TrackDescriptor per stream track ("COMPUTE AGENT [1]
STREAM [0] (GPU)"), and per dispatch a TYPE_SLICE_BEGIN on its track at the start (interned category
"kernel_dispatch", interned event name: the demangled symbol name, `.kd` clone suffix included;
debug annotations with interned names begin_ns, end_ns, delta_ns, kind, agent ("Agent-1"), corr_id,
queue, tid, kernel_id, private_segment_size, group_segment_size, workgroup_size, grid_size; a flow id)
and a TYPE_SLICE_END on the same track at the end. The hostile variants are derived from that trace.
"""

from __future__ import annotations

import gzip
import sqlite3
import subprocess
import sys
import zlib
from pathlib import Path

import polars as pl
import pytest

from attrib.errors import TraceError
from collectors.rocprof import pftrace, rocpd

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

ROCPD = Path(__file__).parent / "fixtures/rocprof/gfx1201_llamacpp_rocpd_rocm7.2/32432_results.db.gz"
ATTRIB = [sys.executable, "-m", "attrib.cli"]

_DISPATCHES = """
SELECT K.start, K."end", S.kernel_name, S.display_name, A.type, A.absolute_index, K.queue_id,
       K.stream_id, K.tid, K.kernel_id, E.stack_id, K.private_segment_size, K.group_segment_size,
       K.workgroup_size_x * K.workgroup_size_y * K.workgroup_size_z,
       K.grid_size_x * K.grid_size_y * K.grid_size_z
FROM rocpd_kernel_dispatch K
JOIN rocpd_info_kernel_symbol S ON S.id = K.kernel_id AND S.guid = K.guid
JOIN rocpd_info_agent A ON A.id = K.agent_id AND A.guid = K.guid
LEFT JOIN rocpd_event E ON E.id = K.event_id AND E.guid = K.guid
"""
_REGIONS = """SELECT category, name, json_extract(extdata, '$.message'), start, "end", tid, stack_id
FROM regions WHERE category LIKE 'HIP%' OR category LIKE 'MARKER%'"""


def _run_records(tmp: Path) -> tuple[list[tuple], list[tuple]]:
    db = tmp / "run.db"
    db.write_bytes(gzip.decompress(ROCPD.read_bytes()))
    con = sqlite3.connect(db)
    try:
        return con.execute(_DISPATCHES).fetchall(), con.execute(_REGIONS).fetchall()
    finally:
        con.close()


def _track_uuid(name: str) -> int:
    return zlib.crc32(name.encode()) | 1 << 40  # the writer hashes the track's name


def _demangled(kernel_name: str, display_name: str) -> str:
    """cxx_demangle of the symbol as the writer calls it: `_Z...kd` -> `<demangled> [clone .kd]`;
    a name that is not mangled stays as it is (`__amd_rocclr_fillBufferAligned.kd`)."""
    return f"{display_name} [clone .kd]" if kernel_name.startswith("_Z") else kernel_name


class _Writer:
    """TracePackets of one trusted sequence with the Perfetto SDK's interning."""

    SEQ = 1

    def __init__(self) -> None:
        self.trace = pb.Trace()
        self.iids: dict[str, dict[str, int]] = {"cat": {}, "name": {}, "ann": {}}
        self.first = True

    def _packet(self, ts: int | None = None):
        p = self.trace.packet.add()
        p.trusted_packet_sequence_id = self.SEQ
        if ts is None:  # a track descriptor
            return p
        p.timestamp = ts
        if self.first:  # the sequence's first event: its interned data starts afresh here
            p.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            self.first = False
        else:
            p.sequence_flags = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        return p

    def _iid(self, p, kind: str, text: str) -> int:
        table = self.iids[kind]
        if text not in table:
            table[text] = len(table) + 1
            entry = {"cat": p.interned_data.event_categories, "name": p.interned_data.event_names,
                     "ann": p.interned_data.debug_annotation_names}[kind].add()
            entry.iid, entry.name = table[text], text
        return table[text]

    def track(self, name: str) -> int:
        p = self._packet()
        p.track_descriptor.uuid = _track_uuid(name)
        p.track_descriptor.name = name
        return p.track_descriptor.uuid

    def slice(self, cat: str, name: str, track: int, start: int, end: int, corr: int,
              args: list[tuple[str, object]]) -> None:
        p = self._packet(start)
        ev = p.track_event
        ev.type = pb.TrackEvent.TYPE_SLICE_BEGIN
        ev.track_uuid = track
        ev.category_iids.append(self._iid(p, "cat", cat))
        ev.name_iid = self._iid(p, "name", name)
        ev.flow_ids.append(corr)
        for key, value in args:
            a = ev.debug_annotations.add()
            a.name_iid = self._iid(p, "ann", key)
            if isinstance(value, str):
                a.string_value = value
            elif key == "kind":  # an enum: int
                a.int_value = value
            else:
                a.uint_value = value
        q = self._packet(end)
        q.track_event.type = pb.TrackEvent.TYPE_SLICE_END
        q.track_event.track_uuid = track
        q.track_event.category_iids.append(self._iid(q, "cat", cat))


def perfetto_trace(tmp: Path, repeat: int = 1) -> bytes:
    """The run as rocprofv3 `--output-format pftrace` lays it out; `repeat` > 1 appends copies of
    the run shifted past its end (a longer run, for the size measurements)."""
    dispatches, regions = _run_records(tmp)
    w = _Writer()
    host = w.track("THREAD 0 (main)")
    span = max(d[1] for d in dispatches) - min(d[0] for d in dispatches) + 1_000_000
    tracks: dict[tuple, int] = {}
    for r in range(repeat):
        shift = r * span
        for cat, name, message, start, end, tid, corr in regions:
            cat = "hip_api" if cat.startswith("HIP") else "marker_api"
            w.slice(cat, message or name, host, start + shift, end + shift, corr,
                    [("begin_ns", start + shift), ("end_ns", end + shift),
                     ("delta_ns", end - start), ("tid", tid), ("corr_id", corr)])
        # the writer bins dispatches per agent and queue, sorted by start
        for d in sorted(dispatches, key=lambda d: (d[5], d[6], d[0])):
            (start, end, kname, display, atype, aindex, queue, stream, tid, kid, corr,
             scratch, lds, wg, grid) = d
            key = (aindex, stream)
            if key not in tracks:
                tracks[key] = w.track(f"COMPUTE AGENT [{aindex}] STREAM [{stream}] ({atype})")
            start, end = start + shift, end + shift
            w.slice("kernel_dispatch", _demangled(kname, display), tracks[key], start, end,
                    corr + r * 1_000_000,
                    [("begin_ns", start), ("end_ns", end), ("delta_ns", end - start),
                     ("kind", 8), ("agent", f"Agent-{aindex}"),
                     ("corr_id", corr + r * 1_000_000), ("queue", queue), ("tid", tid),
                     ("kernel_id", kid), ("private_segment_size", scratch),
                     ("group_segment_size", lds), ("workgroup_size", wg), ("grid_size", grid)])
    return w.trace.SerializeToString()


@pytest.fixture(scope="module")
def trace_bytes(tmp_path_factory) -> bytes:
    return perfetto_trace(tmp_path_factory.mktemp("pftrace"))


def _write(tmp_path: Path, data: bytes, name: str = "32432_results.pftrace") -> Path:
    out = tmp_path / name
    out.write_bytes(data)
    return out


def _kernels(t) -> pl.DataFrame:
    return t.kernels.select("name", "start_ns", "dur_ns").sort("start_ns")


def test_same_kernels_as_rocpd(trace_bytes, tmp_path):
    t = pftrace.read(_write(tmp_path, trace_bytes))
    ref = rocpd.read(ROCPD)
    assert t.kernels.height == ref.kernels.height == 5687
    assert _kernels(t).equals(_kernels(ref))
    assert t.meta.format == "pftrace" and t.meta.warnings == ()
    # the annotations the writer records: agent "Agent-1" is device 1 (not -1), the queue handle,
    # group/private segment sizes, workgroups from the x*y*z products
    k = t.kernels.sort("start_ns")
    r = ref.kernels.sort("start_ns")
    assert k["device"].to_list() == r["device"].to_list() == [1] * 5687
    assert k["lds_bytes"].to_list() == r["lds_bytes"].to_list()
    assert k["scratch_bytes"].to_list() == r["scratch_bytes"].to_list()
    assert k["correlation"].to_list() == r["correlation"].to_list()
    assert [g[0] for g in k["grid"].to_list()] == [
        g[0] * g[1] * g[2] for g in r["grid"].to_list()]


def test_analyze_gives_the_same_kernel_time(trace_bytes, tmp_path):
    out = _write(tmp_path, trace_bytes)
    got = subprocess.run([*ATTRIB, "analyze", str(out), "--format", "json"], capture_output=True,
                         text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    ref = rocpd.read(ROCPD)
    total = int(ref.kernels["dur_ns"].sum())
    assert str(total) in got.stdout or f"{total / 1e6:.3f}" in got.stdout


# --------------------------------------------------------------------------------------------
# hostile variants, each derived from the trace above

def _packets(data: bytes):
    t = pb.Trace()
    t.ParseFromString(data)
    return t


def _kernel_begin(t, nth: int = 0):
    """The nth kernel_dispatch TYPE_SLICE_BEGIN packet and its END (the next event on its track)."""
    begins = [i for i, p in enumerate(t.packet)
              if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_SLICE_BEGIN]
    i = begins[nth]
    track = t.packet[i].track_event.track_uuid
    j = next(k for k in range(i + 1, len(t.packet)) if t.packet[k].track_event.track_uuid == track)
    return t.packet[i], t.packet[j]


def _annotation_names(t) -> dict[str, int]:
    return {e.name: e.iid for p in t.packet for e in p.interned_data.debug_annotation_names}


def _set_annotation(t, packet, key: str, **value) -> None:
    iid = _annotation_names(t)[key]
    a = next(a for a in packet.track_event.debug_annotations if a.name_iid == iid)
    for k, v in value.items():
        setattr(a, k, v)


def _drop_annotation(t, packet, key: str) -> None:
    iid = _annotation_names(t)[key]
    keep = [a for a in packet.track_event.debug_annotations if a.name_iid != iid]
    del packet.track_event.debug_annotations[:]
    packet.track_event.debug_annotations.extend(keep)


def _first_kernel_start(t) -> int:
    begin, _ = _kernel_begin(t)
    return begin.timestamp


@pytest.mark.parametrize("key, value, dropped", [
    ("begin_ns", 1 << 63, True), ("begin_ns", (1 << 64) - 1, True),  # uint64 past Int64
    ("end_ns", (1 << 64) - 1, True),
    ("queue", (1 << 64) - 1, False),  # a non-time value past Int64: null, the row kept
    ("corr_id", 1 << 63, False),
])
def test_uint64_past_int64_is_null(trace_bytes, tmp_path, key, value, dropped):
    t = _packets(trace_bytes)
    begin, _ = _kernel_begin(t)
    start = begin.timestamp
    _set_annotation(t, begin, key, uint_value=value)
    got = pftrace.read(_write(tmp_path, t.SerializeToString()))
    if dropped:
        assert got.kernels.height == 5686
        assert start not in got.kernels["start_ns"].to_list()
        assert got.meta.warnings == ("1 kernels dropped: 1 without a usable start time or duration "
                                     "(missing, not a number, or out of range)",)
    else:
        assert got.kernels.height == 5687 and got.meta.warnings == ()
        col = {"queue": "queue", "corr_id": "correlation"}[key]
        row = got.kernels.filter(pl.col("start_ns") == start)
        assert row[col].to_list() == [None]


def test_packet_timestamps_past_int64(trace_bytes, tmp_path):
    # without begin_ns/end_ns the packet timestamps are the times: 2**64-1 is no Int64 -> dropped
    t = _packets(trace_bytes)
    begin, end = _kernel_begin(t)
    _drop_annotation(t, begin, "begin_ns")
    _drop_annotation(t, begin, "end_ns")
    begin.timestamp = (1 << 64) - 1
    got = pftrace.read(_write(tmp_path, t.SerializeToString()))
    assert got.kernels.height == 5686
    assert got.meta.warnings[0].startswith("1 kernels dropped: 1 without a usable start time")


def test_end_from_the_end_packet_or_missing(trace_bytes, tmp_path):
    t = _packets(trace_bytes)
    begin, end = _kernel_begin(t)
    _drop_annotation(t, begin, "end_ns")  # the END packet's timestamp gives the end
    got = pftrace.read(_write(tmp_path, t.SerializeToString(), "a.pftrace"))
    assert _kernels(got).equals(_kernels(rocpd.read(ROCPD)))
    end.ClearField("timestamp")  # no end at all: a null duration (was `end or 0` - start)
    got = pftrace.read(_write(tmp_path, t.SerializeToString(), "b.pftrace"))
    assert got.kernels.height == 5686
    assert begin.timestamp not in got.kernels["start_ns"].to_list()
    assert got.meta.warnings[0].startswith("1 kernels dropped: 1 without a usable start time")
    assert got.kernels["dur_ns"].min() > 0


def test_double_and_text_annotations(trace_bytes, tmp_path):
    t = _packets(trace_bytes)
    begin, _ = _kernel_begin(t)
    start = begin.timestamp
    _set_annotation(t, begin, "begin_ns", double_value=1e300)  # integral, far past Int64
    b2, _ = _kernel_begin(t, 1)
    _set_annotation(t, b2, "agent", string_value="Agent-99999999999999999999")
    got = pftrace.read(_write(tmp_path, t.SerializeToString()))
    assert got.kernels.height == 5686 and start not in got.kernels["start_ns"].to_list()
    assert got.kernels.filter(pl.col("start_ns") == b2.timestamp)["device"].to_list() == [None]


def _varint_packet(raw_varint: bytes) -> bytes:
    """A TracePacket (Trace field 1) whose timestamp (field 8) is the given varint bytes."""
    body = b"\x40" + raw_varint
    return b"\x0a" + bytes([len(body)]) + body


@pytest.mark.parametrize("raw", [
    b"\xff" * 9 + b"\x02",  # 10 bytes, value 2**64 + ...: more than 64 bits
    b"\xff" * 10 + b"\x01",  # 11 bytes
    b"\x80" * 20 + b"\x00",  # 21 bytes of a zero
])
def test_varint_past_64_bits_is_not_protobuf(trace_bytes, tmp_path, raw):
    t = _packets(trace_bytes)
    first = len(t.packet[0].SerializeToString()) + 2  # key and one-byte length
    data = trace_bytes[:first] + _varint_packet(raw) + trace_bytes[first:]
    with pytest.raises(TraceError) as info:
        pftrace.read(_write(tmp_path, data))
    assert info.value.problem == (f"not a Perfetto protobuf trace (varint of more than 64 bits at "
                                  f"byte {first + 3})")


def test_varint_of_64_bits_is_read(trace_bytes, tmp_path):
    # 2**64-1 in 10 bytes is a valid uint64: a packet carrying only it changes nothing
    t = _packets(trace_bytes)
    first = len(t.packet[0].SerializeToString()) + 2
    data = trace_bytes[:first] + _varint_packet(b"\xff" * 9 + b"\x01") + trace_bytes[first:]
    got = pftrace.read(_write(tmp_path, data))
    assert _kernels(got).equals(_kernels(rocpd.read(ROCPD)))


def _cli_error(path: Path) -> str:
    got = subprocess.run([*ATTRIB, "analyze", str(path)], capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 2, (got.returncode, got.stderr[-2000:])
    assert "Traceback" not in got.stderr and got.stdout == ""
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1, got.stderr
    return lines[0]


def test_truncated(trace_bytes, tmp_path):
    cut = len(trace_bytes) // 2
    line = _cli_error(_write(tmp_path, trace_bytes[:cut]))
    assert "32432_results.pftrace: Perfetto trace is truncated (a record runs past the end at " \
           f"byte " in line and f"of {cut}; file cut short?)" in line


def test_too_big(trace_bytes, tmp_path):
    copies = pftrace.SIZE_LIMIT // len(trace_bytes) + 1
    big = _write(tmp_path, trace_bytes * copies)  # the run again and again: still a valid trace
    size = big.stat().st_size
    line = _cli_error(big)
    assert line.endswith(
        f"32432_results.pftrace: Perfetto trace of {size / 1e6:.0f} MB is past the 100 MB this "
        "pure-Python reader decodes in reasonable time and memory; record with rocprofv3 "
        "--output-format rocpd (or csv) instead")
    # gzip: refused while it is inflated, once its content passes the limit
    packed = _write(tmp_path, gzip.compress(big.read_bytes(), compresslevel=1),
                    "32432_results.pftrace.gz")
    big.unlink()
    with pytest.raises(TraceError) as info:
        pftrace.read(packed)
    assert info.value.problem.startswith("Perfetto trace of over 10")
    assert info.value.problem.endswith("--output-format rocpd (or csv) instead")

