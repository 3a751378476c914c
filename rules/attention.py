"""P10: RDNA decode attention on a single-pass paged kernel with no split-KV (collapses with context)."""

from __future__ import annotations

from typing import Any

import polars as pl

from attrib.pipeline import Attribution
from rules.finding import Finding, arch, is_rdna, phase_doc

SINGLE_PASS = r"kernel_paged_attention_2d|chunked_prefill_paged_decode|paged_attention_ll4mi_QKV|kernel_unified_attention_2d"
SPLIT_KV = r"(?i)unified_attention_3d|reduce_segments|splitkv|split_kv|combine"
ATTENTION_SHARE = 0.30


def decode_attention_no_split_kv(a: Attribution, doc: dict[str, Any]) -> list[Finding]:
    """Decode attention kernels are single-pass paged ones, no split-KV partner runs, attention > 30 %."""
    if not is_rdna(arch(doc)):
        return []
    ph = phase_doc(doc, "decode")
    att = next((c for c in (ph or {}).get("components", ()) if c["component"] == "attention"), None)
    if att is None or (att.get("share") or 0) <= ATTENTION_SHARE:
        return []
    k = a.kernels.filter(pl.col("phase") == "decode")
    single = k.filter(pl.col("name").str.contains(SINGLE_PASS))
    if not single.height or k.filter(pl.col("name").str.contains(SPLIT_KV)).height:
        return []
    return [Finding(
        rule="P10-decode-attention-no-split-kv", severity="high",
        title=f"decode attention is {att['share']:.0%} of decode on {arch(doc)} and runs single-pass paged "
              f"kernels without split-KV: it will grow with context",
        evidence={"arch": arch(doc), "attention_share": att["share"], "attention_ms_per_step": att["ms"],
                  "kernels": single["name"].unique().sort().head(4).to_list(),
                  "tokens_per_step": ph.get("tokens_per_step")},
        remedy="Use a split-KV decode path: --attention-backend TRITON_ATTN on gfx11, a vLLM with the Triton "
               "KV-split decode for RDNA3/4, or on gfx1201 the (experimental, bf16-KV) AITER unified attention.",
        references=("https://github.com/vllm-project/vllm/issues/50264",
                    "https://github.com/vllm-project/vllm/pull/45916",
                    "https://github.com/vllm-project/vllm/pull/58156",
                    "https://github.com/vllm-project/vllm/pull/46192",
                    "https://github.com/ROCm/vllm/pull/994"))]
