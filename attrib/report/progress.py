"""Progress on stderr for work that takes a while: shown only on a terminal, only after `after`
seconds."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from attrib.report.printable import printable


@contextmanager
def progress(label: str, stream: TextIO | None = None, after: float = 1.0) -> Iterator[None]:
    """`attrib: LABEL ...` once the work has run `after` seconds, then `done in N s`; nothing when
    the stream is not a terminal (a pipe, a file, CI) or the work ends sooner."""
    out = stream if stream is not None else sys.stderr
    if not (hasattr(out, "isatty") and out.isatty()):
        yield
        return
    t0 = time.monotonic()
    shown = threading.Event()

    def show() -> None:
        shown.set()
        out.write(f"attrib: {label} ...\r")
        out.flush()
    timer = threading.Timer(after, show)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        if shown.is_set():
            out.write(f"attrib: {label} ... done in {time.monotonic() - t0:.1f} s\n")
            out.flush()


@contextmanager
def bar(label: str, total: int, stream: TextIO | None = None,
        width: int = 24, lines: bool = False) -> Iterator[Callable[[str], None]]:
    """A progress bar over `total` items on a terminal: yields `done(name)`, called once per item
    finished (`attrib: LABEL [#####.....] 3/12 name`); off a terminal nothing is written, or with
    `lines` a line per item (`attrib: LABEL 3/12 name`: a log or a pipe sees it move)."""
    out = stream if stream is not None else sys.stderr
    shown = hasattr(out, "isatty") and out.isatty()
    count = [0]

    def done(name: str) -> None:
        count[0] += 1
        if lines and not shown:
            out.write(f"attrib: {label} {count[0]}/{total} {printable(name)}\n")
            out.flush()
        if shown:
            n = count[0]
            full = width * n // max(total, 1)
            bar = "#" * full + "." * (width - full)
            line = f"attrib: {label} [{bar}] {n}/{total} {printable(name)}"
            out.write(line[:160].ljust(80) + "\r")
            out.flush()

    try:
        yield done
    finally:
        if shown and count[0]:
            out.write("\n")
            out.flush()
