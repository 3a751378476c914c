"""Idle explained by cause: where each step's GPU-idle milliseconds go.

The GPU is idle in a step wherever no kernel or GPU copy runs between the step's start and end
(whichever step launched it, as the steps stage counts busy time). Each idle
stretch is attributed, in this order, to: a GPU copy running (`copies`), a blocking runtime call on
the host (cudaMemcpy, hipMemcpyWithStream, *Synchronize in `launches`), the stretch before the
step's first kernel (host work: input preparation, Python), the stretch after its last kernel, and
what is left between kernels: launch gaps.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from attrib.pipeline import Attribution
from rules.finding import Finding, r
from rules.intervals import covered, merge, spans
from rules.thresholds import Thresholds

BLOCKING_COPY = r"^(?:cuda|hip|cu)Memcpy(?:2D|3D|Peer|DtoH|HtoD|DtoD|WithStream)?(?:_v2)?$"
SYNC = r"^(?:cuda|hip|cu)(?:Stream|Device|Event|Ctx)Synchronize$"
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
REFS = ("https://github.com/vllm-project/vllm/issues/32180", "https://github.com/warpfront/hipfire/pull/239",
        "https://github.com/mudler/vllm.cpp/issues/41")


def _step_causes(w0: int, w1: int, ks: np.ndarray, ke: np.ndarray, copy: tuple, sync: tuple) -> dict[str, float]:
    """Idle nanoseconds of one step window by cause (see the module docstring)."""
    ms, me = merge(np.clip(ks, w0, w1), np.clip(ke, w0, w1))
    if not len(ms):
        a, b, kind = np.array([w0]), np.array([w1]), np.array(["before_first_kernel"])
    else:
        a = np.concatenate([[w0], me])
        b = np.concatenate([ms, [w1]])
        kind = np.array(["before_first_kernel"] + ["launch_gaps"] * (len(ms) - 1) + ["after_last_kernel"])
    keep = b > a
    a, b, kind = a[keep], b[keep], kind[keep]
    c = covered(a, b, *copy)
    cs = covered(a, b, *merge(np.concatenate([copy[0], sync[0]]), np.concatenate([copy[1], sync[1]])))
    rest = (b - a) - cs
    out = {"blocking_copies": float(c.sum()), "synchronization": float((cs - c).sum())}
    for k in ("before_first_kernel", "after_last_kernel", "launch_gaps"):
        out[k] = float(rest[kind == k].sum())
    out["gaps"] = int((kind == "launch_gaps").sum())
    return out


def idle_causes(a: Attribution, phase: str) -> pl.DataFrame:
    """Per step of `phase`: step_ms, idle_ms and the idle milliseconds of each cause in CAUSES."""
    st = a.steps.filter(pl.col("phase") == phase).drop_nulls(["window_start", "window_end"]).sort("step")
    k = a.kernels.filter(pl.col("phase") == phase)
    calls = a.trace.launches
    copy = merge(*spans(pl.concat([a.trace.copies.filter(pl.col("kind") == "memcpy").select("start_ns", "dur_ns"),
                                         calls.filter(pl.col("name").str.contains(BLOCKING_COPY)).select("start_ns", "dur_ns")])))
    sync = merge(*spans(calls.filter(pl.col("name").str.contains(SYNC))))
    # the GPU is busy whenever any kernel or GPU copy runs, whichever step launched it (as the steps stage counts)
    gs, ge = spans(pl.concat([a.kernels.select("start_ns", "dur_ns"), a.trace.copies.select("start_ns", "dur_ns")]))
    order = np.argsort(gs, kind="stable")
    gs, ge = gs[order], ge[order]
    longest = int((ge - gs).max()) if len(gs) else 0
    rows = []
    for s in st.iter_rows(named=True):
        ks = k.filter(pl.col("step") == s["step"])
        w0, w1 = s["window_start"], s["window_end"]
        lo, hi = np.searchsorted(gs, w0 - longest), np.searchsorted(gs, w1)
        live = ge[lo:hi] > w0
        res = _step_causes(w0, w1, gs[lo:hi][live], ge[lo:hi][live], copy, sync)
        rows.append({"step": s["step"], "step_ms": s["step_ms"], "kernels": ks.height,
                     "idle_ms": sum(res[c] for c in CAUSES) / 1e6, "gaps": res["gaps"],
                     **{c: res[c] / 1e6 for c in CAUSES}})
    schema = {"step": pl.Int64, "step_ms": pl.Float64, "kernels": pl.Int64, "idle_ms": pl.Float64, "gaps": pl.Int64,
              **{c: pl.Float64 for c in CAUSES}}
    return pl.DataFrame(rows, schema=schema)


def _named_calls(a: Attribution, phase: str, steps: int) -> list[dict[str, Any]]:
    """The blocking runtime calls and GPU copies inside the phase's step windows, by ms per step."""
    s = a.steps.filter(pl.col("phase") == phase).drop_nulls(["window_start", "window_end"]).sort("window_start")
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


def idle_by_cause(a: Attribution, doc: dict[str, Any], th: Thresholds) -> list[Finding]:
    """Every phase whose GPU idles more than `idle_share` of a step: the idle milliseconds by cause."""
    out = []
    for ph in doc.get("phases", ()):
        idle, idle_ms = ph.get("idle_fraction"), ph.get("idle_ms")
        if idle is None or idle <= th.idle_share or (idle_ms or 0) < th.idle_min_ms:
            continue
        t = idle_causes(a, ph["phase"])
        if not t.height:
            continue
        med = {c: float(t[c].median()) for c in CAUSES}
        total = sum(med.values()) or 1.0
        order = sorted(CAUSES, key=lambda c: med[c], reverse=True)
        top = order[0]
        named = _named_calls(a, ph["phase"], t.height)
        what = {"launch_gaps": f"launch gaps ({t['gaps'].median():.0f} gaps between {t['kernels'].median():.0f} kernels)",
                "blocking_copies": "blocking copies" + (f" ({named[0]['name']})" if named else ""),
                "synchronization": "host synchronizations" + (f" ({named[0]['name']})" if named else ""),
                "before_first_kernel": "host work before the first kernel",
                "after_last_kernel": "host work after the last kernel"}[top]
        out.append(Finding(
            rule="idle-by-cause", severity="high" if idle > 0.5 else "medium",
            title=f"{ph['phase']}: the GPU idles {idle_ms:.3f} ms of each {ph['step_ms']['median']:.3f} ms step "
                  f"({idle:.0%}); most of it is {what}: {med[top]:.3f} ms",
            ms_per_step=float(t["idle_ms"].median()),
            evidence={"phase": ph["phase"], "steps": t.height, "step_ms": ph["step_ms"]["median"],
                      "idle_ms_per_step": r(float(t["idle_ms"].median()), 4), "idle_fraction": idle,
                      "causes": [{"cause": c, "ms_per_step": r(med[c], 4), "share_of_idle": r(med[c] / total)}
                                 for c in order if med[c] > 0],
                      "kernels_per_step": r(float(t["kernels"].median()), 1),
                      "median_launch_gap_us": r(1e3 * med["launch_gaps"] / max(float(t["gaps"].median()), 1), 2),
                      "blocking_calls_and_copies": named},
            remedy=REMEDY[top], references=REFS))
    return out
