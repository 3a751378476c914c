"""Small direct tests of the pure helpers the stages are built from: interval containment, layer
positions, GPU-busy time of a step, the step-name format, the table renderer. Hand cases with the
answer worked out in the comment, and the same helpers against a brute-force reference on real rows."""

from __future__ import annotations

import polars as pl
import pytest
from conftest import EXAMPLE_TRACE

from attrib.analysis.finding import count
from attrib.app import analyze
from attrib.components.position import label
from attrib.link.nesting import innermost, parents
from attrib.report.table import render
from attrib.steps.phases import DEFAULT_MAP, parse_marker
from attrib.steps.windows import windows
from attrib.trace import STEP_NAME, step_name
from collectors import load

BY = ["pid", "tid"]


def _intervals(rows):
    return pl.DataFrame(rows, schema={"id": pl.Int64, "start_ns": pl.Int64, "dur_ns": pl.Int64,
                                      "pid": pl.Int64, "tid": pl.Int64}, orient="row")


def _points(rows):
    return pl.DataFrame(rows, schema={"pid_": pl.Int64, "t_ns": pl.Int64, "pid": pl.Int64, "tid": pl.Int64},
                        orient="row")


# A [0, 100) holds B [10, 50) and C [60, 70) on thread 1; D [0, 100) is on thread 2.
NEST = _intervals([(1, 0, 100, 1, 1), (2, 10, 40, 1, 1), (3, 60, 10, 1, 1), (4, 0, 100, 1, 2)])


def test_innermost_by_hand():
    pts = _points([(10, 5, 1, 1),    # in A only
                   (11, 10, 1, 1),   # at B's start: inside B
                   (12, 49, 1, 1),   # last ns of B
                   (13, 50, 1, 1),   # B has ended (ends come first at equal times): A
                   (14, 65, 1, 1),   # C
                   (15, 100, 1, 1),  # A has ended: nothing
                   (16, 20, 1, 2),   # other thread: D, never B
                   (17, 20, 2, 1)])  # other process: nothing
    got = dict(innermost(NEST, pts, BY).iter_rows())
    assert got == {10: 1, 11: 2, 12: 2, 13: 1, 14: 3, 15: None, 16: 4, 17: None}


def test_parents_by_hand():
    got = {r["id"]: (r["depth"], r["parent"]) for r in parents(NEST, BY).iter_rows(named=True)}
    assert got == {1: (0, None), 2: (1, 1), 3: (1, 1), 4: (0, None)}


def test_innermost_on_real_ops_against_brute_force():
    """Launch times of the first 300 kernel launches inside the Kineto fixture's CPU ops; the reference
    is the shortest op on the same thread that contains the point (ops nest properly)."""
    t = load(EXAMPLE_TRACE)
    ops = t.ops.select("id", "start_ns", "dur_ns", *BY)
    la = t.launches.sort("start_ns").head(300)
    pts = la.select(pl.col("id").alias("pid_"), pl.col("start_ns").alias("t_ns"), *BY)
    got = dict(innermost(ops, pts, BY).iter_rows())
    rows = ops.rows()
    for pid_, t_ns, pid, tid in pts.iter_rows():
        inside = [(dur, i) for i, s, dur, p, th in rows if (p, th) == (pid, tid) and s <= t_ns < s + dur]
        assert got[pid_] == (min(inside)[1] if inside else None), pid_
    assert sum(v is not None for v in got.values()) > 250  # most launches sit inside an op


def test_layer_positions_by_hand():
    """Two dense layers and the head, GEMMs unnamed: q, k, v before the first attention kernel (so
    3 qkv GEMMs per layer); after it o_proj, gate/up, down, then the next layer's q, k, v; after the
    last attention o_proj, the MLP and lm_head. A split-K reduce takes the label of its GEMM."""
    seq = [(1, "G"), (2, "G"), (3, "G"), (90, "A"),
           (4, "G"), (5, "G"), (6, "G"), (7, "G"), (8, "G"), (9, "G"), (91, "A"),
           (10, "G"), (20, "R"), (11, "G"), (12, "G"), (13, "G")]
    assert label(seq) == {1: "qkv_proj", 2: "qkv_proj", 3: "qkv_proj",
                          4: "o_proj", 5: "mlp_gate_up", 6: "mlp_down", 7: "qkv_proj", 8: "qkv_proj", 9: "qkv_proj",
                          10: "o_proj", 20: "o_proj", 11: "mlp_gate_up", 12: "mlp_down", 13: "lm_head"}


def test_a_named_lm_head_takes_no_position_gemm():
    """The last layer's GEMMs when the lm_head is named otherwise ('H', by its module): o_proj,
    gate, up, down, none of them lm_head (bitsandbytes' Linear8bitLt GEMMs before an nn.Linear
    head)."""
    seq = [(1, "G"), (90, "A"), (2, "G"), (3, "G"), (4, "G"), (5, "G"), (99, "H")]
    assert label(seq) == {1: "qkv_proj", 2: "o_proj", 3: "mlp_gate_up", 4: "mlp_gate_up",
                          5: "mlp_down"}


def test_layer_positions_in_a_moe_layer_and_without_attention():
    # qkv, attention, o_proj, router GEMM before the experts, a GEMM after them (shared expert), next qkv
    seq = [(1, "G"), (90, "A"), (2, "G"), (3, "G"), (50, "E"), (4, "G"), (5, "G"), (91, "A"), (6, "G")]
    assert label(seq) == {1: "qkv_proj", 2: "o_proj", 3: "moe_router", 4: "moe_shared_expert", 5: "qkv_proj",
                          6: "o_proj"}
    assert label([(1, "G"), (2, "G")]) == {}  # nothing to anchor on


def test_gpu_busy_time_of_a_step_counts_overlap_once():
    """Kernels [100, 110), [105, 115) overlap (busy 15 ns), [130, 140) adds 10: busy 25 ns. The CPU span
    [90, 150) is the window: idle 60 - 25 = 35 ns. A second step's kernels do not leak into the first."""
    steps = pl.DataFrame({"step": [0, 1], "cpu_start": [90, 200], "cpu_end": [150, 210],
                          "gpu_start": [None, None], "gpu_end": [None, None]},
                         schema={"step": pl.Int64, "cpu_start": pl.Int64, "cpu_end": pl.Int64,
                                 "gpu_start": pl.Int64, "gpu_end": pl.Int64})
    k = pl.DataFrame({"step": [0, 0, 0, 1], "start_ns": [100, 105, 130, 200], "dur_ns": [10, 10, 10, 5]})
    w = {r["step"]: r for r in windows(steps, k).iter_rows(named=True)}
    assert w[0]["busy_ns"] == 25 and w[0]["kernel_ns"] == 30
    assert w[0]["step_ms"] == pytest.approx(60e-6) and w[0]["idle_ms"] == pytest.approx(35e-6)
    assert w[0]["idle_fraction"] == pytest.approx(35 / 60)
    assert w[1]["busy_ns"] == 5 and w[1]["idle_fraction"] == pytest.approx(5 / 10)


@pytest.mark.parametrize("phase, tokens", [("decode", 8), ("prefill", 4096), ("decode", 0), ("mixed", None)])
def test_step_name_round_trips_through_the_steps_stage(phase, tokens):
    name = step_name(phase, tokens)
    assert parse_marker(name, DEFAULT_MAP) == (phase, tokens, "annotation")
    assert (STEP_NAME.match(name) is None) == (tokens is None)


def test_step_name_refuses_a_count_that_is_not_one():
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError):
            step_name("decode", bad)


def test_table_renderer_prints_every_component_row_of_the_document():
    an = analyze(EXAMPLE_TRACE)
    doc = an.to_dict()
    lines = render(an).splitlines()
    for ph in doc["phases"]:
        head = next(
            i
            for i, line in enumerate(lines)
            if line.startswith(f"== {ph['phase']}: {count(ph['steps'], 'step')},")
        )
        hdr = next(i for i in range(head, len(lines)) if lines[i].split()[:1] == ["component"])
        rows = lines[hdr + 1: hdr + 1 + len(ph["components"])]
        assert [r.split()[0] for r in rows] == [c["component"] for c in ph["components"]]
        for r, c in zip(rows, ph["components"]):
            assert r.split()[1:3] == [str(c["kernels"]), f"{c['ms']:.3f}"], r
