"""A whole compiled generate() in one profiler step is its forward passes (issue 36, item 4), on
the H200 captures of HF's static-cache generate (auto-compiled decode forward, CUDA-graph replays)
and torch.compile(mode="reduce-overhead") decode (tests/fixtures/captured/issue36, README there).

The captures mark each forward with its own step annotation; the test derives, from each, the trace
a user gets with one step around the whole generate() (the step annotations and ProfilerStep spans
removed, one ProfilerStep around them all). The truth is the capture's own annotations."""

from __future__ import annotations

import gzip
import json

import pytest

from attrib.app import analyze

from conftest import FIXTURES

CAP = FIXTURES / "captured" / "issue36"
STEPS = ("decode (", "prefill (", "ProfilerStep#")


def _one_step(name, out):
    """The capture with its per-forward steps merged into one ProfilerStep; the truth: the
    removed annotations' (phase, tokens) in order."""
    doc = json.loads(gzip.decompress((CAP / f"{name}.pt.trace.json.gz").read_bytes()))
    marks = [e for e in doc["traceEvents"]
             if e.get("cat") in ("user_annotation", "gpu_user_annotation")
             and e["name"].startswith(STEPS)]
    cpu = [e for e in marks if e["cat"] == "user_annotation"]
    truth = [(e["name"].split(" ")[0], int(e["name"].split("=")[1].rstrip(")")))
             for e in sorted(cpu, key=lambda e: e["ts"]) if not e["name"].startswith("Profiler")]
    t0, t1 = min(e["ts"] for e in cpu), max(e["ts"] + e["dur"] for e in cpu)
    step = next(e for e in cpu if e["name"].startswith("ProfilerStep")) | {
        "name": "ProfilerStep#1", "ts": t0, "dur": t1 - t0}
    gone = {id(e) for e in marks}
    doc["traceEvents"] = [e for e in doc["traceEvents"] if id(e) not in gone] + [step]
    path = out / f"{name}_one_step.json"
    path.write_text(json.dumps(doc))
    return path, truth


@pytest.mark.parametrize("name", ["static_generate_b4", "reduce_overhead_b4"])
def test_one_step_around_a_compiled_generate_is_split_into_its_forwards(name, tmp_path):
    path, truth = _one_step(name, tmp_path)
    prefill = [t for p, t in truth if p == "prefill"]
    decode = [t for p, t in truth if p == "decode"]
    assert prefill == [2048] and decode == [4] * 4  # batch 4, prompt 512: as the README says
    an = analyze(path)
    got = {p.phase: p for p in an.phases}
    assert set(got) == {"prefill", "decode"}, [p.phase for p in an.phases]
    assert (got["prefill"].steps, got["prefill"].tokens_per_step) == (1, 2048)
    # 4 decode forwards of 4 tokens; static_generate_b4's first records its CUDA graph (21 ms
    # against ~3): a warm-up outlier, left out of the figures and listed
    dec = got["decode"]
    assert dec.steps + len(dec.excluded_steps) == 4 and set(dec.per_step.tokens) == {4}
    assert {x.reason for x in dec.excluded_steps} <= {"warm-up"}
    # the annotated capture as run: the same phases and tokens
    ref = {p.phase: p for p in analyze(CAP / f"{name}.pt.trace.json.gz").phases}
    assert ref["decode"].steps == dec.steps and set(ref["decode"].per_step.tokens) == {4}
