"""collectors.capture(..., every=N): one step in N, on demand (signal, trigger file), rolling files."""

from __future__ import annotations

import gzip
import json
import os
import signal
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import collectors  # noqa: E402
from collectors.provenance import read_sidecar  # noqa: E402
from collectors.sampled import _NULL, TRIGGER_CHECK, SampledCapture  # noqa: E402


def _work(i: int) -> float:
    x = torch.full((8, 8), float(i))
    return float((x @ x).sum())


def _steps(path: Path) -> Counter:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return Counter(e["name"] for e in doc["traceEvents"]
                   if e.get("cat") == "user_annotation" and not e["name"].startswith("ProfilerStep#"))


def test_every_n_records_the_nth_steps_and_keeps_the_last_files(tmp_path):
    keep_me = tmp_path / "user.pt.trace.json.gz"
    keep_me.write_bytes(b"the user's own file")
    cap = collectors.capture(tmp_path, every=5, keep=2, name="s", with_stack=False)
    assert isinstance(cap, SampledCapture)
    for i in range(1, 21):
        with cap.phase("decode", tokens=i):
            _work(i)
        cap.flush()   # a sample due while the last one is being compressed is skipped: none here
    res = cap.close()
    # windows open at steps 4, 9, 14, 19 (the profiler's warmup) and record steps 5, 10, 15, 20
    assert res.samples == 4 and res.deleted == 2 and res.errors == [] and res.steps_seen == 20
    assert len(res.timings) == 4 and all(t["save_s"] <= t["export_s"] for t in res.timings)
    assert [p.name for p in res.paths] == ["s.00002.pt.trace.json.gz", "s.00003.pt.trace.json.gz"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [keep_me.name] + [n for p in res.paths for n in (p.name, p.name + ".attrib.json")])
    assert [_steps(p) for p in res.paths] == [{"decode (tokens=15)": 1}, {"decode (tokens=20)": 1}]
    stamp = read_sidecar(res.paths[-1])
    assert stamp["extra"]["sample"] == {"seq": 3, "step": 20, "every": 5, "reason": "every", "steps": 1}
    assert keep_me.read_bytes() == b"the user's own file"


def test_signal_and_trigger_file_take_one_sample_each(tmp_path):
    trigger = tmp_path / "SAMPLE_NOW"
    cap = collectors.capture(tmp_path / "out", signal=signal.SIGUSR1, trigger_file=trigger,
                             steps=2, name="d", with_stack=False)
    for i in range(1, 3 * TRIGGER_CHECK):
        if i == 10:   # before step 10: it warms the profiler, step 11 is recorded
            os.kill(os.getpid(), signal.SIGUSR1)
        if i == TRIGGER_CHECK + 5:
            trigger.touch()   # seen at the next multiple of TRIGGER_CHECK
        with cap.phase("decode", tokens=1):
            _work(i)
        cap.flush()
    res = cap.close()
    assert res.samples == 2 and not trigger.exists()   # consumed
    reasons = [read_sidecar(p)["extra"]["sample"] for p in res.paths]
    assert [(r["reason"], r["step"]) for r in reasons] == [("signal", 11), ("file", 2 * TRIGGER_CHECK + 1)]
    assert all(sum(_steps(p).values()) == 2 for p in res.paths)
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL   # handler restored at close


def test_unsampled_steps_touch_no_profiler_and_bad_arguments_refused(tmp_path):
    cap = collectors.capture(tmp_path, every=1000, with_stack=False)
    for i in range(50):
        step = cap.phase("decode", tokens=1)
        assert step is _NULL   # one shared null context: nothing built per step
        with step:
            assert not torch.autograd.profiler._is_profiler_enabled
    assert cap.close().samples == 0 and list(tmp_path.iterdir()) == []
    for bad in ({"every": 1}, {"every": 5, "keep": 0}):
        with pytest.raises(ValueError):
            collectors.capture(tmp_path, **bad)
    os.environ["ATTRIB_PROFILE"] = "0"
    try:
        assert not collectors.capture(tmp_path, every=5).active
    finally:
        del os.environ["ATTRIB_PROFILE"]


def test_the_sampler_asks_kineto_to_tear_cupti_down_unless_told_otherwise(tmp_path, monkeypatch):
    monkeypatch.delenv("TEARDOWN_CUPTI", raising=False)
    collectors.capture(tmp_path, every=10).close()
    assert os.environ["TEARDOWN_CUPTI"] == "1"   # kept CUPTI slows every later launch
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")
    collectors.capture(tmp_path, every=10).close()
    assert os.environ["TEARDOWN_CUPTI"] == "0"   # the user's (or torch's) choice stands
