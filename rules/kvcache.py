"""The KV cache re-copied every step (HF DynamicCache grows K/V with `cat`:
each step moves the whole cache)."""

from __future__ import annotations


import polars as pl

from attrib.analysis.model import Analysis
from attrib.pipeline import Attribution
from rules.finding import (
    DECODE_LIKE,
    Finding,
    first_names,
    kernels_in,
    num,
    r,
    severity_of,
)
from rules.thresholds import Thresholds

CAT = r"^aten::(?:cat|concat|concatenate)$"
REFS = (
    "https://huggingface.co/docs/transformers/main/en/kv_cache",
    "https://github.com/huggingface/transformers/blob/main/src/transformers/cache_utils.py",
)


def kv_cache_recopy(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """Token steps whose KV-cache writes are `cat` kernels moving at least
    `kv_recopy_vs_attention` of the bytes attention reads: the cache is
    copied whole each step instead of written in place."""
    out = []
    for phase in DECODE_LIKE:
        ph = an.phase(phase)
        if ph is None:
            continue
        kv_write = pl.col("component") == "kv_cache_write"
        cat = pl.col("op").fill_null("").str.contains(CAT)
        k = kernels_in(a, phase, kv_write & cat)
        if not k.height or k["bytes"].is_null().all():
            continue
        steps = max(ph.steps, 1)
        per = (
            k.group_by("step")
            .agg(
                pl.col("bytes").sum(),
                (pl.col("dur_ns").sum() / 1e6).alias("ms"),
                pl.len().alias("n"),
            )
            .sort("step")
        )
        cat_bytes = float(num(per["bytes"].median()))
        cat_ms = float(num(per["ms"].median()))
        att = ph.component("attention")
        att_bytes = att.bytes if att else None
        ratio = cat_bytes / att_bytes if att_bytes else None
        if ratio is None or ratio < th.kv_recopy_vs_attention:
            continue
        growth = (
            float(num(per["bytes"].diff().drop_nulls().median()))
            if per.height > 1
            else None
        )
        out.append(
            Finding(
                rule="kv-cache-recopied",
                severity=severity_of(cat_ms / (ph.step_ms.mean or cat_ms or 1.0)),
                title=f"{phase}: the KV cache is re-copied every step (`cat`): "
                      f"{cat_bytes / 1e6:.1f} MB per step, "
                      f"{ratio:.2f}x the bytes attention reads, {cat_ms:.3f} ms",
                ms_per_step=cat_ms,
                phase=phase,
                summary=f"{num(per['n'].median()):g} cat kernels a step copy "
                        f"{cat_bytes / 1e6:.1f} MB "
                        f"while attention reads {(att_bytes or 0.0) / 1e6:.1f} MB",
                evidence={
                    "phase": phase,
                    "steps": steps,
                    "cat_kernels_per_step": r(float(num(per["n"].median())), 1),
                    "cat_mb_per_step": r(cat_bytes / 1e6, 2),
                    "attention_mb_per_step": r((att_bytes or 0.0) / 1e6, 2),
                    "cat_vs_attention_bytes": r(ratio),
                    "cat_ms_per_step": r(cat_ms, 4),
                    "attention_ms_per_step": att.ms if att else None,
                    "growth_mb_per_step": r(growth / 1e6, 3) if growth is not None else None,
                    "kernels": first_names(k, 2),
                },
                remedy="Write K/V in place into a preallocated cache: HF "
                       "cache_implementation='static' (StaticCache) or a "
                       "paged cache (vLLM/SGLang); then each step writes one "
                       "position instead of copying the whole cache.",
                references=REFS,
            )
        )
    return out
