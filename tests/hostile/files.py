"""Hostile inputs that are about the file rather than its content: special files, links, holes,
random bytes. Derived from the real fixtures where content matters (see corpus.py)."""

from __future__ import annotations

import gzip
import os
import random
from pathlib import Path
from typing import Callable


def _sparse(d: Path, head: bytes) -> Path:
    """`head` (of a real trace), then 3 GB of holes (a sparse file: no disk used): more than the
    2 GB the corpus allows a run, so reading it must fail cleanly."""
    p = d / "sparse.json"
    p.write_bytes(head)
    os.truncate(p, 3 << 30)
    return p


def _fifo(d: Path) -> Path:
    p = d / "trace.json"
    os.mkfifo(p)
    return p


def _loop(d: Path) -> Path:
    (d / "a.json").symlink_to(d / "b.json")
    (d / "b.json").symlink_to(d / "a.json")
    return d / "a.json"


def _write(name: str, data: Callable[[], bytes]) -> Callable[[Path], Path]:
    def build(d: Path) -> Path:
        (d / name).write_bytes(data())
        return d / name
    return build


def _random(n: int, seed: int) -> Callable[[], bytes]:
    return lambda: random.Random(seed).randbytes(n)


def _gz(data: Callable[[], bytes]) -> Callable[[], bytes]:
    return lambda: gzip.compress(data())


def _mkdir(d: Path) -> Path:
    (d / "nothing").mkdir()
    (d / "nothing" / "notes.txt").write_text("no trace here\n")
    return d / "nothing"
