"""A worker process decoding pieces of the event list the reader hands it (issue 40: parallelism
in the one path), for any input the stream reads: plain or compressed, to memory or to disk.

The reader cuts the list as always (pieces); its Decoder (sinks) decodes each piece itself or,
while the worker has room, hands it over unchecked: piece 0 starts at the list's first event and
each piece where the one before it ended, so if every piece parses (in the reader or the worker)
every cut lies between two events; a handed one that does not means a cut inside a string:
`Fallback`, and the document is read whole.

Messages, plain (no shared memory): the worker is `python -c` on `serve`, given a temporary
folder; it says {"ready": true} once its modules are loaded (nothing is handed before). Piece j
is handed as a line on its stdin: `j at n` (its events are the n bytes of a plain trace file from
`at`), else `j` (its JSON array written to the folder). The worker decodes pieces in the order
given, writes each table's frame to the folder (Arrow IPC, event indices from 0: the decoder
moves them into place) and says {"done": j, ...} or {"bad": j}, a JSON line on its stdout that
the reader reads between pieces (the pipe never fills).

Never waiting long: at most QUEUE pieces are handed and unanswered (and HOLD held behind them in
the bounded-memory sink); a piece the decoder needs is waited for while the worker decodes it
(twice what its last piece took it, WAIT_S at most), else decoded by the reader. Nothing is
judged from the machine's load (`start_at` says when the worker starts).
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import BinaryIO

import msgspec
import polars as pl

from attrib.errors import TraceError
from attrib.threads import second_cpu
from collectors import limits
from collectors.kineto.columns import Frames, frames
from collectors.kineto.decode import ERRORS, Fallback, Notes, decode, trim

ENV = "ATTRIB_WORKER"  # "0": no worker process
START_AT = 6  # pieces cut before a worker is started (its start costs about 5 pieces' decoding)
MIN_PIECES = 12  # a plain file of this many pieces starts its worker at once
QUEUE = 2  # pieces handed and not answered, at most
HOLD = 8  # pieces held behind a handed one in a bounded sink, at most (then the reader waits)
WAIT_S = 0.5  # the longest the decoder waits for a piece before decoding it itself
_ROOT = str(Path(__file__).resolve().parents[2])  # where the worker imports this package from


class Answer(msgspec.Struct, omit_defaults=True):
    """One message of the worker (module docstring)."""

    ready: bool = False
    done: int | None = None
    bad: int | None = None
    events: int = 0
    notes: Notes | None = None
    tables: list[str] = []  # written to the folder as {done}-{table}.arrow
    took: float = 0.0  # seconds the worker spent on the piece, from its line to its answer


Decoded = tuple[Frames, int, Notes]  # a piece's frames, event count and notes, indices from 0
_ANSWER = msgspec.json.Decoder(Answer)


def start_at(path: Path, block: int) -> int | None:
    """After how many pieces a read of `path` in pieces of `block` bytes starts its worker: at once
    for a plain file of MIN_PIECES pieces or more, else after START_AT (a compressed file's size
    says little); None where it starts none (ATTRIB_WORKER=0, or attrib.threads.second_cpu)."""
    if os.environ.get(ENV) == "0" or not second_cpu():
        return None
    try:
        big = path.stat().st_size >= MIN_PIECES * block and limits.Inflow(path).kind is None
    except (OSError, TraceError):
        return None  # the reader names the problem
    return 0 if big else START_AT


def decoded(path: Path, text: bytes | bytearray | memoryview) -> Decoded:
    """A piece decoded with indices from 0, its text interned (ERRORS where it does not parse)."""
    notes = Notes()
    evs = decode(path, text, 0, notes)
    return frames(evs, notes, 0, plain=False), len(evs), notes


class Worker:
    """The worker process, from the reader's side (module docstring)."""

    def __init__(self, path: Path, proc: subprocess.Popen[bytes], folder: str) -> None:
        self.path, self.proc, self.folder = path, proc, folder
        self.ready, self.alive = False, True
        self.handed: list[int] = []  # handed and not taken, in the order given
        self.ranges: dict[int, tuple[int, int] | None] = {}  # of the trace file, or None: a copy
        self.done: dict[int, Answer] = {}
        self.pace = WAIT_S  # seconds its last piece took it (its answer's `took`)
        self._buf = b""

    @classmethod
    def start(cls, path: Path) -> Worker | None:
        """A started worker, or None where none can be."""
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # memory: no disk writes
        try:  # at most QUEUE pieces and their frames at a time: ~20 MB
            folder = tempfile.mkdtemp(prefix="attrib-pair-", dir=shm)
        except OSError:
            return None
        code = f"import sys; sys.path.insert(0, {_ROOT!r}); from {__name__} import serve; serve()"
        try:  # stdin unbuffered: a line is sent as it is written
            proc = subprocess.Popen(
                [sys.executable, "-c", code, str(path), folder], bufsize=0,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env=dict(os.environ, POLARS_MAX_THREADS="1"))
        except OSError:
            os.rmdir(folder)
            return None
        return cls(path, proc, folder)

    def answered(self, j: int) -> bool:
        """Whether piece j is answered, or will never be."""
        self._drain(0.0)
        return j in self.done or not self.alive

    def room(self) -> bool:
        """Whether a piece may be handed now."""
        self._drain(0.0)
        waiting = sum(j not in self.done for j in self.handed)
        return self.ready and self.alive and waiting < QUEUE

    def hand(self, j: int, text: bytes | bytearray | memoryview, at: int | None) -> None:
        """Give piece j (its JSON array) to the worker: as the range of the trace file at `at`
        its events fill (the line `j at n`), or written to the folder where `at` is None (`j`)."""
        if at is None:
            _file(self.folder, j, "json").write_bytes(text)
            self.ranges[j], line = None, b"%d\n" % j
        else:
            self.ranges[j], line = (at, len(text) - 2), b"%d %d %d\n" % (j, at, len(text) - 2)
        self.handed.append(j)
        with contextlib.suppress(OSError):  # the worker has ended: the piece is the reader's
            assert self.proc.stdin is not None
            self.proc.stdin.write(line)

    def take(self, j: int) -> Decoded:
        """Piece j: the worker's frames, or decoded here where it has not answered: at once
        where the worker has not started it, after WAIT_S at most where it has (pieces are
        decoded in the order given); Fallback where it does not parse (module docstring)."""
        deadline = time.monotonic() + min(WAIT_S, 2 * self.pace)
        while j not in self.done and self.alive and (left := deadline - time.monotonic()) > 0:
            if next(h for h in self.handed if h not in self.done) != j:
                break  # not started: the worker would decode it after the one it holds
            self._drain(left)
        self.handed.remove(j)
        where = self.ranges.pop(j)
        answer = self.done.pop(j, None)
        try:
            if answer is None:
                return decoded(self.path, _piece(self.path, self.folder, j, where))
        except ERRORS:
            raise Fallback from None
        finally:
            if where is None:
                os.unlink(_file(self.folder, j, "json"))
        made = {}
        for t in answer.tables:
            made[t] = pl.read_ipc(_file(self.folder, j, t))
            os.unlink(_file(self.folder, j, t))
        return made, answer.events, answer.notes or Notes()

    def close(self) -> None:
        """End the worker and remove its folder."""
        self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):  # a line the ended worker never read
                assert pipe is not None
                pipe.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _drain(self, timeout: float) -> None:
        """The worker's answers so far, waiting up to `timeout` seconds for one."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while self.alive and select.select([fd], [], [], timeout)[0]:
            more = os.read(fd, 65536)
            *lines, self._buf = (self._buf + more).split(b"\n")
            try:
                answers = [_ANSWER.decode(line) for line in lines]
            except msgspec.DecodeError:
                answers, more = [], b""  # not the worker's words: it is not working
            for a in answers:
                if a.bad is not None:
                    raise Fallback
                self.ready = self.ready or a.ready
                if a.done is not None:
                    self.done[a.done] = a
                    self.pace = a.took
            self.alive = bool(more)
            timeout = 0.0


def _piece(path: Path, folder: str, j: int, where: tuple[int, int] | None) -> bytes:
    """Piece j's JSON array: its copy in the folder, or read from the trace file."""
    if where is None:
        return _file(folder, j, "json").read_bytes()
    at, n = where
    with open(path, "rb") as fh:
        fh.seek(at)
        return b"[" + fh.read(n) + b"]"


def _file(folder: str, j: int, what: str) -> Path:
    """Piece j's text (`json`) or a table's frame, in the worker's folder."""
    return Path(folder, f"{j}.{what}" if what == "json" else f"{j}-{what}.arrow")


def serve() -> None:
    """The worker (module docstring): the trace's path and the folder in argv, piece numbers on
    stdin, answers on stdout."""
    path, folder, out = Path(sys.argv[1]), sys.argv[2], sys.stdout.buffer
    _say(out, Answer(ready=True))
    for line in sys.stdin.buffer:
        j, *at = map(int, line.split())
        t0 = time.perf_counter()
        try:
            made, n, notes = decoded(path, _piece(path, folder, j, (at[0], at[1]) if at else None))
        except (*ERRORS, TraceError):
            return _say(out, Answer(bad=j))
        for t, df in made.items():  # text as views, as built: no conversion
            df.write_ipc(_file(folder, j, t), compat_level=pl.CompatLevel.newest())
        took = time.perf_counter() - t0
        _say(out, Answer(done=j, events=n, notes=notes, tables=list(made), took=took))
        del made
        trim()


def _say(out: BinaryIO, answer: Answer) -> None:
    out.write(msgspec.json.encode(answer) + b"\n")
    out.flush()
