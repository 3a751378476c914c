"""The notes a phase's figures need: bytes known for too little time, components left out, rows
priced from a sliver of their time, rates above the device's peak."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec
import polars as pl

from attrib.cost.registry import model_for
from attrib.roofline.tables import MIN_KNOWN

if TYPE_CHECKING:
    from attrib.analysis.model import Phase


class Given(msgspec.Struct, frozen=True):
    """What the user gave beside the trace: a model config (--model), a capture (--capture); and
    whether the trace replays graphs (only then is a graph-capture trace any help)."""

    model: bool = False
    capture: bool = False
    graphs: bool = False

    def hint(self) -> str:
        """What else to give for more bytes ('' when nothing would help)."""
        more = [x for x, g in (("--capture with the graph-capture trace",
                                self.capture or not self.graphs),
                               ("--model CONFIG", self.model)) if not g]
        return f" (give {' or '.join(more)})" if more else ""


def _bytes_known(ph: Phase, given: Given) -> str | None:
    share = ph.bytes_known_share
    if share is None:
        return None
    if ph.gb_per_token is not None and share < 0.95:
        return (f"{ph.phase}: bytes known for {share:.0%} of kernel time; "
                "gb_per_token is a lower bound")
    if ph.gb_per_token is None and share < MIN_KNOWN:
        return (f"{ph.phase}: bytes known for {share:.0%} of kernel time, too little for GB/token"
                + given.hint())
    return None


def _left_out(ph: Phase) -> list[str]:
    out = []
    if ph.excluded_components:
        out.append(f"{ph.phase}: {', '.join(ph.excluded_components)} left out of GB/token "
                   "and the ceiling: achieved rate above the device's peak "
                   "(their bytes model is wrong or the data cache-resident)")
    for c in ph.component_rows:
        if c.over_peak:
            out.append(f"{ph.phase}: {c.component}: kernels priced above the device's peak, "
                       "their bytes not counted (a wrong bytes model or cache-resident data): "
                       f"{c.over_peak}")
    partial = [c.component for c in ph.component_rows if c.partial]
    if partial:
        out.append(f"{ph.phase}: {', '.join(partial)} priced for under {MIN_KNOWN:.0%} "
                   "of their time: their bytes are a lower bound, no GB/s or gap shown")
    return out


def phase_notes(phases: Sequence[Phase], device: str | None, what_if: bool,
                given: Given = Given()) -> list[str]:
    """The notes of every phase, in the document's order (hints name only what was not given)."""
    notes = [n for ph in phases if (n := _bytes_known(ph, given)) is not None]
    notes += [n for ph in phases for n in _left_out(ph)]
    rows = [c for ph in phases for c in ph.component_rows if c.inconsistent]
    if what_if:
        over = sorted({c.component for c in rows})
        if over:
            notes.append(f"what-if: {', '.join(over)} ran faster on the traced device "
                         f"than {device}'s peak allows: the projection is out of reach for them")
    else:
        notes += list({c.inconsistent: None for c in rows if c.inconsistent})
    return notes


def unrecorded_note(threads: pl.DataFrame) -> str | None:
    """What a thread that launched work without its ops recorded leaves unknown, and how to
    record it; threads: attrib.steps.idle.unrecorded_threads (pid, tid, calls)."""
    if not threads.height:
        return None
    names = ", ".join(f"{t} ({c} runtime and driver calls)" for t, c in
                      zip(threads["tid"].to_list()[:3], threads["calls"].to_list()[:3]))
    return (f"thread {names}: launched GPU work, but the profiler recorded none of its CPU "
            "ops (op callbacks are per thread: a serving loop on a worker thread), so its "
            "ops, shapes, modules and bytes are unknown and its host time is 'unrecorded "
            "thread'; record it with torch.profiler.profile(experimental_config="
            "torch._C._profiler._ExperimentalConfig(profile_all_threads=True)) (torch 2.7 "
            "and later) or by starting the profiler on that thread")



UNPRICED_SHARE = 0.05  # of a phase's kernel time: an op left unpriced from this share is named


def unpriced_ops(k: pl.DataFrame) -> list[str]:
    """Per phase, each op whose kernels take UNPRICED_SHARE of its kernel time or more with no
    bytes known, named with why (no cost model for it, or one that could not price its call): an
    unpriced op is said, never a silent 0 MB. k: the attribution's kernels (phase, op, bytes,
    dur_ns)."""
    rows = k.lazy().filter(pl.col("phase").is_not_null()).select(
        pl.col("phase").cast(pl.String), pl.col("op").cast(pl.String), "bytes", "dur_ns")
    total = rows.group_by("phase").agg(pl.col("dur_ns").sum().alias("_t"))
    none = (rows.filter(pl.col("bytes").is_null() & pl.col("op").is_not_null())
            .group_by("phase", "op").agg(pl.col("dur_ns").sum()).join(total, on="phase")
            .with_columns((pl.col("dur_ns") / pl.col("_t")).alias("share"))
            .filter(pl.col("share") >= UNPRICED_SHARE)
            .sort(["phase", "share", "op"], descending=[False, True, False])
            .select("phase", "op", "share").collect(engine="in-memory"))
    out = []
    for phase, op, share in none.iter_rows():
        why = ("no cost model for it" if model_for(op) is None else
               "its cost model could not price the call (shapes not recorded or not as its schema "
               "reads them, or context it needs)")
        out.append(f"{phase}: {op} has no bytes ({share:.0%} of kernel time): {why}")
    return out
