"""Rounds of a speculative decoding loop: draft passes, one verify pass, tokens proposed and
accepted, from the steps table (roles from `attrib.steps.speculative`) and the raw ops.

A round is the run of draft-model passes before a target pass, and that target (verify) pass.
Proposed: the round's draft passes (one candidate each); without a draft model (prompt lookup),
the verify pass's tokens less one, or, on the first pass (an empty cache: the prompt and the
candidates together), the candidates `torch.cat` appended to the prompt just before it.
Accepted: from the next verify pass's cache, whose past (keys attended less its new tokens) is the
previous round's sequence plus what was accepted; the last round's from the sequence's growth
(the first `cat([1, n], [1, accepted + 1])` after its verify pass). Times: a pass's forward runs
from the start of its outermost module frame to its end or the end of the last kernel launched
before then, whichever is later (the whole step without frames: a span's first step also holds
the generate() setup before its first forward); other = the round less its passes. Batch: the
sequences of the verify pass's attention query (not its width of 1 + K tokens). A span without a
draft model is a lookup loop only where its ids grow by such cats (`_grows`).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from attrib.reads import Reads
from attrib.steps.speculative import PIECE, kv_lengths
from attrib.trace import input_dims

# the sequence cats of a round, and the runtime calls of a pass's kernels (its forward's end)
READS = Reads(ops=(r"^aten::cat$",), kernel_calls_if_roles=True)

ROUND_COLS = {
    "round": pl.Int64, "span": pl.Utf8, "verify_step": pl.Int64, "drafts": pl.Int64,
    "proposed": pl.Int64, "proposed_from": pl.Utf8, "verified": pl.Int64, "kv_len": pl.Int64,
    "accepted": pl.Int64, "accepted_from": pl.Utf8, "prefill": pl.Boolean,
    "start_ns": pl.Int64, "end_ns": pl.Int64, "draft_ns": pl.Int64, "verify_ns": pl.Int64,
    "other_ns": pl.Int64, "forward_from": pl.Utf8, "batch": pl.Int64,
}


def _pair(dim_text: str | None) -> tuple[int, int] | None:
    """(a, b) of a cat of two [B, a], [B, b] tensors (a sequence growing), else None."""
    dims = input_dims(dim_text)
    if not (isinstance(dims, list) and dims and isinstance(dims[0], list) and len(dims[0]) == 2):
        return None
    x, y = dims[0]
    if not (isinstance(x, list) and isinstance(y, list) and len(x) == len(y) == 2 and x[0] == y[0]):
        return None
    return int(x[1]), int(y[1])


def sequence_cats(ops: pl.DataFrame) -> pl.DataFrame:
    """Every 2-D two-tensor `aten::cat` (t, a, b): where a sequence of ids grows by b."""
    cats = ops.filter(pl.col("name") == "aten::cat").select("start_ns", "input_dims")
    rows = [(t, p[0], p[1]) for t, d in cats.iter_rows() if (p := _pair(d)) is not None]
    schema = {"t": pl.Int64, "a": pl.Int64, "b": pl.Int64}
    return pl.DataFrame(rows, schema=schema, orient="row").sort("t")


def _forward_end(steps: pl.DataFrame, kernels: pl.DataFrame,
                 launches: pl.DataFrame) -> pl.LazyFrame:
    """step, fwd_ns: each pass's forward time (module docstring), as a query."""
    frame_end = pl.coalesce("fwd_end", "cpu_end")
    frame_start = pl.coalesce("fwd_start", "cpu_start")
    s = steps.lazy().select("step", "cpu_start", "cpu_end", frame_start.alias("_fs"),
                            frame_end.alias("_fe"))
    k = kernels.lazy().select("launch_id",
                              (pl.col("start_ns") + pl.col("dur_ns")).alias("_ke"))
    k = k.join(launches.lazy().select(pl.col("id").alias("launch_id"),
                                      pl.col("start_ns").alias("t")),
               on="launch_id").sort("t")
    hit = k.join_asof(s.sort("cpu_start"), left_on="t", right_on="cpu_start")
    tail = hit.filter(pl.col("t") < pl.col("_fe")).group_by("step").agg(pl.col("_ke").max())
    end = pl.min_horizontal("cpu_end", pl.max_horizontal("_fe", "_ke"))
    fwd = (end - pl.col("_fs")).alias("fwd_ns")
    return s.join(tail, on="step", how="left").select("step", fwd)


def rounds(steps: pl.DataFrame, ops: pl.DataFrame, kernels: pl.DataFrame,
           launches: pl.DataFrame) -> pl.DataFrame:
    """One row per round of every span holding a speculative loop (ROUND_COLS); empty if none."""
    if steps.height == 0 or "role" not in steps.columns:
        return pl.DataFrame(schema=ROUND_COLS)
    pieces = (steps.lazy().with_columns(pl.col("marker").str.extract(PIECE, 1).alias("span"))
              .filter(pl.col("span").is_not_null()))
    spec = pieces.group_by("span").agg(
        pl.col("role").is_in(["draft", "verify"]).any().alias("_s"))
    par = (pieces.join(spec.filter(pl.col("_s")).select("span"), on="span", how="semi")
           .collect(engine="in-memory"))
    if par.height == 0:
        return pl.DataFrame(schema=ROUND_COLS)
    frames = par["fwd_end"].is_not_null().any()
    par = (par.lazy().join(kv_lengths(par, ops).lazy(), on="step", how="left")
           .join(_forward_end(par, kernels, launches), on="step", how="left")
           .sort("cpu_start").collect(engine="in-memory"))
    cats = sequence_cats(ops)
    out: list[dict[str, Any]] = []
    for (span,), g in par.group_by("span", maintain_order=True):
        out += _span_rounds(str(span), g, cats, "module frames" if frames else "step windows")
    return pl.DataFrame(out, schema=ROUND_COLS, orient="row")


def _span_rounds(span: str, g: pl.DataFrame, cats: pl.DataFrame,
                 fwd_from: str) -> list[dict[str, Any]]:
    """The rounds of one span's passes (time order)."""
    passes = g.to_dicts()
    has_draft = any(p["model"] == "draft" for p in passes)
    out: list[dict[str, Any]] = []
    drafts: list[dict[str, Any]] = []
    for p in passes:
        if has_draft and p["model"] == "draft":
            drafts.append(p)
            continue
        q, kv = int(p["tokens"] or 0), p["kv_len"]
        start = int((drafts[0] if drafts else p)["cpu_start"])
        if has_draft:
            proposed, how = len(drafts), "draft passes"
        elif kv is not None and kv > q:
            proposed, how = q - 1, "verify tokens - 1"
        else:  # the first pass: prompt + candidates, appended just before it
            c = _cand(cats, p, q)
            proposed, how = (c[1], "cat onto the prompt") if c else (0, "no candidates")
        draft_ns = sum(int(d["fwd_ns"] or 0) for d in drafts)
        verify_ns = int(p["fwd_ns"] or 0)
        end = int(p["cpu_end"])
        out.append({
            "round": len(out), "span": span, "verify_step": p["step"], "drafts": len(drafts),
            "proposed": proposed, "proposed_from": how, "verified": q, "kv_len": kv,
            "accepted": None, "accepted_from": None, "prefill": kv is not None and kv <= q,
            "start_ns": start, "end_ns": end, "draft_ns": draft_ns, "verify_ns": verify_ns,
            "other_ns": end - start - draft_ns - verify_ns, "forward_from": fwd_from,
            "batch": p["batch"],
            "_cur": None if kv is None else kv - proposed, "_t": int(p["cpu_start"]),
        })
        drafts = []
    if not has_draft and not _grows(out, cats):
        return []
    for r, nxt in zip(out, [*out[1:], None]):
        cur = r.pop("_cur")
        t = r.pop("_t")
        if nxt is not None and cur is not None and nxt["kv_len"] is not None:
            r["accepted"] = int(nxt["kv_len"]) - int(nxt["verified"]) - int(cur)
            r["accepted_from"] = "next verify's cache"
        elif cur is not None:
            after = (pl.col("t") > t) & (pl.col("t") < r["end_ns"])
            grow = cats.filter(after & (pl.col("a") == cur))
            if grow.height:
                r["accepted"] = int(grow["b"][0]) - 1
                r["accepted_from"] = "sequence growth (cat)"
    return out


def _grows(out: list[dict[str, Any]], cats: pl.DataFrame) -> bool:
    """Whether the ids grow by a cat from a round's accepted prefix (its `_cur`) after its verify
    pass: a lookup loop does; a continuous-batching step of packed requests (a verify pass's
    shapes over a growing cache) does not."""
    for r in out[1:]:
        if r["_cur"] is None:
            continue
        after = (pl.col("t") > r["_t"]) & (pl.col("a") == r["_cur"])
        if cats.filter(after).height:
            return True
    return False


def _cand(cats: pl.DataFrame, p: dict[str, Any], q: int) -> tuple[int, int] | None:
    """The cat [1, prompt] + [1, candidates] = q tokens in the pass's step before its forward."""
    got = cats.filter((pl.col("t") >= p["cpu_start"]) & (pl.col("t") < p["cpu_end"])
                      & (pl.col("a") + pl.col("b") == q))
    return (int(got["a"][0]), int(got["b"][0])) if got.height else None
