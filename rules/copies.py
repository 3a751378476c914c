"""P21: host<->device copies inside token-generating steps (on an APU they are not free)."""

from __future__ import annotations


import polars as pl

from attrib.analysis.model import Analysis
from attrib.pipeline import Attribution
from rules.finding import DECODE_LIKE, Finding, counted_steps, kernels_in, ns, num, r
from rules.thresholds import Thresholds

HOST = r"HtoD|DtoH|Host|Pageable|Pinned"
REFS = (
    "https://github.com/warpfront/hipfire/pull/239",
    "https://github.com/mudler/vllm.cpp/issues/41",
)


def _in_windows(a: Attribution, phase: str) -> pl.DataFrame:
    """Rows of the trace's copies table that start inside a step window of
    `phase`, with that step."""
    s = (counted_steps(a, phase).select("step", "window_start", "window_end")
         .drop_nulls().sort("window_start").collect(engine="in-memory"))
    copies = a.trace.copies
    c = (copies.lazy().filter(pl.col("kind") == "memcpy").sort("start_ns")
         .collect(engine="in-memory"))
    if not s.height or not c.height:
        return c.clear().with_columns(pl.lit(None, pl.Int64).alias("step"))
    return (c.lazy().join_asof(s.lazy(), left_on="start_ns", right_on="window_start")
            .filter(pl.col("start_ns") < pl.col("window_end")).collect(engine="in-memory"))


def host_copies_in_decode(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """Host<->device memcpy (copies table; direction from the row or its
    name) > 5 % of a decode step."""
    out = []
    for phase in DECODE_LIKE:
        ph = an.phase(phase)
        if ph is None or not ph.step_ms.mean:
            continue
        c = _in_windows(a, phase)
        host = c.filter(pl.coalesce("direction", "name").str.contains(HOST))
        steps = max(ph.steps, 1)
        host_ms = ns(host) / 1e6 / steps
        share = host_ms / ph.step_ms.mean
        if share <= th.copy_step_share:
            continue
        # copy kernels (rocclr blits) have no direction: reported, not counted as host traffic
        blits = kernels_in(a, phase, pl.col("component") == "memcpy")
        out.append(
            Finding(
                rule="P21-host-device-copies-decode",
                severity="medium",
                title=f"host<->device copies take {host_ms:.3f} ms of each "
                      f"{phase} step ({share:.0%})",
                ms_per_step=host_ms,
                phase=phase,
                summary=f"{host.height / steps:g} host<->device copies a step move "
                        f"{(num(host['bytes'].sum()) or 0) / steps / 1e6:.1f} MB",
                evidence={
                    "phase": phase,
                    "steps": ph.steps,
                    "host_copy_ms_per_step": r(host_ms, 4),
                    "copies": host.group_by("name")
                    .agg(
                        (pl.col("dur_ns").sum() / 1e6 / steps).round(4).alias("ms_per_step"),
                        (pl.col("bytes").sum() / steps).alias("bytes_per_step"),
                    )
                    .sort("ms_per_step", descending=True)
                    .head(3)
                    .to_dicts(),
                    "host_copies_per_step": r(host.height / steps, 1),
                    "host_bytes_per_step": r((num(host["bytes"].sum()) or 0) / steps, 0),
                    "share_of_step": r(share),
                    "other_copy_ms_per_step": r((ns(c) - ns(host)) / 1e6 / steps, 4),
                    "copy_kernel_ms_per_step": r(ns(blits) / 1e6 / steps, 4),
                },
                remedy="Keep hot tensors in device allocations (hipMalloc, not "
                       "managed/zero-copy memory), use pinned memory with async "
                       "copies, and read back only the sampled tokens once per step.",
                references=REFS,
            )
        )
    return out
