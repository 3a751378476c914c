"""Narrower stages that must not change a figure (#22 item 1): the host intervals' order and
depth without a join of `parents` and a sort, and each idle stretch's holder found a window of
stretches at a time, against only the intervals that reach into it, from only the intervals
that hold a stretch's midpoint."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from attrib.steps.idle import _sorted_intervals, holders, host_intervals
from collectors import load

FIX = Path(__file__).parent / "fixtures"
SGLANG = FIX / "torch/mi300_sglang_qwen3-8b_decode/capture_bs_32_rank0.json.gz"


@pytest.fixture(scope="module")
def trace():
    return load(SGLANG)


def _intervals(ops: pl.DataFrame, frames: pl.DataFrame) -> pl.DataFrame:
    """host_intervals' input table, as it builds it."""
    fr = frames.filter(~pl.col("name").str.starts_with("<built-in"))
    cols = ["name", "start_ns", "dur_ns", "pid", "tid"]
    return pl.concat([ops.select("id", *cols),
                      fr.select((pl.col("id") + (1 << 40)).alias("id"), *cols)]
                     ).drop_nulls(["start_ns", "dur_ns"])


def _stretches(trace) -> pl.DataFrame:
    """The launches' own spans as stretches (qid, pid, tid, a, b): each held by the op or frame
    around it."""
    return (trace.launches.drop_nulls(["start_ns", "dur_ns"])
            .select("pid", "tid", pl.col("start_ns").alias("a"),
                    (pl.col("start_ns") + pl.col("dur_ns")).alias("b"))
            .with_row_index("qid").with_columns(pl.col("qid").cast(pl.Int64)))


@pytest.mark.parametrize("cut_ns", [1, 1000])
def test_host_intervals_are_the_joined_and_sorted_table(trace, cut_ns):
    # whole microseconds: many starts fall together, so the ties' order (idx) is checked too
    coarse = pl.col("start_ns") // cut_ns * cut_ns
    ops = trace.ops.with_columns(coarse)
    frames = trace.frames.with_columns(coarse)
    got = host_intervals(ops, frames)
    want = _sorted_intervals(_intervals(ops, frames))
    assert got.equals(want) and got.schema == want.schema
    ties = got.select(pl.struct("pid", "tid", "s").is_duplicated().sum()).item()
    assert (ties > 0) == (cut_ns > 1)


def test_holders_the_same_a_window_at_a_time(trace):
    iv = host_intervals(trace.ops, trace.frames)
    q = _stretches(trace)
    whole = holders(iv, q)
    assert whole.n_unique() > 3 and q.height > 1000
    # windows of a few stretches each, against a few hundred intervals
    assert holders(iv, q, chunk=97).equals(whole)
    assert holders(iv, q, chunk=iv.height).equals(whole)  # one window a thread


def test_holders_the_same_from_the_candidates_only(trace):
    # the intervals holding no stretch's midpoint are left out of the holders' input
    q = _stretches(trace)
    near = q.select("pid", "tid", (pl.col("a") + pl.col("b")).alias("m2"))
    whole = host_intervals(trace.ops, trace.frames)
    some = host_intervals(trace.ops, trace.frames, near)
    assert 0 < some.height < whole.height
    assert holders(some, q).equals(holders(whole, q))
    # the candidates keep the whole thread's depth and order
    assert some.equals(whole.join(some.select("idx"), on="idx", maintain_order="left"))


def test_grouped_by_codes_equals_group_by(trace) -> None:
    """attrib.trace.grouped (text keys grouped by category codes) gives group_by's groups and
    sums, text keys back as text, null keys kept, on a real capture's kernels."""
    from attrib.trace import grouped

    k = trace.kernels.with_columns(
        pl.when(pl.col("stream") == pl.col("stream").min()).then(None)
        .otherwise(pl.col("name")).alias("name"))
    aggs = (pl.len().alias("n"), pl.col("dur_ns").sum().alias("ns"))
    got = grouped(k, ["name", "stream"], *aggs).sort("name", "stream", nulls_last=True)
    want = k.group_by("name", "stream").agg(*aggs).sort("name", "stream", nulls_last=True)
    assert got.schema == want.schema and got["name"].null_count() == 1
    assert got.equals(want)
    # the keys as categories (a phase's copy of its kernels): the same groups, text again
    cats = k.with_columns(pl.col("name").cast(pl.Categorical))
    got = grouped(cats, ["name", "stream"], *aggs).sort("name", "stream", nulls_last=True)
    assert got.equals(want)


def test_component_table_by_step_batches_equals_one_batch(monkeypatch) -> None:
    """The per-step component sums, a few steps at a time, give the one-batch table exactly
    (the demo decode: 6 steps in batches of 2; its kernels as a phase copies them)."""
    from attrib.analysis.build import _phase_columns
    from attrib.app import attribution
    from attrib.cost import component_bytes

    a = attribution(Path(__file__).parents[1] / "examples/traces"
                    / "h200_qwen3moe_eager_prefill_decode.json.gz")
    steps = a.steps.filter(pl.col("phase") == "decode")
    k = a.kernels.lazy().filter(pl.col("step").is_in(steps["step"].implode()))
    k = k.select(_phase_columns(a.kernels)).collect()
    whole = component_bytes.component_table(k, steps, None, "decode", peak_gbs=4800)
    monkeypatch.setattr(component_bytes, "STEP_BATCH", 2)
    parts = component_bytes.component_table(k, steps, None, "decode", peak_gbs=4800)
    assert steps.height > 2 * 2 and whole.height > 5
    assert parts.sort("component").equals(whole.sort("component"))
