"""A kernel priced above the device's peak adds no bytes to its component row, and the row names it
(attrib.cost.component_bytes.component_table(peak_gbs=...)): gptoss_swa_b1's prefill has
elementwise kernels of the MoE block priced at > 4.8 TB/s on the H200 (inputs the previous kernel left
in L2)."""

from __future__ import annotations

import polars as pl
import pytest

from attrib.cost.component_bytes import component_table
from attrib.pipeline import attribute
from collectors import load

from conftest import FIXTURES

PEAK = 4800.0   # H200 HBM3e peak GB/s (data/archs)


def test_kernel_above_peak_adds_no_bytes_and_is_named():
    a = attribute(load(FIXTURES / "captured" / "gptoss_swa_b1.pt.trace.json.gz"))
    k = a.kernels.filter(pl.col("phase") == "prefill")
    steps = a.steps.filter(pl.col("phase") == "prefill")
    hot = k.filter(pl.col("bytes").is_not_null() & (pl.col("bytes") / pl.col("dur_ns") > PEAK))
    assert hot.height > 0 and "moe_experts" in hot["component"].to_list()
    plain = component_table(k, steps, None, "prefill")
    checked = component_table(k, steps, None, "prefill", peak_gbs=PEAK)
    row = checked.filter(pl.col("component") == "moe_experts").row(0, named=True)
    base = plain.filter(pl.col("component") == "moe_experts").row(0, named=True)
    excluded = hot.filter(pl.col("component") == "moe_experts")
    assert row["bytes"] == pytest.approx(base["bytes"] - excluded["bytes"].sum())   # one step: no median
    assert row["known_ms"] == pytest.approx(base["known_ms"] - excluded["dur_ns"].sum() / 1e6)
    assert set(row["over_peak"].split("; ")) == set(excluded["name"].to_list())
    # every counted kernel is now at or below the peak; without a peak no row names one
    assert plain["over_peak"].null_count() == plain.height
    assert checked.filter(pl.col("over_peak").is_null())["component"].len() > 0
