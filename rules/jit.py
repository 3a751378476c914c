"""Work that belongs before the measured window: compile/JIT/autotune
(P05), TunableOp tuning (P04)."""

from __future__ import annotations


import polars as pl

from attrib.components.patterns import NOT_TRITON, TENSILE, TRITON_NAME
from attrib.analysis.model import Analysis
from attrib.pipeline import Attribution
from attrib.steps.excluded import compile_events
from rules.finding import Finding, kernels_where, ns, num, r
from rules.intervals import covered, merge, ms, spans, total
from rules.thresholds import Thresholds


P05_REFS = (
    "https://github.com/vllm-project/vllm/pull/40137",
    "https://github.com/vllm-project/vllm/issues/43009",
    "https://github.com/vllm-project/vllm/pull/37188",
    "https://github.com/vllm-project/vllm/pull/44331",
    "https://github.com/vllm-project/vllm/pull/49170",
)
P04_REFS = (
    "https://github.com/pytorch/pytorch/issues/190433",
    "https://github.com/pytorch/pytorch/pull/192402",
    "https://github.com/ROCm/TheRock/issues/5550",
    "https://github.com/ROCm/TheRock/issues/2591",
)


def _per_step_compile(a: Attribution, sp: pl.DataFrame) -> pl.DataFrame:
    """Per step: window ms, compile ms inside it (union of nested spans), kernel count."""
    st = a.steps.drop_nulls(["window_start", "window_end"]).sort("step")
    s, e = merge(*spans(sp))
    cov = ms(covered(st["window_start"], st["window_end"], s, e))
    cols = st.select("step", "phase", "step_ms", pl.col("n_kernels").fill_null(0))
    return cols.with_columns(cov.alias("compile_ms"))


def _odd_steps(a: Attribution, th: Thresholds) -> pl.DataFrame:
    """Steps whose kernel count is `kernel_count_ratio` x above or below
    their phase's median, slowest first (with the phase medians)."""
    steps = a.steps.lazy()
    med = steps.group_by("phase").agg(
        pl.col("n_kernels").median().alias("med_k"),
        pl.col("step_ms").median().alias("med_ms"),
    )
    n, med_k = pl.col("n_kernels"), pl.col("med_k")
    ratio = th.kernel_count_ratio
    odd = (n > ratio * med_k) | (n * ratio < med_k)
    return (
        steps.join(med, on="phase").filter(odd)
        .select("step", "phase", "n_kernels", "med_k", "step_ms", "med_ms")
        .sort("step_ms", descending=True)
        .collect(engine="in-memory")
    )


def compile_in_window(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """P05: torch.compile/Triton compile or autotune spans inside the
    window, Triton kernels whose first call is `first_call_ratio` x their
    median, and steps whose kernel count is an outlier of their phase."""
    sp = compile_events(a.trace)
    name = pl.col("name")
    k = kernels_where(a, name.str.contains(TRITON_NAME) & ~name.str.contains(NOT_TRITON))
    cold = (
        k.lazy().sort("start_ns")
        .group_by("name", "phase")
        .agg(
            pl.len().alias("calls"),
            pl.col("dur_ns").first().alias("first"),
            pl.col("dur_ns").median().alias("median"),
        )
        .filter(
            (pl.col("calls") >= th.cold_min_calls)
            & (pl.col("first") > th.first_call_ratio * pl.col("median"))
        )
        .sort("first", descending=True)
        .collect(engine="in-memory")
    )
    per = _per_step_compile(a, sp) if sp.height else pl.DataFrame()
    odd = _odd_steps(a, th)
    # a step with an odd kernel count that is also slow for its phase:
    # warmup or tuning work in it
    slow_odd = (odd.filter(pl.col("step_ms") > th.slow_step_ratio * pl.col("med_ms"))
                if odd.height else odd)
    if not sp.height and not cold.height and not slow_odd.height:
        return []
    hit = (
        per.filter(pl.col("compile_ms") > 0).sort("compile_ms", descending=True)
        if per.height
        else per
    )
    total_ms = total(*spans(sp)) / 1e6 if sp.height else 0.0
    worst = hit.row(0, named=True) if hit.height else None
    by_name = (
        sp.group_by("name")
        .agg((pl.col("dur_ns").sum() / 1e6).alias("ms"), pl.len().alias("n"))
        .sort("ms", descending=True)
        .head(6)
    ) if sp.height else pl.DataFrame()
    if worst:
        title = (f"compilation/autotuning inside the profiled window: "
                 f"{worst['compile_ms']:.1f} ms of "
                 f"the {worst['step_ms']:.1f} ms {worst['phase']} step {worst['step']} "
                 f"({worst['compile_ms'] / worst['step_ms']:.0%})")
    elif sp.height:
        title = (f"compilation/autotuning inside the profiled window "
                 f"({total_ms:.1f} ms, outside the steps)")
    elif cold.height:
        title = ("Triton kernels' first calls are far slower than the rest: "
                 "JIT or autotune inside the window")
    else:
        o = slow_odd.row(0, named=True)
        title = (f"{o['phase']} step {o['step']} runs {o['n_kernels']} kernels (phase median "
                 f"{o['med_k']:.0f}) and takes {o['step_ms']:.1f} ms "
                 f"({o['med_ms']:.1f} ms median): "
                 "warmup, compile or tuning inside the window")
    odd_ms = (
        float(slow_odd["step_ms"][0] - slow_odd["med_ms"][0])
        if slow_odd.height
        else None
    )
    compiled = [
        {"step": h["step"], "phase": h["phase"], "step_ms": r(h["step_ms"], 2),
         "compile_ms": r(h["compile_ms"], 2),
         "share_of_step": r(h["compile_ms"] / h["step_ms"])}
        for h in (hit.head(5).iter_rows(named=True) if hit.height else [])
    ]
    ops = [
        {"name": b["name"][:120], "ms": r(b["ms"], 1), "count": b["n"]}
        for b in (by_name.iter_rows(named=True) if by_name.height else [])
    ]
    cold_kernels = [
        {"name": c["name"], "phase": c["phase"],
         "first_us": r(c["first"] / 1e3, 1),
         "median_us": r(c["median"] / 1e3, 1)}
        for c in cold.head(5).iter_rows(named=True)
    ]
    outliers = [
        {"step": o["step"], "phase": o["phase"], "kernels": o["n_kernels"],
         "phase_median": o["med_k"], "step_ms": r(o["step_ms"], 2),
         "phase_median_ms": r(o["med_ms"], 2)}
        for o in odd.head(5).iter_rows(named=True)
    ]
    return [Finding(
        rule="P05-compile-in-window", severity="high" if worst else "medium", title=title,
        ms_per_step=worst["compile_ms"] if worst else (total_ms or odd_ms),
        evidence={"compile_ms_total": r(total_ms, 1),
                  "steps_with_compile": compiled,
                  "compile_ops": ops,
                  "cold_kernels": cold_kernels,
                  "kernel_count_outlier_steps": outliers},
        remedy="Compile and autotune before the measured window: warm up every "
               "shape (more warmup steps in the capture, vLLM's warmup), keep the "
               "compile/autotune caches (TORCHINDUCTOR_CACHE_DIR, "
               "TRITON_CACHE_AUTOTUNING=1), ship tuned Triton configs for "
               "this device; leave compile steps out of step figures.",
        references=P05_REFS)]


def tunableop_in_window(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """P04: TunableOp tuning on in the captured env, or a candidate sweep
    of Cijk_ kernels for one GEMM shape."""
    enabled = an.env_var("PYTORCH_TUNABLEOP_ENABLED") == "1"
    tuning = (
        an.env_var("PYTORCH_TUNABLEOP_TUNING") or ("1" if enabled else "0")
    ) == "1"  # tuning defaults on when enabled
    sweep = pl.DataFrame()
    if a.trace.ops.height:
        tensile = pl.col("name").str.contains(TENSILE) & pl.col("op_id").is_not_null()
        k = kernels_where(a, tensile)
        # one query: the ops of those kernels, their shapes by op
        ops = a.trace.ops.lazy().join(k.lazy().select(pl.col("op_id").alias("id")), on="id",
                                      how="semi")
        dims = ops.select(pl.col("id").alias("op_id"), "input_dims")
        sweep = (
            k.lazy().join(dims, on="op_id", how="left")
            .group_by("op", "input_dims")
            .agg(
                pl.col("name").n_unique().alias("variants"),
                pl.len().alias("calls"),
                (pl.col("dur_ns").sum() / 1e6).alias("ms"),
            )
            .filter(pl.col("variants") >= th.tunableop_variants)
            .sort("variants", descending=True)
            .collect(engine="in-memory")
        )
    if not (enabled and tuning) and not sweep.height:
        return []
    gemm_ms = ns(kernels_where(a, pl.col("name").str.contains(TENSILE), ("dur_ns",))) / 1e6
    steps = max(a.steps.height, 1)
    swept_ms = float(num(sweep["ms"].sum())) if sweep.height else gemm_ms
    return [
        Finding(
            rule="P04-tunableop-in-window",
            severity="high" if sweep.height else "medium",
            title="PyTorch TunableOp was tuning GEMMs during the capture: "
                  "GEMM times include the candidate sweep",
            ms_per_step=swept_ms / steps or None,  # no BLAS kernels: unknown
            evidence={
                "PYTORCH_TUNABLEOP_ENABLED": an.env_var("PYTORCH_TUNABLEOP_ENABLED"),
                "PYTORCH_TUNABLEOP_TUNING": an.env_var("PYTORCH_TUNABLEOP_TUNING"),
                "tensile_gemm_ms": r(gemm_ms, 3),
                "swept_shapes": [
                    {"op": s["op"], "variants": s["variants"], "calls": s["calls"]}
                    for s in sweep.head(5).iter_rows(named=True)
                ],
            },
            remedy="Tune offline, then profile with PYTORCH_TUNABLEOP_TUNING=0 "
                   "and the saved results file (PYTORCH_TUNABLEOP_FILENAME).",
            references=P04_REFS,
        )
    ]
