"""attrib trend's labels match their figures (issue 38, item 4), on the repo's real rolling
captures (H200, tests/fixtures/captured/rolling_h200): file 2 is +20.1% per token (mean steps;
+28.3% in medians) against the two before it and read "same +20.1%"; a change is faster/slower only beyond its noise band, "same"
only within it, the band shown."""

from __future__ import annotations

import gzip
import json
import re
import statistics
from pathlib import Path

import pytest

from attrib.cli import main
from attrib.report.trend_render import render

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "tests/fixtures/captured/rolling_h200"
LABEL = re.compile(r"^(faster|slower|same|unclear) ([+-]\d+\.\d)% \(±([\d.]+)%\)$")


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    out = tmp_path_factory.mktemp("trend") / "trend.json"
    assert main(["trend", str(FOLDER), "--format", "json", "-o", str(out)]) == 0
    return json.loads(out.read_text())


def _decode_steps_ms(path: Path) -> list[float]:
    """The decode steps' durations (ms) from the raw CPU annotations alone."""
    ev = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return [e["dur"] / 1e3 for e in ev
            if e.get("cat") == "user_annotation" and e["name"].startswith("decode")]


def test_the_20_percent_change_is_within_its_noise_band_and_shows_it(doc):
    row = doc["rows"][2]
    vs = row["vs_previous"]
    # the change from the raw annotations: files 0 and 1 pooled against file 2 (4 tokens a step)
    before = _decode_steps_ms(Path(doc["rows"][0]["path"])) + _decode_steps_ms(Path(doc["rows"][1]["path"]))
    now = _decode_steps_ms(Path(row["path"]))
    # the mean steps (compare's and trend's one statistic: what the ledger sums to)
    raw_pct = (statistics.mean(now) / statistics.mean(before) - 1) * 100
    assert vs["files"] == 2 and vs["delta_pct"] == pytest.approx(raw_pct, abs=0.3)
    assert vs["delta_pct"] == pytest.approx(20.1, abs=0.05)
    # file 2's own steps run 46-74 ms: the bootstrap CI of the change reaches below zero
    assert min(now) < statistics.mean(before) < max(now)
    assert vs["ci_low_ms"] < 0 < vs["ci_high_ms"] and vs["p_value"] > doc["alpha"]
    band = (vs["cand_ms"] - vs["base_ms"] - vs["ci_low_ms"]) / vs["base_ms"] * 100
    assert vs["noise_pct"] == pytest.approx(band, abs=0.1) and vs["noise_pct"] > vs["delta_pct"]
    assert vs["label"] == f"same +20.1% (±{vs['noise_pct']:.2g}%)" == "same +20.1% (±24%)"
    assert "same +20.1% (±24%)" in render(doc)


def test_every_label_matches_its_figures(doc):
    labelled = 0
    for r in doc["rows"]:
        vs = r["vs_previous"]
        if vs is None or not vs["files"]:
            assert vs is None or vs["label"] == "-"
            continue
        m = LABEL.match(vs["label"])
        assert m, vs["label"]
        word, change, band = m[1], float(m[2]), float(m[3])
        assert change == pytest.approx(vs["delta_pct"], abs=0.05)
        assert band == pytest.approx(vs["noise_pct"], rel=0.05)
        assert vs["noise_pct"] >= doc["min_effect_pct"]
        beyond = abs(vs["delta_pct"]) > vs["noise_pct"]
        if word in ("faster", "slower"):    # compare's verdict, and beyond the band
            assert beyond and word == vs["verdict"]
            assert (word == "faster") == (vs["delta_pct"] < 0)
            assert vs["ci_high_ms"] < 0 if word == "faster" else vs["ci_low_ms"] > 0
        elif word == "same":
            assert not beyond and vs["verdict"] == "no significant change"
        labelled += 1
    assert labelled == 5
    words = [r["vs_previous"]["label"].split()[0] for r in doc["rows"][1:]]
    assert words == ["faster", "same", "-", "same", "faster", "faster"]


def test_table_header_names_the_band(doc):
    text = render(doc)
    assert "vs before (± noise)" in text and "a change beyond its noise band" in text
    # no row of the table reads a bare "same" or a bare "no significant change"
    assert not re.search(r"\bsame [+-]\d+\.\d%\s{2,}", text)
    assert "no significant change" not in text
