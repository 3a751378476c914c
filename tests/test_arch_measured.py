"""--arch naming the device a trace ran on measures on it; a trace that records no device says what
to pass (issue 38, item 2). The real gfx1151 rocprofv3 CSV (tests/fixtures/rocprof): no
agent_info.csv beside it, Agent_Id "Agent 1", llama.cpp kernel names without a target."""

from __future__ import annotations

import csv
import json

import pytest

from attrib.cli import main

from conftest import EXAMPLE_TRACE, FIXTURES

CSV = FIXTURES / "rocprof" / "gfx1151_llamacpp_rocprofv3_csv" / "decode_kernel_trace.csv"


def _json(capsys, *args: str) -> dict:
    assert main(["analyze", *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def _text(doc: dict) -> str:
    return json.dumps(doc)


def test_the_csv_records_no_device():
    with CSV.open() as f:
        rows = list(csv.DictReader(f))
    assert {r["Agent_Id"] for r in rows} == {"Agent 1"} and "gfx" not in CSV.read_text()
    assert not list(CSV.parent.glob("*agent_info*"))


def test_unknown_device_is_one_note_naming_what_to_pass(capsys):
    doc = _json(capsys, str(CSV))
    assert doc["device"]["detected_from"] == "unknown"
    says = [n for n in doc["notes"] if "--arch" in n]
    assert len(says) == 1 and "pass the device it ran on, --arch gfx1151 (the target its path names)" in says[0]
    assert any("no decode_agent_info.csv beside the trace" in n for n in doc["notes"])


@pytest.mark.parametrize("name", ["gfx1151", "radeon-8060s", "gfx1201"])
def test_arch_of_a_trace_without_a_device_record_is_measured(capsys, name):
    doc = _json(capsys, str(CSV), "--arch", name)
    dev = doc["device"]
    assert dev["detected_from"] == "--arch" and dev["arch"] == ("gfx1201" if name == "gfx1201" else "gfx1151")
    text = _text(doc)   # no finding, action, note or assumption says it is a projection
    assert "projection onto" not in text and "a projection" not in text
    assert doc["findings"] and not any(f["projection"] for f in doc["findings"])
    assumed = doc["summary"]["assumed"]
    assert any(a.startswith(f"--arch {dev['arch']}: the device it ran on, as given") for a in assumed)
    fact = next(f for f in doc["summary"]["facts"] if f["name"] == "device")
    assert fact["source"] == "--arch"


def test_arch_of_another_vendor_is_still_a_projection(capsys):
    doc = _json(capsys, str(CSV), "--arch", "h200-sxm")    # a rocprof trace ran on an AMD part
    assert doc["device"]["detected_from"] == "override"
    assert all(f["projection"] for f in doc["findings"]) and doc["findings"]
    assert any("rooflines and the ceiling are a projection" in n for n in doc["notes"])


def test_arch_naming_the_traced_device_changes_nothing(capsys):
    plain = _json(capsys, str(EXAMPLE_TRACE))
    assert plain["device"]["key"] == "h200-sxm" and plain["device"]["detected_from"] == "deviceProperties"
    same = _json(capsys, str(EXAMPLE_TRACE), "--arch", "h200-sxm")
    assert same == plain
    other = _json(capsys, str(EXAMPLE_TRACE), "--arch", "h100-sxm")   # another chip: a what-if
    assert other["device"]["detected_from"] == "override" and "projection onto" in _text(other)


@pytest.mark.parametrize("arch", ["gfx1151", "h200-sxm"])
def test_actions_shortened_after_a_whole_word(capsys, monkeypatch, arch, analysed_once):
    """The verdict's action line, cut to the terminal, ends in an ellipsis after a whole word (it
    cut 'Radeon' to 'Radeo…' at 53 columns). The CSV is analysed once, rendered at each width."""
    doc = _json(capsys, str(CSV), "--arch", arch)
    what = doc["summary"]["phases"][0]["actions"][0]["what"]
    cut = 0
    for width in range(44, 100):
        monkeypatch.setenv("COLUMNS", str(width))
        assert main(["analyze", str(CSV), "--arch", arch]) == 0
        lines = capsys.readouterr().out.splitlines()
        head = next(line for line in lines if line.startswith("   1. "))
        assert len(head) <= width
        if head.endswith("…"):
            cut += 1
            shown = head[:-1].split(") ", 1)[1]      # after "1. 0.052 ms/step (12%) "
            assert what.startswith(shown) and what[len(shown)] == " ", (width, head)
        else:
            assert head.endswith(what)
    assert cut   # the long projection title is cut at some widths
