"""A Kineto trace on disk, read back one chunk of steps at a time (the bounded-memory mode).

The reader's frames go to the `Files` sink (sinks) in a temporary folder. `Spill.window` reads
back the rows of one chunk of steps (attrib.steps.chunks: host events that overlap its context,
GPU events of its runtime calls or in its GPU range) through the files whose ranges can hold
them, and builds them into a Trace as the whole-trace reader does (tables.built), ids included:
an id is the row's place in its whole table sorted by start time, computed once per table from
the start times alone. Memory is bounded by a chunk and a file, not by the trace.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import msgspec
from msgspec import field
from msgspec.structs import replace
import numpy as np
import polars as pl

from attrib.trace import Meta, Trace, TraceWarning
from collectors.kineto import BLOCK, document_meta, events
from collectors.kineto.columns import TABLES
from collectors.kineto.decode import Notes
from collectors.kineto.sinks import END, LOW, ORD, ROWS, START, Files, Part
from collectors.kineto.tables import built

_HOST = ("ops", "frames", "launches")  # the markers: by side
_GPU = ("kernels", "copies", "flows")


class Spill(msgspec.Struct):
    """A trace's tables on disk (see the module docstring). Build with `Spill.read`; `close`
    (or a `with` block) removes the folder."""

    folder: Path
    meta: Meta | None = None
    parts: dict[str, list[Part]] = field(default_factory=lambda: {t: [] for t in TABLES})
    # per table, the file of its rows' ids by place (read where a window needs them: not held)
    ids: dict[str, tuple[Path, np.dtype[Any]]] = field(default_factory=dict)
    # per GPU table, the places of its rows that no runtime call launched (few: found once)
    unlinked: dict[str, pl.Series] = field(default_factory=dict)

    @classmethod
    def read(cls, path: str | Path, folder: str | Path | None = None, block: int = BLOCK,
             rows: int = ROWS) -> Spill:
        """Stream the trace at `path` into a new temporary folder (under `folder`), `rows` rows
        of a table per file; Fallback where it must be read whole, TraceError where it is bad."""
        path = Path(path)
        spill = cls(Path(tempfile.mkdtemp(prefix="attrib-spill-", dir=folder)))
        try:
            sink = Files(spill.folder, rows)
            got = events(path, sink, block, worker=True)
            sink.flush()
            spill.parts = sink.parts
            meta = document_meta(path, got.doc, got.events, got.warnings)
            every = got.warnings + got.notes.warnings()
            spill.meta = replace(meta, warnings=tuple(map(TraceWarning, every)))
            spill.ids = {t: spill._ids(t) for t in TABLES}
            calls = spill._column("launches", "correlation").drop_nulls().unique()
            spill.unlinked = {t: spill._unlinked(t, calls) for t in _GPU}
        except BaseException:
            spill.close()
            raise
        return spill

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _column(self, table: str, col: str) -> pl.Series:
        """One column of the whole table, read from its files."""
        return _concat([pl.read_ipc(p.path, columns=[col])[col] for p in self.parts[table]], col)

    def _ids(self, table: str) -> tuple[Path, np.dtype[Any]]:
        """Each row's id (by its place: its rank in the table stably sorted by start time, nulls
        first, as the whole-trace reader numbers it) in a file, and their dtype."""
        start = self._column(table, START).fill_null(LOW).to_numpy()
        kind = np.uint32 if len(start) < 1 << 32 else np.int64  # held for every row: 4 bytes
        ids = np.empty(len(start), dtype=kind)
        ids[np.argsort(start, kind="stable")] = np.arange(len(start), dtype=kind)
        path = self.folder / f"{table}.ids"
        ids.tofile(path)
        return path, ids.dtype

    def _unlinked(self, table: str, calls: pl.Series) -> pl.Series:
        """The places of the table's rows whose correlation id is no runtime call's."""
        got = [pl.read_ipc(p.path, columns=[ORD, "correlation"]) for p in self.parts[table]]
        if not got:
            return pl.Series(ORD, [], dtype=pl.Int64)
        linked = pl.col("correlation").is_in(calls.implode()).fill_null(False)
        return pl.concat(got).filter(~linked)[ORD]

    def _rows(self, table: str, keep: pl.Expr, parts: list[Part]) -> list[pl.DataFrame]:
        """The rows that `keep` keeps of the table's files `parts`; where none, no rows with
        the table's columns (as the whole table filtered would be), if it has any."""
        got = (pl.read_ipc(p.path).filter(keep) for p in parts)  # one file at a time
        out = [df for df in got if df.height]
        if not out and self.parts[table]:
            out.append(pl.read_ipc(self.parts[table][0].path, n_rows=0))
        return out

    def _host(self, table: str, lo: int, hi: int) -> list[pl.DataFrame]:
        keep = (pl.col(START) < hi) & (pl.col(END) >= lo)
        return self._rows(table, keep, [p for p in self.parts[table] if p.t0 < hi and p.t1 >= lo])

    def _gpu(self, table: str, corr: pl.Series, gpu: tuple[int, int]) -> list[pl.DataFrame]:
        lo, hi = gpu
        c0, c1 = corr.min(), corr.max()  # corr holds no null: None where it is empty

        def maybe(p: Part) -> bool:
            by_time = p.t0 < hi and p.t1 >= lo  # the part's starts lie below t1
            if not isinstance(c0, int) or not isinstance(c1, int) or p.c0 is None or p.c1 is None:
                return by_time
            return by_time or (p.c0 <= c1 and p.c1 >= c0)

        unlinked = pl.col(ORD).is_in(self.unlinked[table].implode())
        ours = pl.col("correlation").is_in(corr.implode()).fill_null(False)
        keep = ours | (unlinked & (pl.col(START) >= lo) & (pl.col(START) < hi))
        return self._rows(table, keep, [p for p in self.parts[table] if maybe(p)])

    def _renumber(self, table: str, df: pl.DataFrame) -> pl.DataFrame:
        path, kind = self.ids[table]
        places = df[ORD].to_numpy()
        # mapped for this read only: the pages it touched go with the map
        ids = np.memmap(path, dtype=kind, mode="r")[places] if len(places) else places
        return df.with_columns(pl.Series("id", ids, dtype=pl.Int64)).drop(ORD, START, END)

    def markers(self) -> Trace:
        """The trace's annotations alone (what chunks are planned from)."""
        return self._trace({"markers": self._rows("markers", pl.lit(True), self.parts["markers"])})

    def window(self, host: tuple[int, int], gpu: tuple[int, int]) -> Trace:
        """The trace of one chunk of steps whose context spans `host` and `gpu` ([start, end)
        ns): attrib.steps.chunks.window, read from disk."""
        lo, hi = min(host[0], gpu[0]), max(host[1], gpu[1])
        tables = {t: self._host(t, lo, hi) for t in _HOST}
        calls = _concat([df["correlation"] for df in tables["launches"]], "correlation")
        tables |= {t: self._gpu(t, calls.drop_nulls(), gpu) for t in _GPU}
        cpu = [m.filter(pl.col("side") == "cpu") for m in self._host("markers", lo, hi)]
        # GPU annotations: those linked to the chunk's CPU ones, and unlinked ones in its GPU range
        ext = _concat([m["external_id"] for m in cpu], "external_id").drop_nulls()
        every = self._column("markers", "external_id").drop_nulls()  # small: annotations
        linked = pl.col("external_id").is_in(every.implode()).fill_null(False)
        ours = pl.col("external_id").is_in(ext.implode()).fill_null(False)
        free = ~linked & (pl.col(START) >= gpu[0]) & (pl.col(START) < gpu[1])
        keep = (pl.col("side") == "gpu") & (ours | free)
        marks = [m for m in cpu if m.height] + self._rows("markers", keep, self.parts["markers"])
        if marks:  # each row (by its place) once, in their place's order
            marks = [pl.concat(marks, how="diagonal_relaxed").unique(ORD, keep="first").sort(ORD)]
        return self._trace(tables | {"markers": marks})

    def _trace(self, parts: dict[str, list[pl.DataFrame]]) -> Trace:
        assert self.meta is not None
        warnings: list[str] = []
        full = {t: parts.get(t, []) for t in TABLES}
        tables = built(Path(self.meta.path), full, Notes(), warnings, self._renumber)
        if warnings:
            raise Unbounded(f"{warnings[0]}")
        return Trace.build(self.meta, **tables)


class Unbounded(Exception):
    """A chunk read back from disk met what the whole-trace reader warns about: read it whole."""


def _concat(series: list[pl.Series], name: str) -> pl.Series:
    return pl.concat(series) if series else pl.Series(name, [], dtype=pl.Int64)
