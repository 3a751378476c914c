"""Shared test helpers: where the real fixtures live (tests/fixtures, inside the checkout)."""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLE_TRACE = ROOT / "examples" / "traces" / "h200_qwen3moe_eager_prefill_decode.json.gz"


@cache
def raw_events(path: Path) -> tuple[dict, ...]:
    """The `traceEvents` of a Kineto fixture read with gzip + json alone: the independent view that
    tests derive expected figures from (never through attrib's reader)."""
    return tuple(json.loads(gzip.decompress(Path(path).read_bytes()))["traceEvents"])


def raw_steps(path: Path, phase: str) -> list[tuple[int, float, float]]:
    """Per annotated step of `phase` (cpu `user_annotation` paired in order with its `gpu_user_annotation`),
    from the raw events alone: (kernels starting in the GPU span, idle fraction, idle ms). The window spans
    both annotations and the step's kernels; busy is the union of GPU work (kernels, copies, fills) in it."""
    ev = raw_events(path)
    spans = {c: sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == c and e["name"].split(" ")[0] == phase)
             for c in ("user_annotation", "gpu_user_annotation")}
    kernels = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "kernel")
    gpu = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    out = []
    for (c0, c1), (g0, g1) in zip(spans["user_annotation"], spans["gpu_user_annotation"]):
        mine = [(a, b) for a, b in kernels if g0 <= a < g1]
        w0, w1 = min(c0, g0, mine[0][0]), max(c1, g1, max(b for _, b in mine))
        busy, end = 0.0, w0
        for a, b in gpu:  # sorted by start: add what each interval covers inside the window past `end`
            a, b = max(a, end), min(b, w1)
            if b > a:
                busy, end = busy + b - a, b
        out.append((len(mine), 1 - busy / (w1 - w0), (w1 - w0 - busy) / 1e3))
    return out


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return FIXTURES
