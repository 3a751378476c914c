"""Issue 39, exits 0 with nonsense: a step annotation nested in a copy of itself (steps and tok/s
doubled), the GPU side on another device with its clock 2.55 s off (a 2,550 ms prefill), a kernel
of 1e9 us (1,000 s steps). Each variant is derived inside the test from the demo trace; each
outcome is checked against the untouched trace's own figures."""

from __future__ import annotations

import gzip
import json

import orjson
import pytest

from attrib.cli import main

from conftest import EXAMPLE_TRACE

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")


# the untouched trace's analysis is read by two tests: analysed once for the module
pytestmark = pytest.mark.usefixtures("module_analysed_once")


@pytest.fixture(scope="module")
def text() -> bytes:
    return gzip.decompress(EXAMPLE_TRACE.read_bytes())


@pytest.fixture(scope="module")
def doc(text):
    return json.loads(text)


def _write(path, d: dict):
    """The edited document as the JSON file `path`."""
    path.write_bytes(orjson.dumps(d))
    return path


def _analyze(capsys, path) -> tuple[int, dict | None, str]:
    code = main(["analyze", str(path), "--format", "json"])
    cap = capsys.readouterr()
    return code, (orjson.loads(cap.out) if code == 0 else None), cap.err


def _steps(analysis: dict) -> dict[str, tuple[int, float]]:
    return {p["phase"]: (p["steps"], p["achieved_tok_s"]) for p in analysis["phases"]}


def test_annotations_nested_in_their_copies_count_once(tmp_path, capsys, text):
    d = json.loads(text)  # a fresh copy to edit
    copies = []
    for e in d["traceEvents"]:
        if e.get("cat") in ("user_annotation", "gpu_user_annotation") and e["name"] in (
                "prefill", "decode"):
            inner = dict(e, ts=e["ts"] + 1, dur=e["dur"] - 2)
            copies.append(inner)
    d["traceEvents"] += copies
    bad = _write(tmp_path / "nested.json", d)
    code, got, err = _analyze(capsys, bad)
    assert code == 0, err
    _, want, _ = _analyze(capsys, EXAMPLE_TRACE)
    assert _steps(got) == _steps(want) == {"prefill": (1, pytest.approx(45552.7, abs=0.1)),
                                           "decode": (6, pytest.approx(_steps(want)["decode"][1]))}
    assert (f"attrib: warning: {bad}: {len(copies)} annotations lie inside a copy of themselves "
            "(the same name on the same thread: a range opened twice); each counted once"
            ) in err.splitlines()


def test_a_gpu_clock_seconds_off_the_host_is_refused(tmp_path, capsys, text, doc):
    d = json.loads(text)  # a fresh copy to edit
    for e in d["traceEvents"]:
        if e.get("cat") in GPU_CATS:
            e["ts"] += 2_550_000
            e.setdefault("args", {})["device"] = 1
    bad = _write(tmp_path / "offset.json", d)
    code, _, err = _analyze(capsys, bad)
    kernels = sum(e.get("cat") == "kernel" for e in doc["traceEvents"])
    assert code == 2
    assert err.strip() == (
        f"attrib: error: {bad}: device 1's kernels start 2.55 s or more after the calls that "
        f"launched them (99% of {kernels:,} linked): its clock is not the host's, so its kernels "
        "cannot be placed in their steps")


def test_kernels_before_their_launch_are_refused(tmp_path, capsys, text):
    d = json.loads(text)  # a fresh copy to edit
    for e in d["traceEvents"]:
        if e.get("cat") in GPU_CATS:
            e["ts"] -= 40_000  # 40 ms early: before the calls that launched them
    bad = _write(tmp_path / "early.json", d)
    code, _, err = _analyze(capsys, bad)
    assert code == 2 and err.strip() == (
        f"attrib: error: {bad}: device 0's kernels start 40.0 ms before the calls that launched "
        f"them (the median of 4,977 linked): its clock is not the host's, so its kernels cannot "
        "be placed in their steps")


def test_a_kernel_longer_than_the_capture_is_dropped(tmp_path, capsys, text):
    d = json.loads(text)  # a fresh copy to edit
    kernels = [e for e in d["traceEvents"] if e.get("cat") == "kernel"]
    kernels[100]["dur"] = 1e9  # 1,000 s in a 0.5 s capture
    bad = _write(tmp_path / "long_kernel.json", d)
    code, got, err = _analyze(capsys, bad)
    assert code == 0, err
    assert "1 kernels dropped: they last up to 1,000.0 s, longer than the whole host timeline" in err
    _, want, _ = _analyze(capsys, EXAMPLE_TRACE)
    # the steps keep their real length: within the one dropped kernel's share of the step
    for g, w in zip(got["phases"], want["phases"]):
        assert g["steps"] == w["steps"]
        assert g["step_ms"]["median"] == pytest.approx(w["step_ms"]["median"], rel=0.05)
