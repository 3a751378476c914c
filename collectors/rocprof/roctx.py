"""ROCTx ranges from Python through ctypes; silent no-ops where no ROCTx library is present.

Under `rocprofv3 --marker-trace` the SDK's roctx library is already preloaded, so the symbols are
looked up in the process first, then in librocprofiler-sdk-roctx.so and the legacy roctracer
libroctx64.so. The lookup happens on first use (not at import: rocprofv3's preload must be in
place) and its result is memoised. Nothing here raises.

    from collectors.rocprof import roctx
    with roctx.region("decode"):
        model.step()
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from typing import Iterator

_LIBRARIES = ("librocprofiler-sdk-roctx.so", "librocprofiler-sdk-roctx.so.1", "libroctx64.so",
              "libroctx64.so.4")


def _candidates() -> Iterator[ctypes.CDLL]:
    with contextlib.suppress(OSError):
        yield ctypes.CDLL(None)
    roots = [os.environ.get("ROCM_PATH", ""), "/opt/rocm"]
    for name in _LIBRARIES:
        for path in [name] + [os.path.join(r, "lib", name) for r in roots if r]:
            with contextlib.suppress(OSError):
                yield ctypes.CDLL(path)


@functools.lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL | None:
    """The first library exporting roctxRangePushA, with argument types set, or None."""
    try:
        for lib in _candidates():
            if hasattr(lib, "roctxRangePushA") and hasattr(lib, "roctxRangePop"):
                lib.roctxRangePushA.argtypes = [ctypes.c_char_p]
                lib.roctxRangePushA.restype = ctypes.c_int
                lib.roctxRangePop.argtypes = []
                lib.roctxRangePop.restype = ctypes.c_int
                if hasattr(lib, "roctxMarkA"):
                    lib.roctxMarkA.argtypes = [ctypes.c_char_p]
                    lib.roctxMarkA.restype = None
                return lib
    except Exception:  # never let profiling annotations break the program
        return None
    return None


def available() -> bool:
    """Whether ROCTx calls reach a real library."""
    return _lib() is not None


def range_push(name: str) -> int:
    """Open a nested range on this thread; returns its depth, or -1 when ROCTx is absent."""
    lib = _lib()
    if lib is None:
        return -1
    try:
        return int(lib.roctxRangePushA(str(name).encode("utf-8", "replace")))
    except Exception:
        return -1


def range_pop() -> int:
    """Close this thread's innermost range; -1 when ROCTx is absent."""
    lib = _lib()
    if lib is None:
        return -1
    try:
        return int(lib.roctxRangePop())
    except Exception:
        return -1


def mark(name: str) -> None:
    """An instant marker (no-op without ROCTx)."""
    lib = _lib()
    if lib is not None and hasattr(lib, "roctxMarkA"):
        with contextlib.suppress(Exception):
            lib.roctxMarkA(str(name).encode("utf-8", "replace"))


@contextlib.contextmanager
def region(name: str) -> Iterator[None]:
    """`with region("decode"):` pushes a range for the block and pops it afterwards."""
    range_push(name)
    try:
        yield
    finally:
        range_pop()
