"""attrib: where an LLM inference step's milliseconds and bytes go, per model component.

    import attrib
    doc = attrib.analyze("trace.json.gz", phase="decode", arch="gfx1201")   # the attrib.analysis/1 document

`attrib.analyze` is `attrib.app.analyze`, resolved on first use: `import collectors` loads only the
contract modules (attrib.trace, attrib.errors), never the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attrib.version import __version__
__all__ = ["analyze", "__version__"]

if TYPE_CHECKING:
    from attrib.app import analyze


def __getattr__(name: str) -> Any:
    if name == "analyze":
        from attrib.app import analyze

        return analyze
    raise AttributeError(f"module 'attrib' has no attribute {name!r}")
