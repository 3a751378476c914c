"""Did the traces of a sweep or a trend run on the same host? Their step times compare only then.

A step whose host-side ledger rows (launch gaps, host ops, syncs, the profiler's cost: every cause
but kernels) hold more than HOST_SHARE of it is set by how fast the host ran. Such a row is not
comparable with the others when
- its launch gaps (the launch row's median interval, us: the host's pace between launches, which
  one-off host work such as a cuDNN plan build does not move) are more than BOUND apart from those
  of the rows most of the sweep ran with (the largest set of rows within BOUND of each other);
- its stamp says the host was loaded (`host_load`, top level or under `extra`: a count, a mapping
  with `spinners`/`processes`, or words other than "none");
- kernel-launch calls held the host STALL_US or more (median) for STALL_SHARE of the step: a
  launch call takes microseconds, so that is the OS descheduling the process (a loaded host).
The gap check needs MIN_STEPS steps (a phase of one step, a prefill, is one sample).

BOUND, measured (tests/fixtures/captured/README.md, issue37 section): the median launch gap of one
job captured in separate processes on the lent H200 spreads 1.03x and 1.06x (the A/A pairs aa2,
two calls), 1.12-1.19x between the unloaded loadsweep decode rows of three calls and 1.36x over
the eager decode rows of tests/fixtures/captured/sweep; that fixture's five slow sdpa decode rows
sit 1.4-1.7x above the others (34.9-36.5 against 21.9-24.6 us) and the loaded loadsweep_b1_p512
decode 1.7-2.0x above the unloaded rows (36.7 against 18.6-22.1 us). 1.5x sits between. (The
A/A pair sdpa_attn_a/_b of 2026-11-30 is 1.35x apart: near the bound, not beyond it.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from attrib.analysis.model import Phase
from attrib.steps.ledger import OWN_COST

BOUND = 1.5          # launch-gap ratio beyond run-to-run noise (module doc)
HOST_SHARE = 0.5     # host-side rows above this share of the step: the host sets the step
STALL_US = 1000.0    # a host-side interval this long (median) is the OS descheduling the process
STALL_SHARE = 0.05   # descheduled this share of the step or more: the host was busy elsewhere
MIN_STEPS = 4        # steps a phase needs for its launch gaps to gauge the host (module doc)
LAUNCH_CALLS = ("cudaLaunch", "cuLaunch", "hipLaunch", "hipModuleLaunch", "hipExtLaunch")
IDLE = ("", "none", "no", "idle", "0", "false", "unloaded")


class HostCost(msgspec.Struct, frozen=True):
    """What one phase's ledger says about its host: its mean step (ms) and steps, the host-side
    share of the step, host ms per kernel launch (us, the profiler's estimate left out), the
    launch-gap row's median (us), ms per step descheduled, and the stamp's declared load."""

    step_ms: float
    steps: int
    host_share: float
    us_per_launch: float | None
    median_gap_us: float | None
    stalls_ms: float     # kernel-launch calls that held the host STALL_US or more (median)
    load: str | None = None

    def dominates(self) -> bool:
        return self.host_share > HOST_SHARE


def declared_load(stamp: Mapping[str, Any] | None) -> str | None:
    """The stamp's `host_load` as words, None where it says the host was not loaded."""
    stamp = stamp or {}
    v = (stamp.get("extra") or {}).get("host_load", stamp.get("host_load"))
    if isinstance(v, Mapping):
        n = v.get("spinners", v.get("processes"))
        if isinstance(n, (int, float)) and not isinstance(n, bool):
            return f"{n:g} CPU-spinning processes" if n > 0 else None
        v = v.get("what")
    if v is None or isinstance(v, bool):
        return "loaded" if v else None
    if isinstance(v, (int, float)):
        return f"load {v:g}" if v > 0 else None
    return None if str(v).strip().lower() in IDLE else str(v)


def cost(ph: Phase, stamp: Mapping[str, Any] | None = None) -> HostCost | None:
    """The host cost of a phase from its ledger (the mean step's rows) and the capture stamp;
    None without a ledger."""
    rows = ph.ledger_rows
    step = sum(r.ms_per_step for r in rows)
    if not rows or step <= 0:
        return None
    kernels = sum(r.ms_per_step for r in rows if r.cause == "kernels")
    launches = sum(r.n_per_step or 0 for r in rows if r.cause == "kernels")
    host = [r for r in rows if r.cause not in ("kernels", OWN_COST)]
    gap = next((r.median_us for r in rows if r.cause == "launch"), None)
    return HostCost(
        step_ms=step, steps=ph.steps, host_share=1 - kernels / step,
        us_per_launch=sum(r.ms_per_step for r in host) / launches * 1e3 if launches else None,
        median_gap_us=gap,
        stalls_ms=sum(r.ms_per_step for r in host
                      if (r.median_us or 0) >= STALL_US and r.what.startswith(LAUNCH_CALLS)),
        load=declared_load(stamp))


class Common(msgspec.Struct, frozen=True):
    """The host most rows ran on: the largest set of rows (not declared loaded) whose median
    launch gaps lie within BOUND of each other, low..high us; rows: how many of all it holds."""

    low: float
    high: float
    rows: int
    of: int


def common(costs: Sequence[HostCost | None], bound: float = BOUND) -> Common | None:
    """The launch gaps that most rows share (None: no row has them); on a tie, the faster."""
    found = sorted(c.median_gap_us for c in costs if c is not None and c.median_gap_us
                   and c.load is None and c.steps >= MIN_STEPS)
    if not found:
        return None
    sets = [[v for v in found if x <= v <= bound * x] for x in found]
    best = max(sets, key=lambda s: (len(s), -s[0]))
    return Common(best[0], best[-1], len(best), sum(c is not None for c in costs))


def median_of(costs: Sequence[HostCost | None]) -> Common | None:
    """The median launch gap of `costs` (not declared loaded) as a one-point Common: what a
    trend holds a file against (the files before it, which may drift slowly)."""
    found = sorted(c.median_gap_us for c in costs if c is not None and c.median_gap_us
                   and c.load is None and c.steps >= MIN_STEPS)
    if not found:
        return None
    n = len(found)
    mid = (found[(n - 1) // 2] + found[n // 2]) / 2
    return Common(mid, mid, n, len(costs))


def reason(c: HostCost | None, ref: Common | None, bound: float = BOUND) -> str | None:
    """Why a row is not comparable with the rows of the common host `ref`; None if it is (or if
    its step is not host-bound)."""
    if c is None or not c.dominates():
        return None
    out = []
    if c.load:
        out.append(f"stamp: host loaded ({c.load})")
    g = c.median_gap_us
    if ref and g and c.steps >= MIN_STEPS and max(ref.high, g) > bound * min(ref.low, g):
        x = g / ref.low if g > ref.high else g / ref.high
        span = f"{ref.low:.0f}" if round(ref.low) == round(ref.high) else \
            f"{ref.low:.0f}-{ref.high:.0f}"
        out.append(f"host {'slower' if g > ref.high else 'faster'}: launch gaps {g:.0f} us "
                   f"(median), {x:.2g}x the {span} us of {ref.rows} of {ref.of} rows")
    if c.stalls_ms >= STALL_SHARE * c.step_ms:
        out.append(f"descheduled: launch calls held the host {c.stalls_ms:.1f} ms/step")
    if not out:
        return None
    return "; ".join(out) + f"; host-side rows {c.host_share:.0%} of the step"


def short(text: str | None) -> str:
    """A table cell for a row's reason: "yes", or "no:" and what tells (host, load, stalls)."""
    if text is None:
        return "yes"
    words = [p.split(":")[0].split()[1] if p.startswith("host ") else "load"
             if p.startswith("stamp") else "stalls" for p in text.split("; ")[:-1]]
    return "no: " + "+".join(words)


def reasons(costs: Sequence[HostCost | None], bound: float = BOUND
            ) -> tuple[Common | None, list[str | None]]:
    """Per row of one phase: why it is not comparable with the rest (None: it is), and the
    common host they are held against."""
    ref = common(costs, bound)
    return ref, [reason(c, ref) for c in costs]
