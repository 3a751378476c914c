"""The step-time ledger: every nanosecond of every step window once, with one cause.

A window is cut into disjoint stretches, in this order:
- `kernels` (what = component): time some kernel runs, the union over streams. Where kernels of
  several components overlap, the time goes to one component: the component with the most kernel
  time in the trace first, `communication` last (compute hides it).
- `copy` (what = memcpy direction or memset): a GPU copy runs and no kernel does.
- The rest is GPU idle (cut in attrib.steps.idle). A stretch of it that ends at GPU work launched
  at least `OUTSIDE_MIN_NS` before the end of the stretch is `outside`: the work was in the queue
  and waited on something the trace does not show running (a stream wait on an event recorded before
  the window, or work from before the profile). The rest of each idle stretch is host-side:
  - `launch` (what = between launches | inside graph replays): stretches up to `LAUNCH_GAP_NS`;
  - `sync` (what = the call and the op that made it): longer stretches, while the launching thread
    is inside a synchronizing call (stream/event/device synchronize, a blocking copy);
  - `host` (what = the innermost op or Python frame that holds at least half of the stretch);
  - `profiler`: an estimate of the profiler's own cost, carved out of the host and launch rows: the
    CPU events that start in the stretch times a per-event cost measured on an H200 (PROFILER_NS).

`Ledger.steps` sums, per step, to its window exactly; `phase_ledger` is the mean over a phase's
counted steps and sums to the mean step time. The idle rows read no component (`idle_side`: the
pipeline finds them beside the components' stage); `ledger` adds the kernels and copy rows.
"""

from __future__ import annotations

from typing import Callable

import msgspec
from msgspec import field
import polars as pl

from attrib.threads import both
from attrib.trace import grouped
from attrib.steps.excluded import counted
from attrib.steps.idle import idle_rows, recorded_threads
from attrib.steps.spans import busy, first_cover, of_events, points_in, unions, uncovered

# the profiler's own cost (an estimate): a caveat about the measurement, never a cause to fix
OWN_COST = "profiler"
CAUSES = ("kernels", "copy", "outside", "sync", "host", "launch", OWN_COST)
# host nanoseconds the torch profiler adds per recorded event, measured on the H200 (torch 2.11,
# bench/ledger_capture.py `m`, tests/fixtures/captured/ledger_measure.json): 40 eager decode steps
# take 95.4 ms bare, 136.4 ms with record_shapes (+41.0 ms over 19,852 ops and runtime/driver
# calls: 2.07 us each), 179.2 ms with with_stack too (+42.8 ms over 32,256 Python frames: 1.33 us)
PROFILER_NS = {"op": 2_070, "frame": 1_330}
_BY = ["pid", "tid"]
STEP_LEDGER = pl.Schema({"step": pl.Int64, "cause": pl.Utf8, "what": pl.Utf8, "ns": pl.Int64,
                         "n": pl.Int64})
# an interval's cause and what as categories: 4 bytes a row, not a 16-byte view (1.75 M idle
# intervals at 8 GB of trace)
INTERVALS = pl.Schema({"step": pl.Int64(), "cause": pl.Categorical(), "what": pl.Categorical(),
                       "start_ns": pl.Int64(), "end_ns": pl.Int64()})


class Ledger(msgspec.Struct, frozen=True):
    """steps: step, cause, what, ns, n (rows of one step sum to its window). intervals: the idle
    stretches behind the outside/sync/host/launch rows (step, cause, what, start_ns, end_ns), before
    the profiler estimate is carved out: the per-gap statistics (count, median) come from them."""

    steps: pl.DataFrame
    intervals: pl.DataFrame
    # the threads with an op or a Python frame in the whole trace (attrib.steps.idle:
    # recorded_threads); a thread that launched GPU work without one had its ops unrecorded
    recorded: tuple[tuple[int, int], ...] = ()
    # phase_ledger by (function, phase), with the steps frame it reads: the
    # analysis and several rules ask for the same phase's ledger (one query each). Never given:
    # each Ledger is built new, never replaced (a replaced one would keep it)
    _memo: dict[tuple[str, str], tuple[pl.DataFrame, pl.DataFrame]] = field(
        default_factory=dict)


def _memoized(led: Ledger, kind: str, steps: pl.DataFrame, phase: str,
              compute: Callable[[], pl.DataFrame]) -> pl.DataFrame:
    """compute(), once per (kind, phase) of `led` while asked with the same `steps` frame."""
    got = led._memo.get((kind, phase))
    if got is not None and got[0] is steps:
        return got[1]
    out = compute()
    led._memo[(kind, phase)] = (steps, out)
    return out


def _spans(df: pl.DataFrame | pl.LazyFrame, key: pl.Expr, labels: dict[str, int]
           ) -> pl.LazyFrame:
    """The rows' spans (g, s, e), g the label of their `key` (rows of no label left out)."""
    g = key.cast(pl.String).replace_strict(labels, default=None, return_dtype=pl.Int64)
    return df.lazy().select(g.alias("g"), *of_events()).drop_nulls("g")


def _busy_rows(steps: pl.DataFrame, k: pl.DataFrame, copies: pl.DataFrame,
               order: tuple[str, ...]) -> pl.LazyFrame:
    """The kernels and copies rows of every step (step, cause, what, ns, n), each instant to
    the first group covering it: the components in `order`, then the copies by kind and
    direction (attrib.steps.spans.first_cover)."""
    component = pl.col("component").fill_null("other")
    parts = [pl.col("kind").fill_null("copy"), pl.col("direction")]
    kind = pl.concat_str(parts, separator=" ", ignore_nulls=True)
    copied = copies.lazy().drop_nulls(["start_ns", "dur_ns"])
    kinds_seen = sorted(copied.select(kind.unique()).collect(engine="in-memory").to_series())
    groups = [("kernels", c) for c in order] + [("copy", w) for w in kinds_seen]
    # a label a group, kernels' first (a component and a copy kind may share a name: memset)
    kernels = _spans(k, component, {c: i for i, c in enumerate(order)})
    copied = _spans(copied, kind, {w: len(order) + i for i, w in enumerate(kinds_seen)})
    spans = pl.concat([kernels, copied]).collect(engine="in-memory")
    windows = steps.select("step", pl.col("window_start").alias("w0"),
                           pl.col("window_end").alias("w1"))
    owned, _ = first_cover(windows, spans)
    named = pl.LazyFrame({"g": range(len(groups)), "cause": [c for c, _ in groups],
                          "what": [w for _, w in groups]},
                         schema={"g": pl.Int64, "cause": pl.String, "what": pl.String})
    return owned.lazy().join(named, on="g").select("step", "cause", "what", "ns", "n")


class Facts(msgspec.Struct, frozen=True):
    """What a step's ledger reads from the whole trace, not the step: the order in which
    components take overlapping kernel time (most kernel time first, `communication` last) and
    the threads that launch GPU work (pid, tid), the one that launches most first."""

    order: tuple[str, ...]
    threads: tuple[tuple[int, int], ...]
    overlaps: tuple[tuple[str, str], ...] = ()  # pairs of components whose kernels overlap
    recorded: tuple[tuple[int, int], ...] = ()  # threads with an op or frame (idle.recorded_threads)

    def holds(self, whole: Facts) -> bool:
        """Whether a part of the trace with these facts gets the ledger the whole trace gives it:
        the same launching threads (the same one first), and each pair of its components whose
        kernels overlap in the whole's order (the order of the others decides nothing)."""
        rank = {c: i for i, c in enumerate(whole.order)}
        mine = {c: i for i, c in enumerate(self.order)}
        agree = all((mine[a] < mine[b]) == (rank[a] < rank[b]) for a, b in self.overlaps)
        same = set(self.threads) == set(whole.threads) and self.threads[:1] == whole.threads[:1]
        # its launching threads are recorded (have ops) as in the whole
        seen = set(self.recorded) & set(self.threads) == set(whole.recorded) & set(self.threads)
        return agree and same and seen


def _overlapping(k: pl.DataFrame) -> tuple[tuple[str, str], ...]:
    """The pairs of components some of whose kernels run at the same time."""
    component = pl.col("component").fill_null("other").cast(pl.String)
    spans = k.lazy().select(component, *of_events())
    # per component, the union of its kernels' time: sorted disjoint (s, e)
    u = unions(spans, ["component"]).collect(engine="in-memory")
    names = sorted(set(u["component"]))
    pairs = []
    for i, a in enumerate(names):
        mine = u.filter(pl.col("component") == a)
        a0, a1 = pl.lit(mine["s"]), pl.lit(mine["e"])
        # per interval of a later component: the last of a's starting before it ends
        last = a0.search_sorted(pl.col("e"), side="left").cast(pl.Int64) - 1
        hit = (last >= 0) & (a1.gather(last.clip(0)) > pl.col("s"))
        later = u.lazy().filter(pl.col("component").is_in(names[i + 1:]))
        met = later.filter(hit).select(pl.col("component").unique()).collect(engine="in-memory")
        pairs += [(a, b) for b in sorted(met["component"])]
    return tuple(pairs)


def _component_order(k: pl.DataFrame) -> tuple[str, ...]:
    last = (pl.col("component") == "communication").alias("_last")
    tot = (k.lazy().select(pl.col("component").fill_null("other"), "dur_ns")
           .group_by("component").agg(pl.col("dur_ns").sum()).with_columns(last)
           .sort(["_last", "dur_ns", "component"], descending=[False, True, False])
           .collect(engine="in-memory"))
    return tuple(tot["component"])


def _gpu_ops(k: pl.DataFrame, copies: pl.DataFrame, launches: pl.DataFrame) -> pl.DataFrame:
    """Every kernel and copy: start_ns, end_ns, graph, launch_id and its launch call's start, end
    and thread (launch_ns, launch_end, pid, tid)."""
    end = (pl.col("start_ns") + pl.col("dur_ns").fill_null(0)).alias("launch_end")
    call = (pl.col("id").alias("launch_id"), pl.col("start_ns").alias("launch_ns"), end,
            "pid", "tid")
    # one query: each step lazy, only the columns read go through it
    la = launches.lazy().select(*call)
    kk = k.lazy().select("start_ns", (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
                         "launch_id", pl.col("graph").fill_null(False))
    kk = kk.join(la, on="launch_id", how="left", maintain_order="left")
    by_corr = (launches.lazy().select("correlation", *call)
               .filter(pl.col("correlation").is_not_null()).unique("correlation"))
    cc = (copies.lazy().select("start_ns", "dur_ns", "correlation")
          .drop_nulls(["start_ns", "dur_ns"]))
    cc = cc.join(by_corr, on="correlation", how="left", maintain_order="left").select(
        "start_ns", (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"), "launch_id",
        pl.lit(False).alias("graph"), "launch_ns", "launch_end", "pid", "tid")
    cols = pl.Schema({"start_ns": pl.Int64, "end_ns": pl.Int64, "launch_id": pl.Int64,
                      "graph": pl.Boolean, "launch_ns": pl.Int64, "launch_end": pl.Int64,
                      "pid": pl.Int64, "tid": pl.Int64})
    both = [kk.select(list(cols)).cast(cols), cc.select(list(cols)).cast(cols)]
    return pl.concat(both).sort("start_ns").collect(engine="in-memory")


def _neighbours(gaps: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """Each gap with the GPU op that ends it (`n_*`: the first op starting at or after its end) and
    whether the op before it belongs to the same graph launch (an intra-graph gap)."""
    nxt = ops.lazy().select(
        pl.col("start_ns").alias("b"),
        pl.col("launch_ns").alias("n_launch"),
        pl.col("launch_end").alias("n_launch_end"),
        pl.col("pid").alias("n_pid"),
        pl.col("tid").alias("n_tid"),
        pl.col("graph").alias("n_graph"),
        pl.col("launch_id").alias("n_lid"),
    )
    prv = ops.lazy().sort("end_ns").select(
        pl.col("end_ns").alias("a"), pl.col("graph").alias("p_graph"),
        pl.col("launch_id").alias("p_lid"))
    g = gaps.lazy().sort("b").join_asof(nxt.sort("b"), on="b", strategy="forward")
    g = g.sort("a").join_asof(prv, on="a", strategy="backward")
    graphs = pl.col("n_graph").fill_null(False) & pl.col("p_graph").fill_null(False)
    same = graphs & (pl.col("n_lid") == pl.col("p_lid"))
    g = g.with_columns(same.fill_null(False).alias("in_graph")).sort("step", "a")
    return g.collect(engine="in-memory")


def _event_times(trace_tables: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame],
                 threads: pl.DataFrame) -> tuple[pl.Series, pl.Series]:
    """Sorted start times of the CPU events (ops and runtime calls; Python frames) on the
    launching threads."""
    ops, frames, launches = trace_tables
    def on(*tables: pl.DataFrame) -> pl.Series:
        rows = pl.concat([t.lazy().select("start_ns", *_BY) for t in tables])
        mine = rows.join(threads.lazy(), on=_BY, how="semi")
        times = mine.select(pl.col("start_ns").drop_nulls().cast(pl.Int64).sort())
        return times.collect(engine="in-memory").to_series()
    return on(ops, launches), on(frames)


def _profiler(rows: pl.DataFrame, events: tuple[pl.Series, pl.Series]) -> pl.DataFrame:
    """Carve the profiler estimate out of host and launch rows: events starting in the row's
    stretch times PROFILER_NS, at most the row's own ns."""
    def inside(times: pl.Series) -> pl.Expr:
        return points_in(times, pl.col("start_ns"), pl.col("end_ns"))

    cost = inside(events[0]) * PROFILER_NS["op"] + inside(events[1]) * PROFILER_NS["frame"]
    carve = pl.col("cause").is_in(["host", "launch"])
    est = pl.when(carve).then(pl.min_horizontal(cost, pl.col("ns"))).otherwise(0)
    priced = rows.lazy().with_columns(est.cast(pl.Int64).alias("_est"))
    kept = priced.with_columns((pl.col("ns") - pl.col("_est")).alias("ns")).drop("_est")
    what = pl.lit("estimate: CPU events x measured cost per event").alias("what")
    prof = priced.select("step", pl.lit(OWN_COST).alias("cause"), what,
                         "start_ns", "end_ns", pl.col("_est").alias("ns"))
    return pl.concat([kept, prof.filter(pl.col("ns") > 0)]).collect(engine="in-memory")


def _per_thread(ops_all: pl.DataFrame) -> pl.LazyFrame:
    return ops_all.lazy().select(_BY).drop_nulls().group_by(_BY).len()


def _threads(ops_all: pl.DataFrame) -> tuple[tuple[int, int], ...]:
    return _thread_order(_per_thread(ops_all))


def _thread_order(counts: pl.DataFrame | pl.LazyFrame) -> tuple[tuple[int, int], ...]:
    ranked = counts.lazy().sort(["len", *_BY], descending=[True, False, False])  # ties: lowest id
    return tuple((int(p), int(t)) for p, t in ranked.collect(engine="in-memory")[_BY].iter_rows())


def launch_counts(k: pl.DataFrame, copies: pl.DataFrame, launches: pl.DataFrame) -> pl.DataFrame:
    """pid, tid, len: the kernels and copies each thread launched."""
    ops = _gpu_ops(k.drop_nulls(["start_ns", "dur_ns"]), copies, launches)
    return _per_thread(ops).collect(engine="in-memory")


def facts(k: pl.DataFrame, copies: pl.DataFrame, launches: pl.DataFrame,
          counts: pl.DataFrame | None = None,
          recorded: tuple[tuple[int, int], ...] = ()) -> Facts:
    """The Facts of a trace's kernels (start_ns, dur_ns, component, launch_id, graph), copies
    and runtime calls; or, given `counts` (launch_counts of its parts, stacked), of kernels
    alone. recorded: the threads with ops or frames (idle.recorded_threads)."""
    kk = k.drop_nulls(["start_ns", "dur_ns"])
    if counts is None:
        threads = _threads(_gpu_ops(kk, copies, launches))
    else:
        threads = _thread_order(counts.lazy().group_by(_BY).agg(pl.col("len").sum()))
    return Facts(_component_order(kk), threads, _overlapping(kk), recorded)


class Idle(msgspec.Struct, frozen=True):
    """The ledger's side that reads no component: the steps with a window (by start), the idle
    pieces of their gaps (step, cause, what, start_ns, end_ns, ns) with the profiler's estimate
    carved out, and the threads with an op or frame (Facts.recorded)."""

    steps: pl.DataFrame
    rows: pl.DataFrame
    recorded: tuple[tuple[int, int], ...]


def _timed(k: pl.DataFrame) -> pl.DataFrame:
    """The kernels with a start and a duration (a query only where one is null)."""
    nulls = k["start_ns"].null_count() or k["dur_ns"].null_count()
    return k.drop_nulls(["start_ns", "dur_ns"]) if nulls else k


def idle_side(steps: pl.DataFrame, k: pl.DataFrame, copies: pl.DataFrame,
              launches: pl.DataFrame, ops: pl.DataFrame, frames: pl.DataFrame,
              whole: Facts | None = None) -> Idle:
    """The Idle side of the ledger of every step with a window. k: kernels with start_ns, dur_ns,
    launch_id, graph (no component: this side runs beside the components' stage)."""
    st = (steps.lazy().drop_nulls(["window_start", "window_end"]).sort("window_start")
          .collect(engine="in-memory"))
    recorded = whole.recorded if whole else recorded_threads(ops, frames)
    if st.height == 0:
        return Idle(st, pl.DataFrame(), recorded)
    w0, w1, ids = st["window_start"], st["window_end"], st["step"]
    kk = _timed(k)
    ops_all = _gpu_ops(kk, copies, launches)
    launching = whole.threads if whole else _threads(ops_all)
    threads = pl.DataFrame(list(launching), schema={"pid": pl.Int64, "tid": pl.Int64},
                           orient="row")
    main = launching[0] if launching else (None, None)
    starts = pl.DataFrame([ids.cast(pl.Int64).alias("step"), w0.cast(pl.Int64).alias("w0")])

    def idle_of_gaps() -> pl.DataFrame:
        g = _neighbours(uncovered(ids, w0, w1, *busy(kk, copies)), ops_all)
        return idle_rows(g, ops, frames, launches, main, starts, recorded)

    # the gaps' causes and the CPU events' times share no result: on two threads
    largest = max(df.height for df in (k, copies, launches, ops, frames))
    idle, events = both(idle_of_gaps, lambda: _event_times((ops, frames, launches), threads),
                        rows=largest)
    return Idle(st, _profiler(idle, events), recorded)


def ledger(steps: pl.DataFrame, k: pl.DataFrame, copies: pl.DataFrame, launches: pl.DataFrame,
           ops: pl.DataFrame, frames: pl.DataFrame, whole: Facts | None = None,
           idle: Idle | None = None) -> Ledger:
    """The ledger of every step with a window (see the module docstring). k: kernels with
    start_ns, dur_ns, component, launch_id, graph. whole: the Facts of the whole trace when
    these tables are a part of it (by default, their own). idle: its idle_side, where found."""
    side = idle if idle is not None else idle_side(steps, k, copies, launches, ops, frames, whole)
    if side.steps.height == 0:
        return Ledger(pl.DataFrame(schema=STEP_LEDGER), pl.DataFrame(schema=INTERVALS),
                      side.recorded)
    kk = _timed(k)
    busy_rows = _busy_rows(side.steps, kk, copies, whole.order if whole else _component_order(kk))
    gap_rows = side.rows.lazy().group_by("step", "cause", "what").agg(
        pl.col("ns").sum(), pl.len().cast(pl.Int64).alias("n")
    )
    parts = [busy_rows, gap_rows.select(list(STEP_LEDGER))]
    per_step = pl.concat(parts).cast(STEP_LEDGER).filter(pl.col("ns") > 0).sort(
        "step", "ns", "cause", "what", descending=[False, True, False, False])
    intervals = side.rows.lazy().filter(pl.col("cause") != OWN_COST).select(list(INTERVALS))
    return Ledger(per_step.collect(engine="in-memory"),
                  intervals.cast(INTERVALS).collect(engine="in-memory"), side.recorded)


def _ranked(rows: pl.LazyFrame) -> pl.LazyFrame:
    """Largest first; equal times by cause and what (group_by's order is arbitrary: sorted by
    time alone, tied rows changed order from run to run)."""
    return rows.sort(["ms_per_step", "cause", "what"], descending=[True, False, False])


def _counted(steps: pl.DataFrame, phase: str) -> pl.DataFrame:
    """The counted steps of `phase`: not excluded, with a window."""
    return steps.filter(pl.col("phase") == phase, pl.col("window_start").is_not_null(),
                        *counted(steps))


def _median_gaps(intervals: pl.DataFrame, mine: pl.Series,
                 kinds: pl.DataFrame) -> pl.DataFrame:
    """cause, what, median_us: the median interval of each (cause, what) of `kinds` over the
    steps `mine`, each a filter of the intervals in one query (a group-by of them all copies
    every row; a pair with a null key never joins)."""
    pairs = [(c, w) for c, w in kinds[["cause", "what"]].iter_rows()
             if c is not None and w is not None]
    counted = pl.col("step").is_in(pl.lit(mine).implode())

    def median_us(cause: str, what: str) -> pl.Expr:
        rows = counted & (pl.col("cause") == cause) & (pl.col("what") == what)
        gap = pl.col("end_ns").filter(rows) - pl.col("start_ns").filter(rows)
        return gap.median() / 1e3

    medians = [median_us(c, w).alias(str(i)) for i, (c, w) in enumerate(pairs)]
    values = intervals.select(medians).row(0) if medians else ()
    return pl.DataFrame({"cause": [c for c, _ in pairs], "what": [w for _, w in pairs],
                         "median_us": values},
                        schema={"cause": pl.Utf8, "what": pl.Utf8, "median_us": pl.Float64})


def phase_ledger(led: Ledger, steps: pl.DataFrame, phase: str) -> pl.DataFrame:
    """The mean step of `phase` (its counted steps: not excluded): cause, what, ms_per_step, share
    of the mean step, n_per_step (intervals or kernels), median_us (of the idle intervals behind
    the row; null for kernels, copies and the profiler estimate). The rows sum to the mean step
    time."""
    return _memoized(led, "phase", steps, phase, lambda: _phase_ledger(led, steps, phase))


def _phase_ledger(led: Ledger, steps: pl.DataFrame, phase: str) -> pl.DataFrame:
    counted = _counted(steps, phase)
    n = counted.height
    schema = pl.Schema({"cause": pl.Utf8, "what": pl.Utf8, "ms_per_step": pl.Float64,
                        "share": pl.Float64, "n_per_step": pl.Float64, "median_us": pl.Float64})
    if n == 0:
        return pl.DataFrame(schema=schema)
    mean_ms = float((counted["window_end"] - counted["window_start"]).sum()) / n / 1e6
    mine = counted["step"]
    rows = grouped(led.steps.join(mine.to_frame(), on="step", how="semi"), ["cause", "what"],
                   (pl.col("ns").sum() / n / 1e6).alias("ms_per_step"),
                   (pl.col("n").sum() / n).alias("n_per_step"), any_order=True)
    med = _median_gaps(led.intervals, mine, rows)
    out = rows.lazy().join(med.lazy(), on=["cause", "what"], how="left").with_columns(
        (pl.col("ms_per_step") / mean_ms if mean_ms else pl.lit(None, pl.Float64)).alias("share"))
    return _ranked(out.select(list(schema)).cast(schema)).collect(engine="in-memory")


def median_gap_us(led: Ledger | None, steps: pl.DataFrame, phase: str) -> float | None:
    """The median of a phase's gaps between launches (the ledger's intervals), in us; None
    without."""
    if led is None:
        return None
    rows = phase_ledger(led, steps, phase)
    gaps = rows["median_us"].filter(rows["what"] == "between launches")
    v = gaps[0] if gaps.len() else None
    return None if v is None else round(float(v), 2)
