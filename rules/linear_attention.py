"""Linear attention (Gated DeltaNet) on the pure-PyTorch fallback: without
flash-linear-attention and causal-conv1d, transformers runs the delta rule
as a per-token loop of small elementwise kernels over the fp32 state (many
kernels, several passes over the state per token) instead of one fused
Triton kernel."""

from __future__ import annotations


import polars as pl

from attrib.link.nesting import innermost
from attrib.analysis.model import Analysis
from attrib.pipeline import Attribution
from attrib.reads import Reads, union
from attrib.components.patterns import FALLBACK_FRAME
from rules.finding import Finding, kernels_in, ns, num, r
from rules import idle
from rules.idle import idle_causes
from rules.thresholds import Thresholds

# fused kernels of the fast path (flash-linear-attention, causal-conv1d,
# vLLM/SGLang ports)
FUSED_KERNEL = (
    r"(?i)gated_delta_rule|fused_recurrent|chunk_\w*fwd"
    r"|causal_conv1d\w*_(?:fwd|update)|fused_gdn"
)
REFS = (
    "https://github.com/huggingface/transformers/pull/40771",
    "https://github.com/fla-org/flash-linear-attention",
    "https://github.com/Dao-AILab/causal-conv1d",
    "https://github.com/unslothai/unsloth/pull/6850",
)

# the fallbacks' frames, the runtime calls of kernels launched inside them, idle_causes'
READS = union([idle.READS, Reads(frames=(FALLBACK_FRAME,),
                                 kernel_calls_if_frames=(FALLBACK_FRAME,))])


def _in_fallback(a: Attribution, k: pl.DataFrame) -> pl.DataFrame:
    """The kernels of `k` launched inside a fallback frame, with that frame's name."""
    f = a.trace.frames.filter(pl.col("name").str.contains(FALLBACK_FRAME))
    if not f.height or not a.trace.launches.height:
        return k.clear().with_columns(pl.lit(None, pl.Utf8).alias("frame"))
    launches = a.trace.launches.select(
        pl.col("id").alias("launch_id"), pl.col("start_ns").alias("t_ns"), "pid", "tid"
    )
    pts = (
        k.select(pl.col("id").alias("pid_"), "launch_id").drop_nulls()
        .join(launches, on="launch_id", how="inner")
        .drop("launch_id")
    )
    frames = f.select("id", "start_ns", "dur_ns", "pid", "tid")
    got = innermost(frames, pts, ["pid", "tid"]).drop_nulls("inner")
    inner = got.select(pl.col("pid_").alias("id"), "inner")
    names = f.select(pl.col("id").alias("inner"), pl.col("name").alias("frame"))
    return (
        k.join(inner, on="id", how="inner")
        .join(names, on="inner", how="left")
    )


def torch_fallback(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """Per phase: the linear-attention kernels launched from transformers'
    torch fallback of the delta rule or the causal conv1d, when no fused
    linear-attention kernel runs; explains their kernel time plus their
    share of the step's launch gaps."""
    out = []
    for ph in an.phases:
        row = ph.component("linear_attention")
        if row is None:  # (before the phase's kernels are copied)
            continue
        k = kernels_in(a, ph.phase)
        fused = k.filter(pl.col("name").str.contains(FUSED_KERNEL))
        if not k.height or fused.height:
            continue
        fb = _in_fallback(a, k)
        if not fb.height:
            continue
        steps = max(int(ph.steps or 0), 1)
        idle = idle_causes(a, ph.phase)
        gaps_ms = float(num(idle["launch_gaps"].median())) if idle.height else 0.0
        share_of_kernels = fb.height / k.height
        kernel_ms = ns(fb) / 1e6 / steps
        ms = kernel_ms + share_of_kernels * gaps_ms
        if ms < th.la_fallback_min_ms:
            continue
        frames = (
            fb.group_by("frame")
            .agg(pl.len().alias("n"), pl.col("dur_ns").sum().alias("ns"))
            .sort("ns", descending=True)
        )
        out.append(
            Finding(
                rule="linear-attention-torch-fallback",
                severity="high" if ph.phase != "prefill" else "medium",
                title=f"{ph.phase}: linear attention runs transformers' "
                      f"PyTorch fallback: {fb.height / steps:.0f} kernels per step "
                      f"({share_of_kernels:.0%} of the step's "
                      f"kernels), {ms:.3f} ms per step with their launch gaps",
                ms_per_step=ms,
                phase=ph.phase,
                evidence={
                    "phase": ph.phase,
                    "fallback_kernels_per_step": r(fb.height / steps, 1),
                    "share_of_kernels": r(share_of_kernels),
                    "kernel_ms_per_step": r(kernel_ms, 4),
                    "launch_gaps_ms_per_step": r(share_of_kernels * gaps_ms, 4),
                    "linear_attention_mb_per_step": (
                        r(row.bytes / 1e6, 2) if row.bytes else None
                    ),
                    "frames": [
                        {
                            "frame": x["frame"].split(": ", 1)[-1],
                            "kernels_per_step": r(x["n"] / steps, 1),
                            "ms_per_step": r(x["ns"] / 1e6 / steps, 4),
                        }
                        for x in frames.iter_rows(named=True)
                    ],
                    "fused_kernels": 0,
                },
                remedy="Install flash-linear-attention (Triton kernels; runs on "
                       "ROCm too) and causal-conv1d so transformers takes its "
                       "fast path (is_fast_path_available), or serve the model "
                       "with vLLM/SGLang, whose Gated DeltaNet kernels are fused.",
                references=REFS,
            )
        )
    return out
