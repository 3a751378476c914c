"""What a reader registers (collectors.registry lists them): its format name, how it recognises a
file, how it reads one (or a folder of them), and what its traces can hold."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from attrib.trace import Trace


class Reader(msgspec.Struct, frozen=True):
    """One trace format.

    name: the format name (the analysis JSON's `source.format`); sniff(path, head): whether a file
    is of this format, from its path and first (decompressed) bytes; read(path): the file as a
    Trace; suffixes: the file names it reads inside a folder; read_folder(folder, files): a folder's
    files of this format as one run (None: a folder may hold one such file, which is read alone);
    title: what a folder holding several is said to hold; cpu_ops: its traces record CPU ops (one
    without GPU kernels is a CPU-only run); document(path): the whole file as parsed JSON, for
    tools that rewrite it (export), None where the format cannot be rewritten.
    """

    name: str
    sniff: Callable[[Path, bytes], bool]
    read: Callable[[Path], Trace]
    suffixes: tuple[str, ...]
    read_folder: Callable[[Path, list[Path]], Trace] | None = None
    title: str = ""
    cpu_ops: bool = False
    document: Callable[[Path], dict[str, Any]] | None = None

    @property
    def exportable(self) -> bool:
        return self.document is not None
