"""The attribution pipeline: Trace -> Attribution, its stages in order.

link (kernel <-> launch <-> op <-> module) -> steps and phases -> components -> tokens -> windows ->
costs. Each stage is a pure function over polars tables.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable

import msgspec
from msgspec.structs import replace
import polars as pl

from attrib.components.classify import classify
from attrib.components.patterns import (BLOCKING_COPY, COMPILE_SPANS, FALLBACK_FRAME,
                                        MATH_SDPA, SOFTMAX_OP, SYNC)
from attrib.components.rope_table import CAST_OPS
from attrib.cost.budget import Budget, for_world
from attrib.cost.kernels import kernel_costs, world_size
from attrib.link.graph_capture import merge
from attrib.link.launches import link
from attrib.steps.phases import (annotated_spans, assign_steps, step_spans,
                                 tokens_from_kernel_names, tokens_from_shapes)
from attrib.steps.tokens import fill_tokens_and_phase, tokens_from_names, with_units
from attrib.steps.excluded import compile_spans, mark_excluded
from attrib.steps.ledger import Facts, Ledger, facts, launch_counts, ledger
from attrib.steps.salvage import drop_empty_steps
from attrib.steps.speculative import ATTENTION_OPS, apply_roles
from attrib.steps.context import SDPA_OPS
from attrib.steps.windows import windows
from attrib.threads import both
from attrib.trace import SCHEMAS, Trace, as_views, coded, compact, joined, views

if TYPE_CHECKING:
    from attrib.steps.chunks import Chunk


class Attribution(msgspec.Struct, frozen=True):
    """The attributed trace: kernels with step, phase and component; the steps table."""

    trace: Trace
    # id, name, start_ns, dur_ns, step, phase, component, evidence, op_id, op, module_path,
    # launch_id, graph, bytes, flops, dtype, cost_model; the text columns as categories (4 bytes
    # a row: attrib.trace.coded), text again through attrib.trace.as_text
    kernels: pl.DataFrame
    steps: pl.DataFrame  # step, phase, tokens, tokens_from, window_start, window_end, ...
    notes: tuple[str, ...]
    ledger: Ledger | None = None  # per step: disjoint (cause, what, ns) rows summing to its window

    def largest(self) -> int:
        """Rows of its largest table (a chunked read's trace keeps a part of its tables)."""
        return max(self.trace.largest(), self.kernels.height)


def attribute(trace: Trace, phase_map: dict[str, str] | None = None, capture: Trace | None = None,
              capture_batch: int | None = None, budget: Budget | None = None,
              whole: Facts | None = None) -> Attribution:
    """Run linking, step/phase split and component mapping over a normalized trace.

    capture: the graph-capture trace of a replay trace; replayed kernels then get the op, shapes and
    module of the launch that captured them (attrib.link.graph_capture). budget: a model config
    (`--model`) pricing ops whose weights are not in their arguments (vLLM's moe_forward).
    whole: the ledger's Facts of the whole trace, when `trace` is a part of it."""
    notes: list[str] = []
    if capture is None:
        compiling = compile_spans(trace)  # the three stages that read them find them once
        # the links and the steps' spans share no result: on two threads
        links, spans = both(lambda: link(trace),
                            lambda: step_spans(trace, phase_map, compiling),
                            rows=trace.largest())
    else:  # the replayed kernels' ops come from the capture: the spans read the merged trace
        trace, links, report = merge(trace, link(trace), capture, batch_size=capture_batch)
        notes.append(report.note())
        compiling = compile_spans(trace)
        spans = step_spans(trace, phase_map, compiling)
    spans, kernel_steps = assign_steps(trace, links, phase_map, compiling, spans)

    def tokens() -> pl.DataFrame:
        """The steps with their tokens: from shapes, then from kernel names. Its notes are the
        only ones added while it runs beside classify (which adds none)."""
        shaped = fill_tokens_and_phase(spans, tokens_from_shapes(trace, spans), notes)
        named = (trace.kernels.select("id", "name", "grid")
                 .join(kernel_steps, on="id", how="left"))
        return tokens_from_names(apply_roles(shaped, trace.ops), tokens_from_kernel_names(named))

    # the components and the steps' tokens share no result: on two threads
    comp, steps = both(lambda: classify(trace, links, kernel_steps, compiling), tokens,
                       rows=trace.largest())
    k = (trace.kernels.select("id", "name", "start_ns", "dur_ns")
         .join(comp, on="id", how="left")
         .join(links.select("id", "launch_id", "graph"), on="id", how="left"))
    k = k.join(steps.select("step", "phase"), on="step", how="left")
    steps = mark_excluded(windows(steps, k, trace.copies, trace.launches), trace, compiling)
    # a salvaged trace: steps cut before their kernels
    steps, trace = drop_empty_steps(steps, trace)
    steps = with_units(steps, trace.ops)
    budget = for_world(budget, world_size(trace))   # a tensor-parallel rank reads its shard
    led, costed = both(
        lambda: ledger(steps, k, trace.copies, trace.launches, trace.ops, trace.frames, whole),
        lambda: kernel_costs(trace, k, steps, budget), rows=trace.largest())
    return Attribution(
        trace=trace,
        kernels=coded(costed),
        steps=steps,
        notes=tuple(notes),
        ledger=led,
    )


def _owned(a: Attribution, chunk: Chunk) -> Attribution:
    """The part of a chunk's attribution that is its own: the steps that start in its own range
    (their kernels, ledger rows), and the stepless kernels that start there."""
    lo, hi = chunk.own
    mine = a.steps.filter((pl.col("cpu_start") >= lo) & (pl.col("cpu_start") < hi))
    ids = mine["step"].implode()
    in_own = pl.col("step").is_null() & (pl.col("start_ns") >= lo) & (pl.col("start_ns") < hi)
    kernels = compact(a.kernels.filter(pl.col("step").is_in(ids) | in_own))
    led = a.ledger
    if led is not None:
        led = Ledger(compact(led.steps.filter(pl.col("step").is_in(ids))),
                     compact(led.intervals.filter(pl.col("step").is_in(ids))))
    bare = a.trace.with_tables(**{t: getattr(a.trace, t).clear() for t in _BIG})
    return Attribution(bare, kernels, compact(mine), a.notes, led)


def _counts(own: Attribution, chunk: Chunk) -> pl.DataFrame:
    """The kernels and copies each thread launched, of a chunk's own kernels and the copies
    whose runtime call starts in its own range."""
    t, (lo, hi) = own.trace, chunk.own
    calls = t.launches.filter((pl.col("start_ns") >= lo) & (pl.col("start_ns") < hi))
    copies = t.copies.join(calls.select("correlation").drop_nulls(), on="correlation",
                           how="semi")
    return launch_counts(own.kernels, copies, t.launches)


def _renumbered(df: pl.DataFrame, shift: int) -> pl.DataFrame:
    """`df` with its chunk-local step ids moved by `shift` to the whole trace's (only the step
    column is new)."""
    return df.with_columns(pl.col("step") + shift)


class NotOneRun(Exception):
    """A chunk's own steps are not one run of its step ids, or its kept kernels are not its
    own: its parts cannot be merged."""


def _merged(trace: Trace, parts: list[Attribution]) -> Attribution:
    """One attribution from the chunks' own parts, steps numbered across the whole trace; the
    list is emptied, each part freed as it is taken in. NotOneRun where a part's steps are
    not one run of ids (the caller attributes the trace whole)."""
    kernels, steps, led, notes = [], [], [], []
    first = 0
    parts.reverse()
    while parts:
        p = parts.pop()
        # a chunk's own steps are one run of its step ids (steps are numbered by start)
        local = p.steps["step"].to_list()
        low = local[0] if local else 0
        if local != list(range(low, low + len(local))):
            raise NotOneRun("a chunk's own steps are not one run of its step ids")
        shift = first - low
        first += p.steps.height
        steps.append(_renumbered(p.steps, shift))
        kernels.append(_renumbered(p.kernels, shift))
        if p.ledger is not None:
            led.append(Ledger(_renumbered(p.ledger.steps, shift),
                              _renumbered(p.ledger.intervals, shift)))
        notes += [n for n in p.notes if n not in notes]
    ledger_ = None if not led else Ledger(pl.concat([x.steps for x in led]),
                                          pl.concat([x.intervals for x in led]))
    return Attribution(trace, _in_id_order(kernels), pl.concat(steps), tuple(notes), ledger_)


Load = Callable[["Chunk"], Trace]
_BIG = ("kernels", "ops", "frames", "launches", "copies")  # a trace's tables but its annotations
# the ops, runtime calls and Python frames the analysis and the rules read by name (beyond those
# the kernels link to): casts of rotary tables, sequence cats and attention ops (speculative
# rounds), attention ops with K (context), compile spans, blocking copies and synchronizing
# calls, linear-attention fallbacks
_EXACT = (*ATTENTION_OPS, *SDPA_OPS, "aten::cat")
_NAMED_OPS = "|".join([CAST_OPS, *(f"^{re.escape(o)}$" for o in _EXACT), COMPILE_SPANS])
_NAMED_CALLS = f"{BLOCKING_COPY}|{SYNC}"
_PARENTS = f"{MATH_SDPA}|{SOFTMAX_OP}"  # the ops' parents read by name
_NAMED_FRAMES = "|".join([FALLBACK_FRAME, COMPILE_SPANS])
# columns only the attribution's stages read (launch geometry, the cost model's strides and
# scalar arguments, the ids that link events, the devices, streams and threads of GPU work and
# ops): no stage after it does (the analysis, the rules, export), so the kept tables hold them
# null (a null literal holds no rows)
_UNREAD = {"kernels": ("grid", "block", "registers", "lds_bytes", "device", "stream",
                       "correlation", "external_id", "launch_id", "pid", "tid"),
           "launches": ("grid", "block", "kernel_name", "external_id"),
           "ops": ("concrete_inputs", "input_strides", "pid", "tid", "external_id")}
# the trace's kernel columns the attributed kernels hold too: the kept table takes them from
# those (one copy of each, not two)
_SHARED = ("name", "start_ns", "dur_ns")


def _named(df: pl.DataFrame, pattern: str) -> pl.Expr:
    names = df["name"].unique()
    return pl.col("name").is_in(names.filter(names.str.contains(pattern)).implode())


def kept(part: Trace, own: Attribution, chunk: Chunk) -> dict[str, pl.DataFrame]:
    """What the analysis and the rules read of a chunk's trace, of its own part: its own
    kernels and the copies its runtime calls made; the ops those kernels link to (and those of
    their parents read by name), and their runtime calls where a later stage reads them
    (`_reads_launches`); the ops, calls and frames read by name that start in its own range.
    Rows another chunk keeps too are the same rows (the same ids)."""
    lo, hi = chunk.own
    mine = (pl.col("start_ns") >= lo) & (pl.col("start_ns") < hi)
    k = own.kernels
    calls = part.launches.filter(mine)
    linked = calls.select("correlation").drop_nulls()
    unlinked = ~pl.col("correlation").is_in(part.launches["correlation"].drop_nulls().implode())
    copies = pl.concat([part.copies.join(linked, on="correlation", how="semi"),
                        part.copies.filter(unlinked.fill_null(True) & mine)])
    ops = part.ops.filter(pl.col("id").is_in(k["op_id"].drop_nulls().implode()))
    # a parent is read for its name alone, and only these (rules.attention's unfused ops)
    parents = part.ops.filter(pl.col("id").is_in(ops["parent"].drop_nulls().implode())
                              & _named(part.ops, _PARENTS))
    named = part.ops.filter(mine & _named(part.ops, _NAMED_OPS))
    linked_calls = part.launches.filter(pl.col("id").is_in(k["launch_id"].drop_nulls().implode()))
    tables = {
        "kernels": part.kernels.join(k.select("id"), on="id", how="semi"),
        "copies": copies,
        "ops": pl.concat([ops, parents, named]),
        "launches": pl.concat([linked_calls if _reads_launches(part, own) else linked_calls.clear(),
                               calls.filter(_named(calls, _NAMED_CALLS))]),
        "frames": part.frames.filter(mine & _named(part.frames, _NAMED_FRAMES)),
    }
    # each id once, in id order: the chunks' parts are then one run, most often (_one_run)
    tables = {t: df.unique("id", keep="first").sort("id") for t, df in tables.items()}
    return {t: compact(_nulled(df, _held_null(t))) for t, df in tables.items()}


def _reads_launches(part: Trace, own: Attribution) -> bool:
    """Whether a later stage reads the runtime calls of the chunk's own kernels: the passes of
    a speculative loop (their forward ends: attrib.steps.rounds), and kernels launched inside a
    fallback frame (rules.linear_attention). Other chunks keep only the calls read by name."""
    roles = "role" in own.steps.columns and own.steps["role"].is_not_null().any()
    return bool(roles) or bool(part.frames["name"].unique().str.contains(FALLBACK_FRAME).any())


def _held_null(table: str) -> tuple[str, ...]:
    """The columns of a kept table that are null until the merge: those no later stage reads,
    and for kernels those taken from the attributed kernels."""
    return (*_UNREAD.get(table, ()), *(_SHARED if table == "kernels" else ()))


def _nulled(df: pl.DataFrame, columns: tuple[str, ...]) -> pl.DataFrame:
    """`df` with those of `columns` it has null, in their dtypes (literals: no rows held)."""
    return df.with_columns(pl.lit(None, df.schema[c]).alias(c) for c in columns
                           if c in df.columns)


def _first_in_id_order(frames: list[pl.DataFrame]) -> pl.Series:
    """Where each id first appears in the frames' rows end to end, in id order."""
    ids = pl.concat([f.select("id") for f in frames], how="vertical_relaxed")
    firsts = ids.with_row_index("_at").unique("id", keep="first")
    return firsts.sort("id")["_at"]


def _column(frames: list[pl.DataFrame], name: str) -> list[pl.Series]:
    """The frames' column `name` (nulls where a frame lacks it)."""
    return [f[name] if name in f.columns else pl.Series(name, [None] * f.height)
            for f in frames]


def _gathered_column(frames: list[pl.DataFrame], name: str, at: pl.Series) -> pl.Series:
    parts = _column(frames, name)
    if any(s.dtype == pl.String for s in parts):
        return as_views([s.cast(pl.String) for s in parts], at)
    return joined(parts).gather(at)


def _one_run(frames: list[pl.DataFrame]) -> bool:
    """Whether the frames, in one schema, hold their ids in one increasing run end to end (each
    frame's ids increasing, each frame's below the next's)."""
    last = None
    for f in frames:
        if f.schema != frames[0].schema:
            return False
        if not f.height:
            continue
        ids = f["id"]
        if ids.null_count() or not (ids.diff().fill_null(1) > 0).all():
            return False
        if last is not None and ids[0] <= last:
            return False
        last = ids[-1]
    return True


def _in_id_order(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """The frames' rows as one table, each id once (its first row), in id order; the frames
    are emptied. Frames that are one run of ids are that table as they stand (their chunks
    kept: nothing is copied). Else it is built a column at a time, each column taken out of
    the frames as it is made: the rows are held about once."""
    if frames and _one_run(frames):
        out = pl.concat(frames, rechunk=False)
        frames.clear()
        return out
    names = list(dict.fromkeys(c for f in frames for c in f.columns))
    at = _first_in_id_order(frames)
    columns = []
    for name in names:
        columns.append(_gathered_column(frames, name, at))
        frames[:] = [f.drop(name, strict=False) for f in frames]
    frames.clear()
    return pl.DataFrame(columns)


def _in_order(table: str, columns: list[str]) -> list[str]:
    """The contract's columns of `table`, then the others of `columns`."""
    return [*SCHEMAS[table], *(c for c in columns if c not in SCHEMAS[table])]


def _gathered(marks: Trace, kept_parts: list[dict[str, pl.DataFrame]]) -> Trace:
    """One trace of the chunks' kept tables (each row once, in id order) and the annotations;
    each table's parts are freed as it is made. The columns held null stay null literals (the
    kernels' shared ones are filled by `_with_shared`)."""
    tables = {}
    for t in list(kept_parts[0]):
        parts = [p.pop(t) for p in kept_parts]
        schema = parts[0].schema
        null = [c for c in _held_null(t) if c in schema]
        df = _in_id_order([f.drop(null) for f in parts])
        nulls = [pl.lit(None, schema[c]).alias(c) for c in null]
        tables[t] = df.with_columns(nulls).select(_in_order(t, list(schema)))
    return marks.with_tables(**tables)


def _with_shared(a: Attribution) -> Attribution:
    """`a` with its trace's kernels' `_SHARED` columns those of its attributed kernels (the same
    rows, in the same id order: their buffers shared)."""
    t, k = a.trace.kernels, a.kernels
    if not t["id"].equals(k["id"]):
        raise NotOneRun("the kept kernels are not the attributed kernels")
    kernels = t.with_columns(views(k[c]) if k.schema[c] == pl.Categorical else k[c]
                             for c in _SHARED)
    return replace(a, trace=a.trace.with_tables(kernels=kernels))


def attribute_chunks(chunks: list[Chunk], load: Load, trace: Trace,
                     phase_map: dict[str, str] | None = None,
                     budget: Budget | None = None, gather: bool = False) -> Attribution:
    """The attribution of a trace chunk by chunk (attrib.steps.chunks): load(chunk) is the
    trace of one chunk; `trace` is what the result holds as its trace, or with gather, its
    annotations, to which the chunks' `kept` tables are added. A chunk whose ledger Facts are
    not the whole trace's (known once every chunk is attributed) is attributed again with the
    whole's."""
    parts, local, counts, keep = [], [], [], []
    for c in chunks:
        part = load(c)
        a = attribute(part, phase_map, budget=budget)
        local.append(facts(a.kernels, part.copies, part.launches))
        own = _owned(a, c)
        counts.append(_counts(replace(own, trace=part), c))
        if gather:
            keep.append(kept(part, own, c))
        parts.append(own)
    if gather:
        trace = _gathered(trace, keep)
        del keep
    timed = pl.concat([p.kernels.select("component", "start_ns", "dur_ns") for p in parts])
    whole = facts(timed, trace.copies, trace.launches, pl.concat(counts))
    del timed
    for i, c in enumerate(chunks):
        if not local[i].holds(whole):
            parts[i] = _owned(attribute(load(c), phase_map, budget=budget, whole=whole), c)
    merged = _merged(trace, parts)
    return _with_shared(merged) if gather else merged


def attribute_in_chunks(trace: Trace, steps: int, halo: int = 1,
                        phase_map: dict[str, str] | None = None,
                        budget: Budget | None = None) -> Attribution:
    """`attribute`, `steps` annotated steps at a time (attribute_chunks over attrib.steps.chunks
    windows of the trace in memory). A trace without step annotations is attributed whole."""
    from attrib.steps.chunks import plan, window  # only the chunked path needs it: a fast start

    chunks = plan(annotated_spans(trace, phase_map), steps, halo)
    if len(chunks) == 1:
        return attribute(trace, phase_map, budget=budget)
    return attribute_chunks(chunks, lambda c: window(trace, c), trace, phase_map, budget)
