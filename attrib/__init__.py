"""attrib: where an LLM inference step's milliseconds and bytes go, per model component.

    from attrib import analyze
    result = analyze("trace.json.gz")      # the attrib.analysis/1 document, a dict
"""

from __future__ import annotations

__version__ = "0.1.0"


def analyze(path, **options):
    """Load a trace (any supported format) and return its analysis (schema attrib.analysis/1)."""
    from attrib.analysis import analyze_path

    return analyze_path(path, **options)
