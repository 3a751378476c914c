"""Progress on stderr for work that takes a while: shown only on a terminal, only after `after` seconds."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
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
