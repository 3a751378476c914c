"""compare explains a change by the ledger rows that moved, and one trace per side claims nothing
it cannot know (issue 37, items 1-2), on the project's own H200 pairs (tests/fixtures/captured,
README there): the same job in two processes (sdpa_attn_a/_b) and SDPA -> eager attention. The
truth is read from the raw events here: the decode steps' CPU annotations and the kernels inside
them."""

from __future__ import annotations

import gzip
import json
import statistics

import pytest

from attrib.app import analyze
from attrib.cli import main
from attrib.multi.compare import compare

from conftest import FIXTURES

CAP = FIXTURES / "captured"
NAMES = ("sdpa_attn_a", "sdpa_attn_b", "eager_attn")


def _path(name):
    return CAP / f"{name}.pt.trace.json.gz"


def _union_us(spans):
    total, end = 0.0, None
    for s, t in sorted(spans):
        if end is None or s > end:
            total, end = total + t - s, t
        elif t > end:
            total, end = total + t - end, t
    return total


def _raw(name):
    """Per decode step from the raw events: the window (ms), the kernels' busy time (union, ms)
    and the kernels launched in it."""
    ev = json.loads(gzip.decompress(_path(name).read_bytes()))["traceEvents"]
    steps = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("decode")]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    out = []
    for s in steps:
        a, b = s["ts"], s["ts"] + s["dur"]
        inside = [(max(k["ts"], a), min(k["ts"] + k["dur"], b)) for k in kernels
                  if k["ts"] < b and k["ts"] + k["dur"] > a]
        launched = sum(1 for k in kernels if a <= k["ts"] < b)
        out.append((s["dur"] / 1e3, _union_us(inside) / 1e3, launched))
    return out


@pytest.fixture(scope="module")
def docs():
    return {n: analyze(_path(n)) for n in NAMES}


@pytest.fixture(scope="module")
def raw():
    return {n: _raw(n) for n in NAMES}


def _mean(rows, i):
    return statistics.mean(r[i] for r in rows)


@pytest.mark.parametrize("base,cand", [("sdpa_attn_a", "sdpa_attn_b"), ("sdpa_attn_a", "eager_attn")])
def test_the_ledger_diff_sums_to_the_raw_mean_step_change(docs, raw, base, cand):
    doc = compare([docs[base]], [docs[cand]]).to_dict()
    diff = doc["summary"]["decode"]["ledger_diff"]
    truth = _mean(raw[cand], 0) - _mean(raw[base], 0)
    assert diff["statistic"] == "mean step"
    assert diff["delta_ms"] == pytest.approx(truth, rel=0.01)
    assert sum(r["delta_ms"] for r in diff["rows"]) == pytest.approx(truth, rel=0.05)
    # the device rows move by what the kernels' busy time moved in the raw events
    kernel_truth = _mean(raw[cand], 1) - _mean(raw[base], 1)
    assert diff["device_delta_ms"] == pytest.approx(kernel_truth, abs=0.05 * abs(truth))
    assert (diff["base_launches"], diff["cand_launches"]) == (
        pytest.approx(_mean(raw[base], 2)), pytest.approx(_mean(raw[cand], 2)))
    # the step row is the same statistic (mean) as the ledger's
    step = doc["phases"]["decode"][0]
    assert step["delta_ms"] == pytest.approx(diff["delta_ms"], abs=1e-3)


def test_the_same_job_twice_is_inconclusive_and_passes_the_gate(docs, raw, tmp_path, capsys):
    a, b = raw["sdpa_attn_a"], raw["sdpa_attn_b"]
    # the raw truth: the same 191 kernels a step with the same busy time, the windows +46%
    assert [r[2] for r in a] == [r[2] for r in b] == [191] * 8
    assert _mean(b, 1) == pytest.approx(_mean(a, 1), rel=0.01)
    assert _mean(b, 0) / _mean(a, 0) - 1 == pytest.approx(0.459, abs=0.005)
    for x, y in (("sdpa_attn_a", "sdpa_attn_b"), ("sdpa_attn_b", "sdpa_attn_a")):
        doc = compare([docs[x]], [docs[y]], gate_pct=5).to_dict()
        assert doc["gate"]["exit_code"] == 0 and doc["gate"]["failed_phases"] == []
        for phase, rows in doc["phases"].items():
            assert not {r["verdict"] for r in rows} & {"faster", "slower"}, (x, phase)
        step = doc["phases"]["decode"][0]
        assert step["verdict"] == "inconclusive" and step["per_token"]["verdict"] == "inconclusive"
        level = doc["summary"]["decode"]["run_level"]
        assert abs(level["host_ms"]) <= level["host_bound_ms"] and level["runs"] >= 3
        # the rows that moved are host-side: launch gaps first, with their median gap
        first = doc["summary"]["decode"]["ledger_diff"]["rows"][0]
        assert first["side"] == "host" and first["cause"] == "launch"
    assert main(["compare", str(_path("sdpa_attn_a")), str(_path("sdpa_attn_b")), "--gate", "5"]) == 0
    out = capsys.readouterr().out
    assert "verdict decode: inconclusive" in out and "repeat each side 3 times" in out
    assert "cause: host-side +3.4" in out and "launch gaps +1.5" in out and "gate 5%: passed" in out


def test_a_kernel_change_names_the_component_first(docs, raw):
    doc = compare([docs["sdpa_attn_a"]], [docs["eager_attn"]], gate_pct=5).to_dict()
    diff = doc["summary"]["decode"]["ledger_diff"]
    top = diff["rows"][0]
    # eager attention: the score matmuls and softmax in place of one cuDNN kernel (8 -> 36 a step)
    assert (top["side"], top["cause"], top["what"]) == ("device", "kernels", "attention")
    assert (top["base_n"], top["cand_n"]) == (8, 36)
    assert top["delta_ms"] == pytest.approx(diff["device_delta_ms"], rel=0.05)
    step = doc["phases"]["decode"][0]
    assert step["verdict"] == "slower" and step["cause"].startswith("kernels +0.9")
    assert "attention +0.90" in step["cause"] and "(gone)" in step["cause"]
    assert doc["gate"]["exit_code"] == 1
    # the gate's failure names the rows that moved most, attention first
    assert doc["gate"]["moved"]["decode"].startswith("attention +0.90")


def test_every_format_shows_the_ledger_diff(tmp_path, analysed_once):
    """md, html and json of one comparison (its two traces analysed once)."""
    a, b = str(_path("sdpa_attn_a")), str(_path("eager_attn"))
    for fmt in ("md", "html", "json"):
        out = tmp_path / f"c.{fmt}"
        assert main(["compare", a, b, "-o", str(out)]) == 0
        text = out.read_text()
        assert "where the time went" in text or "ledger_diff" in text, fmt
        assert "launch gaps" in text or '"cause": "launch"' in text, fmt
