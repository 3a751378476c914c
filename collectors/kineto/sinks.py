"""Pieces of the event list to frames, and where the frames go, in event order.

`Decoder.piece` decodes one JSON array of events (collectors.kineto.decode) into a frame per table
(collectors.kineto.columns) and puts them to its sink: `Parts` keeps them in memory (for
collectors.kineto.tables.built); `Files` writes them to Arrow IPC files, ROWS rows of a table a
file, each with its range of start times, end times and correlation ids (the bounded-memory mode:
collectors.kineto.spill reads them back a chunk of steps at a time).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import msgspec
import polars as pl

from collectors.kineto.columns import TABLES, Frames, frames
from collectors.kineto.decode import Notes, decode

ROWS = 1 << 15  # rows of one table per file
ORD, START, END = "_ord", "_s", "_e"  # a row's place in its table (event order), start, end (ns)
LOW = -(1 << 63)  # the least Int64: a start time no row has


class Sink(Protocol):
    def put(self, made: Frames) -> None:
        """One piece's frames, in event order."""


class Decoder:
    """Pieces in (`piece`), their frames out to `sink`; `notes`: what salvaging changed."""

    def __init__(self, path: Path, sink: Sink) -> None:
        self.path, self.sink, self.notes = path, sink, Notes()

    def piece(self, text: bytes | memoryview, base: int) -> int:
        """The JSON array `text` of events base onwards, put to the sink: its event count.
        ERRORS where it is not an array of whole JSON values (collectors.kineto.decode)."""
        evs = decode(self.path, text, base, self.notes)
        self.sink.put(frames(evs, self.notes, base))
        return len(evs)


class Parts:
    """Each table's frames, in memory."""

    def __init__(self) -> None:
        self.parts: dict[str, list[pl.DataFrame]] = {t: [] for t in TABLES}

    def put(self, made: Frames) -> None:
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


def span(s: pl.Series) -> tuple[int, int] | None:
    """(min, max) of an integer column, None where it holds no value."""
    v = s.drop_nulls()
    if not v.len():
        return None
    lo, hi = v.min(), v.max()
    assert isinstance(lo, int) and isinstance(hi, int)
    return lo, hi


class Files:
    """Each table's frames in files of `folder`, `rows` rows a file: `parts[table]`, in order."""

    def __init__(self, folder: Path, rows: int = ROWS) -> None:
        self.folder, self.rows = folder, rows
        self.parts: dict[str, list[Part]] = {t: [] for t in TABLES}
        self._held: dict[str, list[pl.DataFrame]] = {t: [] for t in TABLES}
        self._written = dict.fromkeys(TABLES, 0)

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
        first = self._written[table]
        start = pl.col("start_ns")
        end = start + pl.col("dur_ns").fill_null(0) if "dur_ns" in df.columns else start
        df = df.with_columns(start.alias(START), end.alias(END),
                             pl.int_range(first, first + df.height, dtype=pl.Int64).alias(ORD))
        path = self.folder / f"{table}-{len(self.parts[table]):05d}.arrow"
        df.write_ipc(path)
        corr = span(df["correlation"]) if "correlation" in df.columns else None
        s, e = span(df[START]), span(df[END])
        self.parts[table].append(Part(path, first, df.height, s[0] if s else LOW,
                                      e[1] if e else LOW, corr[0] if corr else None,
                                      corr[1] if corr else None))
        self._written[table] += df.height
