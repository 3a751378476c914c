"""Pieces of the event list to frames, and where the frames go, in event order.

`Decoder.piece` decodes a JSON array of events (decode, then columns: a frame per table) or has
the worker decode it (pair), and puts the frames to its sink: `Parts` keeps them in memory (for
tables.built), `Files` writes them to Arrow IPC files, ROWS rows of a table a file, each with its
ranges of times and correlation ids (the bounded-memory mode: spill reads them back by chunk).
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import msgspec
import polars as pl

from collectors import limits
from collectors.kineto import pair
from collectors.kineto.columns import TABLES, Frames, frames
from collectors.kineto.decode import Notes, decode

ROWS = 1 << 15  # rows of one table per file
ORD, START, END = "_ord", "_s", "_e"  # a row's place in its table (event order), start, end (ns)
LOW = -(1 << 63)  # the least Int64: a start time no row has


class Decoder:
    """`notes`: what salvaging changed; `events`: the events put so far. Once `worker_at` pieces
    are given, the worker starts; `settle` waits for its pieces, `close` ends it."""

    def __init__(self, path: Path, sink: Sink, worker_at: int | None) -> None:
        self.path, self.sink, self.notes = path, sink, Notes()
        self.events, self._given = 0, 0  # events put, pieces given
        self._at = worker_at
        self._worker: pair.Worker | None = None
        # pieces given and not yet put, in order: decoded with indices from 0, or None: handed
        self._held: deque[tuple[int, pair.Decoded | None]] = deque()

    def piece(self, text: bytes | bytearray | memoryview, at: int | None = None) -> None:
        """The JSON array `text` of the next events, decoded here or handed to the worker (as the
        file's range from `at`, where text[1:-1] is one, else a copy). Where it is not an array of
        whole JSON values: ERRORS if decoded here (the stream tries another cut), else Fallback."""
        if self._at is not None and self._given >= self._at:  # time to start the worker
            self._worker, self._at = pair.Worker.start(self.path), None
        w = self._worker
        if w is not None and len(text) <= limits.EVENT_LIMIT and w.room():
            w.hand(self._given, text, at)
            self._held.append((self._given, None))
        else:
            if len(text) > limits.EVENT_LIMIT:
                self.settle()  # an oversized event is named by its index: every index known
            if self._held:
                self._held.append((self._given, pair.decoded(self.path, text)))
            else:
                evs = decode(self.path, text, self.events, self.notes)
                self.sink.put(frames(evs, self.notes, self.events))
                self.events += len(evs)
        self._given += 1
        self._put(wait=self.sink.bounded and len(self._held) > pair.HOLD)

    def settle(self) -> int:
        """Every piece given put to the sink (waiting for the worker's): the events so far."""
        self._put(wait=True)
        return self.events

    def close(self) -> None:
        """End the worker, and start none."""
        if self._worker is not None:
            self._worker.close()
        self._worker, self._at = None, None

    def _put(self, wait: bool) -> None:
        """The held pieces, from the first, up to one the worker has not answered (`wait`: all,
        the worker's taken or decoded here), their indices moved into place."""
        while self._held:
            j, got = self._held[0]
            if got is None:
                assert self._worker is not None
                if not (wait or self._worker.answered(j)):
                    return
                got = self._worker.take(j)
            self._held.popleft()
            made, n, notes = got
            if "kernels" in made:
                made["kernels"] = made["kernels"].with_columns(pl.col("event") + self.events)
            self.notes.add(notes, self.events)
            self.sink.put(made)
            self.events += n


class Parts:
    """Each table's frames, in memory."""

    bounded = False  # whether it holds a bounded part of the trace (then pieces are not held)

    def __init__(self) -> None:
        self.parts: dict[str, list[pl.DataFrame]] = {t: [] for t in TABLES}

    def put(self, made: Frames) -> None:
        """One piece's frames, in event order."""
        for t, df in made.items():
            self.parts[t].append(df)


class Part(msgspec.Struct, frozen=True):
    """One file of a table: its rows' places first..first+rows, the range of their start
    times and of their ends (t0, t1), and of their correlation ids (None where none)."""

    path: Path
    first: int
    rows: int
    t0: int
    t1: int
    c0: int | None
    c1: int | None


class Files:
    """Each table's frames in files of `folder`, `rows` rows a file: `parts[table]`, in order."""

    bounded = True

    def __init__(self, folder: Path, rows: int = ROWS) -> None:
        self.folder, self.rows = folder, rows
        self.parts: dict[str, list[Part]] = {t: [] for t in TABLES}
        self._held: dict[str, list[pl.DataFrame]] = {t: [] for t in TABLES}

    def put(self, made: Frames) -> None:
        for t, df in made.items():
            self._held[t].append(df)
            if sum(f.height for f in self._held[t]) >= self.rows:
                self._write(t)

    def flush(self) -> None:
        """Write what is held."""
        for t in TABLES:
            self._write(t)

    def _write(self, table: str) -> None:
        held = self._held[table]
        if not held:
            return
        df = pl.concat(held, how="diagonal_relaxed")
        held.clear()
        first = sum(p.rows for p in self.parts[table])
        start = pl.col("start_ns")
        end = start + pl.col("dur_ns").fill_null(0) if "dur_ns" in df.columns else start
        df = df.with_columns(start.alias(START), end.alias(END),
                             pl.int_range(first, first + df.height, dtype=pl.Int64).alias(ORD))
        path = self.folder / f"{table}-{len(self.parts[table]):05d}.arrow"
        df.write_ipc(path)
        corr = pl.col("correlation") if "correlation" in df.columns else pl.lit(None, pl.Int64)
        ranges = df.select(t0=pl.col(START).min().fill_null(LOW),
                           t1=pl.col(END).max().fill_null(LOW), c0=corr.min(), c1=corr.max())
        self.parts[table].append(Part(path, first, df.height, **ranges.row(0, named=True)))


Sink = Parts | Files  # where a Decoder puts the frames
