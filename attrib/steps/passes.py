"""Forward passes found from the GPU side, for the kernels of a thread whose CPU ops the profiler did
not record (a serving loop on a worker thread: transformers' continuous batching, issue 36).

Without its ops there is no embedding op to start a pass at, but its kernels keep a pass's shape:
the layers' GEMMs, the LM head's GEMM, then the kernel that picks the next tokens (an argmax, or a
sampler's: `TOKEN_PICK`); the next pass starts at its token lookup (an `embedding` pattern of
attrib/data/kernel_patterns.csv, or a row gather) before its first GEMM. So where a pick lies
between two GEMMs, a pass starts at the first lookup kernel after the last such pick (the host's
batch preparation between, masks and copies, stays with the pass it follows, as a recorded
thread's split at its embedding op leaves it); without a lookup, at the kernel after the pick.
The first pass starts at the last lookup before the thread's first GEMM. Each start is its
kernel's launch time, where the embedding op would have begun. Kernels are taken in launch order,
the thread's program order; names only, no vendor's library: ROCm and CUDA traces alike.

Limits: a model that picks twice a pass (a vision detector's argmaxes) is cut twice; a pass
whose tokens are picked on the host (no pick kernel) joins the next. A pass's phase and tokens are
not in its kernels: `fill_from_stamp` takes them from the capture stamp where its figures account
for the passes found, else they stay unknown with a note.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from attrib.bounds import MAX_BATCH, MAX_CONTEXT, whole
from attrib.components.patterns import GEMM_LIKE, ROW_GATHER, TOKEN_PICK, component_patterns
from attrib.steps.idle import recorded_threads, unrecorded_threads
from attrib.trace import STEP_NAME, Trace

GPU_PIECE = " (from kernels)"  # the marker's end of a pass found this way (attrib.steps.phases)
_BY = ["pid", "tid"]
_T = pl.Schema({"t": pl.Int64})


def _pattern(component: str) -> str:
    """The kernel-name pattern of a component in the table (its rows joined)."""
    table = component_patterns().filter(pl.col("component") == component)
    return "|".join(f"(?:{p})" for p in table["pattern"].to_list())


def _last_before(flag: str) -> pl.Expr:
    """Per kernel: the index of the last kernel before it with `flag`, null without one."""
    return pl.when(flag).then(pl.col("i")).shift(1).forward_fill()


def _first_after(flag: str) -> pl.Expr:
    """Per kernel: the index of the first kernel after it with `flag`, null without one."""
    return pl.when(flag).then(pl.col("i")).shift(-1).backward_fill()


def pass_starts(names: pl.Series) -> pl.Series:
    """Indices (Int64) of the kernels (in launch order) that start a forward pass: the first
    pass's, then one per token pick between two GEMMs (the module's docstring). Empty when fewer
    than two GEMMs. One query."""
    flags = names.to_frame("name").lazy().select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("i"),
        pl.col("name").str.contains(GEMM_LIKE).alias("g"),
        pl.col("name").str.contains(TOKEN_PICK).alias("s"),
        (pl.col("name").str.contains(_pattern("embedding"))
         | pl.col("name").str.contains(ROW_GATHER)).alias("l"))
    i, first_g = pl.col("i"), pl.col("i").filter("g").first()
    # the first pass: at the last lookup before the first GEMM, else at the first kernel
    first = i.filter(pl.col("l") & (i < first_g)).last().fill_null(0).alias("at")
    two = (pl.col("g").sum() >= 2).alias("two")  # else no pass at all
    # at each GEMM after the first: the last pick before it, and the first lookup after that pick
    marks = flags.with_columns(_last_before("s").alias("pick"), _last_before("g").alias("gemm"),
                               _first_after("l").alias("look"))
    pick, nxt = pl.col("pick"), pl.col("look").gather(pl.col("pick"))
    cut = pl.col("g") & (pick > pl.col("gemm"))  # a pick since the GEMM before: a pass ended
    at = pl.when(nxt.is_not_null() & (nxt < i)).then(nxt).otherwise(pick + 1).alias("at")
    starts = marks.select(at, cut.fill_null(False).alias("cut")).filter("cut").select("at")
    passes = pl.concat([flags.select(first, two).filter("two").select("at"), starts])
    return passes.collect(engine="in-memory").to_series()


def gpu_forward_starts(trace: Trace) -> pl.DataFrame:
    """t: the launch time of each forward pass's first kernel on the threads whose ops were not
    recorded (none in a trace without ops: rocprof, whose steps come from attrib.steps.periodic)."""
    threads = unrecorded_threads(recorded_threads(trace.ops, trace.frames), trace.launches)
    if not threads.height or not trace.kernels.height:
        return pl.DataFrame(schema=_T)
    calls = (trace.launches.join(threads.select(_BY), on=_BY, how="semi")
             .filter(pl.col("correlation").is_not_null())
             .select("correlation", pl.col("start_ns").alias("t"), *_BY))
    k = (trace.kernels.select("name", "correlation").drop_nulls("correlation")
         .join(calls, on="correlation").sort("t"))
    out = []
    for (_pid, _tid), part in k.group_by(_BY, maintain_order=True):
        at = pass_starts(part["name"])
        if at.len() > 1:  # one pass is no split
            out.append(part["t"].gather(at).to_frame())
    return pl.concat(out).cast(_T).sort("t") if out else pl.DataFrame(schema=_T)


def _span_of(marker: str | None) -> str | None:
    """The marker of the span a pass found from kernels split ("" for a trace without step
    spans), else None."""
    if not marker or not marker.endswith(GPU_PIECE):
        return None
    span, _, index = (" " + marker.removesuffix(GPU_PIECE)).rpartition(" forward ")
    return span.strip() if index.isdigit() else None


def _schedule(span: str, passes: int, provenance: dict[str, Any]) -> list[tuple] | None:
    """(phase, tokens, tokens_from) per pass of one span when the stamp accounts for them: its
    `batch` requests of `context_length` prompt tokens each, and the span's `(tokens=N)` generated
    with N = batch x passes (one token sampled per request and pass: every request admitted into
    the first pass, no chunked prefill). Then the first pass is their prefill and the others
    decode one token per request; else None."""
    m = STEP_NAME.match(span)
    batch = whole(provenance.get("batch"), 1, MAX_BATCH)
    prompt = whole(provenance.get("context_length"), 1, MAX_CONTEXT)
    if m is None or batch is None or prompt is None or int(m["tokens"]) != batch * passes:
        return None
    first = ("prefill", batch * prompt, "stamp (batch x context_length)")
    return [first, *[("decode", batch, "stamp (batch, 1 token each)")] * (passes - 1)]


def fill_from_stamp(steps: pl.DataFrame, provenance: dict[str, Any],
                    notes: list[str]) -> pl.DataFrame:
    """The passes found from kernels (no shapes: their phase unknown, tokens null) take phase and
    tokens from the capture stamp where `_schedule` accounts for them; else they stay unknown. A
    note says which."""
    if not steps["marker"].str.ends_with(GPU_PIECE).any():
        return steps
    spans: dict[str, list[int]] = {}
    for step, marker, phase, tokens in steps.select("step", "marker", "phase", "tokens").iter_rows():
        span = _span_of(marker)
        if span is not None and phase == "unknown" and tokens is None:
            spans.setdefault(span, []).append(step)
    rows = []
    for span, members in spans.items():
        plan = _schedule(span, len(members), provenance)
        notes.append(_note(span, len(members), plan is not None))
        rows += [(s, *p) for s, p in zip(sorted(members), plan or [])]
    got = pl.DataFrame(rows, schema={"step": pl.Int64, "_phase": pl.Utf8, "_tokens": pl.Int64,
                                     "_from": pl.Utf8}, orient="row")
    if not got.height:
        return steps
    s = steps.join(got, on="step", how="left")
    return s.with_columns(pl.coalesce("_phase", "phase").alias("phase"),
                          pl.coalesce("_tokens", "tokens").alias("tokens"),
                          pl.coalesce("_from", "tokens_from").alias("tokens_from"),
                          ).drop("_phase", "_tokens", "_from")


def _note(span: str, passes: int, stamped: bool) -> str:
    """What the passes found from kernels of one span are, and where their phases come from."""
    head = (f"{span or 'the trace'}: {passes} forward passes found from the kernels of a thread "
            "whose CPU ops were not recorded (each from its token lookup to its token pick)")
    if stamped:
        return (head + "; the stamp's batch x passes = the span's tokens, so the first pass is "
                "taken as the prefill of batch x context_length tokens and the others as decode "
                "of one token per request: phases and tokens from the stamp, not the trace")
    return (head + "; their phases and tokens are unknown (no shapes, and the stamp's batch, "
            "context_length and the span's tokens do not account for them)")
