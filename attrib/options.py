"""The options of one analysis, resolved (what `attrib.app` and the CLI pass along)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import msgspec
from msgspec import field

from attrib.cost.budget import Budget
from attrib.cost.weights import Formats
from attrib.roofline.arch import Arch

TOP_KERNELS = 10


class Options(msgspec.Struct, frozen=True):
    """phase: only this phase; phase_map: annotation name -> phase; arch (+ arch_from
    "override"): the device to measure against instead of the detected one; arch_file: extra
    device entries; budget: a model config's bytes for ops whose weights the trace hides;
    capture (+ capture_batch): the graph-capture trace of a replay trace; top: top kernels per
    phase; what_if: weight/KV formats to project the decode phase at (attrib.analysis.reprice);
    baseline: a plain decode trace of the target, whose decode step a speculative loop's speedup
    is measured against. chunk_steps: attrib.app.attribution's `steps`."""

    phase: str | None = None
    phase_map: Mapping[str, str] = field(default_factory=dict)
    arch: Arch | None = None
    arch_from: str | None = None
    arch_file: Path | None = None
    budget: Budget | None = None
    capture: Path | None = None
    capture_batch: int | None = None
    top: int = TOP_KERNELS
    what_if: Formats | None = None  # re-price the decode phase at these formats (needs budget)
    baseline: Path | None = None
    chunk_steps: int | None = None  # read a big Kineto trace this many steps at a time (0: whole)
