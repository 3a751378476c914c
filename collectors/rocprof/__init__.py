"""rocprof / rocprofv3 outputs (placeholder until the rocprof readers land)."""

from __future__ import annotations

from pathlib import Path


def sniff(path: Path, head: bytes) -> str | None:
    """The rocprof format of `path`, or None if it is not rocprof output."""
    return None


def read(path: Path, fmt: str, **options):
    from attrib.errors import TraceError

    raise TraceError(path, f"{fmt} reader not available")
