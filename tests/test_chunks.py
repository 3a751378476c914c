"""A trace attributed a few steps at a time gives what the whole trace gives (attrib.steps.chunks,
attrib.chunked.attribute_in_chunks), on real captures: a host that runs ahead of the GPU, tensor
parallel, a compile, blocking copies, prefill then decode."""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl
import pytest

from attrib.app import analysis
from attrib.chunked import attribute_in_chunks
from attrib.pipeline import Attribution, attribute
from attrib.steps.chunks import plan, window
from attrib.steps.ledger import Facts, facts
from attrib.steps.phases import annotated_spans
from collectors import load

ROOT = Path(__file__).resolve().parents[1]
CAPTURED = ROOT / "tests" / "fixtures" / "captured"
CASES = [
    (CAPTURED / "ledger_graph_ahead.json.gz", 1),  # the host up to 19 steps ahead of the GPU
    (CAPTURED / "ledger_graph_ahead.json.gz", 5),
    (CAPTURED / "tp2_decode_rank0.pt.trace.json.gz", 2),
    (CAPTURED / "compile_decode.pt.trace.json.gz", 2),
    (CAPTURED / "blocking_copy_decode.pt.trace.json.gz", 3),
    (ROOT / "examples" / "traces" / "h200_qwen3moe_eager_prefill_decode.json.gz", 2),
]


def _doc(a: Attribution) -> bytes:
    return orjson.dumps(analysis(a).to_dict(), option=orjson.OPT_SORT_KEYS)


@pytest.mark.parametrize(("path", "steps"), CASES, ids=lambda x: getattr(x, "name", str(x)))
def test_chunked_equals_whole(path: Path, steps: int) -> None:
    trace = load(path)
    whole = attribute(trace)
    chunks = plan(annotated_spans(trace), steps)
    assert len(chunks) == -(-whole.steps.height // steps) > 1
    got = attribute_in_chunks(trace, steps)
    assert got.kernels.equals(whole.kernels.sort("id"))
    assert got.steps.equals(whole.steps)
    assert whole.ledger is not None and got.ledger is not None
    assert got.ledger.steps.equals(whole.ledger.steps)
    assert got.ledger.intervals.equals(whole.ledger.intervals)
    assert _doc(got) == _doc(whole)


def test_chunks_cover_every_event_once() -> None:
    """Each step is owned by one chunk; every kernel and runtime call is in some chunk's window."""
    trace = load(CAPTURED / "ledger_graph_ahead.json.gz")
    spans = annotated_spans(trace)
    chunks = plan(spans, 4)
    owners = [sum(c.own[0] <= t < c.own[1] for c in chunks) for t in spans["cpu_start"]]
    assert owners == [1] * spans.height
    parts = [window(trace, c) for c in chunks]
    for table in ("kernels", "launches"):
        seen = pl.concat([getattr(p, table).select("id") for p in parts]).unique()
        assert seen.height == getattr(trace, table).height
    # the context reaches past the owned steps: the host there is steps ahead of the GPU
    assert all(p.launches.height > 0 for p in parts)


def test_facts_guard_overlapping_components() -> None:
    """The one pair of components whose kernels overlap (one activation kernel starts 224 ns
    before the mlp_gate_up kernel ahead of it on stream 7 ends: the recorded times overlap) has
    its time decided by the whole trace's order: a part that orders the pair the other way does
    not hold, and forcing that order moves exactly those 224 ns."""
    trace = load(CAPTURED / "ledger_graph_ahead.json.gz")
    a = attribute(trace)
    whole = facts(a.kernels, trace.copies, trace.launches)
    assert whole.overlaps == (("activation", "mlp_gate_up"),)
    order = list(whole.order)
    i, j = order.index("activation"), order.index("mlp_gate_up")
    order[i], order[j] = order[j], order[i]
    swapped = Facts(tuple(order), whole.threads, whole.overlaps)
    assert whole.holds(whole) and not swapped.holds(whole)
    unordered = Facts(tuple(order), whole.threads, ())  # no overlap: the order decides nothing
    assert unordered.holds(whole)
    forced = attribute(trace, whole=swapped)
    assert forced.ledger is not None and a.ledger is not None
    assert not forced.ledger.steps.equals(a.ledger.steps)
    pair = pl.col("what").is_in(["activation", "mlp_gate_up"])
    moved = forced.ledger.steps.filter(pair).join(a.ledger.steps.filter(pair),
                                                  on=["step", "what"], suffix="_was")
    change = moved.filter(pl.col("ns") != pl.col("ns_was"))
    assert sorted((change["ns"] - change["ns_was"]).to_list()) == [-224, 224]


def test_in_id_order_is_concat_unique_sort() -> None:
    """The kept tables' merge, built a column at a time with its text re-made from the distinct
    values, equals concat + first row of each id + id order: parts that overlap (as halo chunks
    do), out of order, one part lacking a column (nulls there), text with nulls."""
    from attrib.chunked import _in_id_order

    ops = load(CASES[-1][0]).ops
    n = ops.height
    parts = [ops.slice(n // 2), ops.slice(0, n // 2 + 50).drop("input_types"),
             ops.slice(n // 3, 100)]
    expected = (pl.concat(parts, how="diagonal_relaxed").unique("id", keep="first")
                .sort("id"))
    assert expected["input_types"].null_count() > 0 and expected.height == n
    got = _in_id_order(parts)
    assert parts == []
    assert got.columns == expected.columns
    assert got.equals(expected)


def test_in_id_order_keeps_parts_that_are_one_run() -> None:
    """Parts whose ids run in one increasing sequence (each chunk's own rows, in order) are the
    table as they stand, their chunks kept (no copy); one row out of place, and they are merged."""
    from attrib.chunked import _in_id_order

    ops = load(CASES[-1][0]).ops.sort("id")
    n = ops.height
    cut = [0, n // 3, n // 2, n]
    run = [ops.slice(a, b - a) for a, b in zip(cut, cut[1:])]
    got = _in_id_order(list(run))
    assert got.equals(ops) and got["id"].n_chunks() == 3
    swapped = [run[1], run[0], run[2]]
    got = _in_id_order(swapped)
    assert got.equals(ops) and got["id"].n_chunks() == 1
