"""A large plain file's event list decoded from both ends: this process from the front, a worker
process from the back, until they meet (issue 40: parallelism inside the one path).

Pieces: cut k (k >= 1) is the first `}, {"` at or after k x `block` bytes, a grid the file's bytes
alone fix, so neither process asks the other where a piece starts. A cut inside a string or a
nested object makes a piece that does not parse; piece 0 starts at the list's first event and
each piece where the one before it ended, so when every piece parses, every cut lies between two
events (JSON parses left to right). A piece that does not parse ends this path: pieces.stream
reads the file. The last piece and the keys after the list are read by `pieces.tail`.

Messages, plain (no shared memory): the grid (`Grid`, with a temporary folder) as JSON in the
worker's argv; a line `k` on its stdin each time the reader starts piece k. The worker takes
pieces from the last but one down and stops at the first the reader has started; its stdout
says {"claim": k} before it decodes piece k, {"done": k, "events": n, "notes": ..., "tables":
[...]} once the frames are in the folder as Arrow IPC files, {"bad": k} where it does not parse.
The reader reads those lines between its own pieces (the pipe never fills) and a piece's files
when it takes it. It waits for one piece at most, the one the worker claimed last, and for
WAIT_S at most; it decodes itself what a late, failed or ended worker leaves. Nothing is judged
from the machine's load: a plain file of MIN_PIECES pieces or more, a second CPU that may be used
(attrib.threads.second_cpu), and ATTRIB_WORKER not 0.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
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
from collectors.kineto.decode import ERRORS, Notes, decode
from collectors.kineto.pieces import Blocks, Got, header, tail, trim
from collectors.kineto.sinks import Decoder

ENV = "ATTRIB_WORKER"  # "0": no worker process
MIN_PIECES = 12  # pieces of a file worth a worker (its start costs about 5 pieces' decoding)
WAIT_S = 0.5  # the longest the reader waits on the worker's piece before decoding it itself
LOOK = 1 << 20  # bytes searched for a cut past its grid line
_CUT = re.compile(rb'\}\s*,\s*\{\s*"')


class Grid(msgspec.Struct, frozen=True):
    """The list's pieces: piece k is the file's bytes starts[k]:ends[k]; the last is the tail."""

    path: str
    starts: list[int]
    ends: list[int]
    folder: str = ""  # where the worker writes its frames

    def text(self, fd: int, k: int) -> bytearray:
        """Piece k (not the tail) as a JSON array: `[`, its events, `]`."""
        n = self.ends[k] - self.starts[k]
        buf = bytearray(n + 2)
        buf[0], buf[-1] = ord("["), ord("]")
        if os.preadv(fd, [memoryview(buf)[1:-1]], self.starts[k]) != n:
            raise OSError(f"{self.path}: read short (the file changed while it was read)")
        return buf


class Answer(msgspec.Struct, omit_defaults=True):
    """One message of the worker (module docstring)."""

    claim: int | None = None
    done: int | None = None
    bad: int | None = None
    events: int = 0
    notes: Notes | None = None
    tables: list[str] = []  # written to `folder` as {done}-{table}.arrow


_GRID = msgspec.json.Decoder(Grid)
_ANSWER = msgspec.json.Decoder(Answer)


def grid(fd: int, path: Path, first: int, size: int, block: int) -> Grid | None:
    """The pieces of the list whose first event is at `first` (module docstring); None where
    there are fewer than MIN_PIECES or a grid line has no cut within LOOK bytes."""
    starts, ends = [first], []
    line = block
    while line + block <= size:  # the tail keeps at least a block
        at = max(line, starts[-1])
        m = _CUT.search(os.pread(fd, LOOK, at))
        if m is None:
            return None
        ends.append(at + m.start() + 1)
        starts.append(at + m.start() + m.group().rindex(b"{"))
        line += block
    ends.append(size)
    return Grid(str(path), starts, ends) if len(starts) >= MIN_PIECES else None


def worth(path: Path, size: int, block: int) -> bool:
    """Whether to read `path` from both ends: a second CPU, not turned off, a large plain file."""
    return (os.environ.get(ENV) != "0" and second_cpu() and size >= MIN_PIECES * block
            and hasattr(os, "preadv") and limits.Inflow(path).kind is None)


def read(path: Path, block: int, dec: Decoder) -> Got | None:
    """The document read from both ends (module docstring), its frames put to `dec`'s sink in
    event order; None, with nothing put, where the path does not apply or a piece does not parse
    (pieces.stream reads it then); Fallback as pieces.stream raises it."""
    try:
        size = path.stat().st_size
    except OSError:
        return None  # the stream names the problem
    if not worth(path, size, block):
        return None
    blocks = Blocks(limits.Inflow(path, block))
    head, view = header(blocks)
    first = blocks.taken - len(view) + 1  # the list's text after its `[`
    del blocks, view
    with open(path, "rb") as fh:
        g = grid(fh.fileno(), path, first, size, block)
        if g is None:
            return None
        got = _Pair(path, g, fh.fileno()).pieces()
        if got is None:
            return None
        last = len(g.starts) - 1
        text = memoryview(os.pread(fh.fileno(), size - g.starts[last], g.starts[last]))
    for made, _n, notes in got:
        dec.sink.put(made)
        dec.notes.add(notes, 0)
    return tail(path, head, text, [], dec, sum(n for _made, n, _notes in got))


Piece = tuple[Frames, int, Notes]  # frames, events, notes; indices those of the whole list


class _Bad(Exception):
    """A piece that does not parse."""


class _Pair:
    """The reader's side: its pieces from the front, the worker's answers (`done`, `low`: the
    lowest piece it claimed) from the back."""

    def __init__(self, path: Path, g: Grid, fd: int) -> None:
        self.path, self.g, self.fd = path, g, fd
        self.low, self.done, self.buf = len(g.starts) - 1, dict[int, Answer](), b""

    def pieces(self) -> list[Piece] | None:
        """Every piece but the tail, in order; None where one does not parse or no worker
        starts."""
        with tempfile.TemporaryDirectory(prefix="attrib-pair-") as folder:
            self.g = msgspec.structs.replace(self.g, folder=folder)
            code = f"import sys; sys.path.insert(0, {_ROOT!r}); from {__name__} import serve; serve()"
            try:  # stdin unbuffered: a line is sent as it is written
                proc = subprocess.Popen(
                    [sys.executable, "-c", code, msgspec.json.encode(self.g)], bufsize=0,
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    env=dict(os.environ, POLARS_MAX_THREADS="1"))
            except OSError:
                return None
            try:
                return self._meet(proc)
            except _Bad:
                return None
            finally:
                proc.kill()
                proc.wait()
                for pipe in (proc.stdin, proc.stdout):
                    with contextlib.suppress(OSError):  # a line the ended worker never read
                        assert pipe is not None
                        pipe.close()

    def _meet(self, proc: subprocess.Popen[bytes]) -> list[Piece]:
        """Own pieces from 0 until the worker's lowest, then the worker's (own where it is
        late); the worker hears each own piece as it is started, and the end."""
        last = len(self.g.starts) - 1
        out: list[Piece] = []
        base = k = 0
        while k < last:
            self._drain(proc, 0.0)
            if k >= self.low:
                break
            _tell(proc, k)
            out.append(self._own(k, base))
            base, k = base + out[-1][1], k + 1
        _tell(proc, last)
        for j in range(k, last):
            deadline = time.monotonic() + WAIT_S
            while j not in self.done and (left := deadline - time.monotonic()) > 0:
                if not self._drain(proc, left):
                    break  # the worker has ended
            out.append(self._theirs(j, base) if j in self.done else self._own(j, base))
            base += out[-1][1]
        return out

    def _own(self, k: int, base: int) -> Piece:
        notes = Notes()
        try:
            evs = decode(self.path, self.g.text(self.fd, k), base, notes)
        except ERRORS:
            raise _Bad from None
        except OSError as exc:
            raise TraceError(self.path, f"cannot read: {exc}") from None
        return frames(evs, notes, base), len(evs), notes

    def _theirs(self, j: int, base: int) -> Piece:
        """The worker's piece j, its event indices moved to the whole list's (`base` on)."""
        answer, made = self.done[j], {}
        for t in answer.tables:
            made[t] = pl.read_ipc(_file(self.g, j, t))
            os.unlink(_file(self.g, j, t))
        if "kernels" in made:
            made["kernels"] = made["kernels"].with_columns(pl.col("event") + base)
        notes = Notes()
        notes.add(answer.notes or Notes(), base)
        return made, answer.events, notes

    def _drain(self, proc: subprocess.Popen[bytes], timeout: float) -> bool:
        """The worker's answers so far, waiting up to `timeout` seconds for one; False once
        it has ended (or said what is not an answer)."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while select.select([fd], [], [], timeout)[0]:
            more = os.read(fd, 65536)
            *lines, self.buf = (self.buf + more).split(b"\n")
            try:
                answers = [_ANSWER.decode(line) for line in lines]
            except msgspec.DecodeError:
                return False
            for a in answers:
                if a.bad is not None:
                    raise _Bad
                if a.claim is not None:
                    self.low = min(self.low, a.claim)
                if a.done is not None:
                    self.done[a.done] = a
            if not more:
                return False
            timeout = 0.0
        return True


_ROOT = str(Path(__file__).resolve().parents[2])  # where the worker imports this package from


def _file(g: Grid, j: int, table: str) -> str:
    """Where the worker writes piece j's frame of `table`."""
    return os.path.join(g.folder, f"{j}-{table}.arrow")


def _tell(proc: subprocess.Popen[bytes], k: int) -> None:
    """Tell the worker the reader has started piece k."""
    with contextlib.suppress(OSError):  # the worker has ended: its pieces are the reader's
        assert proc.stdin is not None
        proc.stdin.write(b"%d\n" % k)


def serve() -> None:
    """The worker (module docstring): the grid in argv, the reader's progress on stdin, answers
    on stdout, frames in the grid's folder."""
    g, out, heard, seen = _GRID.decode(sys.argv[1]), sys.stdout.buffer, b"", -1
    with open(g.path, "rb") as fh:
        for j in range(len(g.starts) - 2, 0, -1):
            while select.select([0], [], [], 0)[0]:  # the reader's progress so far
                more = os.read(0, 65536)
                if not more:
                    return  # the reader has ended
                *lines, heard = (heard + more).split(b"\n")
                seen = max([seen, *map(int, lines)])
            if j <= seen:
                return
            _say(out, Answer(claim=j))
            notes = Notes()
            try:
                evs = decode(Path(g.path), g.text(fh.fileno(), j), 0, notes)
            except (*ERRORS, TraceError):
                return _say(out, Answer(bad=j))
            made = frames(evs, notes, 0, plain=False)
            answer = Answer(done=j, events=len(evs), notes=notes, tables=list(made))
            del evs
            for t, df in made.items():  # text as views, as built: no conversion
                df.write_ipc(_file(g, j, t), compat_level=pl.CompatLevel.newest())
            del made
            trim()
            _say(out, answer)


def _say(out: BinaryIO, answer: Answer) -> None:
    out.write(msgspec.json.encode(answer) + b"\n")
    out.flush()
