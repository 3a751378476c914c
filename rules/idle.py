"""Idle explained by cause: where each step's milliseconds without a running kernel go.

In a step window, every stretch where no kernel runs (launched by any step) is attributed, in this order,
to: a GPU copy or a blocking copy call on the host (a memcpy in `copies`; cudaMemcpy, hipMemcpyWithStream,
... in `launches`), a host synchronization (*Synchronize), the stretch before the step's first kernel
(host work: input preparation, Python), the stretch after its last, and what is left between kernels:
launch gaps. The steps stage counts copies as GPU-busy; here a copy is a cause of kernel idle, so the
causes add up to the steps' idle plus the copy time that no kernel overlaps.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np
import polars as pl

from attrib.analysis.model import Analysis
from attrib.steps.ledger import median_gap_us
from attrib.components.patterns import BLOCKING_COPY, SYNC
from attrib.pipeline import Attribution
from rules.finding import Finding, kernels_in, num, r, steps_in
from rules.intervals import Spans, covered, merge, spans
from rules.thresholds import Thresholds

CAUSES = ("blocking_copies", "synchronization", "before_first_kernel", "after_last_kernel", "launch_gaps")
REMEDY = {
    "blocking_copies": "Make the copy asynchronous from pinned memory (non_blocking=True on a pinned tensor), move it "
                       "off the step, or keep the data on the device; read back only the sampled tokens.",
    "synchronization": "Remove per-step host synchronizations (.item(), .cpu(), .tolist(), torch.cuda.synchronize) "
                       "from the step, or defer them to after the next step's launches.",
    "before_first_kernel": "Host work precedes the step's first kernel (input preparation, scheduling, Python): "
                           "overlap it with the previous step's GPU work or move it off the critical path.",
    "after_last_kernel": "Host work follows the step's last kernel (output processing, detokenization): overlap it "
                         "with the next step.",
    "launch_gaps": "Kernels are launched one by one and the GPU waits for the CPU between them: replay the step "
                   "from a CUDA/HIP graph (vLLM default cudagraph mode; HF: static cache + torch.compile "
                   "mode='reduce-overhead') or fuse kernels.",
}
REFS = {"launch_gaps": ("https://github.com/vllm-project/vllm/issues/32180", "https://github.com/mudler/vllm.cpp/issues/332"),
        "blocking_copies": ("https://github.com/warpfront/hipfire/pull/239", "https://github.com/mudler/vllm.cpp/issues/41"),
        "synchronization": ("https://github.com/warpfront/hipfire/pull/239",)}
ALL_REFS = tuple(dict.fromkeys(u for refs in REFS.values() for u in refs))


def _step_causes(w0: int, w1: int, kern: Spans, copy: Spans, copy_or_sync: Spans) -> dict[str, float]:
    """Kernel-idle nanoseconds of one step window by cause (see the module docstring); `kern`, `copy` and
    `copy_or_sync` are merged (disjoint, sorted) intervals."""
    gs, ge = kern
    i, j = np.searchsorted(ge, w0, side="right"), np.searchsorted(gs, w1, side="left")
    ms, me = np.clip(gs[i:j], w0, w1), np.clip(ge[i:j], w0, w1)
    if not len(ms):
        a, b, kind = np.array([w0]), np.array([w1]), np.array(["before_first_kernel"])
    else:
        a = np.concatenate([[w0], me])
        b = np.concatenate([ms, [w1]])
        kind = np.array(["before_first_kernel"] + ["launch_gaps"] * (len(ms) - 1) + ["after_last_kernel"])
    keep = b > a
    a, b, kind = a[keep], b[keep], kind[keep]
    c = covered(a, b, *copy)
    cs = covered(a, b, *copy_or_sync)
    rest = (b - a) - cs
    out = {"blocking_copies": float(c.sum()), "synchronization": float((cs - c).sum())}
    for k in ("before_first_kernel", "after_last_kernel", "launch_gaps"):
        out[k] = float(rest[kind == k].sum())
    out["gaps"] = int((kind == "launch_gaps").sum())
    return out


def idle_causes(a: Attribution, phase: str) -> pl.DataFrame:
    """Per step of `phase`: step_ms, idle_ms (no kernel running), GPU copy ms, and the ms of each cause in CAUSES."""
    st = steps_in(a, phase).drop_nulls(["window_start", "window_end"]).sort("step")
    k = kernels_in(a, phase)
    calls = a.trace.launches
    cols = ("start_ns", "dur_ns")
    kern = merge(*spans(a.trace.kernels.select(cols).drop_nulls()))
    copy = merge(*spans(pl.concat([a.trace.copies.filter(pl.col("kind") == "memcpy").select(cols),
                                   calls.filter(pl.col("name").str.contains(BLOCKING_COPY)).select(cols)]).drop_nulls()))
    sync = merge(*spans(calls.filter(pl.col("name").str.contains(SYNC)).select(cols)))
    cps = merge(*spans(a.trace.copies.select(cols).drop_nulls()))
    copy_or_sync = merge(np.concatenate([copy[0], sync[0]]), np.concatenate([copy[1], sync[1]]))
    kernels = dict(k.group_by("step").len().iter_rows())  # once, not a filter of every kernel per step
    rows = []
    for s in st.iter_rows(named=True):
        res = _step_causes(s["window_start"], s["window_end"], kern, copy, copy_or_sync)
        gpu_copy = covered(np.array([s["window_start"]]), np.array([s["window_end"]]), *cps)[0]
        rows.append({"step": s["step"], "step_ms": s["step_ms"], "kernels": kernels.get(s["step"], 0),
                     "idle_ms": sum(res[c] for c in CAUSES) / 1e6, "gaps": res["gaps"], "gpu_copy_ms": gpu_copy / 1e6,
                     **{c: res[c] / 1e6 for c in CAUSES}})
    schema = {"step": pl.Int64, "step_ms": pl.Float64, "kernels": pl.Int64, "idle_ms": pl.Float64, "gaps": pl.Int64,
              "gpu_copy_ms": pl.Float64, **{c: pl.Float64 for c in CAUSES}}
    return pl.DataFrame(rows, schema=schema)


class NamedCall(TypedDict):
    name: str
    ms_per_step: float | None
    calls_per_step: float | None
    bytes_per_step: float | None


def _named_calls(a: Attribution, phase: str, steps: int) -> list[NamedCall]:
    """The blocking runtime calls and GPU copies inside the phase's step windows, by ms per step."""
    s = steps_in(a, phase).drop_nulls(["window_start", "window_end"]).sort("window_start")
    if not s.height:
        return []
    calls = a.trace.launches.filter(pl.col("name").str.contains(BLOCKING_COPY) | pl.col("name").str.contains(SYNC))
    copies = a.trace.copies.filter(pl.col("kind") == "memcpy")
    both = pl.concat([calls.select("name", "start_ns", "dur_ns", pl.lit(None, pl.Int64).alias("bytes")),
                      copies.select("name", "start_ns", "dur_ns", "bytes")]).sort("start_ns")
    inside = (both.join_asof(s.select("window_start", "window_end"), left_on="start_ns", right_on="window_start")
              .filter(pl.col("start_ns") < pl.col("window_end")))
    g = (inside.group_by("name").agg((pl.col("dur_ns").sum() / 1e6 / steps).alias("ms"), (pl.len() / steps).alias("n"),
                                     (pl.col("bytes").sum() / steps).alias("bytes"))
         .sort("ms", descending=True).head(4))
    return [{"name": x["name"], "ms_per_step": r(x["ms"], 4), "calls_per_step": r(x["n"], 2),
             "bytes_per_step": r(x["bytes"], 0) if x["bytes"] else None} for x in g.iter_rows(named=True)]


def idle_by_cause(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """Every phase whose steps run no kernel for more than `idle_share` of their time: those milliseconds by
    cause, the largest named in the title."""
    out = []
    for ph in an.phases:
        if ph.idle_fraction is None:  # no kernel in any step (a CPU-only trace): no GPU to be idle
            continue
        t = idle_causes(a, ph.phase)
        if not t.height:
            continue
        idle_ms, step_ms = float(num(t["idle_ms"].median())), float(num(t["step_ms"].median()))
        share = idle_ms / step_ms if step_ms else 0.0
        if share <= th.idle_share or idle_ms < th.idle_min_ms:
            continue
        med = {c: num(t[c].median()) for c in CAUSES}
        total = sum(med.values()) or 1.0
        order = sorted(CAUSES, key=lambda c: med[c], reverse=True)
        top = order[0]
        named = _named_calls(a, ph.phase, t.height)
        sync_named = [n for n in named if "ynchronize" in n["name"]]
        copy_named = [n for n in named if "ynchronize" not in n["name"]]
        what = {"launch_gaps": f"launch gaps ({num(t['gaps'].median()):.0f} gaps between {num(t['kernels'].median()):.0f} kernels)",
                "blocking_copies": "copies" + (f" ({copy_named[0]['name']})" if copy_named else ""),
                "synchronization": "host synchronizations" + (f" ({sync_named[0]['name']})" if sync_named else ""),
                "before_first_kernel": "host work before the first kernel",
                "after_last_kernel": "host work after the last kernel"}[top]
        out.append(Finding(
            rule="idle-by-cause", severity="high" if share > 0.5 else "medium",
            title=f"{ph.phase}: no kernel runs for {idle_ms:.3f} ms of each {step_ms:.3f} ms step ({share:.0%}); "
                  f"most of it is {what}: {med[top]:.3f} ms",
            ms_per_step=idle_ms, phase=ph.phase, explains="idle",
            evidence={"phase": ph.phase, "steps": t.height, "step_ms": r(step_ms, 4),
                      "kernel_idle_ms_per_step": r(idle_ms, 4), "kernel_idle_share": r(share),
                      "gpu_idle_ms_per_step": ph.idle_ms, "gpu_copy_ms_per_step": r(float(num(t["gpu_copy_ms"].median())), 4),
                      "causes": [{"cause": c, "ms_per_step": r(med[c], 4), "share_of_idle": r(med[c] / total)}
                                 for c in order if med[c] > 0],
                      "kernels_per_step": r(float(num(t["kernels"].median())), 1),
                      "median_launch_gap_us": median_gap_us(a.ledger, a.steps, ph.phase),
                      "blocking_calls_and_copies": named},
            remedy=REMEDY[top], references=REFS.get(top, ())))
    return out
