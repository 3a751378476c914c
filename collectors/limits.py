"""Bounded input: which paths a reader may open and how much it may read from them.

Every reader opens its file through here, so a FIFO never blocks, a symbolic-link loop is named
as one, and a gzip is streamed with a bound on what it may expand to (a small file of a few MB
that inflates to GBs of whitespace is refused, not read).
"""

from __future__ import annotations

import errno
import os
import stat
import zlib
from pathlib import Path

from attrib.errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
# A gzip may expand to RATIO_LIMIT times its size once past INFLATE_FLOOR (real traces: 9-27x).
RATIO_LIMIT = 200
INFLATE_FLOOR = 64 << 20
# One trace event (one JSON object of the event list), or one string field, at most this long.
EVENT_LIMIT = 16 << 20
_STEP = 16 << 20

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def check_path(path: Path) -> os.stat_result:
    """The path's stat if it is a regular file or a directory; otherwise a TraceError that says why."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise TraceError(path, "is a symbolic link loop") from None
        if exc.errno == errno.ENOENT and os.path.islink(path):
            raise TraceError(path, f"is a broken symbolic link (to {os.readlink(path)})") from None
        if exc.errno == errno.ENOENT:
            raise TraceError(path, "no such file or directory") from None
        raise TraceError(path, f"cannot access: {exc.strerror or exc}") from None
    for test, kind in _KINDS:
        if test(st.st_mode):
            raise TraceError(path, f"is {kind}, not a regular file (attrib reads regular files and folders)")
    return st


def open_file(path: Path):
    """A binary file object for a regular file, opened without ever blocking on a FIFO."""
    check_path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except IsADirectoryError:
        raise TraceError(path, "is a directory, expected a trace file") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped after the check
        os.close(fd)
        raise TraceError(path, "is not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def head(path: Path, n: int = 65536) -> bytes:
    """Up to n leading bytes, gunzipped if gzip (b"" when a gzip's first block is unreadable)."""
    with open_file(path) as fh:
        raw = fh.read(max(n, 1 << 16))
    if raw[:2] != GZIP_MAGIC:
        return raw[:n]
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, n)
    except zlib.error:
        return b""


def inflate_limit(compressed: int) -> int:
    return max(INFLATE_FLOOR, RATIO_LIMIT * compressed)


def gunzip(path: Path, raw: bytes) -> tuple[bytearray, bool]:
    """(data, cut): a gzip's content, streamed with a bound on its size; `cut` if it ends early.

    The content is a bytearray (no copy at the end; every reader takes bytes-like input).
    Concatenated members are read in turn. A stream that would pass `inflate_limit` is refused;
    corrupt data, or a cut with nothing before it, is a TraceError.
    """
    limit = inflate_limit(len(raw))
    out = bytearray()
    pos = 0
    while pos < len(raw):
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        buf = memoryview(raw)[pos:]
        try:
            while buf and not d.eof:
                out += d.decompress(buf, _STEP)
                buf = d.unconsumed_tail
                if len(out) > limit:
                    raise TraceError(path, f"gzip expands past {limit >> 20} MB ({RATIO_LIMIT}x its "
                                           f"{len(raw) / 1e6:.1f} MB): refused as a decompression bomb")
        except zlib.error as exc:
            if not out:
                raise TraceError(path, f"corrupt gzip data ({exc})") from None
            return out, True
        if not d.eof:
            if not out:
                raise TraceError(path, "truncated gzip file with no readable data")
            return out, True
        pos = len(raw) - len(d.unused_data)
        if d.unused_data[:2] != GZIP_MAGIC:
            break  # trailing garbage after the last member is ignored, as gzip does
    return out, False


def read_bytes(path: Path) -> tuple[bytes | bytearray, bool]:
    """(content, cut): the whole file, gunzipped with bounds if gzip; `cut` for a gzip cut short."""
    with open_file(path) as fh:
        try:
            raw = fh.read()
        except OSError as exc:
            raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    if raw[:2] != GZIP_MAGIC:
        return raw, False
    return gunzip(path, raw)
