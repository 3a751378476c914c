"""Launch family: decode bound by CPU launches (P06), graph replays hiding
per-kernel ops (P07)."""

from __future__ import annotations


import polars as pl

from attrib.analysis.model import Analysis
from attrib.pipeline import Attribution
from attrib.steps.ledger import median_gap_us, phase_ledger
from rules.finding import DECODE_LIKE, Finding, kernels_lazy, num, r
from rules.thresholds import Thresholds

P06_REFS = (
    "https://github.com/vllm-project/vllm/issues/32180",
    "https://github.com/mudler/vllm.cpp/issues/332",
    "https://github.com/antirez/ds4/pull/819",
    "https://github.com/kyuz0/amd-strix-halo-vllm-toolboxes/issues/10",
)
P07_REFS = (
    "https://github.com/AMD-AGI/Hyperloom/issues/747",
    "https://github.com/sgl-project/sglang/issues/31545",
)


def _per_step(a: Attribution, phase: str) -> pl.DataFrame:
    """Per step of `phase`: kernels, distinct CPU launches, kernel time
    replayed from a graph."""
    k = kernels_lazy(a, phase).select("step", "graph", "op_id", "launch_id", "dur_ns")
    replayed = pl.col("graph").fill_null(False)
    with_op = replayed & pl.col("op_id").is_not_null()
    dur = pl.col("dur_ns")
    return k.group_by("step").agg(
        pl.len().alias("kernels"),
        pl.col("launch_id").drop_nulls().n_unique().alias("launches"),
        pl.when(replayed).then(dur).otherwise(0).sum().alias("graph_ns"),  # (no filtered copy)
        pl.when(with_op).then(dur).otherwise(0).sum().alias("graph_op_ns"),
        dur.sum().alias("ns")).collect(engine="in-memory")


def launch_gap_ms(a: Attribution, phase: str) -> float:
    """The mean step's short gaps between launches (the ledger's launch rows, not graph replays):
    a host stall inside one op or a sync is not a launch gap."""
    if a.ledger is None:
        return 0.0
    rows = phase_ledger(a.ledger, a.steps, phase).filter(
        (pl.col("cause") == "launch") & (pl.col("what") == "between launches"))
    return num(rows["ms_per_step"].sum())


def launch_bound_decode(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """P06: token-generating steps launched kernel by kernel, launch gaps >
    `launch_gap_share` of each step."""
    out = []
    for phase in DECODE_LIKE:
        ph = an.phase(phase)
        if ph is None or not ph.step_ms.mean:
            continue
        s = _per_step(a, phase)
        if s.height == 0 or not num(s["kernels"].sum()):
            continue
        graph_share = float(num(s["graph_ns"].sum()) / max(num(s["ns"].sum()), 1))
        if graph_share >= th.graph_majority:
            continue
        gap_ms = launch_gap_ms(a, phase)
        step_ms, kernel_ms = ph.step_ms.mean, ph.kernel_ms
        share = gap_ms / step_ms
        if share <= th.launch_gap_share:
            continue
        launches = num(s["launches"].median()) if num(s["launches"].sum()) else None
        out.append(
            Finding(
                rule="P06-launch-bound-decode",
                severity="high" if share > 0.5 else "medium",
                title=f"{phase} is CPU-launch-bound: launch gaps leave the GPU "
                      f"idle {gap_ms:.3f} ms of each {step_ms:.3f} ms step "
                      f"({num(s['kernels'].median()):.0f} kernels launched one by one, "
                      f"no graph replay)",
                ms_per_step=gap_ms,
                phase=phase,
                explains="idle",
                evidence={
                    "phase": phase,
                    "steps": ph.steps,
                    "idle_fraction": ph.idle_fraction,
                    "idle_ms_per_step": ph.idle_ms,
                    "launch_gap_ms_per_step": r(gap_ms, 4),
                    "launch_gap_share_of_step": r(share),
                    "step_ms": step_ms,
                    "kernel_ms_per_step": kernel_ms,
                    "kernels_per_step": r(num(s["kernels"].median()), 1),
                    "launches_per_step": r(launches, 1),
                    "median_gap_us": median_gap_us(a.ledger, a.steps, phase),
                    "graph_replayed_share": r(graph_share),
                    "speedup_if_launch_free": (
                        r(step_ms / (step_ms - gap_ms), 2) if step_ms > gap_ms else None
                    ),
                },
                remedy="Replay decode from a CUDA/HIP graph (vLLM: drop "
                       "--enforce-eager, keep the default FULL_AND_PIECEWISE "
                       "cudagraph mode; HF: a static cache with "
                       "torch.compile mode='reduce-overhead'), or cut the kernel "
                       "count with fused kernels. On gfx1151, if graph capture "
                       "times out, update the kernel/firmware rather than running eager.",
                references=P06_REFS,
            )
        )
    return out


def graph_opaque_steps(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """P07: token steps replayed from graphs whose kernels carry no CPU op
    (so no shapes, no bytes)."""
    # the source never records ops (e.g. rocprof): not a graph blind spot
    if a.trace.ops.height == 0:
        return []
    out = []
    for phase in DECODE_LIKE:
        ph = an.phase(phase)
        if ph is None:
            continue
        s = _per_step(a, phase)
        ns, graph_ns = num(s["ns"].sum()), num(s["graph_ns"].sum())
        if not ns or graph_ns / ns < th.graph_majority:
            continue
        op_known = float(num(s["graph_op_ns"].sum()) / graph_ns)
        if op_known >= th.op_known_min:
            continue
        blind = [c.component for c in ph.component_rows if c.bytes is None]
        unknown = 1 - (ph.bytes_known_share or 0)
        out.append(Finding(
            rule="P07-graph-opaque-steps", severity="info",
            title=f"{phase} steps are graph replays without per-kernel ops: "
                  "bytes and rooflines are unknown "
                  f"for {unknown:.0%} of their kernel time",
            # bytes unknown: a blind spot, no time a fix recovers
            ms_per_step=None, phase=phase,
            evidence={"phase": phase, "steps": ph.steps,
                      "graph_replayed_share": r(graph_ns / ns),
                      "replayed_with_op_share": r(op_known),
                      "bytes_known_share": ph.bytes_known_share,
                      "kernel_ms_without_bytes": r(unknown * (ph.kernel_ms or 0), 4),
                      "components_without_bytes": blind},
            remedy="Give the analysis the graph-capture trace (attrib analyze "
                   "REPLAY --capture CAPTURE; vLLM writes it with its capture "
                   "profiler) so replayed kernels get their ops and shapes, or "
                   "profile with rocprofv3 --kernel-trace / an eager run for "
                   "attribution. Keep the capture traces.",
            references=P07_REFS))
    return out
