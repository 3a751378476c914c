"""Speed changes that must not change a figure (#22): the one-key sort of the nesting pass (and its
narrow form, no wide event table), and
ledger rows whose order no longer depends on group_by's arbitrary order."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from attrib.app import attribution
from attrib.link.nesting import _levels, _narrow, _sorted, _stream
from attrib.steps.ledger import phase_ledger
from collectors import load

FIX = Path(__file__).parent / "fixtures"
SGLANG = FIX / "torch/mi300_sglang_qwen3-8b_decode/capture_bs_32_rank0.json.gz"
DSV3 = FIX / "captured/deepseekv3_decode.pt.trace.json.gz"
BY = ["pid", "tid"]


@pytest.fixture(scope="module")
def intervals() -> pl.DataFrame:
    t = load(SGLANG)
    cols = ["id", "start_ns", "dur_ns", *BY]
    return pl.concat([t.ops.select(cols), t.frames.select(cols)]).drop_nulls()


def _four(ev: pl.DataFrame) -> pl.DataFrame:
    return ev.sort([*BY, "key", "order"], maintain_order=True)


def test_one_key_sort_is_the_four_key_sort(intervals):
    ev = _stream(intervals, None, BY).drop("open")
    assert ev.select(pl.struct(BY).n_unique()).item() > 1  # several threads: the group part counts
    assert _sorted(ev, BY).equals(_four(ev))


def test_one_key_sort_keeps_ties_in_order(intervals):
    # times cut to whole microseconds: many starts and ends fall together
    coarse = intervals.with_columns((pl.col("start_ns") // 1000 * 1000).alias("start_ns"))
    ev = _stream(coarse, None, BY).drop("open")
    assert ev.select(pl.struct(BY, "key", "order").is_duplicated().any()).item()
    assert _sorted(ev, BY).equals(_four(ev))


def test_a_span_too_wide_for_one_key_sorts_by_four(intervals):
    # one interval 2^60 ns later: group, key and order no longer fit 62 bits
    far = intervals.with_columns(pl.when(pl.int_range(pl.len()) == 0)
                                 .then(pl.col("start_ns") + (1 << 60))
                                 .otherwise(pl.col("start_ns")).alias("start_ns"))
    ev = _stream(far, None, BY).drop("open")
    assert _sorted(ev, BY).equals(_four(ev))



def _wide(intervals: pl.DataFrame, points: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    ev = _stream(intervals, points, BY)
    pts = (ev.filter(pl.col("pid_").is_not_null())
           .select(*BY, "key", "pid_", (pl.col("open") - 1).alias("depth")).sort("key"))
    return _levels(ev, BY), pts


def test_narrow_levels_are_the_event_tables(intervals):
    # whole microseconds (starts, ends and points fall together) and a zero-length interval;
    # points at every interval's start and end: the rows and their order are the wide table's
    coarse = intervals.with_columns((pl.col("start_ns") // 1000 * 1000).alias("start_ns"),
                                    pl.when(pl.int_range(pl.len()) % 7 == 0).then(0)
                                    .otherwise(pl.col("dur_ns")).alias("dur_ns"))
    at_start = coarse.select(pl.col("id").alias("pid_"), pl.col("start_ns").alias("t_ns"), *BY)
    at_end = coarse.select((pl.col("id") + (1 << 40)).alias("pid_"),
                           (pl.col("start_ns") + pl.col("dur_ns")).alias("t_ns"), *BY)
    pts = pl.concat([at_start, at_end])
    lv, got = _narrow(coarse, pts, BY) or (None, None)
    want_lv, want_pts = _wide(coarse, pts)
    assert lv is not None and got is not None
    assert lv.equals(want_lv) and lv.schema == want_lv.schema
    assert got.equals(want_pts) and got.schema == want_pts.schema
    assert got.height == 2 * coarse.height


def test_narrow_gives_way_where_one_key_does_not_fit(intervals):
    far = intervals.with_columns(pl.when(pl.int_range(pl.len()) == 0)
                                 .then(pl.col("start_ns") + (1 << 60))
                                 .otherwise(pl.col("start_ns")).alias("start_ns"))
    assert _narrow(far, None, BY) is None
    assert _narrow(intervals.with_columns(pl.lit(None, pl.Int64).alias("tid")), None, BY) is None

def test_ledger_ties_ordered_by_cause_and_what():
    a = attribution(DSV3)
    rows = phase_ledger(a.ledger, a.steps, "decode")
    key = list(zip((-v for v in rows["ms_per_step"]), rows["cause"], rows["what"]))
    assert key == sorted(key)
    # the steps hold rows of exactly equal time (the tie that swapped between runs)
    per_step = a.ledger.steps
    assert per_step["ns"].is_duplicated().any()
    key = list(zip(per_step["step"], (-v for v in per_step["ns"]), per_step["cause"], per_step["what"]))
    assert key == sorted(key)
