"""attrib slope: JSON output, no slope from one context (a trace repeated, an A/A pair), drift of
the same work between traces flagged without a crossover claim, a batch mismatch warned."""

from __future__ import annotations

import json
from functools import cache

from attrib.analysis.model import Analysis
from attrib.app import analyze
from attrib.cli import main
from attrib.multi.slope import WEIGHT_BOUND, slope

from conftest import FIXTURES

CAP = FIXTURES / "captured"


@cache
def _doc(name: str) -> Analysis:
    return analyze(CAP / f"{name}.pt.trace.json.gz")


def test_slope_json_is_written(tmp_path, capsys):
    out = tmp_path / "slope.json"
    paths = [str(CAP / f"slope_ctx{n}.pt.trace.json.gz") for n in (1024, 4096)]
    assert main(["slope", *paths, "--format", "json", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == "attrib.slope/1" and any(r["component"] == "attention" for r in doc["rows"])


def test_one_context_repeated_or_an_aa_pair_gives_no_slope():
    for docs in ([_doc("slope_ctx1024")] * 2, [_doc("sdpa_attn_a"), _doc("sdpa_attn_b")]):
        d = slope(docs).to_dict()
        assert d["rows"] == [] and d["crossover"]["context"] is None
        assert d["notes"][0].startswith("no slope: the traces share one context")
        json.dumps(d)


def _drifted(an: Analysis, factor: float) -> Analysis:
    """The analysis with its weight-bound components' decode time scaled by `factor`, work
    unchanged (what a clock or process change between traces does to the same kernels): its
    document edited and decoded back."""
    d = an.to_dict()
    ph = next(p for p in d["phases"] if p["phase"] == "decode")
    for c in WEIGHT_BOUND:
        per = ph["per_step"]["components"].get(c)
        if per:
            ph["per_step"]["components"][c] = [v * factor for v in per]
    for r in ph["components"]:
        if r["component"] in WEIGHT_BOUND:
            r["ms"] *= factor
    return Analysis.decode(json.dumps(d))


def test_real_series_has_no_drift_and_a_crossover():
    d = slope([_doc(f"slope_ctx{n}") for n in (1024, 4096, 16384)]).to_dict()
    assert d["drift"] == [] and d["crossover"]["context"] is not None


def test_drift_of_the_same_gemms_is_flagged_and_no_crossover_claimed():
    docs = [_doc("slope_ctx1024"), _doc("slope_ctx4096"), _drifted(_doc("slope_ctx16384"), 1.18)]
    d = slope(docs).to_dict()
    drifted = {x["component"] for x in d["drift"]}
    assert {"qkv_proj", "mlp_down", "lm_head"} <= drifted and "attention" not in drifted
    assert d["crossover"]["context"] is None and "drifted" in d["crossover"]["why"]
    assert any(n.startswith("drift: qkv_proj ran the same 12 kernels") for n in d["notes"])


def test_traces_of_different_batch_are_warned():
    d = slope([_doc("slope_ctx1024"), _doc("nosplit_ctx2048")]).to_dict()
    assert any(n.startswith("not one batch: the traces run [1, 8] tokens") for n in d["notes"])
