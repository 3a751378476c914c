"""What-if formats: the typed result of re-pricing a decode phase at other weight and KV-cache
formats (a projection, not a measurement; attrib.analysis.reprice computes it)."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec


LABEL = "projection"


class WhatIfRow(msgspec.Struct, frozen=True):
    """One component per step: bytes as measured and projected, the part re-priced (weight or
    K/V bytes, before), floors before and after (ms), what bounds it after."""

    component: str
    repriced: str | None  # the weight class, "kv", or None (kept as measured)
    bytes: float
    projected_bytes: float
    repriced_bytes: float
    floor_ms: float | None
    projected_floor_ms: float | None
    bound: str | None  # "memory" | "compute" after the change


class WhatIf(msgspec.Struct, frozen=True):
    """The decode phase at other formats (a projection): GB/token, ceiling, per-component floors."""

    phase: str
    formats: str  # as given, e.g. "default=int4,kv=fp8"
    weight_bits_from: Mapping[str, float]  # current bits per class (the model budget's)
    weight_bits_to: Mapping[str, float]
    kv_bytes_from: float
    kv_bytes_to: float
    context: int
    tokens_per_step: int
    bytes_per_step: float
    projected_bytes_per_step: float
    gb_per_token: float
    projected_gb_per_token: float
    ceiling_tok_s: float | None
    projected_ceiling_tok_s: float | None
    rows: tuple[WhatIfRow, ...]
    notes: tuple[str, ...] = ()
    label: str = LABEL
