"""The one way attrib writes a file: whole or not at all, and never over a file it was not told
to replace.

Each output is written to a hidden temporary file in the target's folder, flushed and fsynced, then
renamed into place: a failure (a full disk, a signal, a crash) leaves the old file as it was and no
temporary file behind. Without `force` the last step is an exclusive create (a hard link, which
fails if the name exists): of concurrent runs writing one name, exactly one wins. The collectors
write their trace and stamp with it too, so it lives in the contract layer (stdlib only).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import IO, Iterator, Sequence

from attrib.errors import TraceError

APPEARED = "appeared meanwhile (another run wrote it); pass --force to overwrite it"

# the files the running command reads (`protect`): no write of this module ever replaces one
_INPUTS: tuple[Path, ...] = ()


def protect(inputs: Sequence[Path]) -> None:
    """Name the running command's inputs (traces, --capture, --baseline, config and arch files, an
    input folder's files): until the next call, writing one of them, by any spelling or through a
    symlink, is a TraceError (exit 2), --force or not. The CLI names them before any work."""
    global _INPUTS
    _INPUTS = tuple(inputs)


def same_file(a: Path, b: Path) -> bool:
    """The same file (a hard link too); where one is missing, the same path after symlinks."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def input_of(path: Path) -> Path | None:
    """The protected input `path` names (see `protect`), None when it names none."""
    return next((src for src in _INPUTS if same_file(path, src)), None)


def refuse_input(path: Path, inputs: Sequence[Path] | None = None) -> None:
    """A TraceError where `path` is one of `inputs` (default: the protected ones): a trace is often
    the only copy of an hour-long capture, so an input is never an output, --force or not."""
    src = (next((i for i in inputs if same_file(path, i)), None) if inputs is not None
           else input_of(path))
    if src is not None:
        raise TraceError(path, f"is an input of this command ({src}); attrib never writes "
                               "over its input: give the output another name")
_NO_LINK = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK, errno.ENOSYS)


def temp_name(path: Path) -> str:
    """The prefix of the temporary files beside `path` (`.NAME.` + random + `.tmp`)."""
    return f".{path.name}."


def _mktemp(path: Path) -> tuple[int, str]:
    """A new, empty temporary file beside `path`: its descriptor and name. Mode 0666 less the
    umask, as a plain open would give (tempfile.mkstemp's 0600 would hide outputs from a group)."""
    for _ in range(100):
        tmp = os.path.join(path.parent, f"{temp_name(path)}{os.urandom(4).hex()}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))


@contextlib.contextmanager
def staged(path: Path) -> Iterator[tuple[IO[bytes], Path]]:
    """A new temporary file beside `path`, open for writing, and its name, for a writer that streams
    (the capture's gzip); fsynced when the block ends, removed if it raises (KeyboardInterrupt too).
    Then `commit` it."""
    fd, tmp = _mktemp(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh, Path(tmp)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def commit(tmp: Path, path: Path, force: bool) -> None:
    """Move the written `tmp` to `path`: replace it (force), else create it exclusively
    (FileExistsError if the name exists). `tmp` is gone afterwards, whatever happens."""
    try:
        if force:
            os.replace(tmp, path)
        else:
            _create(tmp, path)
        _sync_folder(path.parent)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _create(tmp: Path, path: Path) -> None:
    try:
        os.link(tmp, path)
    except OSError as exc:
        if exc.errno not in _NO_LINK:
            raise
        # no hard links here (FAT, some FUSE mounts): reserve the name, then replace the placeholder
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        os.replace(tmp, path)


def _sync_folder(folder: Path) -> None:
    """The rename itself on disk (best effort: not every filesystem lets a folder be fsynced)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_files(files: Sequence[tuple[Path, bytes]], force: bool) -> None:
    """Write every (path, data) whole, or leave each path as it was.

    A FIFO or device among them is written through as it is; a symlink's target is replaced (the
    link kept). All are staged first, then each is committed. Without `force` a name that appeared since the
    run began is a TraceError (exit 2) and the files this call already created are removed again.
    An OSError is a TraceError naming the file and the cause ("No space left on device"). An
    input of the command (`protect`) is refused before anything is written."""
    for p, _ in files:
        refuse_input(p)
    through = [(p, d) for p, d in files if not_regular(p)]
    for p, d in through:
        _through(p, d)
    # a symlink's target is written (the link stays a link), under its own name
    files = [(Path(os.path.realpath(p)) if os.path.islink(p) else p, d)
             for p, d in files if not not_regular(p)]
    tmps: list[Path] = []
    made: list[Path] = []
    path = files[0][0] if files else Path()
    try:
        for path, data in files:
            _stage(path, data, tmps)
        for (path, _), tmp in zip(files, tmps):
            commit(tmp, path, force)
            made.append(path)
    except BaseException as exc:
        for p in tmps + ([] if force else made):
            with contextlib.suppress(OSError):
                os.unlink(p)
        if isinstance(exc, FileExistsError):
            raise TraceError(path, APPEARED) from None
        if isinstance(exc, OSError):
            kept = "the old file is unchanged" if os.path.lexists(path) else "nothing was written"
            raise TraceError(path, f"cannot write: {exc.strerror or exc}; {kept}") from None
        raise


def _stage(path: Path, data: bytes, tmps: list[Path]) -> None:
    """`data` in a new temporary file beside `path` (its name appended to `tmps`), fsynced."""
    fd, tmp = _mktemp(path)
    tmps.append(Path(tmp))
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def not_regular(path: Path) -> bool:
    """Whether `path` is an existing FIFO, device or socket (after symlinks): written through, not
    replaced."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _through(path: Path, data: bytes) -> None:
    """`data` written into a FIFO or device as it is (no temporary file, no rename: it keeps its
    type); an OSError is a TraceError naming it."""
    try:
        with open(path, "wb") as fh:
            fh.write(data)
    except OSError as exc:
        raise TraceError(path, f"cannot write: {exc.strerror or exc}") from None


def write_file(path: Path, data: bytes | str, force: bool) -> None:
    """Write one file whole (str as UTF-8); see write_files."""
    write_files([(path, data.encode() if isinstance(data, str) else data)], force)


def check_folder(path: Path, force: bool) -> None:
    """Refuse a folder output before any work: a file there, a non-empty folder without `force`,
    a missing parent (attrib makes the folder itself, no folder above it)."""
    if path.exists() and not path.is_dir():
        raise TraceError(path, "is a file; give a folder name (one file per table goes in it)")
    if path.is_dir() and any(path.iterdir()) and not force:
        raise TraceError(path, "is a folder that is not empty; pass --force to write into it")
    if not path.parent.is_dir():
        raise TraceError(path, f"folder {path.parent} does not exist (attrib creates no folders "
                               "above its output)")


def write_folder(path: Path, files: dict[str, bytes], force: bool) -> None:
    """The folder `path` holding `files` (name -> bytes). A new folder is filled under a hidden
    temporary name and renamed into place, so an error leaves nothing; into an existing folder
    (empty, or with `force`) each file is written whole (write_files)."""
    refuse_input(path)
    if path.is_dir():
        write_files([(path / n, data) for n, data in files.items()], force=True)
        return
    tmp = path.parent / f"{temp_name(path)}{os.urandom(4).hex()}.tmp"
    try:
        os.mkdir(tmp)
        for name, data in files.items():
            with open(tmp / name, "xb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        os.rename(tmp, path)
        _sync_folder(path.parent)
    except BaseException as exc:
        for f in tmp.glob("*") if tmp.is_dir() else ():
            with contextlib.suppress(OSError):
                f.unlink()
        with contextlib.suppress(OSError):
            tmp.rmdir()
        if isinstance(exc, OSError):
            why = (APPEARED if path.exists()
                   else f"cannot write: {exc.strerror or exc}; nothing was written")
            raise TraceError(path, why) from None
        raise
