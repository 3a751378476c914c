"""attrib trend on a folder of real rolling captures (H200, collectors.capture(..., every=25))."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from attrib.cli import main
from attrib.multi.trend import SCHEMA_ID
from attrib.report.trend_render import render

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "tests/fixtures/captured/rolling_h200"


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    out = tmp_path_factory.mktemp("trend") / "trend.json"
    assert main(["trend", str(FOLDER), "--format", "json", "-o", str(out)]) == 0
    return json.loads(out.read_text())


def _raw_op_ms_per_step(path: Path, op: str) -> float:
    """Mean per decode step of one CPU op's time, from the raw events."""
    ev = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    steps = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("decode")]
    ops = [e for e in ev if e.get("cat") == "cpu_op" and e["name"] == op]
    return statistics.fmean(sum(o["dur"] for o in ops if s["ts"] <= o["ts"] <= s["ts"] + s["dur"]) / 1e3
                            for s in steps)


def test_rows_in_capture_order_with_the_batch_change_flagged(doc):
    assert doc["schema"] == SCHEMA_ID and doc["files"] == 7 and doc["phase"] == "decode"
    rows = doc["rows"]
    seqs = [json.loads(Path(r["path"] + ".attrib.json").read_text())["extra"]["sample"]["seq"] for r in rows]
    assert seqs == list(range(7))
    assert [r["tokens_per_step"] for r in rows] == [4, 4, 4, 16, 16, 16, 16]
    assert all(r["steps"] == 4 for r in rows)
    for r in rows:   # tok/s is tokens over the median step
        assert r["achieved_tok_s"] == pytest.approx(r["tokens_per_step"] / r["step_ms"] * 1e3, rel=0.02)
    change = rows[3]
    assert "tokens/step 4 -> 16" in change["changes"]
    assert change["vs_previous"]["files"] == 0 and change["vs_previous"]["verdict"].startswith(
        "not comparable"
    )
    # weights read once per step serve 4x the tokens: GB/token falls by well over half
    assert change["gb_per_token"] / rows[2]["gb_per_token"] < 0.4
    assert any(c.startswith("GB/token") for c in change["changes"])
    assert rows[4]["vs_previous"]["files"] == 1 and rows[6]["vs_previous"]["files"] == 3


def test_flags_follow_compare_statistics(doc):
    for r in doc["rows"][1:]:
        vs = r["vs_previous"]
        flagged = any(c.startswith(("faster", "slower")) for c in r["changes"])
        assert flagged == (vs["verdict"] in ("faster", "slower"))
        if flagged:   # compare's rule: p < alpha, the CI excludes 0, the change >= min_effect
            assert vs["p_value"] < doc["alpha"] and abs(vs["delta_pct"]) >= doc["min_effect_pct"]
            assert vs["ci_low_ms"] > 0 or vs["ci_high_ms"] < 0


def test_top_cause_checked_against_the_raw_events(doc):
    first = doc["rows"][0]
    cause = first["top_cause"]
    assert (cause["cause"], cause["what"]) == ("host", "aten::_cudnn_attention_forward")
    raw = _raw_op_ms_per_step(Path(first["path"]), "aten::_cudnn_attention_forward")
    assert cause["ms_per_step"] == pytest.approx(raw, rel=0.05)   # ~50 ms of a ~58 ms step
    assert all(r["top_cause"]["cause"] != "profiler" for r in doc["rows"])


def test_table_and_bad_folders(doc, tmp_path, capsys):
    text = render(doc)
    assert "! tokens/step 4 -> 16" in text and text.count("rolling_h200/") == 7
    assert main(["trend", str(tmp_path)]) == 2
    assert "holds no trace" in capsys.readouterr().err
