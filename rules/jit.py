"""Work that belongs before the measured window: Triton JIT/autotune (P05), TunableOp tuning (P04)."""

from __future__ import annotations

from typing import Any

import polars as pl

from attrib.pipeline import Attribution
from rules.finding import Finding, r

# compile and benchmark entry points only: triton/compiler frames such as launch_metadata run on every launch
JIT_FRAMES = r"triton/runtime/autotuner\.py|do_bench|triton/compiler/compiler\.py\(\d+\): (?:compile|_compile)\b"
# plain identifiers that are not vendor-library kernels: how Triton names its kernels
TRITON_NAME = r"^[A-Za-z_]\w*$"
NOT_TRITON = r"^(?:Cijk_|nvjet|_ZN|__amd_rocclr|sm\d+_|ampere_|cutlass|cudnn|ck_)"
FIRST_CALL_RATIO = 20.0
TUNABLEOP_VARIANTS = 4  # distinct Cijk_ kernels for one (op, shape) that only a candidate sweep produces

P05_REFS = ("https://github.com/vllm-project/vllm/pull/40137", "https://github.com/vllm-project/vllm/issues/43009",
            "https://github.com/vllm-project/vllm/pull/37188", "https://github.com/vllm-project/vllm/pull/44331",
            "https://github.com/vllm-project/vllm/pull/49170")
P04_REFS = ("https://github.com/pytorch/pytorch/issues/190433", "https://github.com/pytorch/pytorch/pull/192402",
            "https://github.com/ROCm/TheRock/issues/5550", "https://github.com/ROCm/TheRock/issues/2591")


def triton_jit_in_window(a: Attribution, doc: dict[str, Any]) -> list[Finding]:
    """P05: Triton compile/autotune frames in the window, or a Triton kernel whose first call is > 20x its median."""
    fr = a.trace.frames.filter(pl.col("name").str.contains(JIT_FRAMES))
    k = a.kernels.filter(pl.col("name").str.contains(TRITON_NAME) & ~pl.col("name").str.contains(NOT_TRITON))
    cold = (k.sort("start_ns").group_by("name", "phase").agg(
        pl.len().alias("calls"), pl.col("dur_ns").first().alias("first"), pl.col("dur_ns").median().alias("median"))
        .filter((pl.col("calls") >= 3) & (pl.col("first") > FIRST_CALL_RATIO * pl.col("median")))
        .sort("first", descending=True))
    if not fr.height and not cold.height:
        return []
    return [Finding(
        rule="P05-triton-jit-in-window", severity="medium",
        title="Triton compiled or autotuned inside the profiled window: those steps are not steady state",
        evidence={"jit_frames": fr.height, "jit_frame_ms": r(fr["dur_ns"].max() / 1e6 if fr.height else 0.0),
                  "jit_functions": fr["name"].unique().sort().head(5).to_list(),
                  "cold_kernels": [{"name": c["name"], "phase": c["phase"], "first_us": r(c["first"] / 1e3, 1),
                                    "median_us": r(c["median"] / 1e3, 1)} for c in cold.head(5).iter_rows(named=True)]},
        remedy="Warm up every shape before profiling (vLLM warmup, more warmup steps in the capture), keep "
               "TRITON_CACHE_AUTOTUNING=1, and ship tuned Triton configs for this device name.",
        references=P05_REFS)]


def _env(doc: dict[str, Any]) -> dict[str, str]:
    env = (doc.get("provenance") or {}).get("env") or {}
    return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}


def tunableop_in_window(a: Attribution, doc: dict[str, Any]) -> list[Finding]:
    """P04: TunableOp tuning on in the captured env, or a candidate sweep of Cijk_ kernels for one GEMM shape."""
    env = _env(doc)
    enabled = env.get("PYTORCH_TUNABLEOP_ENABLED") == "1"
    tuning = env.get("PYTORCH_TUNABLEOP_TUNING", "1" if enabled else "0") == "1"  # tuning defaults on when enabled
    sweep = pl.DataFrame()
    if a.trace.ops.height:
        sweep = (a.kernels.filter(pl.col("name").str.starts_with("Cijk_") & pl.col("op_id").is_not_null())
                 .join(a.trace.ops.select(pl.col("id").alias("op_id"), "input_dims"), on="op_id", how="left")
                 .group_by("op", "input_dims").agg(pl.col("name").n_unique().alias("variants"), pl.len().alias("calls"))
                 .filter(pl.col("variants") >= TUNABLEOP_VARIANTS).sort("variants", descending=True))
    if not (enabled and tuning) and not sweep.height:
        return []
    return [Finding(
        rule="P04-tunableop-in-window", severity="high" if sweep.height else "medium",
        title="PyTorch TunableOp was tuning GEMMs during the capture: GEMM times include the candidate sweep",
        evidence={"PYTORCH_TUNABLEOP_ENABLED": env.get("PYTORCH_TUNABLEOP_ENABLED"),
                  "PYTORCH_TUNABLEOP_TUNING": env.get("PYTORCH_TUNABLEOP_TUNING"),
                  "swept_shapes": [{"op": s["op"], "variants": s["variants"], "calls": s["calls"]}
                                   for s in sweep.head(5).iter_rows(named=True)]},
        remedy="Tune offline, then profile with PYTORCH_TUNABLEOP_TUNING=0 and the saved results file "
               "(PYTORCH_TUNABLEOP_FILENAME).",
        references=P04_REFS)]
