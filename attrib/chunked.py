"""A huge trace attributed a chunk of steps at a time (attrib.steps.chunks cuts it): each chunk by
the pipeline's own stages (attrib.pipeline.attribute), its own steps kept, the parts merged into one
Attribution numbered across the whole trace.

What survives a chunk for the analysis and the rules after the merge is its own kernels, the ops
and runtime calls they link to, and what the stages (`STAGES`) and the rules (their `Rule.reads`,
given by the caller) declare they read by name (attrib.reads): nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from msgspec.structs import replace
import polars as pl

from attrib.components import rope_table
from attrib.cost.budget import Budget
from attrib.pipeline import Attribution, attribute
from attrib.reads import Reads, pattern, union
from attrib.steps import context, excluded, rounds, speculative
from attrib.steps.idle import recorded_threads
from attrib.steps.ledger import Ledger, facts, launch_counts
from attrib.steps.phases import annotated_spans
from attrib.trace import SCHEMAS, Trace, as_views, compact, joined, views

if TYPE_CHECKING:
    from attrib.steps.chunks import Chunk

# what the analysis's stages read by name after the merge: the rotary tables' casts, attention ops
# with K (context, speculative rounds), the rounds' sequence cats and pass ends, compile spans
STAGES = union([rope_table.READS, context.READS, speculative.READS, rounds.READS, excluded.READS])


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
                     compact(led.intervals.filter(pl.col("step").is_in(ids))), led.recorded)
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


def _merged(trace: Trace, parts: list[Attribution],
            recorded: tuple[tuple[int, int], ...] = ()) -> Attribution:
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
                                          pl.concat([x.intervals for x in led]), recorded)
    return Attribution(trace, _in_id_order(kernels), pl.concat(steps), tuple(notes), ledger_)


Load = Callable[["Chunk"], Trace]
_BIG = ("kernels", "ops", "frames", "launches", "copies")  # a trace's tables but its annotations
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


def _named(df: pl.DataFrame, regexes: tuple[str, ...]) -> pl.Expr:
    """Rows whose name matches one of `regexes` (each distinct name matched once)."""
    alternation = pattern(regexes)
    if alternation is None:
        return pl.lit(False)
    names = df["name"].unique()
    return pl.col("name").is_in(names.filter(names.str.contains(alternation)).implode())


def kept(part: Trace, own: Attribution, chunk: Chunk,
         reads: Reads = STAGES) -> dict[str, pl.DataFrame]:
    """What the analysis and the rules read of a chunk's trace, of its own part: its own
    kernels and the copies its runtime calls made; the ops those kernels link to (and their
    parents that `reads` names), and their runtime calls where `reads` asks for them
    (`_reads_launches`); the ops, calls and frames `reads` names that start in its own range.
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
    parents = part.ops.filter(pl.col("id").is_in(ops["parent"].drop_nulls().implode())
                              & _named(part.ops, reads.parents))
    named = part.ops.filter(mine & _named(part.ops, reads.ops))
    linked_calls = part.launches.filter(pl.col("id").is_in(k["launch_id"].drop_nulls().implode()))
    if not _reads_launches(part, own, reads):
        linked_calls = linked_calls.clear()
    tables = {
        "kernels": part.kernels.join(k.select("id"), on="id", how="semi"),
        "copies": copies,
        "ops": pl.concat([ops, parents, named]),
        "launches": pl.concat([linked_calls, calls.filter(_named(calls, reads.calls))]),
        "frames": part.frames.filter(mine & _named(part.frames, reads.frames)),
    }
    # each id once, in id order: the chunks' parts are then one run, most often (_one_run)
    tables = {t: df.unique("id", keep="first").sort("id") for t, df in tables.items()}
    return {t: compact(_nulled(df, _held_null(t))) for t, df in tables.items()}


def _reads_launches(part: Trace, own: Attribution, reads: Reads) -> bool:
    """Whether a later stage reads the runtime calls of the chunk's own kernels (`reads`): the
    passes of a speculative loop, where the steps have roles (attrib.steps.rounds: their forward
    ends); kernels launched inside a frame so named (rules.linear_attention's fallbacks). Other
    chunks keep only the calls read by name."""
    roles = "role" in own.steps.columns and own.steps["role"].is_not_null().any()
    if reads.kernel_calls_if_roles and roles:
        return True
    frames = pattern(reads.kernel_calls_if_frames)
    return frames is not None and bool(part.frames["name"].unique().str.contains(frames).any())


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
                     budget: Budget | None = None, gather: bool = False,
                     reads: Reads = Reads()) -> Attribution:
    """The attribution of a trace chunk by chunk (attrib.steps.chunks): load(chunk) is the
    trace of one chunk; `trace` is what the result holds as its trace, or with gather, its
    annotations, to which the chunks' `kept` tables are added: what the stages (STAGES) and
    `reads` (the rules': rules.reads()) read. A chunk whose ledger Facts are not the whole
    trace's (known once every chunk is attributed) is attributed again with the whole's."""
    wanted = union([STAGES, reads])
    parts, local, counts, keep = [], [], [], []
    recorded: set[tuple[int, int]] = set()
    for c in chunks:
        part = load(c)
        a = attribute(part, phase_map, budget=budget)
        mine = recorded_threads(part.ops, part.frames)
        recorded |= set(mine)
        local.append(facts(a.kernels, part.copies, part.launches, recorded=mine))
        own = _owned(a, c)
        counts.append(_counts(replace(own, trace=part), c))
        if gather:
            keep.append(kept(part, own, c, wanted))
        parts.append(own)
    if gather:
        trace = _gathered(trace, keep)
        del keep
    timed = pl.concat([p.kernels.select("component", "start_ns", "dur_ns") for p in parts])
    whole = facts(timed, trace.copies, trace.launches, pl.concat(counts),
                  recorded=tuple(sorted(recorded)))
    del timed
    for i, c in enumerate(chunks):
        if not local[i].holds(whole):
            parts[i] = _owned(attribute(load(c), phase_map, budget=budget, whole=whole), c)
    merged = _merged(trace, parts, whole.recorded)
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
