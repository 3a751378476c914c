"""The idle stretches of step windows, cut by cause (outside, launch, sync, host): see
attrib.steps.ledger's docstring for the causes. All stretches of a trace at once, as polars joins:
no Python loop per stretch (a long trace has thousands).

The holder of a stretch [a, b) is the innermost host op, Python frame or (long, not synchronizing)
runtime call of the launching thread that overlaps at least HOLD_SHARE of it. With HOLD_SHARE = 1/2
such an interval contains the stretch's midpoint, so the candidates are the intervals that contain
it: an inequality join. A thread that launched GPU work without a recorded op or frame (a serving
loop on a worker thread the profiler did not record) holds its stretches as `unrecorded thread TID`.
"""

from __future__ import annotations

import re

import polars as pl

from attrib.components.patterns import BLOCKING_COPY, STREAM_WAIT, SYNC
from attrib.link.nesting import parents, start_order
from attrib.steps.spans import of_events

LAUNCH_GAP_NS = 100_000
OUTSIDE_MIN_NS = 100_000
HOLD_SHARE = 0.5  # the midpoint argument above needs it >= 1/2
WINDOW = 1 << 18  # a thread's intervals per window of stretches in `holders`
UNTRACED = "untraced host time"
# held by a thread that launched kernels while the profiler recorded none of its CPU ops (op
# callbacks are per thread: a serving loop on a worker thread), in a trace that has ops elsewhere
UNRECORDED = "unrecorded thread"  # + its tid


def recorded_threads(ops: pl.DataFrame, frames: pl.DataFrame) -> tuple[tuple[int, int], ...]:
    """The threads (pid, tid) with an op or a Python frame in the trace, in order."""
    both_ = pl.concat([ops.lazy().select(_BY), frames.lazy().select(_BY)]).drop_nulls()
    threads = both_.unique().sort(_BY).collect(engine="in-memory")
    return tuple((int(p), int(t)) for p, t in threads.iter_rows())


def _threads_frame(threads: tuple[tuple[int, int], ...]) -> pl.DataFrame:
    return pl.DataFrame(list(threads), schema={"pid": pl.Int64, "tid": pl.Int64}, orient="row")


def unrecorded_threads(recorded: tuple[tuple[int, int], ...],
                       launches: pl.DataFrame) -> pl.DataFrame:
    """The threads (pid, tid, calls) that made runtime calls while the profiler recorded none of
    their ops or frames (`recorded`: recorded_threads of the whole trace), in a trace that has
    some (none in a trace without any: rocprof)."""
    if not recorded or not launches.height:
        return pl.DataFrame(schema={"pid": pl.Int64, "tid": pl.Int64, "calls": pl.UInt32})
    calls = launches.lazy().group_by(_BY).agg(pl.len().alias("calls"))
    return (calls.join(_threads_frame(recorded).lazy(), on=_BY, how="anti")
            .sort(["calls", *_BY], descending=[True, False, False]).collect(engine="in-memory"))
IDLE = pl.Schema({"step": pl.Int64, "cause": pl.Utf8, "what": pl.Utf8,
                  "start_ns": pl.Int64, "end_ns": pl.Int64, "ns": pl.Int64})
_BY = ["pid", "tid"]
_FRAME = re.compile(r"^(?P<path>.+?)\((?P<line>\d+)\): (?P<fn>.+)$")


def frame_label(name: str) -> str:
    """`path/serve.py(42): sample_top_p` -> `sample_top_p (serve.py:42)`; other names unchanged."""
    m = _FRAME.match(name)
    return f"{m['fn']} ({m['path'].rsplit('/', 1)[-1]}:{m['line']})" if m else name


def host_intervals(ops: pl.DataFrame, frames: pl.DataFrame,
                   near: pl.DataFrame | pl.LazyFrame | None = None,
                   calls: pl.DataFrame | pl.LazyFrame | None = None) -> pl.DataFrame:
    """The host threads' ops, Python frames and (given) runtime calls: pid, tid, s, e, depth, idx
    (order of start within the thread), name. near (pid, tid, m2, a doubled time): only the
    intervals holding one of its points on their thread are kept (a holder candidate), with the
    whole thread's depth and idx."""
    frame_id = (pl.col("id") + (1 << 40)).alias("id")
    fr = (frames.lazy().select(frame_id, "name", "start_ns", "dur_ns", *_BY)
          .filter(~pl.col("name").str.starts_with("<built-in")))
    parts = [ops.lazy().select("id", "name", "start_ns", "dur_ns", *_BY), fr]
    if calls is not None:
        call_id = (pl.col("id") + (2 << 40)).alias("id")
        parts.append(calls.lazy().select(call_id, "name", "start_ns", "dur_ns", *_BY))
    iv = pl.concat(parts).collect(engine="in-memory")  # one query; only the columns read are copied
    if iv["start_ns"].null_count() or iv["dur_ns"].null_count():  # else no copy
        iv = iv.drop_nulls(["start_ns", "dur_ns"])
    got = start_order(iv, _BY)
    if got is None:
        out = _sorted_intervals(iv)
        return out if near is None else out.filter(_holding(out, near))
    at, depth = got
    # the columns as Series, no query: s, e (int64), then name
    s = iv["start_ns"].cast(pl.Int64)
    iv = iv[_BY].hstack([s.alias("s"), (s + iv["dur_ns"].cast(pl.Int64)).alias("e"), iv["name"]])
    idx = pl.int_range(0, iv.height, dtype=pl.Int64, eager=True).alias("idx")
    if near is not None:  # only the candidates' rows are gathered
        keep = _holding(iv.select(*_BY, "s", "e")[at], near)
        at, depth, idx = at.filter(keep), depth.filter(keep), idx.filter(keep)
    return iv[at].hstack([depth, idx])[[*_BY, "s", "e", "depth", "idx", "name"]]


def _thread(prefix: str) -> list[pl.Expr]:
    """The thread (pid, tid) as keys a join matches nulls by (as eq_missing does)."""
    return [k for c in _BY for k in (pl.col(c).cast(pl.Int64).fill_null(0).alias(prefix + c),
                                     pl.col(c).is_null().alias(prefix + c + "_null"))]


def _holding(iv: pl.DataFrame, near: pl.DataFrame | pl.LazyFrame) -> pl.Series:
    """Whether each interval (pid, tid, s, e; sorted by s within each thread) holds a point of
    `near` (pid, tid, m2) of its thread, s * 2 <= m2 <= e * 2: the first point of its thread at
    or after s * 2 (an as-of join) is at or before e * 2."""
    keys = [k.meta.output_name() for k in _thread("_")]
    points = (near.lazy().select(*_thread("_"), pl.col("m2").cast(pl.Int64)).drop_nulls("m2")
              .sort("m2"))
    ends = iv.lazy().select(*_thread("_"), (pl.col("s") * 2).alias("s2"),
                            (pl.col("e") * 2).alias("e2"))
    hit = ends.join_asof(points, left_on="s2", right_on="m2", by=keys, strategy="forward",
                         check_sortedness=False)
    held = (pl.col("m2") <= pl.col("e2")).fill_null(False).alias("keep")
    return hit.select(held).collect(engine="in-memory").to_series()


def _sorted_intervals(iv: pl.DataFrame) -> pl.DataFrame:
    """host_intervals' output by a join of `parents` and a sort (where `start_order` is None)."""
    names = iv["name"]
    iv = iv.drop("name").with_row_index("_row")
    iv = iv.join(parents(iv, _BY).drop("parent"), on="id")
    s = pl.col("start_ns").cast(pl.Int64)
    e = s + pl.col("dur_ns").cast(pl.Int64)
    iv = iv.sort([*_BY, "start_ns"], maintain_order=True).with_row_index("idx")
    return iv.select(*_BY, s.alias("s"), e.alias("e"), "depth",
                     pl.col("idx").cast(pl.Int64), names.gather(iv["_row"]))


def _stabbing(q: pl.DataFrame, iv: pl.DataFrame, inside: list[pl.Expr]) -> pl.LazyFrame | None:
    """Pairs of q rows and iv rows of the same thread meeting the `inside` predicates: a join a
    thread, lazy; None without a thread."""
    parts = []
    for pid, tid in q[_BY].unique(maintain_order=True).iter_rows():
        mine = pl.col("pid").eq_missing(pid) & pl.col("tid").eq_missing(tid)
        ii = iv.lazy().filter(mine).drop(_BY)
        parts.append(q.lazy().filter(mine).join_where(ii, *inside))
    return pl.concat(parts) if parts else None


def _held_by(q: pl.DataFrame, iv: pl.LazyFrame) -> pl.LazyFrame:
    """(qid, depth, idx) of the intervals holding HOLD_SHARE of each query (qid, a, b, m2, the
    doubled midpoint) of one thread, the deepest first, then the first started: its pair."""
    inside = [pl.col("s") * 2 <= pl.col("m2"), pl.col("e") * 2 >= pl.col("m2")]
    ov = pl.min_horizontal("e", "b") - pl.max_horizontal("s", "a")
    held = ov >= HOLD_SHARE * (pl.col("b") - pl.col("a"))
    pairs = q.lazy().join_where(iv, *inside).filter(held).select("qid", "depth", "idx")
    return _first_held(pairs)


def _first_held(pairs: pl.LazyFrame) -> pl.LazyFrame:
    """The one pair kept per query (the deepest, then the first started), in qid order."""
    return (pairs.sort(["qid", "depth", "idx"], descending=[False, True, False])
            .unique("qid", keep="first", maintain_order=True))


def holders(iv: pl.DataFrame, q: pl.DataFrame, chunk: int = WINDOW) -> pl.Series:
    """For queries (qid, pid, tid, a, b): the label of each one's holder, in q's order."""
    mid = (pl.col("a") + pl.col("b")).alias("m2")
    # the pairs (a query and each interval holding its midpoint) carry no name and are cut to
    # each query's one holder a window of midpoints at a time, each against only the intervals
    # that reach into it (one inequality join over a whole thread was the ledger's peak); the
    # name joins the one holder kept per query
    # every window's pairs are lazy: one query for them all
    parts = []
    threads = q.lazy().select(*_BY, "qid", "a", "b", mid).sort("m2").collect(engine="in-memory")
    for (pid, tid), qq in threads.partition_by(_BY, as_dict=True).items():  # each sorted by m2
        mine = pl.col("pid").eq_missing(pid) & pl.col("tid").eq_missing(tid)
        n = iv.select(mine.sum()).item()
        size = -(-qq.height // -(-n // chunk)) if n else qq.height
        for at in range(0, qq.height if n else 0, size):
            part = qq.slice(at, size)
            reach = (pl.col("s") * 2 <= part["m2"].max()) & (pl.col("e") * 2 >= part["m2"].min())
            ii = iv.lazy().filter(mine & reach).select("s", "e", "depth", "idx")
            parts.append(_held_by(part, ii))
    if parts:
        named = iv.lazy().select("idx", "name")
        pairs = (_first_held(pl.concat(parts))
                 .join(named, on="idx", how="left", maintain_order="left").collect(engine="in-memory"))
        labels = {n: frame_label(n) for n in pairs["name"].unique().to_list()}
        held = pairs.lazy().select("qid", pl.col("name").replace_strict(labels).alias("holder"))
    else:
        held = pl.LazyFrame(schema={"qid": pl.Int64, "holder": pl.Utf8})
    out = q.lazy().select(pl.col("qid").cast(pl.Int64))
    out = out.join(held, on="qid", how="left", maintain_order="left")  # lazy: an order only asked
    return out.select(pl.col("holder").fill_null(UNTRACED)).collect(engine="in-memory").to_series()


def sync_calls(launches: pl.DataFrame) -> pl.DataFrame:
    """The synchronizing runtime calls (and blocking copies): pid, tid, s, e, name."""
    is_sync = pl.col("name").str.contains(SYNC) | pl.col("name").str.contains(BLOCKING_COPY)
    return (launches.lazy().filter(is_sync).drop_nulls("start_ns")
            .select(*_BY, *of_events(), "name").collect(engine="in-memory"))


def _with_waits(rows: pl.LazyFrame, launches: pl.DataFrame) -> pl.LazyFrame:
    """rows (pid, tid, n_launch, w0) with `what` of an outside stretch: a stream wait on an event
    made in the window before its launch, or work the trace does not show."""
    waits = launches.lazy().filter(pl.col("name").str.contains(STREAM_WAIT)).select(
        pl.col("start_ns").cast(pl.Int64).alias("t"), *_BY).drop_nulls().sort("t")
    left = rows.with_columns(pl.col("n_launch").cast(pl.Int64).alias("t")).sort("t")
    hit = left.join_asof(waits.with_columns(pl.col("t").alias("wait")), on="t", by=_BY,
                         strategy="backward", check_sortedness=False)
    seen = pl.col("wait").is_not_null() & (pl.col("wait") >= pl.col("w0"))
    what = (pl.when(seen)
            .then(pl.lit("queued behind a stream wait on an event recorded before the window"))
            .otherwise(pl.lit("queued behind GPU work not in the trace")))
    return hit.with_columns(what.alias("what")).drop("t", "wait")


def idle_rows(g: pl.DataFrame, ops: pl.DataFrame, frames: pl.DataFrame, launches: pl.DataFrame,
              main: tuple, w0: pl.DataFrame,
              recorded: tuple[tuple[int, int], ...] = ()) -> pl.DataFrame:
    """(step, cause, what, start_ns, end_ns, ns) per idle piece of each gap, sorted by step,
    start_ns, cause and what. g: the gaps (step, a, b) with the GPU op that ends each
    (n_launch, n_launch_end, n_pid, n_tid) and in_graph;
    main: the thread that launches most; w0: step, w0 (its window's start); recorded: the
    threads with ops or frames in the whole trace."""
    untraced = pl.col("n_pid").is_null()
    gaps = g.lazy().with_columns(
        pl.when(untraced).then(pl.lit(main[0], pl.Int64)).otherwise(pl.col("n_pid")).alias("pid"),
        pl.when(untraced).then(pl.lit(main[1], pl.Int64)).otherwise(pl.col("n_tid")).alias("tid"),
        pl.col("in_graph").fill_null(False),
    ).join(w0.lazy(), on="step", how="left", maintain_order="left")
    sent = pl.col("n_launch_end")
    queued = (sent.is_not_null() & ~pl.col("in_graph")
              & (pl.col("b") - pl.max_horizontal("a", sent) > OUTSIDE_MIN_NS)).fill_null(False)
    held = pl.when(queued).then(pl.max_horizontal("a", sent)).otherwise(pl.col("b")).alias("h")
    g = gaps.with_columns(held, queued.alias("queued")).collect(engine="in-memory")
    # the rows of each cause lazy, collected together at the end
    outside = _with_waits(g.lazy().filter("queued"), launches).select(
        "step", pl.lit("outside").alias("cause"), "what", pl.col("h").alias("start_ns"),
        pl.col("b").alias("end_ns"), (pl.col("b") - pl.col("h")).alias("ns"))
    host_side = g.lazy().filter(pl.col("h") > pl.col("a"))
    short = (pl.col("h") - pl.col("a")) <= LAUNCH_GAP_NS
    in_graph = pl.when("in_graph").then(pl.lit("inside graph replays"))
    launch = host_side.filter(short).select(
        "step", pl.lit("launch").alias("cause"),
        in_graph.otherwise(pl.lit("between launches")).alias("what"),
        pl.col("a").alias("start_ns"), pl.col("h").alias("end_ns"),
        (pl.col("h") - pl.col("a")).alias("ns"))
    long_rows = host_side.filter(~short).with_row_index("qid").select(
        pl.col("qid").cast(pl.Int64), "step", *_BY, "a", pl.col("h").alias("b"))
    longs = long_rows.collect(engine="in-memory")
    parts = [outside, launch, *_held(longs, ops, frames, launches, recorded)]
    rows = pl.concat([p.select(list(IDLE)).cast(IDLE) for p in parts])
    return rows.sort("step", "start_ns", "cause", "what").collect(engine="in-memory")


def _runtime_holders(launches: pl.DataFrame) -> pl.LazyFrame:
    """The runtime calls that may hold a host stretch as ops do (a graph launch that takes 250 us,
    an allocation): not the synchronizing ones, whose stretches are `sync` rows; the long ones
    only (a stretch held is at least LAUNCH_GAP_NS, so a holder is at least half as long)."""
    is_sync = pl.col("name").str.contains(SYNC) | pl.col("name").str.contains(BLOCKING_COPY)
    long = pl.col("dur_ns") >= HOLD_SHARE * LAUNCH_GAP_NS
    return launches.lazy().select("id", "name", "start_ns", "dur_ns", *_BY).filter(long & ~is_sync)


def _unrecorded(who: pl.Series, asks: pl.DataFrame,
                recorded: tuple[tuple[int, int], ...]) -> pl.Series:
    """`who` with UNTRACED said as `unrecorded thread TID` where the asking thread has no op or
    frame (`recorded`: recorded_threads of the whole trace) in a trace that has some (a rocprof
    trace has none anywhere: there it stays UNTRACED)."""
    if not recorded or not who.len():
        return who
    recorded_ = _threads_frame(recorded).lazy().with_columns(pl.lit(True).alias("recorded"))
    asked = asks.lazy().select(*_BY).with_row_index("i").join(recorded_, on=_BY, how="left")
    label = pl.concat_str([pl.lit(UNRECORDED + " "), pl.col("tid").cast(pl.Utf8)])
    mark = pl.col("recorded").is_null() & (pl.col("who") == UNTRACED) & pl.col("tid").is_not_null()
    return (asked.sort("i").with_columns(who.alias("who"))
            .select(pl.when(mark).then(label).otherwise(pl.col("who")).alias(who.name))
            .collect(engine="in-memory").to_series())


def _held(longs: pl.DataFrame, ops: pl.DataFrame, frames: pl.DataFrame,
          launches: pl.DataFrame, recorded: tuple[tuple[int, int], ...]) -> list[pl.LazyFrame]:
    """The sync and host rows of the long host-side stretches (qid, step, pid, tid, a, b)."""
    overlap = [pl.col("s") < pl.col("b"), pl.col("e") > pl.col("a")]
    pairs = _stabbing(longs, sync_calls(launches), overlap)
    if pairs is None:
        pairs = pl.LazyFrame(schema={"qid": pl.Int64, "step": pl.Int64, "pid": pl.Int64,
                                     "tid": pl.Int64, "a": pl.Int64, "b": pl.Int64, "s": pl.Int64,
                                     "e": pl.Int64, "name": pl.Utf8})
    ov = (pl.min_horizontal("e", "b") - pl.max_horizontal("s", "a")).alias("ov")
    calls = pairs.sort("qid", "s").with_columns(ov).collect(engine="in-memory")
    n = longs.height
    asks = pl.concat([
        longs.lazy().select("qid", *_BY, "a", "b"),
        calls.lazy().with_row_index("i").select(
            (pl.col("i").cast(pl.Int64) + n).alias("qid"), *_BY,
            pl.col("s").alias("a"), pl.col("e").alias("b")),
    ]).collect(engine="in-memory")
    # the host intervals holding a stretch's midpoint only: the others hold nothing
    near = asks.lazy().select(*_BY, (pl.col("a") + pl.col("b")).alias("m2"))
    who = holders(host_intervals(ops, frames, near, _runtime_holders(launches)), asks)
    who = _unrecorded(who, asks, recorded)
    # the sync and host rows lazy: the caller collects them with the others
    sync_rows = calls.lazy().with_columns(who.slice(n).alias("in")).select(
        "step", pl.lit("sync").alias("cause"),
        pl.concat_str([pl.col("name"), pl.col("in")], separator=" in ").alias("what"),
        pl.col("a").alias("start_ns"), pl.col("b").alias("end_ns"), pl.col("ov").alias("ns"))
    synced = calls.lazy().group_by("qid").agg(pl.col("ov").sum().alias("synced"))
    rest = (pl.col("b") - pl.col("a") - pl.col("synced").fill_null(0)).alias("ns")
    host_rows = (longs.lazy().with_columns(who.slice(0, n).alias("what"))
                 .join(synced, on="qid", how="left", maintain_order="left")
                 .select("step", pl.lit("host").alias("cause"), "what",
                         pl.col("a").alias("start_ns"), pl.col("b").alias("end_ns"), rest)
                 .filter(pl.col("ns") > 0))
    return [sync_rows, host_rows]
