"""The report's timeline shows idle (issue 38 item 4): on the example H200 trace, whose eager
decode leaves the GPU idle ~97% of each step, the band the plot draws is busy for the share of the
steps' time the raw trace's GPU work covers (tests/conftest.raw_steps: kernels, copies and fills
unioned inside each annotated step, from the raw events alone), within 1 percentage point; the
lane's label says the idle share. Widths are read back from the SVG (each band's <g id>)."""

from __future__ import annotations

import re

import pytest

from attrib.app import analyze
from attrib.report import plots

from conftest import FIXTURES, raw_steps

TRACE = FIXTURES / "torch" / "h200_qwen3moe_eager_prefill_decode.json.gz"
NUM = re.compile(r"-?\d+(?:\.\d+)?")


def _widths(svg: str, gid: str) -> list[float]:
    """The x extent (SVG units) of each bar of the collection `gid`."""
    m = re.search(rf'<g id="{gid}">(.*?)</g>', svg, re.S)
    assert m, gid
    out = []
    for d in re.findall(r'<path d="([^"]+)"', m.group(1)):
        xs = [float(x) for x in NUM.findall(d)[0::2]]
        out.append(max(xs) - min(xs))
    return out


@pytest.mark.skipif(not plots.available(), reason=plots.MISSING)
def test_the_drawn_busy_share_is_the_traces():
    an = analyze(TRACE)
    svg = plots.timeline(an)
    assert svg is not None
    for phase in ("prefill", "decode"):
        raw = raw_steps(TRACE, phase)
        window = sum(idle_ms / idle for _, idle, idle_ms in raw)
        busy = sum(idle_ms / idle - idle_ms for _, idle, idle_ms in raw)
        drawn_busy = sum(_widths(svg, f"timeline-busy-{phase}"))
        drawn_idle = sum(_widths(svg, f"timeline-idle-{phase}"))
        steps = sum(_widths(svg, f"timeline-steps-{phase}"))
        assert drawn_busy + drawn_idle == pytest.approx(steps, rel=0.01)
        drawn = drawn_busy / (drawn_busy + drawn_idle)
        assert drawn == pytest.approx(busy / window, abs=0.01), phase
        label = f"GPU idle {(1 - drawn) * 100:.1f}%"
        assert label in svg, label
    # decode: ~3% busy drawn as ~3% of the band (not the solid lane the merged spans make)
    assert 0.02 < drawn < 0.04
