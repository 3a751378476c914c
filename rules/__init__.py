"""Known pathologies: one pure function per rule over an attribution and its analysis document.

Each rule is `rule(a: Attribution, doc: dict) -> list[Finding]`: it reads `a.kernels`, `a.steps`,
`a.trace`'s tables and the document (the device comes from `doc["device"]`, never guessed), cites
its catalog id (../shared/knowledge/hardware-and-pathologies.md, Part 2) in `Finding.rule`, and
returns [] when its evidence is absent. `run` applies every rule of `RULES`, high severity first.

Not covered: the crash classes P09 (wave32 launch-geometry), P11 (multi-split attention fault),
P24 (gfx1151 platform instability) and P25 (GDN/MTP spec-decode faults). Their signatures live in
logs and crash output, not in a trace of a run that finished.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attrib.pipeline import Attribution
from rules.attention import decode_attention_no_split_kv
from rules.copies import host_copies_in_decode
from rules.finding import SEVERITIES, Finding
from rules.gemm import big_tile_decode_gemm, skinny_gemm_gfx1151
from rules.jit import triton_jit_in_window, tunableop_in_window
from rules.launch import graph_opaque_steps, launch_bound_decode
from rules.roofline import memory_bound_gap

Rule = Callable[[Attribution, dict[str, Any]], list[Finding]]

RULES: tuple[Rule, ...] = (
    launch_bound_decode,           # P06
    graph_opaque_steps,            # P07
    skinny_gemm_gfx1151,           # P01
    big_tile_decode_gemm,          # P02
    decode_attention_no_split_kv,  # P10
    triton_jit_in_window,          # P05
    tunableop_in_window,           # P04
    host_copies_in_decode,         # P21
    memory_bound_gap,              # generic memory-roofline gap
)

__all__ = ["RULES", "Finding", "run"]


def run(a: Attribution, doc: dict[str, Any], rules: tuple[Rule, ...] = RULES) -> list[Finding]:
    """Every rule's findings for attribution `a` and its document `doc`, high severity first."""
    found = [f for rule in rules for f in rule(a, doc)]
    return sorted(found, key=lambda f: SEVERITIES.index(f.severity))
