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
    """attrib.trace.grouped (text keys grouped by category codes from SMALL_ROWS rows, plainly
    below) gives group_by's groups and sums, text keys back as text, null keys kept, on a real
    capture's kernels, and on them repeated past SMALL_ROWS."""
    from attrib.trace import SMALL_ROWS, grouped

    one = trace.kernels.with_columns(
        pl.when(pl.col("stream") == pl.col("stream").min()).then(None)
        .otherwise(pl.col("name")).alias("name"))
    assert one.height < SMALL_ROWS
    aggs = (pl.len().alias("n"), pl.col("dur_ns").sum().alias("ns"))
    for k in (one, pl.concat([one] * (SMALL_ROWS // one.height + 1))):
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


@pytest.mark.parametrize("small", [0, 1 << 16])
def test_grouped_in_any_order_equals_group_by(trace, small, monkeypatch) -> None:
    """grouped(any_order=True) (the streaming engine from SMALL_ROWS rows) gives the eager
    group-by's counts and integer sums on a real capture's kernels, keys as text or
    categories."""
    from attrib import trace as trace_module
    from attrib.trace import grouped

    monkeypatch.setattr(trace_module, "SMALL_ROWS", small)
    aggs = (pl.len().alias("n"), pl.col("dur_ns").sum().alias("ns"),
            pl.col("start_ns").min().alias("first_ns"))
    want = trace.kernels.group_by("name", "stream").agg(*aggs).sort("name", "stream")
    cats = trace.kernels.with_columns(pl.col("name").cast(pl.Categorical))
    for k in (trace.kernels, cats):
        got = grouped(k, ["name", "stream"], *aggs, any_order=True).sort("name", "stream")
        assert got.equals(want)


def _demo():
    from attrib.app import attribution

    return attribution(Path(__file__).parents[1] / "examples/traces"
                       / "h200_qwen3moe_eager_prefill_decode.json.gz")


@pytest.mark.parametrize("small", [0, 1 << 16])
def test_attributed_text_is_categories_and_views_give_it_back(small, monkeypatch) -> None:
    """An attribution's kernels hold their text as categories (4 bytes a row); `as_text` gives
    the text the cast gives, nulls kept, as views (from SMALL_ROWS rows) or a cast (its memory
    is bench/memory.py's to measure)."""
    from attrib import trace as trace_module
    from attrib.trace import as_text, views

    monkeypatch.setattr(trace_module, "SMALL_ROWS", small)
    k = _demo().kernels
    text = [c for c, t in k.schema.items() if t == pl.Categorical]
    assert {"name", "component", "op", "module_path"} <= set(text)
    back = as_text(k)
    assert all(back.schema[c] == pl.String for c in text)
    for c in text:
        assert back[c].to_list() == k[c].cast(pl.String).to_list()
    assert k["dtype"].null_count() > 0 and back["dtype"].null_count() == k["dtype"].null_count()
    assert views(k["name"].head(0)).len() == 0 and views(k["dtype"]).dtype == pl.String


@pytest.mark.parametrize("small", [0, 1 << 16])
def test_kernels_in_reads_text_as_the_string_filter_does(small, monkeypatch) -> None:
    """rules.finding.kernels_in / kernels_where on the categories give the rows a filter of the
    text gives: a test of one text column (its distinct values), of two columns (text views of
    the step's rows), of no text; `columns` only; a big table's paths (SMALL_ROWS 0) and a
    small one's."""
    from attrib import trace as trace_module
    from attrib.trace import as_text
    from rules import finding
    from rules.finding import kernels_in, kernels_where, steps_in

    monkeypatch.setattr(trace_module, "SMALL_ROWS", small)
    monkeypatch.setattr(finding, "SMALL_ROWS", small)
    a = _demo()
    text = as_text(a.kernels)
    decode = pl.col("step").is_in(steps_in(a, "decode")["step"].implode())
    gemm = pl.col("name").str.contains("nvjet")
    two = (pl.col("component") == "o_proj") | pl.col("op").fill_null("").str.contains("mm")
    short = pl.col("dur_ns") < 3000
    for where in (gemm, two, short):
        want = text.filter(decode & where)
        assert want.height > 10
        assert kernels_in(a, "decode", where).equals(want)
        cols = ("name", "dur_ns")
        assert kernels_in(a, "decode", where, cols).equals(want.select("step", *cols))
        assert kernels_where(a, where).equals(text.filter(where))
    assert kernels_in(a, "decode").equals(text.filter(decode))


def test_top_table_from_its_top_groups_equals_every_group(monkeypatch) -> None:
    """The top-kernels table built from the kernels of its top groups only (ties included)
    equals the one built from every kernel, on the demo decode's phase copy."""
    from attrib.analysis import build

    a = _demo()
    steps = a.steps.filter(pl.col("phase") == "decode")
    k = a.kernels.lazy().filter(pl.col("step").is_in(steps["step"].implode()))
    k = k.select(build._phase_columns(a.kernels)).collect()
    monkeypatch.setattr(build, "SMALL_ROWS", 0)  # the demo's 4,977 kernels as a big table's
    got = {n: build._top_table(k, None, False, n) for n in (1, 3, 10, 10_000)}
    monkeypatch.setattr(build, "_top_rows", lambda k, top_n: k)
    for n, table in got.items():
        assert table.height == min(n, k.select("name", "component").unique().height)
        assert table.equals(build._top_table(k, None, False, n)), n


def test_module_paths_walked_equal_joined() -> None:
    """attrib.link.launches: a small table's module paths from one walk in Python are the
    level-by-level joins' rows, in their order (a with_stack capture: nested modules, repeated
    instance names)."""
    from attrib.link.launches import _BY, _MODULE, _joined, _walked
    from attrib.link.nesting import parents

    frames = load(FIX / "captured/hf_llama_cuda_b8_p512.pt.trace.json.gz").frames
    mods = (frames.filter(pl.col("name").str.starts_with("nn.Module: "))
            .with_columns(pl.col("name").str.extract(_MODULE).alias("inst")))
    mods = mods.join(mods.select("id", *_BY, "start_ns", "dur_ns").pipe(parents, _BY), on="id")
    assert mods["depth"].max() >= 2
    assert _walked(mods).equals(_joined(mods))
    # a level missing (its paths `?`) and an instance the pattern could not read (null)
    odd = mods.filter(pl.col("depth") != 1).with_columns(
        pl.when(pl.col("depth") == 3).then(None).otherwise(pl.col("inst")).alias("inst"))
    got = _walked(odd)
    assert got.equals(_joined(odd)) and got["module_path"].str.starts_with("?/").any()
