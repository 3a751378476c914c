"""A second process that decodes chunks of a large Kineto trace while the reader decodes the others.

The whole-text reader (collectors.kineto) takes chunks from the front of the trace; between two of
its chunks it hands chunks from the back to the worker, keeping two in flight, until the two ends
meet. The streaming reader (collectors.kineto_stream) hands it each piece it cuts while fewer than
IN_FLIGHT are pending, and decodes the others itself. A chunk is a region of the trace file where
the reader's text is the file's bytes (the worker reads it itself, after checking the file's
mtime, inode and the region's edges), else a file of one JSON array in a private folder (in
/dev/shm where there is one); its frames come back as Arrow IPC files built by
collectors.kineto_tables (the code the reader runs); the pipes carry only a few bytes per chunk, so
no thread of the reader ever waits on them. A chunk the worker has not started when the reader
takes it back is the reader's: whoever renames or removes its file first (an atomic step) decodes
it. The worker answers "fallback" when its fast typed decode fails; the reader decodes such chunks
itself, as it does the chunks of a worker that could not start, died, stalled or answered garbage:
salvage, warnings and errors are always the serial path's, and the worker can make reading faster,
never different.

The worker is a fresh interpreter (subprocess, not fork: the reader's polars thread pool is running)
that imports only msgspec, polars and the collectors package.
"""

from __future__ import annotations

import io
import os
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import IO

import msgspec
import numpy as np
import polars as pl

from collectors.kineto_events import CHUNK, DECODE_ERRORS, Notes, decode_fast, json_array
from collectors.kineto_tables import TABLES, chunk_frames

# a request: chunk number; its first event's index in traceEvents; its offset and length in the
# trace file, the CRC-32 of the region's first and last 4 kB, and the file's mtime (ns) and inode
# when the reader read it (length 0: the chunk's JSON array is in its file in the folder); chunk
# number END: no more
_ASK = struct.Struct("<IQQQIQQ")
_EDGE = 4096
_END = 0xFFFFFFFF
# an answer: kind, chunk, tables present (bit mask), events without ph, without ts
_ANSWER = struct.Struct("<cIIQQ")
# the kinds: frames written; fast decode failed; the reader took it back
_FRAMES, _FALLBACK, _SKIPPED = b"T", b"F", b"S"
# chunks handed over and not yet answered: one being decoded, two waiting (the reader hands
# chunks over only between two of its own, and the worker may finish two in that time)
IN_FLIGHT = 3
# no answer for this long: the worker is taken to be stuck and its chunks decoded here
_PATIENCE_S = 60.0
_ROOT = str(Path(__file__).resolve().parents[1])
_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); from collectors.kineto_worker import serve; "
         "serve(sys.argv[2], sys.argv[3])")

Answer = tuple[dict[str, pl.DataFrame], int, int]  # frames, events without ph, events without ts
# JSON text from which a worker process decodes chunks too (about 170k events)
PARALLEL_BYTES = 64 << 20
_COMPRESSED = (".gz", ".xz", ".zst")


def _chunk_file(folder: Path, j: int) -> Path:
    return folder / f"{j}.json"


def _table_file(folder: Path, j: int, table: str) -> Path:
    return folder / f"{j}.{table}.arrow"


def _address(buf: object) -> int:
    """Where a bytes-like object's memory starts."""
    return np.frombuffer(buf, dtype=np.uint8).ctypes.data


def _edges(buf: bytes | memoryview) -> int:
    """CRC-32 of a region's first and last 4 kB."""
    return zlib.crc32(buf[-_EDGE:], zlib.crc32(buf[:_EDGE]))


def _payload(where: Path, source: str, j: int, start: int, length: int, edges: int, mtime_ns: int,
             ino: int) -> bytes | bytearray | None:
    """The chunk's JSON array: its region of the trace file (None where the file is not the one the
    reader read: modified since, or another file), or its file in the folder."""
    mine = where / f"{j}.taken"
    if not length:
        payload = mine.read_bytes()
        mine.unlink()
        return payload
    mine.unlink()
    buf = bytearray(length + 2)  # the region read between its brackets: no copy after the read
    buf[0], buf[-1] = ord("["), ord("]")
    data = memoryview(buf)[1:-1]
    with open(source, "rb") as fh:
        got = os.preadv(fh.fileno(), [data], start)
        st = os.fstat(fh.fileno())
    same_file = (st.st_mtime_ns, st.st_ino) == (mtime_ns, ino)
    same = same_file and got == length and _edges(data) == edges
    return buf if same else None


def serve(folder: str, source: str = "", inp: IO[bytes] | None = None,
          out: IO[bytes] | None = None) -> None:
    """The worker's loop: decode each chunk asked for on `inp`, answer on `out`, until END or
    EOF."""
    inp = inp or sys.stdin.buffer
    out = out or sys.stdout.buffer
    where = Path(folder)
    while len(head := inp.read(_ASK.size)) == _ASK.size:
        j, base, *region = _ASK.unpack(head)
        if j == _END:
            return
        try:  # a rename is atomic: the reader may have taken the chunk back
            os.rename(_chunk_file(where, j), where / f"{j}.taken")
        except FileNotFoundError:
            out.write(_ANSWER.pack(_SKIPPED, j, 0, 0, 0))
            out.flush()
            continue
        try:
            payload = _payload(where, source, j, *region)
            if payload is None:
                raise ValueError("the trace file changed")
            evs = decode_fast(payload)
        except (*DECODE_ERRORS, OSError, ValueError):
            out.write(_ANSWER.pack(_FALLBACK, j, 0, 0, 0))
            out.flush()
            continue
        del payload
        notes = Notes()
        frames = chunk_frames(evs, notes, base)
        del evs
        mask = 0
        for t, df in frames.items():
            df.write_ipc_stream(_table_file(where, j, t))
            mask |= 1 << TABLES.index(t)
        out.write(_ANSWER.pack(_FRAMES, j, mask, notes.no_ph, notes.no_ts))
        out.flush()
    shutil.rmtree(where, ignore_errors=True)  # EOF: the reader is gone


def likely_big(path: Path) -> bool:
    """Whether the file's JSON text will be PARALLEL_BYTES or more, judged from its size on disk."""
    try:
        size = path.stat().st_size
    except OSError:
        return False
    return size >= PARALLEL_BYTES // (8 if path.name.lower().endswith(_COMPRESSED) else 1)


def cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _ticks_s() -> float:
    return 1.0 / os.sysconf("SC_CLK_TCK")


def _busy_s() -> float | None:
    """Seconds all CPUs spent busy since boot (Linux /proc/stat); None where it cannot be read."""
    try:
        with open("/proc/stat", "rb") as fh:
            v = [int(x) for x in fh.readline().split()[1:9]]
        return (sum(v) - v[3] - v[4]) * _ticks_s()  # less idle and iowait
    except (OSError, ValueError, IndexError):
        return None


def _cpu_s(pid: int) -> float:
    """A process's user + system seconds (Linux /proc/PID/stat); 0 where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            rest = fh.read().rsplit(b")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) * _ticks_s()
    except (OSError, ValueError, IndexError):
        return 0.0


def _spans(text: memoryview, start: int, end: int, first: msgspec.Raw,
           last: msgspec.Raw) -> bool:
    """Whether text[start:end] is a region of the text that starts with `first` and ends with
    `last`."""
    if not 0 <= start < end <= len(text):
        return False
    return (bytes(text[start:start + len(first)]) == bytes(first)
            and bytes(text[end - len(last):end]) == bytes(last))


class Others:
    """How many CPUs other processes keep busy, from a start to now: the worker only pays where a
    CPU is free (on a shared machine it would compete with this process for the same core)."""

    def __init__(self) -> None:
        t = os.times()
        self.wall, self.busy, self.own = time.monotonic(), _busy_s(), t.user + t.system

    def cpus(self, worker: Worker) -> float | None:
        """Average CPUs busy with processes other than this one and the worker; None without
        /proc."""
        busy, t = _busy_s(), os.times()
        wall = time.monotonic() - self.wall
        if busy is None or self.busy is None or wall <= 0:
            return None
        mine = t.user + t.system - self.own + _cpu_s(worker.proc.pid)
        return max(0.0, busy - self.busy - mine) / wall

    def free(self, worker: Worker) -> bool:
        """Whether a CPU was free since the start: other processes kept less than half a CPU busy
        and there is one besides this process's (where /proc cannot say: two CPUs)."""
        busy = self.cpus(worker)
        return cpus() >= 2 and (busy is None or busy + 1.5 <= cpus())


class Claims:
    """Which chunks are left: the reader takes from the front, the worker from the back."""

    def __init__(self, n: int) -> None:
        self.lo, self.hi = 0, n

    def front(self) -> int | None:
        if self.lo >= self.hi:
            return None
        self.lo += 1
        return self.lo - 1

    def back(self) -> int | None:
        if self.lo >= self.hi:
            return None
        self.hi -= 1
        return self.hi


class Worker:
    """The reader's side of one worker process. Every call is the reader's own and none blocks but
    `finish`, which waits for the chunk the worker is decoding."""

    def __init__(self, proc: subprocess.Popen, folder: Path) -> None:
        self.proc, self.folder = proc, folder
        self._text: memoryview | None = None  # the reader's text where it is the trace file's bytes
        self._base = 0
        # the trace file's mtime (ns) and inode when it was read
        self._file: tuple[int, int] = (0, 0)
        # chunk -> frames and counts; None: the reader decodes it
        self.answers: dict[int, Answer | None] = {}
        self.pending: list[int] = []  # chunks handed over, not answered
        self.taken_back: set[int] = set()  # handed over, then decoded by the reader
        self._buf = b""
        self._alive = True

    @classmethod
    def start(cls, source: Path) -> Worker | None:
        """A started worker process, or None where none can be started (the reader then works
        alone)."""
        if not sys.executable:
            return None
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # memory, not a disk
        env = dict(os.environ, POLARS_MAX_THREADS="1")  # its work is one thread's
        try:
            folder = Path(tempfile.mkdtemp(prefix="attrib-kineto-", dir=shm))
        except OSError:
            return None
        try:
            argv = [sys.executable, "-c", _BOOT, _ROOT, str(folder), str(source)]
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, env=env)
        except (OSError, ValueError):
            shutil.rmtree(folder, ignore_errors=True)
            return None
        worker = cls(proc, folder)
        try:
            os.set_blocking(proc.stdout.fileno(), False)
        except OSError:  # not a POSIX pipe
            worker.close()
            return None
        return worker

    def file_text(self, text: bytes, stat: os.stat_result) -> None:
        """The reader's text is the trace file's bytes, read whole (`stat` taken before it was
        read): the worker reads each chunk's region from the file itself (no copy made here), and
        decodes it only if the file's mtime and inode and the region's edges are still those the
        reader saw."""
        self._text, self._base = memoryview(text), _address(text)
        self._file = (stat.st_mtime_ns, stat.st_ino)

    def _region(self, raws: list[msgspec.Raw]) -> tuple[int, int, int, int, int]:
        """The request's region fields (after the chunk number and its first event); all 0 where
        the region is unknown."""
        if self._text is None:
            return 0, 0, 0, 0, 0
        start = _address(raws[0]) - self._base
        end = _address(raws[-1]) - self._base + len(raws[-1])
        if not _spans(self._text, start, end, raws[0], raws[-1]):
            return 0, 0, 0, 0, 0
        return start, end - start, _edges(self._text[start:end]), *self._file

    def pump(self, chunks: list[list[msgspec.Raw]], claims: Claims) -> None:
        """Take in the answers that came, and hand over chunks from the back up to IN_FLIGHT: a
        region of the trace file, else the chunk's JSON array written to the folder."""
        self._receive(0.0)
        while self._alive and len(self.pending) < IN_FLIGHT and (j := claims.back()) is not None:
            region = self._region(chunks[j])
            if not self._send(j, j * CHUNK, region, b"" if region[1] else json_array(chunks[j])):
                self.answers[j] = None  # the reader does the rest
                break

    def _send(self, j: int, base: int, region: tuple[int, ...], payload: bytes | memoryview
              ) -> bool:
        """Write chunk j's file (its JSON array, or nothing where `region` says where it is in
        the trace file) and ask for it; False where it died or the folder is full."""
        try:
            _chunk_file(self.folder, j).write_bytes(payload)
            self.proc.stdin.write(_ASK.pack(j, base, *region))
            self.proc.stdin.flush()
        except (OSError, ValueError):
            self._alive = False
            return False
        self.pending.append(j)
        return True

    @property
    def alive(self) -> bool:
        return self._alive

    def room(self) -> bool:
        """Whether it is alive and has fewer than IN_FLIGHT chunks pending."""
        self._receive(0.0)
        return self._alive and len(self.pending) < IN_FLIGHT

    def reads(self, stat: os.stat_result) -> None:
        """The trace file is plain JSON (`stat` taken before it was read): `hand` may give the
        worker a region of it to read itself."""
        self._file = (stat.st_mtime_ns, stat.st_ino)

    def hand(self, j: int, base: int, text: memoryview, start: int | None = None) -> bool:
        """Hand over chunk `j`: the JSON array `text`, its first event traceEvents[base]; its
        events (text[1:-1]) are the trace file's bytes from `start` where that is given (`reads`),
        read there by the worker, else written to the folder. False where it cannot be handed
        over (it died, or the folder is full)."""
        events = text[1:-1]
        known = start is not None and self._file != (0, 0)
        region = (start, len(events), _edges(events), *self._file) if known else (0,) * 5
        return self._send(j, base, region, b"" if known else text)

    def wait(self, j: int) -> None:
        """Wait until chunk `j` is answered or taken back, or the worker is gone or stuck (no
        answer for _PATIENCE_S: it is then given up, its pending chunks the reader's)."""
        last = time.monotonic()
        while j in self.pending and self._alive:
            if self._receive(1.0):
                last = time.monotonic()
            elif time.monotonic() - last >= _PATIENCE_S:
                self._alive = False

    def take_back(self, keep: int = 0) -> list[int]:
        """Handed-over chunks the worker has not started, now the reader's (in increasing order):
        the latest sent first, leaving it `keep` pending (the one it decodes and the next: the two
        ends then finish about together)."""
        back = []
        for j in reversed(list(self.pending)):
            if len(self.pending) <= keep:
                break
            try:
                _chunk_file(self.folder, j).unlink()
            except FileNotFoundError:
                # the worker renamed it first: it has started it, and every chunk sent before it
                break
            self.pending.remove(j)
            back.append(j)
        self.taken_back.update(back)
        return sorted(back)

    def finish(self) -> dict[int, Answer | None]:
        """Wait for the answers still due; a chunk without an answer (the worker died or stuck) is
        left out, for the reader to decode."""
        try:
            self.proc.stdin.write(_ASK.pack(_END, 0, 0, 0, 0, 0, 0))
            self.proc.stdin.close()
        except (OSError, ValueError):
            pass
        last = time.monotonic()
        while self.pending and self._alive and time.monotonic() - last < _PATIENCE_S:
            if self._receive(1.0):
                last = time.monotonic()
        return self.answers

    def _receive(self, wait_s: float) -> bool:
        """Read whatever answers are there (waiting up to wait_s for the first); whether any
        came."""
        fd = self.proc.stdout.fileno()
        try:
            if wait_s and not select.select([fd], [], [], wait_s)[0]:
                return False
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        if not data:  # EOF: it exited or died
            self._alive = False
            return False
        self._buf += data
        n = len(self._buf) // _ANSWER.size * _ANSWER.size
        for off in range(0, n, _ANSWER.size):
            self._take(*_ANSWER.unpack_from(self._buf, off))
        self._buf = self._buf[n:]
        return True

    def _take(self, kind: bytes, j: int, mask: int, no_ph: int, no_ts: int) -> None:
        if kind == _SKIPPED and j in self.taken_back:
            return
        if j not in self.pending:  # not a chunk it was given: garbage; stop using it
            self._alive = False
            return
        self.pending.remove(j)
        if kind == _FRAMES and mask >> len(TABLES) == 0:
            try:
                frames = {t: self._load(j, t) for i, t in enumerate(TABLES) if mask >> i & 1}
            except (OSError, ValueError, pl.exceptions.PolarsError):
                frames = None
            self.answers[j] = (frames, no_ph, no_ts) if frames is not None else None
        elif kind in (_FALLBACK, _SKIPPED):
            self.answers[j] = None
        else:
            self._alive = False
            self.answers[j] = None

    def _load(self, j: int, table: str) -> pl.DataFrame:
        path = _table_file(self.folder, j, table)
        data = path.read_bytes()  # the frame holds its own copy: the file is removed at once
        path.unlink()
        return pl.read_ipc_stream(io.BytesIO(data))

    def close(self) -> None:
        """End the process (at once if it still runs), reap it, remove its folder."""
        for fh in (self.proc.stdin, self.proc.stdout):
            try:
                fh.close()
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._text = None
        shutil.rmtree(self.folder, ignore_errors=True)
