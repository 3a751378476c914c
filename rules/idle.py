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

import polars as pl

from attrib.components.patterns import BLOCKING_COPY, SYNC
from attrib.pipeline import Attribution
from attrib.reads import Reads
from rules.finding import kernels_in, steps_in
from rules.intervals import Spans, busy, covered, merge, ms, spans, uncovered

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


def _kind(w0: pl.Series, w1: pl.Series) -> pl.Expr:
    """The cause of each stretch (w, a, b) of kernel idle of window w in [w0, w1): the one from
    the window's start before_first_kernel (the whole window where no kernel runs in it), the
    one to its end after_last_kernel, those between launch_gaps."""
    # a stretch (of positive length) starts at its window's start only if first, ends at its
    # end only if last
    first = pl.col("a") == pl.lit(w0).gather(pl.col("w"))
    last = pl.col("b") == pl.lit(w1).gather(pl.col("w"))
    return (pl.when(first).then(pl.lit("before_first_kernel"))
            .when(last).then(pl.lit("after_last_kernel")).otherwise(pl.lit("launch_gaps")))


def _causes(st: pl.DataFrame, kern: Spans, copy: Spans, copy_or_sync: Spans) -> pl.LazyFrame:
    """Per row w of `st` (step windows window_start, window_end) with a stretch where no kernel
    runs: its nanoseconds by cause (see the module docstring) and its launch gaps; `kern`,
    `copy` and `copy_or_sync` are merged (disjoint, sorted) intervals."""
    w0, w1 = st["window_start"].cast(pl.Int64), st["window_end"].cast(pl.Int64)
    w = pl.Series("w", range(st.height), pl.Int64)
    g = uncovered(w, w0, w1, *kern).rename({"step": "w"})
    c = covered(g["a"], g["b"], *copy).alias("c")
    cs = covered(g["a"], g["b"], *copy_or_sync).alias("cs")
    rest = (pl.col("b") - pl.col("a")) - pl.col("cs")
    kinds = ("before_first_kernel", "after_last_kernel", "launch_gaps")
    return g.lazy().with_columns(c, cs, _kind(w0, w1).alias("kind")).group_by("w").agg(
        pl.col("c").sum().alias("blocking_copies"),
        (pl.col("cs") - pl.col("c")).sum().alias("synchronization"),
        *[rest.filter(pl.col("kind") == k).sum().alias(k) for k in kinds],
        (pl.col("kind") == "launch_gaps").sum().cast(pl.Int64).alias("gaps"))


def idle_causes(a: Attribution, phase: str) -> pl.DataFrame:
    """Per step of `phase`: step_ms, idle_ms (no kernel running), GPU copy
    ms, and the ms of each cause in CAUSES."""
    st = steps_in(a, phase).drop_nulls(["window_start", "window_end"]).sort("step")
    k = kernels_in(a, phase, columns=())  # only counted per step
    calls = a.trace.launches
    cols = ("start_ns", "dur_ns")
    kern = busy(a.trace.kernels)
    memcpy = a.trace.copies.filter(pl.col("kind") == "memcpy").select(cols)
    blocking = calls.filter(pl.col("name").str.contains(BLOCKING_COPY)).select(cols)
    copy = busy(memcpy, blocking)
    sync = merge(*spans(calls.filter(pl.col("name").str.contains(SYNC)).select(cols)))
    cps = busy(a.trace.copies)
    copy_or_sync = merge(pl.concat([copy[0], sync[0]]), pl.concat([copy[1], sync[1]]))
    # once, not a filter of every kernel per step
    kernels = k.lazy().group_by("step").agg(pl.len().cast(pl.Int64).alias("kernels"))
    gpu_copy = covered(st["window_start"], st["window_end"], *cps).alias("gpu_copy_ms")
    ns = (
        st.lazy().select(pl.int_range(pl.len(), dtype=pl.Int64).alias("w"), "step", "step_ms",
                         gpu_copy)
        .join(kernels, on="step", how="left", maintain_order="left")
        .join(_causes(st, kern, copy, copy_or_sync), on="w", how="left", maintain_order="left")
        .with_columns(pl.col("kernels", "gaps", *CAUSES).fill_null(0))
        .select(pl.col("step").cast(pl.Int64), pl.col("step_ms").cast(pl.Float64), "kernels",
                pl.sum_horizontal(CAUSES).alias("idle_ms"), "gaps", "gpu_copy_ms", *CAUSES)
        .collect(engine="in-memory")
    )
    # the nanosecond figures in ms: the causes' sum as the ms of their integer sum
    return ns.with_columns(ms(ns[c]) for c in ("idle_ms", "gpu_copy_ms", *CAUSES))
