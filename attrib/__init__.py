"""attrib: where an LLM inference step's milliseconds and bytes go, per model component.

    import attrib
    an = attrib.analyze("trace.json.gz", arch="gfx1201") # an attrib.Analysis (typed, frozen)
    dec = an.phase("decode")                             # per step: the mean counted step
    dec.components                                       # a polars DataFrame, one row per component
    an.findings                                          # the rules' findings, by ms per step
    an.to_json(), an.save("run.analysis.json")          # the attrib.analysis/1 document
    attrib.Analysis.load("run.analysis.json") == an      # decoded back: the same analysis

`attrib.analyze` is `attrib.app.analyze` and `attrib.Analysis` is `attrib.analysis.Analysis`,
resolved on first use: `import collectors` loads only the contract modules (attrib.trace,
attrib.errors), never the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attrib.version import __version__

__all__ = ["Analysis", "analyze", "__version__"]

if TYPE_CHECKING:
    from attrib.analysis import Analysis
    from attrib.app import analyze


def __getattr__(name: str) -> Any:
    if name == "analyze":
        from attrib.app import analyze

        return analyze
    if name == "Analysis":
        from attrib.analysis import Analysis

        return Analysis
    raise AttributeError(f"module 'attrib' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
