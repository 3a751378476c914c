"""Text that is safe to print on a terminal: any renderer passes trace-derived strings through here.

Kernel and annotation names come from the trace, which anyone may have written: an ANSI or OSC
escape in one could recolour, retitle or rewrite the user's terminal, a `\\r` could overwrite the
line before it. Escape sequences are removed, line breaks and tabs become spaces, other control
characters (C0, DEL, C1, bidirectional overrides) are removed.

`plain` and `plain_tree` are the same without turning line breaks and tabs into spaces: the one
pass every Analysis gets when it is made (attrib.app), so that no output format (JSON, CSV, xlsx,
parquet, HTML, the plots' SVG text) and no warning carries an escape a trace's text held.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import msgspec
from msgspec.structs import replace

_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"          # CSI: colours, cursor moves, erase
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window title, hyperlinks, clipboard
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"     # DCS, SOS, PM, APC strings
    r"|\x1b.?"                            # any other escape
    r"|\x9b[0-?]*[ -/]*[@-~]"            # 8-bit CSI
)
_SPACES = re.compile(r"[\t\n\r\v\f]")
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` without escape sequences or control characters (line breaks and tabs -> spaces)."""
    if text.isprintable():
        return text
    return _CONTROLS.sub("", _SPACES.sub(" ", _ESCAPES.sub("", text)))


_BREAKS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def plain(text: str) -> str:
    """`text` without escape sequences or control characters, tabs and line feeds kept (a
    carriage return, which overwrites a line, is removed)."""
    if text.isprintable():
        return text
    return _BREAKS.sub("", _ESCAPES.sub("", text))


_LEAVES = (int, float, type(None))


def printable_tree(obj: Any, clean: Callable[[str], str] = printable) -> Any:
    """A JSON-like document (dicts, lists, strings) or a tree of records (dataclasses: the Analysis)
    with every string passed through `clean` (`printable`; `plain_tree` passes `plain`). What
    needs no change is returned as it is (the same object)."""
    if isinstance(obj, str):
        return clean(obj)
    if isinstance(obj, _LEAVES):  # most of the Analysis' leaves (per-step series): nothing to clean
        return obj
    if isinstance(obj, tuple):  # tens of thousands of (start, end) pairs: kept, not rebuilt
        if all(isinstance(v, _LEAVES) for v in obj):
            return obj
        return type(obj)(printable_tree(v, clean) for v in obj)
    if isinstance(obj, list):
        return [printable_tree(v, clean) for v in obj]
    if isinstance(obj, dict):
        # the terminal's copy has every key as text; the Analysis' own keep their types
        return {clean(k) if isinstance(k, str) else clean(str(k)) if clean is printable else k:
                printable_tree(v, clean) for k, v in obj.items()}
    if isinstance(obj, msgspec.Struct):
        fields = {f: printable_tree(getattr(obj, f), clean) for f in obj.__struct_fields__}
        return replace(obj, **fields)
    return obj


def plain_tree(obj: Any) -> Any:
    """`printable_tree` keeping tabs and line feeds: every string of `obj` passed through `plain`."""
    return printable_tree(obj, plain)
