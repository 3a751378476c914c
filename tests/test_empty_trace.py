"""Every stage and every rule on an empty trace: a real trace of each source with all rows filtered out
(and, second, with only its GPU rows filtered out: a CPU-side trace). Nothing may raise, and what
the document says must be what an empty input allows: no phases, no figures, no findings."""

from __future__ import annotations

from functools import cache

import polars as pl
import pytest
from conftest import EXAMPLE_TRACE, FIXTURES

import rules
from attrib.components.classify import classify
from attrib.cost.component_bytes import component_table
from attrib.cost.kernels import kernel_costs
from attrib.link.launches import link
from attrib.pipeline import attribute
from attrib.analysis.build import build
from attrib.report.table import render
from attrib.roofline.arch import override
from attrib.roofline.tables import phase_figures, roofline_rows
from attrib.steps.phases import assign_steps
from attrib.steps.windows import windows
from attrib.trace import TABLES, Trace
from collectors import load

SOURCES = {
    "kineto": EXAMPLE_TRACE,
    "rocpd": FIXTURES / "rocprof" / "gfx1201_llamacpp_rocpd_rocm7.2" / "32432_results.db.gz",
    "rocprofv3-csv": FIXTURES / "rocprof" / "gfx1151_llamacpp_rocprofv3_csv",
}
GPU_TABLES = ("kernels", "copies", "launches")  # what a CPU-only capture lacks


@cache
def _real(name: str) -> Trace:
    return load(SOURCES[name])


def _emptied(name: str, tables: tuple[str, ...]) -> Trace:
    t = _real(name)
    assert t.kernels.height > 0  # the real trace the empty one is derived from has work in it
    return t.with_tables(**{n: getattr(t, n).clear() for n in tables})


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_each_stage_runs_on_an_empty_trace(name):
    t = _emptied(name, TABLES)
    links = link(t)
    spans, kernel_steps = assign_steps(t, links, None)
    comp = classify(t, links, kernel_steps)
    assert links.height == spans.height == kernel_steps.height == comp.height == 0
    a = attribute(t)
    assert a.kernels.height == 0 and a.steps.height == 0
    assert kernel_costs(t, a.kernels, a.steps).height == 0
    assert windows(a.steps, a.kernels).height == 0
    table = component_table(a.kernels, a.steps, None, "decode")
    rows = roofline_rows(table, override("gfx1201"))
    assert rows.height == 0
    fig = phase_figures(a.steps, a.kernels, rows, override("gfx1201"))
    assert fig["bytes_per_step"] is None and fig["ceiling_tok_s"] is None and fig["bytes_known_share"] is None


@pytest.mark.parametrize("arch", [None, "gfx1151", "gfx1201"])
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_document_and_every_rule_on_an_empty_trace(name, arch):
    a = attribute(_emptied(name, TABLES))
    an = build(a) if arch is None else build(a, arch=override(arch), arch_from="override")
    doc = an.to_dict()
    assert doc["phases"] == [] and doc["source"]["kernels"] == 0 and doc["source"]["kernel_ms"] == 0
    assert doc["coverage"] == {"attributed_share": None, "bytes_known_share": None}
    for rule in rules.CATALOG:  # each rule's function directly, whatever device it is gated to
        args = (an, an) if isinstance(rule, rules.PairRule) else (a, an)
        assert rule.fn(*args, rules.DEFAULT) == [], rule.id
    assert rules.run(a, an) == []
    assert "0 kernels" in render(an)


def test_a_trace_with_cpu_rows_and_no_gpu_rows():
    """The Kineto trace without its kernels, copies and runtime launches (a CPU-only capture): steps come
    from the CPU side, no GPU figure, no finding."""
    a = attribute(_emptied("kineto", GPU_TABLES))
    assert a.kernels.height == 0 and a.trace.ops.height == _real("kineto").ops.height
    an = build(a)
    doc = an.to_dict()
    for ph in doc["phases"]:
        assert ph["kernel_ms"] in (0, None) and ph["components"] == [] and ph["gb_per_token"] is None
        assert ph["idle_fraction"] is None  # no GPU to be idle, not 100 %
    assert [p["steps"] for p in doc["phases"]] == [1, 6]  # the annotated steps are still there
    for rule in rules.CATALOG:  # no GPU evidence: nothing to find
        args = (an, an) if isinstance(rule, rules.PairRule) else (a, an)
        assert rule.fn(*args, rules.DEFAULT) == [], rule.id
    assert a.steps.filter(pl.col("kernel_ms") > 0).height == 0
