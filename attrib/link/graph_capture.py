"""Give graph-replayed kernels the CPU op and module of the launch that captured them.

A replay trace shows a CUDA/HIP graph as one graph launch whose kernels share its correlation id
and have no CPU op, shapes or module. A separate trace of the graph *capture* (vLLM
`capture_torch_profiler`, SGLang) records, between each `*StreamBeginCapture` and its
`*StreamEndCapture` on one thread, a runtime launch per kernel with the kernel name, under the real
CPU ops and nn.Module frames. `merge` aligns each replay group (the kernels of one graph launch, in
start order) with the capture segment whose kernel-name sequence matches best
(difflib.SequenceMatcher; only kernels in matching blocks, i.e. with equal names, are mapped) and
copies the capture launch's op (appended to `ops`) and module path onto them. Segments with the
same name sequence (several batch sizes, repeated captures) are told apart by continuing the
previous group's segment within one `capture_<bs>_<mode>` annotation, else the first in capture
order; `batch_size` restricts the choice to one captured batch size.
"""

from __future__ import annotations


import msgspec
from msgspec import field
import polars as pl

from attrib.link.launches import KERNEL_LAUNCH, link
from attrib.link.nesting import innermost
from attrib.trace import GRAPH_LAUNCH, Trace, conform

_BY = ["pid", "tid"]
_ANNOTATION = r"^capture_(\d+)_(\w+)$"
MIN_RATIO = 0.5


class MergeReport(msgspec.Struct, frozen=True):
    """How a replay trace was matched to its capture: counts of segments, groups and kernels."""

    segments: int        # closed capture segments (one per captured graph)
    groups: int          # graph launches in the replay
    replayed: int        # kernels replayed from graphs
    matched: int         # replayed kernels given a capture launch
    unmatched: int
    with_op: int         # matched kernels that got a CPU op
    with_module: int     # ... and a module path
    ops_appended: int    # capture ops appended to the replay's ops
    groups_matched: int
    groups_exact: int    # groups whose kernel names equal their segment's
    groups_ambiguous: int  # groups whose best segments lie under several capture annotations
    mean_ratio: float | None
    captures: dict[str, int] = field(default_factory=dict)  # capture annotation -> segments

    def note(self) -> str:
        """The one line the analysis notes carry."""
        ambiguous = (f", {self.groups_ambiguous} ambiguous: pass --capture-batch"
                     if self.groups_ambiguous else "")
        return (f"graph capture: {self.matched} of {self.replayed} replayed kernels matched to "
                f"{self.segments} captured graphs "
                f"({self.groups_exact} of {self.groups} groups exact"
                + ambiguous + ")")


def _norm(col: pl.Expr) -> pl.Expr:
    return col.str.strip_chars().str.replace_all(r"\s+", " ")


def capture_launches(capture: Trace) -> pl.DataFrame:
    """Named kernel launches inside closed capture segments: id, seg (the begin call's id), pos,
    name, annotation, batch_size, in capture order."""
    la = capture.launches.sort([*_BY, "start_ns"])
    begin = pl.col("name").str.contains(r"(?i)StreamBeginCapture")
    end = pl.col("name").str.contains(r"(?i)StreamEndCapture")
    la = la.with_columns(
        pl.when(begin).then(pl.col("id")).forward_fill().over(_BY).alias("seg"),
        (begin.cast(pl.Int64) - end.cast(pl.Int64)).cum_sum().over(_BY).alias("open"))
    closed = la.filter(end & pl.col("seg").is_not_null()).select("seg").unique()
    is_launch = (pl.col("name").str.contains(KERNEL_LAUNCH)
                 & ~pl.col("name").str.contains(GRAPH_LAUNCH))
    kern = (pl.col("open") > 0) & is_launch & pl.col("kernel_name").is_not_null()
    segs = la.filter(kern).join(closed, on="seg", how="semi")
    if segs.height == 0:
        return pl.DataFrame(schema={"id": pl.Int64, "seg": pl.Int64, "pos": pl.Int64,
                                    "name": pl.Utf8, "annotation": pl.Utf8,
                                    "batch_size": pl.Int64})
    begins = la.filter(begin).select(pl.col("id").alias("pid_"), pl.col("start_ns").alias("t_ns"),
                                     *_BY)
    is_ann = (pl.col("side") == "cpu") & pl.col("name").str.contains(_ANNOTATION)
    ann = capture.markers.filter(is_ann)
    ann_names = ann.select(pl.col("id").alias("inner"), pl.col("name").alias("annotation"))
    batch = pl.col("annotation").str.extract(_ANNOTATION, 1).cast(pl.Int64)
    inner = (innermost(ann.select("id", "start_ns", "dur_ns", *_BY), begins, _BY)
             .join(ann_names, on="inner", how="left")
             .join(begins.select("pid_", "t_ns"), on="pid_")
             .select(pl.col("pid_").alias("seg"), "annotation", batch.alias("batch_size"),
                     pl.col("t_ns").alias("seg_ns")))
    segs = segs.join(inner, on="seg", how="left").sort("seg_ns", "start_ns")
    return segs.select("id", "seg", pl.int_range(pl.len()).over("seg").alias("pos"),
                       _norm(pl.col("kernel_name")).alias("name"), "annotation", "batch_size")


def capture_context(capture: Trace, launches: pl.DataFrame) -> pl.DataFrame:
    """Capture launch id -> op_id, module, module_path, via `attrib.link.launches.link` over one
    pseudo kernel per launch (External id of the launch, else time containment; module frames)."""
    la = capture.launches.join(launches.select("id"), on="id", how="semi")
    pseudo = la.select("id", "correlation", pl.lit(False).alias("graph"),
                       pl.col("id").alias("launch_id"))
    got = link(capture.with_tables(kernels=conform("kernels", pseudo)))
    return got.select("id", "op_id", "module", "module_path")


def replay_groups(replay: Trace, links: pl.DataFrame) -> pl.DataFrame:
    """Graph-replayed kernels grouped by their graph launch: launch_id, correlation, ids, names
    (start order)."""
    keyed = pl.col("launch_id").is_not_null() | pl.col("correlation").is_not_null()
    k = (replay.kernels.select("id", "name", "start_ns", "correlation")
         .join(links.select("id", "launch_id", "graph"), on="id", how="inner")
         .filter(pl.col("graph").fill_null(False) & keyed)
         .sort("start_ns", "id"))
    return k.group_by("launch_id", "correlation", maintain_order=True).agg(
        "id", _norm(pl.col("name")).alias("names"))


def _pick(names: list[str], seqs: dict[tuple[str, ...], list[int]], ann: list[str | None],
          prev: int | None) -> tuple[int | None, float, bool]:
    """Best segment for a group's names: (segment index, ratio, ambiguous across annotations)."""
    import difflib  # only a graph replay with its capture trace aligns (a fast start)

    scored = []
    for seq, idx in seqs.items():
        sm = difflib.SequenceMatcher(None, names, seq, autojunk=False)
        if sm.real_quick_ratio() >= MIN_RATIO and sm.quick_ratio() >= MIN_RATIO:
            scored.append((sm.ratio(), idx))
    if not scored:
        return None, 0.0, False
    best = max(r for r, _ in scored)
    if best < MIN_RATIO:
        return None, best, False
    cands = sorted(i for r, idx in scored if r == best for i in idx)
    ambiguous = len({ann[i] for i in cands}) > 1
    if prev is not None:
        nxt = [i for i in cands if i == prev + 1 and ann[i] == ann[prev]]
        same = [i for i in cands if ann[i] == ann[prev]]
        if nxt or same:
            return (nxt or same)[0], best, ambiguous
    return cands[0], best, ambiguous


_PAIRS = {"id": pl.Int64, "capture_launch": pl.Int64}


def _align(groups: pl.DataFrame, segs: pl.DataFrame
           ) -> tuple[pl.DataFrame, dict[str, int | float | None]]:
    """Kernel id -> capture launch id for every kernel in a matching block of its group's
    segment."""
    import difflib  # as in _pick

    per = segs.group_by("seg", maintain_order=True).agg("id", "name", pl.col("annotation").first())
    seg_ids, seg_names = per["id"].to_list(), [tuple(n) for n in per["name"].to_list()]
    ann = per["annotation"].to_list()
    seqs: dict[tuple[str, ...], list[int]] = {}
    for i, seq in enumerate(seg_names):
        seqs.setdefault(seq, []).append(i)
    kid, lid, ratios = [], [], []
    exact = ambiguous = 0
    prev = None
    for ids, names in zip(groups["id"].to_list(), groups["names"].to_list()):
        s, ratio, amb = _pick(names, seqs, ann, prev)
        if s is None:
            continue
        prev, ambiguous = s, ambiguous + amb
        ratios.append(ratio)
        exact += ratio == 1.0
        sm = difflib.SequenceMatcher(None, names, seg_names[s], autojunk=False)
        for a, b, n in sm.get_matching_blocks():
            kid.extend(ids[a:a + n])
            lid.extend(seg_ids[s][b:b + n])
    pairs = pl.DataFrame({"id": kid, "capture_launch": lid}, schema=_PAIRS)
    stats = {"groups_matched": len(ratios), "groups_exact": exact, "groups_ambiguous": ambiguous,
             "mean_ratio": round(sum(ratios) / len(ratios), 4) if ratios else None}
    return pairs, stats


def merge(replay: Trace, links: pl.DataFrame, capture: Trace, *,
          batch_size: int | None = None) -> tuple[Trace, pl.DataFrame, MergeReport]:
    """Attribute `replay`'s graph-replayed kernels from the `capture` trace.

    Returns the replay trace with the matched capture ops appended to `ops` (new ids past the
    replay's largest; External id and parent cleared so nothing re-links to them), `links` with
    op_id/module/module_path from the capture and link = "capture" for matched kernels (graph stays
    True; unmatched kernels keep their row), and a MergeReport. `batch_size` keeps only segments
    under a `capture_<batch_size>_<mode>` annotation.
    """
    segs = capture_launches(capture)
    if batch_size is not None:
        segs = segs.filter(pl.col("batch_size") == batch_size)
    groups = replay_groups(replay, links)
    n_replayed = int(groups["id"].list.len().sum() or 0)
    pairs, stats = _align(groups, segs) if segs.height and groups.height else (
        pl.DataFrame(schema=_PAIRS),
        {"groups_matched": 0, "groups_exact": 0, "groups_ambiguous": 0, "mean_ratio": None})
    ctx = capture_context(capture, segs) if pairs.height else pl.DataFrame(
        schema={"id": pl.Int64, "op_id": pl.Int64, "module": pl.Utf8, "module_path": pl.Utf8})
    offset = int(replay.ops["id"].max()) + 1 if replay.ops["id"].drop_nulls().len() else 0
    got = pairs.join(ctx.rename({"id": "capture_launch"}), on="capture_launch", how="left").select(
        "id", (pl.col("op_id") + offset).alias("c_op"), pl.col("module").alias("c_mod"),
        pl.col("module_path").alias("c_path"))
    used = got["c_op"].drop_nulls().unique() - offset
    new_ops = (capture.ops.filter(pl.col("id").is_in(used.implode()))
               .with_columns((pl.col("id") + offset).alias("id"),
                             pl.lit(None, pl.Int64).alias("external_id"),
                             pl.lit(None, pl.Int64).alias("parent"))
               .select([c for c in replay.ops.columns if c in capture.ops.columns]))
    ops = pl.concat([replay.ops, new_ops], how="diagonal_relaxed") if new_ops.height else replay.ops
    hit = pl.col("c_op").is_not_null() | pl.col("c_path").is_not_null()
    out = links.join(got, on="id", how="left").with_columns(
        pl.when(hit).then(pl.col("c_op")).otherwise(pl.col("op_id")).alias("op_id"),
        pl.when(hit).then(pl.lit("capture")).otherwise(pl.col("link")).alias("link"),
        pl.when(hit).then(pl.col("c_mod")).otherwise(pl.col("module")).alias("module"),
        pl.when(hit).then(pl.col("c_path")).otherwise(pl.col("module_path")).alias("module_path"),
    ).select(links.columns)
    annotations = (segs.group_by("annotation").agg(pl.col("seg").n_unique().alias("n"))
                   .sort("annotation"))
    report = MergeReport(
        segments=int(segs["seg"].n_unique()), groups=groups.height, replayed=n_replayed,
        matched=pairs.height, unmatched=n_replayed - pairs.height,
        with_op=int(got["c_op"].is_not_null().sum()),
        with_module=int(got["c_path"].is_not_null().sum()),
        ops_appended=new_ops.height, **stats,
        captures={a or "(none)": n for a, n in annotations.iter_rows()})
    return replay.with_tables(ops=ops), out, report
