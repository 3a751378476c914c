"""Idle by coarse cause, per step (what linear-attention-torch-fallback
reads; the step-time ledger, attrib.steps.ledger, is the account every
report and finding reads).

In a step window, every stretch where no kernel runs (launched by any step)
is attributed, in this order, to: a GPU copy or a blocking copy call on the
host (a memcpy in `copies`; cudaMemcpy, hipMemcpyWithStream, ... in
`launches`), a host synchronization (*Synchronize), the stretch before the
step's first kernel (host work: input preparation, Python), the stretch
after its last, and what is left between kernels: launch gaps. The steps
stage counts copies as GPU-busy; here a copy is a cause of kernel idle, so
the causes add up to the steps' idle plus the copy time that no kernel
overlaps.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from attrib.components.patterns import BLOCKING_COPY, SYNC
from attrib.pipeline import Attribution
from attrib.reads import Reads
from rules.finding import kernels_in, steps_in
from rules.intervals import Spans, covered, merge, spans

CAUSES = (
    "blocking_copies",
    "synchronization",
    "before_first_kernel",
    "after_last_kernel",
    "launch_gaps",
)
REFS = {
    "launch_gaps": (
        "https://github.com/vllm-project/vllm/issues/32180",
        "https://github.com/mudler/vllm.cpp/issues/332",
    ),
    "blocking_copies": (
        "https://github.com/warpfront/hipfire/pull/239",
        "https://github.com/mudler/vllm.cpp/issues/41",
    ),
    "synchronization": ("https://github.com/warpfront/hipfire/pull/239",),
}
ALL_REFS = tuple(dict.fromkeys(u for refs in REFS.values() for u in refs))

# idle_causes: blocking copies and synchronizing calls by name
READS = Reads(calls=(BLOCKING_COPY, SYNC))


def _step_causes(
    w0: int, w1: int, kern: Spans, copy: Spans, copy_or_sync: Spans
) -> dict[str, float]:
    """Kernel-idle nanoseconds of one step window by cause (see the module
    docstring); `kern`, `copy` and `copy_or_sync` are merged (disjoint,
    sorted) intervals."""
    gs, ge = kern
    i, j = np.searchsorted(ge, w0, side="right"), np.searchsorted(gs, w1, side="left")
    ms, me = np.clip(gs[i:j], w0, w1), np.clip(ge[i:j], w0, w1)
    if not len(ms):
        a, b, kind = np.array([w0]), np.array([w1]), np.array(["before_first_kernel"])
    else:
        a = np.concatenate([[w0], me])
        b = np.concatenate([ms, [w1]])
        gaps = ["launch_gaps"] * (len(ms) - 1)
        kind = np.array(["before_first_kernel"] + gaps + ["after_last_kernel"])
    keep = b > a
    a, b, kind = a[keep], b[keep], kind[keep]
    c = covered(a, b, *copy)
    cs = covered(a, b, *copy_or_sync)
    rest = (b - a) - cs
    out = {
        "blocking_copies": float(c.sum()),
        "synchronization": float((cs - c).sum()),
    }
    for k in ("before_first_kernel", "after_last_kernel", "launch_gaps"):
        out[k] = float(rest[kind == k].sum())
    out["gaps"] = int((kind == "launch_gaps").sum())
    return out


def idle_causes(a: Attribution, phase: str) -> pl.DataFrame:
    """Per step of `phase`: step_ms, idle_ms (no kernel running), GPU copy
    ms, and the ms of each cause in CAUSES."""
    st = steps_in(a, phase).drop_nulls(["window_start", "window_end"]).sort("step")
    k = kernels_in(a, phase, columns=())  # only counted per step
    calls = a.trace.launches
    cols = ("start_ns", "dur_ns")
    kern = merge(*spans(a.trace.kernels.select(cols).drop_nulls()))
    memcpy = a.trace.copies.filter(pl.col("kind") == "memcpy").select(cols)
    blocking = calls.filter(pl.col("name").str.contains(BLOCKING_COPY)).select(cols)
    copy = merge(*spans(pl.concat([memcpy, blocking]).drop_nulls()))
    sync = merge(*spans(calls.filter(pl.col("name").str.contains(SYNC)).select(cols)))
    cps = merge(*spans(a.trace.copies.select(cols).drop_nulls()))
    copy_or_sync = merge(
        np.concatenate([copy[0], sync[0]]), np.concatenate([copy[1], sync[1]])
    )
    # once, not a filter of every kernel per step
    kernels = dict(k.group_by("step").len().iter_rows())
    rows = []
    for s in st.iter_rows(named=True):
        w0, w1 = s["window_start"], s["window_end"]
        res = _step_causes(w0, w1, kern, copy, copy_or_sync)
        gpu_copy = covered(np.array([w0]), np.array([w1]), *cps)[0]
        idle_ns = sum(res[c] for c in CAUSES)
        rows.append({"step": s["step"], "step_ms": s["step_ms"],
                     "kernels": kernels.get(s["step"], 0),
                     "idle_ms": idle_ns / 1e6, "gaps": res["gaps"],
                     "gpu_copy_ms": gpu_copy / 1e6,
                     **{c: res[c] / 1e6 for c in CAUSES}})
    schema = {"step": pl.Int64, "step_ms": pl.Float64, "kernels": pl.Int64,
              "idle_ms": pl.Float64, "gaps": pl.Int64,
              "gpu_copy_ms": pl.Float64, **{c: pl.Float64 for c in CAUSES}}
    return pl.DataFrame(rows, schema=schema)
