"""Draft and verify passes of a speculative (assisted) generate loop.

When one annotation split into forward passes (`phases._split_forwards`, markers `NAME forward i`)
holds the forward passes of two model instances (their outermost `nn.Module:` frames, with_stack
traces), the smaller one (fewer nn.Module frames in a forward pass) is the draft model; of two
models of one size (a draft that is a copy of the target), the one with more passes (it runs K a
round), then the one that runs first (it proposes before the target verifies). Its passes get role
`draft`, the other model's `verify`; each model's first pass (its prefill) gets no role. `model`
says whose pass it is ("draft" | "target"), `fwd_start` and `fwd_end` where its outermost module
frame starts and ends.
A split span of one model (prompt lookup: no draft passes) has verify passes too: those after its
first with several new tokens over a cache that is not empty (`mark_verify`). `apply_roles` then
puts draft passes in phase `draft` and verify passes in `decode`.
"""

from __future__ import annotations

import re

import polars as pl

from attrib.components.patterns import SDPA
from attrib.link.launches import module_paths
from attrib.reads import Reads
from attrib.trace import input_dims
from attrib.steps.spans import points_in

PIECE = r"^(?P<parent>.+) forward \d+$"
ATTENTION_OPS = (SDPA,)  # q [B, H, q, D], k [B, Hkv, L, D]
READS = Reads(ops=tuple(f"^{re.escape(o)}$" for o in ATTENTION_OPS))


def _roots(frames: pl.DataFrame) -> pl.DataFrame:
    """Outermost nn.Module frames: t0, t1, model (instance), size (module frames inside: those
    starting in [t0, t1))."""
    mods = module_paths(frames)
    t0, t1 = pl.col("start_ns"), pl.col("start_ns") + pl.col("dur_ns")
    size = points_in(mods["start_ns"].sort(), t0, t1)
    roots = mods.lazy().filter(~pl.col("module_path").str.contains("/"))
    return roots.select(t0.alias("t0"), t1.alias("t1"), pl.col("module_path").alias("model"),
                        size.alias("size")).collect(engine="in-memory")


def _draft_of(g: pl.DataFrame) -> object | None:
    """The draft model of one span's passes (see the module docstring), None without two models."""
    per = g.group_by("model").agg(
        pl.col("size").median(), pl.len().alias("n"), pl.col("cpu_start").min().alias("first")
    )
    if per.height != 2:
        return None
    order = per.sort(["size", "n", "first"], descending=[False, True, False])
    return order["model"][0]


def mark_roles(spans: pl.DataFrame, frames: pl.DataFrame) -> pl.DataFrame:
    """spans + `role` ("draft" | "verify" | null), `model`, `fwd_end` (module docstring)."""
    out = spans.with_columns(
        pl.lit(None, pl.Utf8).alias("role"),
        pl.lit(None, pl.Utf8).alias("model"),
        pl.lit(None, pl.Int64).alias("fwd_start"),
        pl.lit(None, pl.Int64).alias("fwd_end"),
    )
    parent = pl.col("marker").str.extract(PIECE, 1).alias("parent")
    pieces = (out.lazy().with_columns(parent).filter(pl.col("parent").is_not_null())
              .collect(engine="in-memory"))
    if pieces.height < 2 or frames.height == 0:
        return out
    roots = _roots(frames)
    if roots.height == 0:
        return out
    # each piece's model: the root frame that overlaps it most
    overlap = pl.min_horizontal("t1", "cpu_end") - pl.max_horizontal("t0", "cpu_start")
    p = pieces.drop("model").join(roots, how="cross").with_columns(overlap.alias("_ov"))
    p = p.filter(pl.col("_ov") > 0).sort("_ov", descending=True).unique("step", keep="first")
    got = []
    for _, g in p.group_by("parent"):
        draft = _draft_of(g)
        if draft is None or g.height < 4:  # one model: only where its passes' frames end
            got.append(g.select("step", pl.lit(None, pl.Utf8).alias("_r"),
                                pl.lit(None, pl.Utf8).alias("_m"), pl.col("t0").alias("_s"),
                                pl.col("t1").alias("_e")))
            continue
        g = g.sort("cpu_start").with_columns(pl.int_range(pl.len()).over("model").alias("_i"))
        is_draft = pl.col("model") == draft
        role = (pl.when(pl.col("_i") == 0).then(pl.lit(None, pl.Utf8))
                .when(is_draft).then(pl.lit("draft")).otherwise(pl.lit("verify")))
        who = pl.when(is_draft).then(pl.lit("draft")).otherwise(pl.lit("target"))
        got.append(g.select("step", role.alias("_r"), who.alias("_m"), pl.col("t0").alias("_s"),
                            pl.col("t1").alias("_e")))
    if not got:
        return out
    new = pl.concat(got)
    return (
        out.join(new, on="step", how="left")
        .with_columns(
            pl.coalesce("_r", "role").alias("role"),
            pl.coalesce("_m", "model").alias("model"),
            pl.coalesce("_s", "fwd_start").alias("fwd_start"),
            pl.coalesce("_e", "fwd_end").alias("fwd_end"),
        )
        .drop("_r", "_m", "_s", "_e")
    )


def _keys(dim_text: str | None) -> tuple[int | None, int, int] | None:
    """(sequences, queries, keys) of an attention op's Input Dims: q [B, .., q, D], k [.., L, D]."""
    dims = input_dims(dim_text)
    if not isinstance(dims, list) or len(dims) < 2:
        return None
    q, k = dims[0], dims[1]
    if not (isinstance(q, list) and isinstance(k, list) and len(q) >= 2 and len(k) >= 2):
        return None
    return (int(q[0]) if len(q) >= 3 else None), int(q[-2]), int(k[-2])


def kv_lengths(steps: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """Per step: `kv_len`, the keys its first attention op attends (cache after the pass's
    write), and `batch`, the sequences of its query, from the op's input shapes. Columns step,
    kv_len, batch."""
    schema = {"step": pl.Int64, "kv_len": pl.Int64, "batch": pl.Int64}
    if steps.height == 0:
        return pl.DataFrame(schema=schema)
    att = ops.lazy().filter(pl.col("name").is_in(ATTENTION_OPS)).select("start_ns", "input_dims")
    spans = steps.lazy().select("step", pl.col("cpu_start").alias("t"), "cpu_end").sort("t")
    near = att.sort("start_ns").join_asof(spans, left_on="start_ns", right_on="t")
    hit = (near.filter(pl.col("start_ns") < pl.col("cpu_end")).unique("step", keep="first")
           .select("step", "input_dims").collect(engine="in-memory"))
    rows = [(s, kq[2], kq[0]) for s, d in hit.iter_rows()
            if (kq := _keys(d)) is not None]
    return pl.DataFrame(rows, schema=schema, orient="row")


def mark_verify(steps: pl.DataFrame, ops: pl.DataFrame) -> pl.LazyFrame:
    """Steps of a split span without a draft model: a pass after the span's first one with more
    than one new token a sequence over a non-empty cache (kv_len > tokens a sequence) is a verify
    pass (a plain decode of B sequences has B tokens a step, one each). Its rounds are a lookup
    loop only where the ids grow by cats from them (`attrib.steps.rounds`). A query."""
    if "role" not in steps.columns or steps.height == 0:
        return steps.lazy()
    par = steps.lazy().with_columns(pl.col("marker").str.extract(PIECE, 1).alias("_p"))
    single = par.filter(pl.col("_p").is_not_null()).group_by("_p").agg(
        pl.col("role").is_null().all().alias("_none"), pl.col("cpu_start").min().alias("_first"))
    kv = kv_lengths(steps, ops)
    s = par.join(single, on="_p", how="left").join(kv.lazy(), on="step", how="left")
    q = pl.col("tokens") // pl.col("batch").fill_null(1)
    verify = (pl.col("_none").fill_null(False) & (pl.col("cpu_start") > pl.col("_first"))
              & (q > 1) & (pl.col("kv_len") > q))
    role = pl.when(verify).then(pl.lit("verify")).otherwise(pl.col("role")).alias("role")
    return s.with_columns(role).drop("_p", "_none", "_first", "kv_len", "batch")


def apply_roles(steps: pl.DataFrame, ops: pl.DataFrame | None = None) -> pl.DataFrame:
    """Draft passes in phase `draft`, verify passes in `decode` (their tokens stay as their shapes
    say); with ops, the verify passes of a span without a draft model are found first."""
    if "role" not in steps.columns:
        return steps
    marked = mark_verify(steps, ops) if ops is not None else steps.lazy()
    return marked.with_columns(pl.when(pl.col("role") == "draft").then(pl.lit("draft"))
                               .when(pl.col("role") == "verify").then(pl.lit("decode"))
                               .otherwise(pl.col("phase")).alias("phase")
                               ).collect(engine="in-memory")
