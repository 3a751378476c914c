"""Steps of a salvaged trace: a file cut short keeps its CPU events longer than its GPU ones (a
Kineto trace lists GPU events after the CPU ones), so its last steps can have an annotation and no
kernel. Those steps are no measurement: they are dropped, and the truncation warning says how
many."""

from __future__ import annotations

import polars as pl

from attrib.trace import TRUNCATED, Trace, TraceWarning


def drop_empty_steps(steps: pl.DataFrame, trace: Trace) -> tuple[pl.DataFrame, Trace]:
    """(steps, trace) with the steps without GPU work left out of a truncated trace that has
    kernels, and that count added to its truncation warning; both unchanged otherwise."""
    cut = [w for w in trace.meta.warnings if w.kind == TRUNCATED]
    if not cut or trace.kernels.height == 0 or "n_kernels" not in steps.columns:
        return steps, trace
    empty = steps.filter(pl.col("n_kernels").fill_null(0) == 0)
    if empty.height == 0:
        return steps, trace
    phases = ", ".join(f"{n} {p}" for p, n in sorted(empty.group_by("phase").len().iter_rows()))
    note = (f"; dropped {empty.height} step(s) with no GPU work ({phases}): "
            "the cut came before their kernels")
    warnings = tuple(TraceWarning(w + note, TRUNCATED) if w is cut[0] else w
                     for w in trace.meta.warnings)
    return steps.filter(pl.col("n_kernels").fill_null(0) > 0), trace.with_meta(warnings=warnings)
