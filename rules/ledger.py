"""Findings that read the step-time ledger (attrib.steps.ledger): one per
cause of a phase's mean counted step, the statistic of every phase figure
(`phase_ledger`: each row's mean over the steps; the rows sum to the mean
step, so a finding's ms is the ledger row it cites).

Each cause that is not kernel time (copy, outside, sync, host, launch,
profiler) with at least `MIN_SHARE` of the mean step gives one finding,
ranked by its ms per step; its severity follows its share of the step
(rules.finding.severity_of). Remedies fit the evidence: the host stall of a
known op names the op's fixes, a sync names the call, launch gaps inside
graph replays get no graph advice, and where host-side rows dominate the
profiler's own cost is named as a caveat.
"""

from __future__ import annotations

import re

import msgspec
from msgspec.structs import replace
import polars as pl

from attrib.analysis.finding import count
from attrib.components.patterns import RUNTIME_CALL
from attrib.analysis.model import Analysis, LedgerRow
from attrib.pipeline import Attribution
from attrib.steps.ledger import OWN_COST, PROFILER_NS, phase_ledger
from attrib.steps.idle import UNRECORDED
from attrib.trace import GRAPH_LAUNCH
from rules.finding import (
    DECODE_LIKE,
    HIGH_SHARE,
    Finding,
    num,
    r,
    severity_of,
    steps_in,
)
from rules.thresholds import Thresholds

MIN_SHARE = 0.05
HOST_SIDE = ("host", "launch", "sync", OWN_COST)
CUDNN_SDPA = (
    "cuDNN builds an execution plan for every new attention shape, so each "
    "decode step's new KV length stalls the host in this op: warm the decode "
    "shapes before timing, pad the KV length to a few buckets so plans are "
    "reused, or pick another SDPA backend (torch.nn.attention.sdpa_kernel("
    "SDPBackend.FLASH_ATTENTION or EFFICIENT_ATTENTION))."
)
# host ops with known fixes: (regex on the op name, remedy)
KNOWN_OPS = ((r"cudnn_attention|_scaled_dot_product_cudnn", CUDNN_SDPA),)
_FRAME = re.compile(r"^.+ \(.+\.py:\d+\)$")


class Facts(msgspec.Struct, frozen=True):
    """What the findings need beside the phase ledger: the phase, its
    counted steps, their mean step time and the share of its kernel
    time replayed from graphs."""

    phase: str
    steps: int
    step_ms: float
    graph_replayed_share: float


def facts(a: Attribution, phase: str) -> Facts:
    """The Facts of `phase` from an attribution."""
    st = steps_in(a, phase).drop_nulls("window_start")
    dur = pl.col("dur_ns")
    k = a.kernels.lazy().filter(pl.col("step").is_in(pl.lit(st["step"]).implode()))
    sums = k.select(dur.sum(), dur.filter(pl.col("graph").fill_null(False)).sum().alias("graph"))
    total, graph = map(num, sums.collect(engine="in-memory").row(0))  # one query: the columns read only
    replayed = graph / total if total else 0.0
    return Facts(phase, st.height, num(st["step_ms"].mean()), replayed)


def _host_remedy(what: str, ms: float) -> str:
    for pattern, fix in KNOWN_OPS:
        if re.search(pattern, what):
            return fix
    if re.search(GRAPH_LAUNCH, what):
        return (f"The host is inside {what} for {ms:.3f} ms a step while the GPU "
                "waits for the replay: a graph launch costs host time per node. "
                "Launch the next replay before synchronizing on this one (so the "
                "launch overlaps the GPU's work), upload the graph once after "
                "capture (cudaGraphUpload, or one replay before timing), or "
                "capture fewer, larger nodes.")
    if re.match(RUNTIME_CALL, what):
        return (f"The host is inside the runtime call {what} for {ms:.3f} ms a "
                "step while the GPU waits: make it once, before the steps "
                "(allocations from a caching allocator or a preallocated pool, "
                "module and stream setup at start-up), or issue it after the "
                "step's launches.")
    if what.startswith(UNRECORDED + " "):
        return ("The thread that launched these kernels ran without its CPU ops "
                "recorded (torch.profiler's op callbacks are per thread: a serving "
                "loop on a worker thread, such as transformers' generate_batch, is "
                "not seen). Record it: start the profiler on that thread, or pass "
                "experimental_config=torch._C._profiler._ExperimentalConfig("
                "profile_all_threads=True) to torch.profiler.profile (torch 2.7 "
                "and later); then the ops, shapes and bytes of its steps are known.")
    if what == "untraced host time":
        return ("The host holds the GPU idle outside any recorded op or frame: "
                "profile with with_stack=True to name the Python code, then "
                "move it off the step or overlap it with GPU work.")
    if _FRAME.match(what):
        return (f"Python code in {what} runs while the GPU waits "
                f"({ms:.3f} ms a step): do it on the GPU "
                "(e.g. sampling with torch ops on device tensors), overlap it "
                "with the next step's GPU work, or move it off the per-step path.")
    return (f"The host is inside {what} while the GPU waits "
            f"({ms:.3f} ms a step): look for CPU work in this op "
            "(shape-dependent setup, allocation, a host-side fallback) and "
            "make it once per shape.")


def _launch_remedy(what: str, graphed: bool, median_us: float | None) -> str:
    gap = f" (median gap {median_us:.1f} us)" if median_us is not None else ""
    if what == "inside graph replays":
        return ("The steps are already replayed from graphs; these are the "
                f"gaps between graph nodes{gap}: "
                "fewer, fused kernels shorten them. Graph capture would not help.")
    if graphed:
        return (f"The step is mostly replayed from graphs; these gaps{gap} are "
                "around the eager kernels launched beside the graph: capture "
                "them into it (a full graph of the step) or fuse them.")
    return ("Kernels are launched one by one and the GPU waits for each "
            f"launch{gap}: replay the step from a CUDA/HIP graph (vLLM: the "
            "default cudagraph mode, not --enforce-eager; HF: a static cache "
            "with torch.compile mode='reduce-overhead') or fuse kernels with "
            "torch.compile.")


def _remedy(cause: str, top: LedgerRow, f: Facts) -> str:
    what, ms = top.what, top.ms_per_step
    if cause == "host":
        return _host_remedy(what, ms)
    if cause == "launch":
        return _launch_remedy(what, f.graph_replayed_share >= 0.5, top.median_us)
    if cause == "sync":
        return (f"The host blocks in {what} with the GPU idle: remove per-step "
                "synchronizations (.item(), .cpu(), .tolist(), "
                "torch.cuda.synchronize) or defer them until after the next "
                "step's launches; read back only the sampled tokens, with "
                "non_blocking copies into pinned memory.")
    if cause == "outside":
        return (
            f"The GPU sits {ms:.3f} ms a step with launched work {what}: "
            "this is not the step's own work. Find what it waits on (an event "
            "of another stream, e.g. an overlapped scheduler's previous "
            "batch, or work before the profile) and profile a window that holds it."
        )
    if cause == "copy":
        return (
            f"GPU copies ({what}) that no kernel overlaps: copy from pinned "
            "memory with non_blocking=True on a side stream, keep the data on "
            "the device, or move the copy off the step."
        )
    per_op, per_frame = PROFILER_NS["op"] / 1e3, PROFILER_NS["frame"] / 1e3
    return (f"An estimate of the profiler's own host cost ({per_op:.2f} us "
            f"per op or runtime call, {per_frame:.2f} us per Python frame, "
            "measured on an H200): host-side rows read high under the "
            "profiler. Time the step without it (or without with_stack) "
            "before acting on them.")


def _title(cause: str, top: LedgerRow, ms: float, f: Facts) -> str:
    """The largest row of the cause with its ms, and the cause's total
    where other rows add to it."""
    own = top.ms_per_step
    # other rows of the cause add to it: the lead names the cause, then the top
    more = ms > own * 1.01
    lead = {
        "host": f"host stalls, most in {top.what}" if more else f"host stall in {top.what}",
        "sync": f"host blocked, most in {top.what}" if more else f"host blocked in {top.what}",
        "launch": f"launch gaps {top.what}",
        "outside": f"GPU waits on work outside the step ({top.what})",
        "copy": f"GPU copies ({top.what})",
        "profiler": "profiler overhead (estimate)",
    }[cause]
    rest = f"; {cause} rows in all {ms:.3f} ms" if more else ""
    return (f"{f.phase}: {lead}: {own:.3f} ms of each {f.step_ms:.3f} ms step "
            f"({own / f.step_ms:.0%}{rest})")


def _summary(cause: str, top: LedgerRow, host_share: float) -> str:
    """The evidence in words: how many stretches a step, how long each,
    what the host side holds."""
    each = f", median {top.median_us:.1f} us" if top.median_us is not None else ""
    noun = {"launch": ("gap", None), "profiler": ("CPU event", None), "copy": ("copy", "copies")}
    one, many = noun.get(cause, ("stretch", "stretches"))
    where = (f" in {top.what}" if cause in ("host", "sync")
             else f" ({top.what}) that no kernel overlaps" if cause == "copy" else "")
    tail = (
        f"; host-side rows hold {host_share:.0%} of the step"
        if cause in HOST_SIDE
        else ""
    )
    return f"{count(top.n_per_step, one, many)} a step{where}{each}{tail}"


def ledger_findings(ledger: pl.DataFrame, f: Facts) -> list[Finding]:
    """One finding per non-kernel cause of a phase ledger
    (`attrib.steps.ledger.phase_ledger`: cause, what, ms_per_step, share,
    n_per_step, median_us), largest first. The profiler caveat is given
    where the host-side rows are most of the step."""
    if not f.step_ms or ledger.height == 0:
        return []
    out = []
    idle = ledger.filter(~pl.col("cause").is_in(["kernels"]))
    host_side = idle.filter(pl.col("cause").is_in(HOST_SIDE))
    host_share = num(host_side["ms_per_step"].sum()) / f.step_ms
    # eager: a lazy group-by sums a group's floats in another order (other last bits)
    by_cause = (
        idle.group_by("cause")
        .agg(pl.col("ms_per_step").sum())
        .sort("ms_per_step", descending=True)
    )
    for cause, ms in by_cause.iter_rows():
        share = ms / f.step_ms
        caveat = cause == OWN_COST and host_share > HIGH_SHARE
        if share < MIN_SHARE and not caveat:
            continue
        rows = (
            idle.lazy().filter(pl.col("cause") == cause)
            .sort("ms_per_step", descending=True)
            .collect(engine="in-memory")
        )
        top = LedgerRow(**rows.row(0, named=True))
        shown = [
            {"what": x["what"], "ms_per_step": r(x["ms_per_step"], 4),
             "per_step": r(x["n_per_step"], 2),
             "median_us": r(x["median_us"], 2)}
            for x in rows.head(3).iter_rows(named=True)
        ]
        severity = "info" if cause == OWN_COST else severity_of(share)
        out.append(Finding(
            rule=f"ledger-{cause}", severity=severity,
            title=_title(cause, top, ms, f), ms_per_step=ms,
            summary=_summary(cause, top, host_share),
            evidence={"phase": f.phase, "steps": f.steps,
                      "step_ms": r(f.step_ms, 4), "ms_per_step": r(ms, 4),
                      "share_of_step": r(share),
                      "graph_replayed_share": r(f.graph_replayed_share),
                      "host_side_share": r(host_share),
                      "rows": shown},
            remedy=_remedy(cause, top, f)))
    return out


def findings_of(a: Attribution, phase: str, f: Facts | None = None) -> list[Finding]:
    """ledger_findings of one phase of an attribution (its phase ledger and facts: `f` where
    already found)."""
    if a.ledger is None:
        return []
    return ledger_findings(phase_ledger(a.ledger, a.steps, phase),
                           facts(a, phase) if f is None else f)


def step_ledger(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """The catalog entry: the ledger's findings of every phase, each
    accounting for GPU idle time. Launch gaps of kernel-by-kernel token
    steps are P06's (launch-bound decode), not said twice."""
    out = []
    for ph in an.phases:
        # no kernel in any step (a CPU-only trace): no GPU to be idle
        if ph.idle_fraction is None:
            continue
        f = facts(a, ph.phase)
        eager = f.graph_replayed_share < th.graph_majority
        p06 = ph.phase in DECODE_LIKE and eager
        p06_gaps = th.launch_gap_share * f.step_ms
        for x in findings_of(a, ph.phase, f):
            launch = x.rule == "ledger-launch"
            if p06 and launch and (x.ms_per_step or 0) > p06_gaps:
                continue
            out.append(replace(x, phase=ph.phase, explains="idle"))
    return out
