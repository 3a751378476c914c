"""Bounded input: which paths a reader may open and how much it may read from them.

Every reader opens its file through here, so a FIFO never blocks, a symbolic-link loop is named
as one, and a compressed file (gzip; xz; zstd where `zstandard` is installed) is streamed with a
bound on what it may expand to (a small file of a few MB that inflates to GBs of whitespace is
refused, not read).
"""

from __future__ import annotations

import errno
import io
import lzma
import os
import stat
import zlib
from pathlib import Path
from typing import Any

from attrib.errors import TraceError


def _zstd() -> Any:
    """The zstandard module (optional: .zst traces need it), imported when one is read; None
    where it is not installed."""
    try:
        import zstandard
    except ImportError:
        return None
    return zstandard


GZIP_MAGIC = b"\x1f\x8b"
XZ_MAGIC = b"\xfd7zXZ\x00"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# A gzip may expand to RATIO_LIMIT times its size once past INFLATE_FLOOR (real traces: 9-27x).
RATIO_LIMIT = 200
INFLATE_FLOOR = 64 << 20
# One trace event (one JSON object of the event list), or one string field, at most this long.
EVENT_LIMIT = 16 << 20
# A file of at most this much text (`text_bytes`) holds a small trace (~40 k Kineto events of
# ~400 bytes): a Kineto file is read where small tables cost least (attrib.threads.pooled).
SMALL_TEXT = 16 << 20
_STEP = 16 << 20
_STREAM_STEP = 1 << 16

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def text_bytes(path: Path) -> int | None:
    """The text a regular file likely holds: its size, 8 times it where compressed (.gz, .xz,
    .zst; real traces inflate 9-27x); None for anything else (a folder, a missing path)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    packed = path.name.lower().endswith((".gz", ".xz", ".zst"))
    return st.st_size * (8 if packed else 1)


def small_text(*paths: Path | str | None) -> bool:
    """Whether each given file (None: none) holds at most SMALL_TEXT of text (`text_bytes`)."""
    sizes = [text_bytes(Path(p)) for p in paths if p is not None]
    return all(n is not None and n <= SMALL_TEXT for n in sizes)


def check_path(path: Path) -> os.stat_result:
    """The path's stat if it is a regular file or a directory; otherwise a TraceError that says
    why."""
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
            raise TraceError(path, f"is {kind}, not a regular file "
                                   "(attrib reads regular files and folders)")
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


def compression(raw: bytes) -> str | None:
    """"gzip", "xz" or "zstd" from a file's magic bytes; None for an uncompressed file."""
    if raw[:2] == GZIP_MAGIC:
        return "gzip"
    if raw[:6] == XZ_MAGIC:
        return "xz"
    if raw[:4] == ZSTD_MAGIC:
        return "zstd"
    return None


def _stream(kind: str, raw: bytes) -> Any:
    """A file object that decompresses `raw` (xz or zstd) as it is read."""
    if kind == "xz":
        return lzma.LZMAFile(io.BytesIO(raw))
    return _zstd().ZstdDecompressor().stream_reader(io.BytesIO(raw), read_across_frames=True)


def _stream_errors(kind: str) -> tuple[type[BaseException], ...]:
    """What a corrupt xz or zstd stream raises."""
    zstd = _zstd() if kind == "zstd" else None
    return (lzma.LZMAError, EOFError, OSError) + ((zstd.ZstdError,) if zstd else ())


def _zstd_readable(path: Path, kind: str | None) -> None:
    """A TraceError where `path` is zstd-compressed and zstandard is not installed."""
    if kind == "zstd" and _zstd() is None:
        raise TraceError(path, "zstd-compressed: install the zstandard package "
                               "(pip install 'attrib[zstd]') or decompress it (zstd -d)")


def _bomb(path: Path, kind: str, limit: int, size: int) -> TraceError:
    """Data of `kind` (`size` bytes compressed) that expands past `limit` bytes: refused."""
    return TraceError(path, f"{kind} expands past {limit >> 20} MB ({RATIO_LIMIT}x its "
                            f"{size / 1e6:.1f} MB): refused as a decompression bomb")


def head(path: Path, n: int = 65536) -> bytes:
    """Up to n leading bytes, decompressed if compressed (b"" when the first block is
    unreadable)."""
    with open_file(path) as fh:
        raw = fh.read(max(n, 1 << 16))
    kind = compression(raw)
    if kind is None:
        return raw[:n]
    if kind == "gzip":
        try:
            out = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, n)
        except zlib.error:
            return b""
        if out.strip() or len(out) < n:
            return out
        with open_file(path) as fh:  # blanks only: the whole (compressed) file, to pass them
            return _past_space(path, fh.read(), n)
    _zstd_readable(path, kind)
    out = b""
    try:
        with _stream(kind, raw) as f:
            while len(out) < n and (part := f.read(n - len(out))):
                out += part
    except _stream_errors(kind):
        pass  # the first 64 kB of a whole file: a cut here is the end of what there is
    return out


def _past_space(path: Path, raw: bytes, n: int) -> bytes:
    """Up to n bytes of a gzip's content from its first non-blank byte (blanks streamed and
    dropped, every member in turn), under `inflate_limit`: the head of a trace behind GBs of
    whitespace, or a decompression bomb named as one."""
    limit, seen, out, pos = inflate_limit(len(raw)), 0, b"", 0
    while pos < len(raw) and len(out) < n:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        buf = memoryview(raw)[pos:]
        try:
            while buf and not d.eof and len(out) < n:
                part = d.decompress(buf, _STEP)
                buf = d.unconsumed_tail
                seen += len(part)
                out += part if out else part.lstrip()
                if seen > limit:
                    ratio = f"{RATIO_LIMIT}x its {len(raw) / 1e6:.1f} MB"
                    raise TraceError(path, f"gzip expands past {limit >> 20} MB ({ratio}) of "
                                           "blanks before any content: refused as a "
                                           "decompression bomb")
        except zlib.error:
            break
        if not d.eof or d.unused_data[:2] != GZIP_MAGIC:
            break
        pos = len(raw) - len(d.unused_data)
    return out[:n]


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
                    raise _bomb(path, "gzip", limit, len(raw))
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


def unpack(path: Path, kind: str, raw: bytes) -> tuple[bytearray, bool]:
    """(data, cut) of an xz or zstd file, as `gunzip` does for gzip: streamed, refused past
    `inflate_limit`; corrupt data, or a cut with nothing before it, is a TraceError."""
    _zstd_readable(path, kind)
    limit = inflate_limit(len(raw))
    out = bytearray()
    try:
        with _stream(kind, raw) as f:  # small reads: a stream cut short keeps what came before
            while part := f.read(_STREAM_STEP):
                out += part
                if len(out) > limit:
                    raise _bomb(path, kind, limit, len(raw))
    except _stream_errors(kind) as exc:
        if not out:
            raise TraceError(path, f"corrupt or truncated {kind} data ({exc})") from None
        return out, True
    return out, False


def read_bytes(path: Path) -> tuple[bytes | bytearray, bool]:
    """(content, cut): the whole file, decompressed with bounds if compressed; `cut` for a
    compressed stream cut short."""
    with open_file(path) as fh:
        try:
            raw = fh.read()
        except OSError as exc:
            raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    kind = compression(raw)
    if kind is None:
        return raw, False
    if kind == "gzip":
        return gunzip(path, raw)
    return unpack(path, kind, raw)


_IN_STEP = 4 << 20  # compressed bytes read at a time when streaming


class Inflow:
    """A file's content as it is read, in blocks of up to `block` bytes: decompressed with the
    bounds and errors of `read_bytes` (a bomb refused, corrupt data with nothing before it a
    TraceError), without holding the file or its content whole. After iterating, `cut` says
    whether a compressed stream ended early (what came before it was given)."""

    def __init__(self, path: Path, block: int = _STEP) -> None:
        self.path, self.block, self.cut = path, block, False
        with open_file(path) as fh:
            self.kind = compression(fh.read(8))

    def __iter__(self):
        with open_file(self.path) as fh:
            size = os.fstat(fh.fileno()).st_size
            if self.kind is None:
                try:
                    while part := fh.read(self.block):
                        yield part
                except OSError as exc:
                    raise TraceError(self.path, f"cannot read: {exc.strerror or exc}") from None
            elif self.kind == "gzip":
                yield from self._gunzip(fh, size)
            else:
                yield from self._unpack(fh, size)

    def _bomb(self, size: int, kind: str) -> TraceError:
        limit = inflate_limit(size)
        return TraceError(self.path, f"{kind} expands past {limit >> 20} MB ({RATIO_LIMIT}x its "
                                     f"{size / 1e6:.1f} MB): refused as a decompression bomb")

    def _gunzip(self, fh: Any, size: int):
        """`gunzip`, streamed: members in turn, trailing garbage ignored."""
        limit, total, more = inflate_limit(size), 0, True
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        buf = b""
        while True:
            if not buf and more:
                buf = fh.read(_IN_STEP)
                more = bool(buf)
            if not buf:
                if not d.eof:
                    if not total:
                        raise TraceError(self.path, "truncated gzip file with no readable data")
                    self.cut = True
                return
            try:
                out = d.decompress(buf, self.block)
            except zlib.error as exc:
                if not total:
                    raise TraceError(self.path, f"corrupt gzip data ({exc})") from None
                self.cut = True
                return
            buf = d.unconsumed_tail
            total += len(out)
            if total > limit:
                raise self._bomb(size, "gzip")
            if out:
                yield out
            if d.eof:
                buf = d.unused_data + buf
                while len(buf) < 2 and more:
                    part = fh.read(_IN_STEP)
                    buf, more = buf + part, bool(part)
                if buf[:2] != GZIP_MAGIC:
                    return  # trailing garbage after the last member is ignored, as gzip does
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def _unpack(self, fh: Any, size: int):
        """`unpack`, streamed (small reads: a stream cut short keeps what came before)."""
        _zstd_readable(self.path, self.kind)
        limit, total, parts, held = inflate_limit(size), 0, [], 0
        if self.kind == "xz":
            stream: Any = lzma.LZMAFile(fh)
        else:
            stream = _zstd().ZstdDecompressor().stream_reader(fh, read_across_frames=True)
        try:
            with stream as f:
                while part := f.read(_STREAM_STEP):
                    total += len(part)
                    if total > limit:
                        raise self._bomb(size, str(self.kind))
                    parts.append(part)
                    held += len(part)
                    if held >= self.block:
                        yield b"".join(parts)
                        parts, held = [], 0
        except _stream_errors(str(self.kind)) as exc:
            if not total:
                raise TraceError(self.path,
                                 f"corrupt or truncated {self.kind} data ({exc})") from None
            self.cut = True
        if parts:
            yield b"".join(parts)
