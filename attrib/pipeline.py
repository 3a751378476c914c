"""The attribution pipeline: Trace -> Attribution, its stages in order.

link (kernel <-> launch <-> op <-> module) -> steps and phases -> components -> tokens -> windows ->
costs. Each stage is a pure function over polars tables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

import polars as pl

from attrib.components.classify import classify
from attrib.components.patterns import BLOCKING_COPY, COMPILE_SPANS, FALLBACK_FRAME, SYNC
from attrib.components.rope_table import CAST_OPS
from attrib.cost.budget import Budget, for_world
from attrib.cost.kernels import kernel_costs, world_size
from attrib.link.graph_capture import merge
from attrib.link.launches import link
from attrib.steps.phases import (annotated_spans, assign_steps, tokens_from_kernel_names,
                                 tokens_from_shapes)
from attrib.steps.tokens import fill_tokens_and_phase, tokens_from_names, with_units
from attrib.steps.excluded import mark_excluded
from attrib.steps.ledger import Facts, Ledger, facts, launch_counts, ledger
from attrib.steps.salvage import drop_empty_steps
from attrib.steps.speculative import ATTENTION_OPS, apply_roles
from attrib.steps.context import SDPA_OPS
from attrib.steps.windows import windows
from attrib.trace import SCHEMAS, Trace

if TYPE_CHECKING:
    from attrib.steps.chunks import Chunk


@dataclass(frozen=True)
class Attribution:
    """The attributed trace: kernels with step, phase and component; the steps table."""

    trace: Trace
    # id, name, start_ns, dur_ns, step, phase, component, evidence, op_id, op, module_path,
    # launch_id, graph, bytes, flops, dtype, cost_model
    kernels: pl.DataFrame
    steps: pl.DataFrame  # step, phase, tokens, tokens_from, window_start, window_end, ...
    notes: tuple[str, ...]
    ledger: Ledger | None = None  # per step: disjoint (cause, what, ns) rows summing to its window


def attribute(trace: Trace, phase_map: dict[str, str] | None = None, capture: Trace | None = None,
              capture_batch: int | None = None, budget: Budget | None = None,
              whole: Facts | None = None) -> Attribution:
    """Run linking, step/phase split and component mapping over a normalized trace.

    capture: the graph-capture trace of a replay trace; replayed kernels then get the op, shapes and
    module of the launch that captured them (attrib.link.graph_capture). budget: a model config
    (`--model`) pricing ops whose weights are not in their arguments (vLLM's moe_forward).
    whole: the ledger's Facts of the whole trace, when `trace` is a part of it."""
    links = link(trace)
    notes: list[str] = []
    if capture is not None:
        trace, links, report = merge(trace, links, capture, batch_size=capture_batch)
        notes.append(report.note())
    spans, kernel_steps = assign_steps(trace, links, phase_map)
    comp = classify(trace, links, kernel_steps)
    shaped = fill_tokens_and_phase(spans, tokens_from_shapes(trace, spans), notes)
    steps = apply_roles(shaped, trace.ops)
    k = (trace.kernels.select("id", "name", "start_ns", "dur_ns")
         .join(comp, on="id", how="left")
         .join(links.select("id", "launch_id", "graph"), on="id", how="left"))
    grids = k.join(trace.kernels.select("id", "grid"), on="id", how="left")
    steps = tokens_from_names(steps, tokens_from_kernel_names(grids))
    k = k.join(steps.select("step", "phase"), on="step", how="left")
    steps = mark_excluded(windows(steps, k, trace.copies, trace.launches), trace)
    # a salvaged trace: steps cut before their kernels
    steps, trace = drop_empty_steps(steps, trace)
    steps = with_units(steps, trace.ops)
    budget = for_world(budget, world_size(trace))   # a tensor-parallel rank reads its shard
    led = ledger(steps, k, trace.copies, trace.launches, trace.ops, trace.frames, whole)
    return Attribution(
        trace=trace,
        kernels=kernel_costs(trace, k, steps, budget),
        steps=steps,
        notes=tuple(notes),
        ledger=led,
    )


def _interned(s: pl.Series) -> pl.Series:
    """The column as views of its distinct values, each value's text held once."""
    return _as_views([s])


def compact(df: pl.DataFrame) -> pl.DataFrame:
    """`df` with each text column re-made from its distinct values, each held once: a chunk's
    part holds no more text than it reads (rows filtered from a table share its text buffers:
    polars strings are views)."""
    text = [c for c, t in df.schema.items() if t == pl.String]
    return df.with_columns([_interned(df[c]) for c in text]) if text else df


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
    """A chunk's own steps are not one run of its step ids: its parts cannot be merged."""


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
_NAMED_FRAMES = "|".join([FALLBACK_FRAME, COMPILE_SPANS])
# columns only the attribution's stages read (launch geometry, the cost model's strides and
# scalar arguments): the analysis and the rules never do
_ATTRIBUTION_ONLY = {"kernels": ("grid", "block", "registers", "lds_bytes"),
                     "launches": ("grid", "block", "kernel_name"),
                     "ops": ("concrete_inputs", "input_strides")}


def _named(df: pl.DataFrame, pattern: str) -> pl.Expr:
    names = df["name"].unique()
    return pl.col("name").is_in(names.filter(names.str.contains(pattern)).implode())


def kept(part: Trace, own: Attribution, chunk: Chunk) -> dict[str, pl.DataFrame]:
    """What the analysis and the rules read of a chunk's trace, of its own part: its own
    kernels and the copies its runtime calls made; the ops and runtime calls those kernels link
    to (and the ops' parents); the ops, calls and frames read by name that start in its own
    range. Rows another chunk keeps too are the same rows (the same ids)."""
    lo, hi = chunk.own
    mine = (pl.col("start_ns") >= lo) & (pl.col("start_ns") < hi)
    k = own.kernels
    calls = part.launches.filter(mine)
    linked = calls.select("correlation").drop_nulls()
    unlinked = ~pl.col("correlation").is_in(part.launches["correlation"].drop_nulls().implode())
    copies = pl.concat([part.copies.join(linked, on="correlation", how="semi"),
                        part.copies.filter(unlinked.fill_null(True) & mine)])
    ops = part.ops.filter(pl.col("id").is_in(k["op_id"].drop_nulls().implode()))
    parents = part.ops.filter(pl.col("id").is_in(ops["parent"].drop_nulls().implode()))
    named = part.ops.filter(mine & _named(part.ops, _NAMED_OPS))
    tables = {
        "kernels": part.kernels.join(k.select("id"), on="id", how="semi"),
        "copies": copies,
        "ops": pl.concat([ops, parents, named]),
        "launches": pl.concat([
            part.launches.filter(pl.col("id").is_in(k["launch_id"].drop_nulls().implode())),
            calls.filter(_named(calls, _NAMED_CALLS))]),
        "frames": part.frames.filter(mine & _named(part.frames, _NAMED_FRAMES)),
    }
    return {t: compact(df.drop(_ATTRIBUTION_ONLY.get(t, ()))) for t, df in tables.items()}


def _first_in_id_order(frames: list[pl.DataFrame]) -> pl.Series:
    """Where each id first appears in the frames' rows end to end, in id order."""
    ids = pl.concat([f.select("id") for f in frames], how="vertical_relaxed")
    firsts = ids.with_row_index("_at").unique("id", keep="first")
    return firsts.sort("id")["_at"]


def _column(frames: list[pl.DataFrame], name: str) -> list[pl.Series]:
    """The frames' column `name` (nulls where a frame lacks it)."""
    return [f[name] if name in f.columns else pl.Series(name, [None] * f.height)
            for f in frames]


def _joined(parts: list[pl.Series]) -> pl.Series:
    """The parts end to end, in their common supertype."""
    return pl.concat([s.to_frame() for s in parts], how="vertical_relaxed").to_series()


def _as_views(parts: list[pl.Series], at: pl.Series | None = None) -> pl.Series:
    """Text rows `at` (all by default) of the parts end to end, as views of their distinct
    values, each value's text held once (a gather of the text itself would copy each row's
    bytes)."""
    distinct = _joined([s.unique() for s in parts]).unique()
    table = distinct.to_frame().with_row_index("_code")
    codes = pl.concat([s.to_frame().join(table, on=s.name, how="left",
                                         maintain_order="left")["_code"] for s in parts])
    return distinct.gather(codes if at is None else codes.gather(at))


def _gathered_column(frames: list[pl.DataFrame], name: str, at: pl.Series) -> pl.Series:
    parts = _column(frames, name)
    if any(s.dtype == pl.String for s in parts):
        return _as_views([s.cast(pl.String) for s in parts], at)
    return _joined(parts).gather(at)


def _in_id_order(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """The frames' rows as one table, each id once (its first row), in id order. Built a column
    at a time, each column taken out of the frames as it is made: the rows are held about once
    (the frames, emptied, are freed)."""
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
    each table's parts are freed as it is made. The columns only the attribution reads are
    null (a null literal holds no rows)."""
    tables = {}
    for t in list(kept_parts[0]):
        df = _in_id_order([p.pop(t) for p in kept_parts])
        nulls = [pl.lit(None, SCHEMAS[t][c]).alias(c) for c in _ATTRIBUTION_ONLY.get(t, ())]
        tables[t] = df.with_columns(nulls).select(_in_order(t, df.columns)) if nulls else df
    return marks.with_tables(**tables)


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
    return _merged(trace, parts)


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
