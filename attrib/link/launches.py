"""CPU op <-> runtime launch <-> GPU kernel <-> nn.Module, as one table per kernel.

kernel -> launch: the correlation id (1:1 for launches, 1:N for a graph launch; kernels replayed
from a graph are marked graph=True and get no CPU op or module, since the launch call site is
not theirs). kernel -> op: the External id (on the kernel, else on its launch), else the innermost
cpu_op containing the launch on the launching thread. kernel -> module: the innermost
`nn.Module:` Python frame containing the launch (with_stack traces), with its full path.
"""

from __future__ import annotations

import polars as pl

from attrib.link.nesting import innermost, parents
from attrib.threads import both
from attrib.trace import SMALL_ROWS, Trace

KERNEL_LAUNCH = (r"(?i)(launchkernel|launchcooperativekernel|graphlaunch|modulelaunchkernel"
                 r"|cuLaunch)")
_MODULE = r"^nn\.Module: (.+)$"
_BY = ["pid", "tid"]


def _launch_of(trace: Trace) -> pl.LazyFrame:
    """kernel id -> launch id/name/time/thread through the correlation id."""
    # the columns first: a filter of the whole table would copy every column
    cols = {"id": "launch", "name": "launch_name", "start_ns": "launch_ns", "pid": "launch_pid",
            "tid": "launch_tid", "external_id": "launch_ext"}
    la = (trace.launches.lazy()
          .select("correlation", *(pl.col(c).alias(n) for c, n in cols.items()))
          .filter(pl.col("correlation").is_not_null())
          .unique("correlation", keep="first"))
    k = trace.kernels.lazy().select("id", "correlation", "external_id", "graph", "launch_id")
    k = k.join(la, on="correlation", how="left")
    # graph replays are the contract's fact (attrib.trace.mark_graph_replays, applied by the
    # collectors)
    return k.with_columns(pl.col("launch_id").fill_null(pl.col("launch")).alias("launch_id"),
                          pl.col("graph").fill_null(False).alias("graph"))


def module_paths(frames: pl.DataFrame) -> pl.DataFrame:
    """nn.Module frames with `module` (class name), `module_path` (outer/.../inner instance
    names)."""
    mods = (frames.lazy().filter(pl.col("name").str.starts_with("nn.Module: "))
            .with_columns(pl.col("name").str.extract(_MODULE).alias("inst"))
            .collect(engine="in-memory"))
    if mods.height == 0:
        return mods.select("id", "start_ns", "dur_ns", *_BY, pl.lit("").alias("module"),
                           pl.lit("").alias("module_path"))
    tree = mods[["id", *_BY, "start_ns", "dur_ns"]].pipe(parents, _BY)
    mods = mods.join(tree, on="id")
    walked = _walked if mods.height < SMALL_ROWS else _joined
    return (mods.lazy().join(walked(mods).lazy(), on="id", how="left")
            .select("id", "start_ns", "dur_ns", *_BY,
                    pl.col("inst").str.replace(r"_\d+$", "").alias("module"), "module_path")
            .collect(engine="in-memory"))


def _joined(mods: pl.DataFrame) -> pl.DataFrame:
    """id, module_path of module frames (id, parent, depth, inst): a level of the tree at a
    time, each path its parent's (`?` where the level above lacks it) + `/` + its instance."""
    paths = mods.filter(pl.col("depth") == 0).select("id", pl.col("inst").alias("module_path"))
    done = [paths]
    for d in range(1, int(mods["depth"].max() or 0) + 1):
        level = mods.filter(pl.col("depth") == d).select("id", "parent", "inst")
        ups = paths.rename({"id": "parent", "module_path": "up"})
        path = pl.concat_str([pl.col("up").fill_null("?"), pl.col("inst")], separator="/")
        paths = level.join(ups, on="parent", how="left").select("id", path.alias("module_path"))
        done.append(paths)
    return pl.concat(done)


def _walked(mods: pl.DataFrame) -> pl.DataFrame:
    """What `_joined` gives, in its row order, from one walk of the rows in Python: a small
    table's levels cost more queries than rows."""
    ids, ups, insts, depths = (mods[c].to_list() for c in ("id", "parent", "inst", "depth"))
    out_ids: list[int] = []
    out: list[str | None] = []
    above: dict[int, str | None] = {}  # the paths of the level above, by id
    level: dict[int, str | None] = {}
    at = -1
    for i in sorted(range(len(ids)), key=depths.__getitem__):  # stable: each level in row order
        d = depths[i]
        if d != at:
            above, level, at = (level if d == at + 1 else {}), {}, d
        inst = insts[i]
        if d == 0:
            path = inst
        else:
            up = above.get(ups[i]) if ups[i] is not None else None
            path = None if inst is None else f"{'?' if up is None else up}/{inst}"
        level[ids[i]] = path
        out_ids.append(ids[i])
        out.append(path)
    return pl.DataFrame({"id": out_ids, "module_path": out},
                        schema={"id": mods.schema["id"], "module_path": pl.String})


def launch_points(k: pl.DataFrame) -> pl.DataFrame:
    """Where and when each directly launched kernel (not a graph replay) was launched: pid_ (the
    kernel id), t_ns, pid, tid; the points `innermost` places in ops, frames and modules."""
    launched = k.lazy().filter(pl.col("launch_ns").is_not_null() & ~pl.col("graph"))
    return launched.select(
        pl.col("id").alias("pid_"), pl.col("launch_ns").alias("t_ns"),
        pl.col("launch_pid").alias("pid"), pl.col("launch_tid").alias("tid"),
    ).collect(engine="in-memory")


def _ops_by_ext(ops: pl.DataFrame) -> pl.LazyFrame:
    return (ops.lazy().select("external_id", pl.col("id").alias("op_ext"))
            .filter(pl.col("external_id").is_not_null()).unique("external_id", keep="first"))


def link(trace: Trace) -> pl.DataFrame:
    """One row per kernel: id, launch_id, launch_name, graph, op_id, link (how the op was found),
    module, module_path, module_ns (the start of that module's call: two calls of one module path
    apart). Unlinked fields are null."""
    ext = pl.coalesce(pl.when(~pl.col("graph")).then(pl.col("external_id")),
                      pl.when(~pl.col("graph")).then(pl.col("launch_ext")))
    op_of_ext = _ops_by_ext(trace.ops).rename({"external_id": "ext"})
    k = (_launch_of(trace).with_columns(ext.alias("ext")).join(op_of_ext, on="ext", how="left")
         .collect(engine="in-memory"))
    pts = launch_points(k)

    def op_by_time() -> pl.DataFrame:
        spans = trace.ops[["id", "start_ns", "dur_ns", *_BY]]
        return innermost(spans, pts, _BY)

    def module_by_time() -> pl.LazyFrame:
        mods = module_paths(trace.frames)
        named = mods.lazy().select(pl.col("id").alias("inner"), "module", "module_path",
                                   pl.col("start_ns").alias("module_ns"))
        inner = innermost(mods[["id", "start_ns", "dur_ns", *_BY]], pts, _BY)
        return inner.lazy().join(named, on="inner", how="left").select(
            pl.col("pid_").alias("id"), "module", "module_path", "module_ns")

    # the op and the module around each launch share no result: on two threads
    by_time, by_mod = both(op_by_time, module_by_time, rows=trace.largest())
    op_time = by_time.lazy().rename({"pid_": "id", "inner": "op_time"})
    joined = k.lazy().join(op_time, on="id", how="left").join(by_mod, on="id", how="left")
    how = (pl.when(pl.col("op_ext").is_not_null()).then(pl.lit("external_id"))
           .when(pl.col("op_time").is_not_null()).then(pl.lit("time")))
    out = joined.select("id", "launch_id", "launch_name", "graph",
                        pl.coalesce("op_ext", "op_time").alias("op_id"), how.alias("link"),
                        "module", "module_path", "module_ns")
    return out.collect(engine="in-memory")
