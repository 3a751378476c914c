"""P08: the sampler's share of small-batch decode on wave32 RDNA (a large
vocabulary, torch fallback top-k/top-p)."""

from __future__ import annotations


import polars as pl

from attrib.components.patterns import SORT_SCAN
from attrib.analysis.model import Analysis
from attrib.pipeline import Attribution
from rules.finding import DECODE_LIKE, Finding, kernel_ns, kernels_in, ns, num, r
from rules.thresholds import Thresholds

REFS = (
    "https://github.com/vllm-project/vllm/issues/45871",
    "https://github.com/vllm-project/vllm/pull/46012",
    "https://github.com/vllm-project/vllm/pull/31295",
    "https://github.com/vllm-project/vllm/pull/51507",
)


def _vocab(a: Attribution, k: pl.DataFrame) -> int | None:
    """The largest dimension among the sampler kernels' op inputs (the
    logits' vocabulary), None without shapes."""
    ids = k["op_id"].drop_nulls().unique()
    if not ids.len():
        return None
    ops = a.trace.ops.filter(pl.col("id").is_in(ids.implode()))
    dims = (
        ops["input_dims"].drop_nulls()
        .str.extract_all(r"\d+").explode().drop_nulls().cast(pl.Int64)
    )
    return int(num(dims.max())) if dims.len() else None


SAMPLING_COLUMNS = ("name", "start_ns", "dur_ns", "component", "op", "op_id")


def _sampling(a: Attribution, phase: str) -> pl.DataFrame:
    """The phase's sampling kernels: classified `sampler`, or launched in a
    step after its last lm_head kernel (logits processing and sampling
    follow the LM head in every token step)."""
    end = (pl.col("start_ns") + pl.col("dur_ns")).max().alias("_head_end")
    heads = kernels_in(a, phase, pl.col("component") == "lm_head", ("start_ns", "dur_ns"))
    head = heads.group_by("step").agg(end)
    head_end = pl.col("step").replace_strict(head["step"], head["_head_end"], default=None)
    after_head = head_end.is_not_null() & (pl.col("start_ns") >= head_end)
    sampler = pl.col("component") == "sampler"
    return kernels_in(a, phase, sampler | after_head, SAMPLING_COLUMNS)


def sampler_share(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """P08: sampling kernels > `sampler_share` of decode kernel time at <=
    `max_decode_tokens` tokens per step."""
    out = []
    for phase in DECODE_LIKE:
        ph = an.phase(phase)
        tokens = ph.tokens_per_step if ph else None
        if ph is None or not tokens or tokens > th.max_decode_tokens:
            continue
        k = _sampling(a, phase)
        total = kernel_ns(a, phase)
        share = ns(k) / total if total else 0.0
        if share <= th.sampler_share:
            continue
        steps = max(ph.steps, 1)
        fallback = k.filter(pl.col("name").str.contains(SORT_SCAN))
        vocab = _vocab(a, k)
        over = f" over a {vocab:,}-entry vocabulary" if vocab else ""
        op_ms = (pl.col("dur_ns").sum() / 1e6 / steps).round(4).alias("ms")
        ops = k.group_by("op").agg(op_ms).sort("ms", descending=True).head(5)
        out.append(Finding(
            rule="P08-sampler-share", severity="medium",
            title=f"{phase}: sampling takes {share:.0%} of kernel time at "
                  f"{tokens} token(s) per step" + over,
            ms_per_step=ns(k) / 1e6 / steps, phase=phase,
            evidence={"phase": phase, "tokens_per_step": tokens,
                      "sampler_share": r(share),
                      "sampler_ms_per_step": r(ns(k) / 1e6 / steps, 4),
                      "vocab": vocab,
                      "kernels_per_step": r(k.height / steps, 1),
                      "sort_scan_kernels_per_step": r(fallback.height / steps, 1),
                      "ops": ops.to_dicts()},
            remedy="Use the engine's fused top-k/top-p sampler built for wave32 "
                   "(vLLM PR #46012 on ROCm), avoid a full sort of the vocabulary "
                   "per step, or decode greedily where acceptable.",
            references=REFS))
    return out
