"""Progress on stderr for work that takes a while: shown only on a terminal, only after `after` seconds."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO


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
def bar(label: str, total: int, stream: TextIO | None = None, width: int = 24) -> Iterator[Callable[[str], None]]:
    """A progress bar on stderr (a terminal only): yields `tick(what)`, called before each of
    `total` parts; `attrib: LABEL [####....] 3/12 what`, then `done in N s`."""
    out = stream if stream is not None else sys.stderr
    tty = hasattr(out, "isatty") and out.isatty()
    t0, done = time.monotonic(), [0]

    def tick(what: str) -> None:
        if tty:
            n = min(done[0], total)
            fill = "#" * (width * n // max(total, 1))
            out.write(f"\rattrib: {label} [{fill:<{width}}] {n}/{total} {what[:40]:<40}")
            out.flush()
        done[0] += 1

    try:
        yield tick
    finally:
        if tty:
            out.write(f"\rattrib: {label} [{'#' * width}] {total}/{total} done in "
                      f"{time.monotonic() - t0:.1f} s{' ' * 30}\n")
            out.flush()
