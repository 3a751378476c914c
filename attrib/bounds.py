"""The domain of each number attrib takes from outside: a trace's metadata, a model config, an
argument, a TOML file. A figure outside it is refused with one line naming where it came from,
the field and the value (attrib.errors), before any arithmetic can turn it into a crash or into
confident nonsense (negative bytes, 1e24 bytes, a gate that never fires).

A contract module: the readers (collectors), the cost models and the CLI all check against the
same bounds.
"""

from __future__ import annotations

import math
import re
from typing import Any

from attrib.errors import TraceError, UsageError

MAX_WORLD = 1 << 16  # ranks of one process group
MAX_CONTEXT = 1 << 24  # K/V positions one sequence reads (16 M; the longest models: 10 M)
MAX_BATCH = 1 << 20  # sequences (tokens) per step
MAX_DIM = 1 << 24  # hidden, intermediate, vocabulary, head sizes of a model config
MAX_LAYERS = 1 << 16
MAX_EXPERTS = 1 << 16
BITS = (1.0, 32.0)  # bits per weight, scales included (1.58 ternary .. 32 fp32)
MAX_PERCENT = 1000  # a gate or effect in percent (10x slower)
MAX_LINK_GBS = 100_000  # interconnect GB/s per direction (NVLink 5: 900)
MAX_TOML_DEPTH = 32  # arrays and inline tables inside each other (the device database: 2)
MAX_TOML_CHARS = 4 << 20


def shown(value: Any) -> str:
    """The value as the message shows it: short even for an integer of thousands of digits."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**24:
        return f"{'-' if value < 0 else ''}an integer of {len(format(abs(value), 'x')) * 4} bits"
    if isinstance(value, str):
        return repr(value[:40] + ("..." if len(value) > 40 else ""))
    text = repr(value) if not isinstance(value, float) else f"{value:g}"
    return text if len(text) <= 60 else text[:57] + "..."


def whole(value: Any, lo: int, hi: int | None) -> int | None:
    """The value as an int if it is a whole number (an int, or a float or numeric string with no
    fraction; not a bool) within lo..hi (hi None: no upper bound); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            return None
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return None
        value = int(value)
    if not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        return None
    return value


def real(value: Any, lo: float, hi: float, lo_open: bool = False) -> float | None:
    """The value as a finite float within lo..hi (lo excluded where lo_open); else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        x = float(value)
    except OverflowError:
        return None
    if not math.isfinite(x) or x > hi or x < lo or (lo_open and x == lo):
        return None
    return x


def span(lo: float, hi: float, lo_open: bool = False) -> str:
    """lo..hi as the messages write it ("> 0 and <= 1e+05", "1..65536")."""
    def fmt(x: float) -> str:
        if isinstance(x, int) or (x.is_integer() and abs(x) < 1e8):
            return str(int(x))
        return f"{x:g}"
    return f"> {fmt(lo)} and <= {fmt(hi)}" if lo_open else f"{fmt(lo)}..{fmt(hi)}"


class OutOfDomain(ValueError):
    """A figure outside its domain, where the code that finds it does not know the file: `str()`
    is `FIELD = VALUE: must be ...`, to which the caller adds the file (a TraceError)."""


def out_of_domain(field: str, value: Any, want: str) -> str:
    """The message: `FIELD = VALUE: must be WANT`."""
    return f"{field} = {shown(value)}: must be {want}"


def bits(value: Any, field: str = "weight bits") -> float:
    """Bits per weight: a finite number in BITS (OutOfDomain, the caller names where from)."""
    got = real(value, *BITS)
    if got is None:
        raise OutOfDomain(out_of_domain(field, value, f"a finite number in {span(*BITS)}"))
    return got


def count(value: Any, field: str, lo: int, hi: int | None = None, where: object = None,
          strict: bool = False) -> int:
    """A whole number in lo..hi (hi None: no bound); else a TraceError naming `where` (a file)
    and the field, or, without `where`, a UsageError (an argument). strict: an int, not a float
    or a numeric string (an argument of the API)."""
    typed = not strict or (isinstance(value, int) and not isinstance(value, bool))
    got = whole(value, lo, hi)
    if got is None or not typed:
        want = f"in {span(lo, hi)}" if hi is not None else f">= {lo}"
        problem = out_of_domain(field, value, f"a whole number {want}")
        raise UsageError(problem) if where is None else TraceError(where, problem)
    return got


def figure(value: Any, field: str, lo: float, hi: float, lo_open: bool = False,
           where: object = None) -> float:
    """A finite number in lo..hi; else a TraceError naming `where` and the field, or, without
    `where`, a UsageError."""
    got = real(value, lo, hi, lo_open)
    if got is None:
        problem = out_of_domain(field, value, f"a finite number {span(lo, hi, lo_open)}"
                                if lo_open else f"a finite number in {span(lo, hi)}")
        raise UsageError(problem) if where is None else TraceError(where, problem)
    return got


# what may open or close a nesting level in TOML text, strings and comments skipped
_TOML_TOKENS = re.compile(r'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"(?:[^"\\\n]|\\.)*"|'
                          r"'[^'\n]*'|#[^\n]*|[\[\]{}]", re.S)


def toml_text(text: str, origin: object) -> None:
    """A TraceError (naming `origin`) for TOML text too large, or with arrays and inline tables
    nested deeper than MAX_TOML_DEPTH (the parser recurses once per level: 5,000 levels crashed
    it), before any parser reads it."""
    if len(text) > MAX_TOML_CHARS:
        raise TraceError(origin, f"{len(text):,} characters of TOML: more than the "
                                 f"{MAX_TOML_CHARS:,} a device file may hold")
    depth = 0
    for m in _TOML_TOKENS.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > MAX_TOML_DEPTH:
                line = text.count("\n", 0, m.start()) + 1
                raise TraceError(origin, f"arrays or tables nested more than {MAX_TOML_DEPTH} "
                                         f"deep (line {line}): not a device file")
        elif c in "]}":
            depth = max(0, depth - 1)


_INT64 = (-(1 << 63), (1 << 63) - 1)


def unrepresentable(obj: Any, root: str) -> str | None:
    """The first number in a JSON value (a stamp) that no JSON output can hold: an integer
    outside 64 bits, NaN or an infinity, as `PATH = VALUE: ...`; None when there is none. Walked
    without recursion (a stamp may nest deep)."""
    todo: list[tuple[str, Any]] = [(root, obj)]
    while todo:
        where, v = todo.pop()
        if isinstance(v, dict):
            todo.extend((f"{where}.{k}", x) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            todo.extend((f"{where}[{i}]", x) for i, x in reversed(list(enumerate(v))))
        elif isinstance(v, bool):
            continue
        elif isinstance(v, int) and not _INT64[0] <= v <= _INT64[1]:
            return out_of_domain(where, v, "a 64-bit integer")
        elif isinstance(v, float) and not math.isfinite(v):
            return out_of_domain(where, v, "a finite number")
    return None
