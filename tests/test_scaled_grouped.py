"""fp8 MoE experts as `aten::_scaled_grouped_mm` (H200 captures tests/fixtures/captured/issue36/
scaled_grouped_moe_a{1,16}, README there): priced from the op's shapes, the experts hit from the
router's tokens even where each expert's rows are padded to 16. Truth: the experts each layer
hit, recorded by the capture beside the trace (the trace's `offs` has no values)."""

from __future__ import annotations

import json
import statistics

import polars as pl
import pytest

from attrib.app import analyze
from attrib.pipeline import attribute
from collectors import load

from conftest import FIXTURES, raw_events

DIR = FIXTURES / "captured" / "issue36"


def _info(align):
    return json.loads((DIR / f"scaled_grouped_moe_a{align}.model.json").read_text())


def _kernels(align):
    k = attribute(load(DIR / f"scaled_grouped_moe_a{align}.json.gz")).kernels
    return k.filter(pl.col("op").cast(pl.Utf8) == "aten::_scaled_grouped_mm")


def _truth_mb(info, phase):
    """Per step: the hit experts' fp8 weights and scales, mat_a and the bf16 output of the two
    grouped GEMMs of each layer, from the rows the capture routed (and padded)."""
    h, f, e = info["hidden"], info["ffn"], info["experts"]
    steps = []
    for step in (s for s in info["steps"] if s["phase"] == phase):
        total = 0
        for layer in step["layers"]:
            hit, rows = layer["experts_hit"], layer["rows_padded"]
            for k, n in ((h, 2 * f), (f, h)):
                weights = hit * (k * n + n * 4)            # fp8 weight, fp32 scale per channel
                total += weights + rows * (k + 4) + rows * n * 2 + e * 4
        steps.append(total / 1e6)
    return statistics.mean(steps)


@pytest.mark.parametrize("align", [1, 16])
def test_the_raw_op_is_fp8_rows_by_experts(align):
    info = _info(align)
    calls = [e for e in raw_events(DIR / f"scaled_grouped_moe_a{align}.json.gz")
             if e.get("name") == "aten::_scaled_grouped_mm"]
    assert len(calls) == 2 * info["layers"] * len(info["steps"])
    assert {e["args"]["Input type"][0] for e in calls} == {"c10::Float8_e4m3fn"}
    # exact routing: 512 or 8 tokens x top-8; padded: up to 15 more rows for each expert hit (in
    # decode 16 for each: no expert got more than 16 of the 64 rows)
    rows = {layer["rows_padded"] for step in info["steps"] for layer in step["layers"]}
    assert rows <= {e["args"]["Input Dims"][0][0] for e in calls}
    if align == 1:
        assert rows == {4096, 64}
    if align == 16:
        decode = [layer for step in info["steps"][1:] for layer in step["layers"]]
        assert all(lay["rows_padded"] == 16 * lay["experts_hit"] for lay in decode)


@pytest.mark.parametrize("align", [1, 16])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_grouped_bytes_follow_the_experts_hit(align, phase):
    info = _info(align)
    k = _kernels(align).filter(pl.col("phase") == phase)
    steps = k["step"].n_unique()
    measured = k["bytes"].sum() / steps / 1e6
    # uniform routing of 8 tokens x top-8 over 64 experts expects 42.0 a layer; the run hit 36-45
    assert measured == pytest.approx(_truth_mb(info, phase), rel=0.03)
    assert set(k["dtype"].cast(pl.Utf8).to_list()) == {"fp8_e4m3fn"}


def test_the_experts_are_fp8_in_the_table():
    an = analyze(DIR / "scaled_grouped_moe_a16.json.gz")
    comp = next(c for c in an.phase("decode").component_rows if c.component == "moe_experts")
    assert comp.weight_format == comp.dtype == "fp8_e4m3fn"
