"""What-if formats: the decode phase's bytes re-priced at other weight and KV-cache formats.

A projection, not a measurement. Per component of the phase (its measured bytes per step):
- a GEMM component (cost.weights.WEIGHT_CLASS): its weight bytes are the model budget's (the
  config's parameters at the current bits: the format the trace shows it ran in, its
  `weight_format`, else the budget's; at most the measured bytes); they scale by new / old bits;
  the rest (activations) is kept;
- attention and the cache write (KV_COMPONENTS): all but the budget's activation bytes are K/V in
  the cache's format (reads, the cache's copies, GQA expansions as run) and scale by new / old
  bytes per element;
- everything else is kept.
Floors: max(projected bytes / the roofline bandwidth, FLOPs / the dtype's peak); a compute-bound
row's floor does not move with the format. Ceiling: tokens per step / the sum of the floors.
Without a model config, `traced_rows` re-prices the GEMMs' weight bytes the trace's shapes give
(attrib.cost.gemm_weights) by the same arithmetic (the rule `16-bit-gemm-decode` reads it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from msgspec.structs import replace
import polars as pl

from attrib.analysis.model import Component, Device, Phase
from attrib.analysis.whatif import WhatIf, WhatIfRow
from attrib.cost.budget import Budget
from attrib.cost.weights import KV_COMPONENTS, WEIGHT_CLASS, Formats, bits_for
from attrib.cost.dtypes import PEAK_KEY
from attrib.cost.lowbit import format_bits


def _context(phase: Phase, budget: Budget) -> int | None:
    if budget.context is not None:
        return budget.context
    ctx = pl.Series(phase.per_step.context, dtype=pl.Int64).drop_nulls()
    med = ctx.median() if ctx.len() else None
    return int(med) if isinstance(med, (int, float)) else None


def _compute_ms(c: Component, device: Device) -> float:
    dtype = PEAK_KEY.get(c.dtype or "", c.dtype or "")
    peak = device.matrix_peak(dtype) if dtype else None
    return (c.flops or 0) / (peak * 1e9) if peak else 0.0


def _bits(c: Component, budget: Budget, cls: str) -> float:
    """The bits a component's weights run at: its traced format's, else the budget's."""
    return format_bits(c.weight_format) or bits_for(budget.weight_bits, cls)


def _weights(c: Component, b: Mapping[str, Any], budget: Budget, cls: str) -> float:
    """The budget's weight bytes of a component at the bits it runs at (_bits)."""
    return float(b["weight_bytes"]) * _bits(c, budget, cls) / bits_for(budget.weight_bits, cls)


def _priced(c: Component, part: float, ratio: float, what: str | None,
            device: Device) -> WhatIfRow:
    """A component's row with `part` of its measured bytes scaled by `ratio` (`what`: the weight
    class, "kv", or None: kept), its floors before and after."""
    measured = float(c.bytes or 0)
    projected = measured - part + part * ratio
    bw = device.roofline_bw
    mem = projected / (bw * 1e6) if bw else None
    cmp_ms = _compute_ms(c, device)
    floor = max(mem, cmp_ms) if mem is not None else None
    bound = None if mem is None else ("compute" if cmp_ms > mem else "memory")
    return WhatIfRow(c.component, what, measured, projected, part, c.roofline_ms, floor, bound)


def _weight_row(c: Component, weights: float, old_bits: float, new_bits: float,
                device: Device) -> WhatIfRow:
    """A GEMM component whose `weights` bytes (at most its measured bytes) at `old_bits` a weight
    are re-priced at `new_bits`."""
    return _priced(c, min(weights, float(c.bytes or 0)), new_bits / old_bits,
                   WEIGHT_CLASS[c.component], device)


def _row(c: Component, b: Mapping[str, Any], budget: Budget, formats: Formats,
         device: Device) -> WhatIfRow:
    cls = WEIGHT_CLASS.get(c.component)
    new_bits = formats.bits(cls) if cls is not None else None
    if cls is not None and new_bits is not None and b:
        return _weight_row(c, _weights(c, b, budget, cls), _bits(c, budget, cls), new_bits, device)
    if c.component in KV_COMPONENTS and formats.kv_bytes is not None and b:
        part = max(float(c.bytes or 0) - b["act_bytes"], 0.0)
        return _priced(c, part, formats.kv_bytes / budget.kv_bytes, "kv", device)
    return _priced(c, 0.0, 1.0, None, device)


def traced_rows(phase: Phase, weights: Mapping[str, float], formats: Formats,
                device: Device) -> tuple[WhatIfRow, ...]:
    """The rows `project` gives with no model config: each counted component with weight bytes
    from the trace's shapes (`weights`: bytes a step at its traced format's bits) re-priced at
    `formats`; the others kept as measured."""
    rows = []
    for c in _counted(phase, device):
        cls = WEIGHT_CLASS.get(c.component)
        new_bits = formats.bits(cls) if cls is not None else None
        old_bits, w = format_bits(c.weight_format), weights.get(c.component)
        if new_bits is not None and old_bits and w:
            rows.append(_weight_row(c, w, old_bits, new_bits, device))
        else:
            rows.append(_priced(c, 0.0, 1.0, None, device))
    return tuple(rows)


def _counted(phase: Phase, device: Device) -> list[Component]:
    """The components a projection counts: with bytes, and consistent (any on a what-if device)."""
    return [c for c in phase.component_rows
            if c.bytes is not None and (device.what_if or c.inconsistent is None)]


def _below(c: Component, weights: float) -> str:
    return (f"{c.component}: measured {c.bytes or 0:,.0f} B/step, below the model config's "
            f"weights ({weights:,.0f} B at the budget's bits): give --weight-bits for the "
            "traced format")


def ceiling(tokens: int, floors: list[float | None]) -> float | None:
    """Tokens a second at the sum of the floors (None unless every floor is known)."""
    known = [f for f in floors if f]
    return tokens / (sum(known) / 1e3) if known and len(known) == len(floors) else None


def project(phase: Phase, budget: Budget, formats: Formats, device: Device) -> WhatIf | None:
    """The what-if of a decode phase (None when it has no tokens, bytes or context to price)."""
    ctx, tps = _context(phase, budget), phase.tokens_per_step
    if ctx is None or not tps or phase.bytes_per_step is None:
        return None
    table = budget.table(tps) if budget.context == ctx else replace(budget, context=ctx).table(tps)
    rows_b = {r["component"]: r for r in table.iter_rows(named=True)}
    counted = _counted(phase, device)
    rows = tuple(_row(c, rows_b.get(c.component, {}), budget, formats, device) for c in counted)
    before = sum(r.bytes for r in rows)
    after = sum(r.projected_bytes for r in rows)
    classes = sorted({r.repriced for r in rows if r.repriced and r.repriced != "kv"})
    label = formats.label()
    notes = [f"{r.component}: compute-bound at {label}: the format does not move its floor"
             for r in rows if r.bound == "compute"]
    weights = {c.component: _weights(c, rows_b[c.component], budget, WEIGHT_CLASS[c.component])
               for c in counted if c.component in WEIGHT_CLASS and c.component in rows_b}
    notes += [_below(c, weights[c.component]) for c in counted
              if weights.get(c.component, 0.0) > 1.05 * (c.bytes or 0)]
    traced = {WEIGHT_CLASS[c.component]: _bits(c, budget, WEIGHT_CLASS[c.component])
              for c in counted if c.component in WEIGHT_CLASS and c.weight_format}
    if device.roofline_bw is None:
        notes.append("no device bandwidth known: floors and the ceiling are not projected")
    return WhatIf(
        phase=phase.phase, formats=formats.label(),
        weight_bits_from={c: traced.get(c) or bits_for(budget.weight_bits, c) for c in classes},
        weight_bits_to={c: formats.bits(c) or traced.get(c) or bits_for(budget.weight_bits, c)
                        for c in classes},
        kv_bytes_from=budget.kv_bytes, kv_bytes_to=formats.kv_bytes or budget.kv_bytes,
        context=ctx, tokens_per_step=tps, bytes_per_step=before, projected_bytes_per_step=after,
        gb_per_token=before / tps / 1e9, projected_gb_per_token=after / tps / 1e9,
        ceiling_tok_s=phase.ceiling_tok_s,
        projected_ceiling_tok_s=ceiling(tps, [r.projected_floor_ms for r in rows]),
        rows=rows, notes=tuple(notes))
