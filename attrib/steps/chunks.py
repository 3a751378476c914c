"""A long trace cut into chunks of whole steps, each attributed on its own.

Every stage of the attribution reads a step and what runs around it, never the whole trace, so
a chunk of steps with a margin of `halo` steps on each side gives its own steps the figures the
whole trace gives them. A chunk *owns* the steps that start in its host range; its *context* is
that range widened to the halo steps' ranges:
- host events (ops, frames, runtime calls, CPU annotations) that overlap the context range;
- GPU events (kernels, copies, GPU annotations) of those runtime calls (by correlation id) or,
  unlinked, by their own start in the context's GPU range.

`plan` cuts the trace's annotated steps into chunks; `window` is the trace of one chunk.
"""

from __future__ import annotations

import msgspec
import polars as pl

from attrib.trace import Trace

FAR = 2**62  # the open end of the first and the last chunk


class Chunk(msgspec.Struct, frozen=True):
    """own: the host range [start, end) the chunk's own steps start in. host, gpu: the context,
    host times and GPU times, [start, end)."""

    own: tuple[int, int]
    host: tuple[int, int]
    gpu: tuple[int, int]


def _bound(values: list[int], i: int, low: bool) -> int:
    if i <= 0 and low:
        return -FAR
    if i >= len(values) and not low:
        return FAR
    return values[max(0, min(i, len(values) - 1))]


def plan(spans: pl.DataFrame, steps: int, halo: int = 1) -> list[Chunk]:
    """Chunks of `steps` steps each (the last may hold fewer) over step spans (cpu_start,
    cpu_end, gpu_start, gpu_end); one chunk over everything when there are too few."""
    sp = spans.sort("cpu_start")
    starts = sp["cpu_start"].to_list()
    if steps <= 0 or len(starts) <= steps:
        return [Chunk((-FAR, FAR), (-FAR, FAR), (-FAR, FAR))]
    gpu0 = sp.select(pl.min_horizontal("gpu_start", "cpu_start").alias("t"))["t"].to_list()
    gpu1 = sp.select(pl.max_horizontal("gpu_end", "cpu_end").alias("t"))["t"].to_list()
    out = []
    for first in range(0, len(starts), steps):
        last = min(first + steps, len(starts))  # one past the chunk's last step
        lo, hi = max(first - halo, 0), min(last + halo, len(starts))
        own = (_bound(starts, first, True), _bound(starts, last, False))
        host = (_bound(starts, lo, True), _bound(starts, hi, False))
        g_lo = -FAR if lo == 0 else min(gpu0[lo:hi])
        g_hi = FAR if hi == len(starts) else max(gpu1[lo:hi] + [starts[hi]])
        out.append(Chunk(own, host, (g_lo, g_hi)))
    return out


def _overlaps(lo: int, hi: int) -> pl.Expr:
    end = pl.col("start_ns") + pl.col("dur_ns").fill_null(0)
    return (pl.col("start_ns") < hi) & (end >= lo)


def _starts_in(lo: int, hi: int) -> pl.Expr:
    return (pl.col("start_ns") >= lo) & (pl.col("start_ns") < hi)


def _gpu(key: str, mine: pl.Series, every: pl.Series, gpu: tuple[int, int]) -> pl.Expr:
    """A GPU row linked (by `key`) to the context's host events, or unlinked and starting in
    its GPU range."""
    linked = pl.col(key).is_in(every.drop_nulls().implode()).fill_null(False)
    ours = pl.col(key).is_in(mine.drop_nulls().implode()).fill_null(False)
    return ours | (~linked & _starts_in(*gpu))


def window(trace: Trace, chunk: Chunk) -> Trace:
    """The trace of one chunk: its context's events (see the module docstring)."""
    # the host events of the context's steps, and those that ran while its GPU work did (a host
    # that runs ahead is steps further on then)
    hull = (min(chunk.host[0], chunk.gpu[0]), max(chunk.host[1], chunk.gpu[1]))
    host = _overlaps(*hull)
    calls = trace.launches.filter(host)
    corr, every_corr = calls["correlation"], trace.launches["correlation"]
    mk = trace.markers
    cpu_side = pl.col("side") == "cpu"
    ours = mk.filter(cpu_side & host)["external_id"]
    annotated = _gpu("external_id", ours, mk.filter(cpu_side)["external_id"], chunk.gpu)
    on_gpu = _gpu("correlation", corr, every_corr, chunk.gpu)
    return trace.with_tables(
        ops=trace.ops.filter(host), frames=trace.frames.filter(host), launches=calls,
        kernels=trace.kernels.filter(on_gpu), copies=trace.copies.filter(on_gpu),
        markers=mk.filter(pl.when(cpu_side).then(host).otherwise(annotated)))
