"""Attention: RDNA decode without split-KV (P10), RDNA custom
paged-attention traps (P12), unfused eager attention / SDPA math
fallback (P17)."""

from __future__ import annotations


import orjson
import polars as pl

from attrib.components.patterns import (
    BMM_OP,
    FP8_KV_CACHE,
    FUSED_ATTENTION,
    MATH_SDPA,
    NAVI_PAGED_ATTENTION,
    PAGED_SINGLE_PASS,
    SOFTMAX_OP,
    SPLIT_KV,
)
from attrib.analysis.model import Analysis
from attrib.pipeline import Attribution
from attrib.reads import Reads
from rules.finding import Finding, is_rdna, kernel_ns, kernels_in, kernels_where, ns, num, r
from rules.thresholds import Thresholds

P10_REFS = (
    "https://github.com/vllm-project/vllm/issues/50264",
    "https://github.com/vllm-project/vllm/pull/45916",
    "https://github.com/vllm-project/vllm/pull/58156",
    "https://github.com/vllm-project/vllm/pull/46192",
    "https://github.com/ROCm/vllm/pull/994",
)
P12_REFS = (
    "https://github.com/vllm-project/vllm/pull/53856",
    "https://github.com/vllm-project/vllm/issues/57614",
    "https://github.com/vllm-project/vllm/pull/17004",
    "https://github.com/vllm-project/vllm/pull/13843",
)
P17_REFS = (
    "https://github.com/unslothai/unsloth/pull/8821",
    "https://github.com/ROCm/TheRock/issues/1364",
    "https://github.com/pytorch/pytorch/issues/152595",
    "https://github.com/ROCm/flash-attention/issues/27",
    "https://github.com/ROCm/aotriton/issues/16",
)

# P17: the unfused ops' parents by name (an SDPA math fallback, a softmax)
P17_READS = Reads(parents=(MATH_SDPA, SOFTMAX_OP))


def _seq_dims(dims: str | None) -> list[int]:
    """The key dims where the query has 1 and the key more, from an
    op's input_dims (query first, key second); [] without both."""
    d = orjson.loads(dims) if dims else []
    pair = len(d) >= 2 and isinstance(d[0], list) and isinstance(d[1], list)
    if not pair or len(d[0]) != len(d[1]):
        return []
    return [
        kd for qd, kd in zip(d[0], d[1])
        if isinstance(qd, int) and isinstance(kd, int) and qd == 1 and kd > 1
    ]


def decode_keys(a: Attribution, k: pl.DataFrame) -> int | None:
    """Keys each decode query attends to, from the attention ops' query
    and key shapes (any layout: the dimension where the query has 1 and
    the key more is the sequence); None without shapes."""
    op_ids = k["op_id"].drop_nulls().implode()
    ops = a.trace.ops.filter(pl.col("id").is_in(op_ids))
    best = None
    for (dims,) in ops.select("input_dims").unique().iter_rows():
        seq = _seq_dims(dims)
        if seq:
            best = max(best or 0, max(seq))
    return best


def decode_attention_no_split_kv(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """P10: decode attention that cannot keep up with the context, no
    split-KV kernel in the phase, attention above `attention_share` of
    decode; either (RDNA) vLLM's single-pass paged kernels, or (any
    device) attention over >= `p10_min_keys` keys reading K/V below
    `p10_bw_fraction` of the memory roofline."""
    ph = an.phase("decode")
    att = ph.component("attention") if ph else None
    if ph is None or att is None or att.ms is None:
        return []
    if (att.share or 0) <= th.attention_share:
        return []
    k = kernels_in(a, "decode", columns=("name", "component", "op_id"))
    if k.filter(pl.col("name").str.contains(SPLIT_KV)).height:
        return []
    attn = k.filter(pl.col("component") == "attention")
    single = (
        k.filter(pl.col("name").str.contains(PAGED_SINGLE_PASS))
        if is_rdna(an.arch)
        else k.clear()
    )
    keys = decode_keys(a, attn)
    bw, gbs = an.device.roofline_bw, att.achieved_gbs
    frac = gbs / bw if (gbs and bw) else None
    long_context = keys is not None and keys >= th.p10_min_keys
    slow = long_context and frac is not None and frac < th.p10_bw_fraction
    if not single.height and not slow:
        return []
    floor = att.roofline_ms
    shown = single if single.height else attn
    names = shown["name"].unique().sort().head(4).to_list()
    what = (
        f"over up to {keys} keys at {frac:.0%} of the memory roofline "
        f"({att.ms / floor:.1f}x its K/V-read floor)"
        if slow and floor
        else "on single-pass paged kernels"
    )
    rdna = is_rdna(an.arch)
    remedy = (
        "Use a split-KV decode path: --attention-backend TRITON_ATTN on "
        "gfx11, a vLLM with the Triton KV-split decode for RDNA3/4, or on "
        "gfx1201 the (experimental, bf16-KV) AITER unified attention."
        if rdna
        else "Use a split-KV (flash-decoding) attention kernel for decode: "
        "let SDPA pick its flash or cuDNN backend (do not pin it to the "
        "memory-efficient one), or a FlashAttention/FlashInfer decode with "
        "KV splits."
    )
    return [Finding(
        rule="P10-decode-attention-no-split-kv", severity="high",
        title=f"decode attention is {att.share:.0%} of decode on {an.arch} "
              f"and runs without split-KV {what}: it grows with context",
        ms_per_step=att.ms - floor if (slow and floor) else att.ms,
        evidence={"arch": an.arch, "attention_share": att.share,
                  "attention_ms_per_step": att.ms,
                  "roofline_ms_per_step": floor, "achieved_gbs": gbs,
                  "fraction_of_roofline": r(frac), "keys": keys,
                  "kernels": [n[:120] for n in names], "split_kv_kernels": 0,
                  "tokens_per_step": ph.tokens_per_step},
        remedy=remedy,
        references=P10_REFS)]


def navi_paged_attention_traps(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """P12: vLLM's custom (ll4mi) paged attention on RDNA with what it
    does not support: fp8 KV (from the KV-write kernel's template or the
    stamp), a block size other than 16 or ALiBi (from the stamp)."""
    k = kernels_where(a, pl.col("name").str.contains(NAVI_PAGED_ATTENTION))
    if not k.height:
        return []
    kv = str(an.stamp("kv_cache_dtype") or "")
    fp8_writes = kernels_where(a, pl.col("name").str.contains(FP8_KV_CACHE), ("name",))
    fp8 = "fp8" in kv.lower() or fp8_writes.height > 0
    block = an.stamp("block_size") or an.env_var("VLLM_BLOCK_SIZE")
    traps = (
        ([f"fp8 KV cache ({kv or 'from the KV-write kernel'})"] if fp8 else [])
        + ([f"block size {block}"] if block and str(block) != "16" else [])
        + (["ALiBi"] if an.stamp("alibi") else [])
    )
    steps = max(k["step"].n_unique(), 1)
    title = (
        "RDNA custom paged attention with " + ", ".join(traps)
        + ": outside what the kernel supports"
        if traps
        else "RDNA custom paged attention in use: check logits for NaN "
        "at partially written KV tiles"
    )
    return [Finding(
        rule="P12-navi-paged-attention", severity="high" if traps else "info",
        title=title,
        ms_per_step=ns(k) / 1e6 / steps,
        evidence={"kernels": k["name"].unique().sort().head(3).to_list(),
                  "calls": k.height, "traps": traps,
                  "kv_cache_dtype": kv or None, "block_size": block},
        remedy="Keep the Navi paged attention to head_size 128, block_size "
               "16, bf16/fp16 KV, no ALiBi; otherwise select TRITON_ATTN. "
               "Check logits for NaN when the context ends mid-tile.",
        references=P12_REFS)]


def _op_names(a: Attribution, phase: str) -> pl.DataFrame:
    """The phase's kernels (name, dur_ns, component, op_id, step) launched by an op whose
    name, or whose parent's, is one P17 reads (math SDPA, softmax, bmm), with those two names
    (the other kernels' ops match none of its tests)."""
    ops = a.trace.ops.select(pl.col("id").alias("op_id"), pl.col("name").alias("op_name"), "parent")
    parents = a.trace.ops.select(pl.col("id").alias("parent"), pl.col("name").alias("parent_name"))
    named = ops.join(parents, on="parent", how="left")
    read = named.filter(pl.col("op_name").str.contains(f"{MATH_SDPA}|{SOFTMAX_OP}|{BMM_OP}")
                        | pl.col("parent_name").str.contains(f"{MATH_SDPA}|{SOFTMAX_OP}"))
    k = kernels_in(a, phase, pl.col("op_id").is_in(read["op_id"].implode()),
                   ("name", "dur_ns", "component", "op_id"))
    return k.join(read, on="op_id", how="left")


def unfused_attention(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """P17: attention computed as matmul + softmax + matmul (eager
    attention, or SDPA's math fallback) where no fused attention kernel
    runs; the unfused kernels' share of each phase."""
    if not a.trace.ops.height:
        return []
    out = []
    for ph in an.phases:
        total = kernel_ns(a, ph.phase)
        fused = kernels_in(a, ph.phase, pl.col("name").str.contains(FUSED_ATTENTION))
        if not total or fused.height:
            continue  # (checked before the joins with the ops table)
        k = _op_names(a, ph.phase)
        attn = pl.col("component") == "attention"
        op = pl.col("op_name")
        parent = pl.col("parent_name").fill_null("")
        math = op.str.contains(MATH_SDPA) | parent.str.contains(MATH_SDPA)
        softmax = op.str.contains(SOFTMAX_OP) | parent.str.contains(SOFTMAX_OP)
        unf = k.filter(math | (attn & (softmax | op.str.contains(BMM_OP))))
        soft = unf.filter(softmax)
        if not soft.height:
            continue
        share = ns(unf) / total
        if share <= th.unfused_attention_share:
            continue
        steps = max(ph.steps, 1)
        via = (
            "SDPA math fallback"
            if unf.filter(math).height
            else "eager attention (matmul + softmax + matmul)"
        )
        soft_share = num(soft["dur_ns"].sum()) / total
        out.append(
            Finding(
                rule="P17-unfused-attention",
                severity="high" if share > 0.3 else "medium",
                title=f"{ph.phase} attention runs unfused ({via}): "
                      f"{share:.0%} of kernel time, "
                      f"softmax alone {soft_share:.0%}",
                ms_per_step=ns(unf) / 1e6 / steps,
                phase=ph.phase,
                evidence={
                    "phase": ph.phase,
                    "share_of_kernel_time": r(share),
                    "softmax_share": r(ns(soft) / total),
                    "kernels_per_step": r(unf.height / steps, 1),
                    "ops": unf.group_by("op_name")
                    .agg((pl.col("dur_ns").sum() / 1e6 / steps).alias("ms"))
                    .sort("ms", descending=True)
                    .head(4)
                    .with_columns(pl.col("ms").round(4))
                    .to_dicts(),
                    "top_kernels": unf.group_by("name")
                    .agg((pl.col("dur_ns").sum() / 1e6 / steps).alias("ms"))
                    .sort("ms", descending=True)
                    .head(3)
                    .with_columns(pl.col("ms").round(4), pl.col("name").str.slice(0, 100))
                    .to_dicts(),
                },
                remedy="Use a fused attention kernel: attn_implementation='sdpa' (or "
                       "flash_attention_2) in HF; on ROCm RDNA "
                       "set TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 so SDPA "
                       "does not fall through to MATH.",
                references=P17_REFS,
            )
        )
    return out
