"""collectors.capture / collectors.wrap on real torch (CPU in CI) and a real HF model."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import collectors  # noqa: E402
from attrib.trace import step_name  # noqa: E402
from collectors.torch_capture import CaptureWarning  # noqa: E402
from collectors.provenance import SCHEMA, read_sidecar, sidecar_path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BATCH, PROMPT, DECODE = 2, 12, 4


def _document(path: Path) -> dict:
    """The exported trace. torch's exporter can write a name with raw quotes (seen here with torch
    2.13: `torch/profiler/_cupti_monitor.py(0): "warmup"`), which attrib's reader repairs; so does this."""
    from collectors.kineto import repair_names

    raw = gzip.decompress(path.read_bytes())
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError:
        doc = json.loads(repair_names(raw)[0])
    assert isinstance(doc["traceEvents"], list) and doc["traceEvents"]
    return doc


def _events(path: Path) -> list[dict]:
    """The exported events."""
    return _document(path)["traceEvents"]


def _spans(path: Path, events: list[dict] | None = None) -> Counter:
    """User annotations other than the profiler's own ProfilerStep#N (of `events`: path's, read)."""
    return Counter(e["name"] for e in (_events(path) if events is None else events)
                   if e.get("cat") == "user_annotation" and not e["name"].startswith("ProfilerStep#"))


def _work(x: int) -> int:
    """A small real torch step; returns a plain int so results are easy to compare."""
    t = torch.full((16, 16), float(x))
    return int((t @ t).sum().item())


@pytest.fixture(scope="module")
def tiny_lm():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(
        "llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=512, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    import inspect

    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    return cfg, model, key


def _generate(cfg, model, key, cap) -> list[torch.Tensor]:
    from transformers import DynamicCache

    try:
        cache = DynamicCache(config=cfg)
    except TypeError:
        cache = DynamicCache()
    ids = torch.randint(0, cfg.vocab_size, (BATCH, PROMPT))
    out = []
    with torch.inference_mode():
        with cap.phase("prefill", tokens=BATCH * PROMPT):
            nxt = model(input_ids=ids, use_cache=True, **{key: cache}).logits[:, -1].argmax(-1, keepdim=True)
        out.append(nxt)
        for _ in range(DECODE):
            with cap.phase("decode", tokens=BATCH):
                nxt = model(input_ids=nxt, use_cache=True, **{key: cache}).logits[:, -1].argmax(-1, keepdim=True)
            out.append(nxt)
    assert cache.get_seq_length() == PROMPT + DECODE
    return out


def test_hf_prefill_decode_trace_and_sidecar(tmp_path, tiny_lm, monkeypatch):
    cfg, model, key = tiny_lm
    monkeypatch.setenv("PYTORCH_TUNABLEOP_ENABLED", "1")
    monkeypatch.setenv("VLLM_ATTENTION_BACKEND", "ROCM_AITER_FA")
    monkeypatch.setenv("VLLM_API_KEY", "s3cret")
    monkeypatch.setenv("UNRELATED_SETTING", "x")
    prov = {"model": "random-init llama-2L-64", "dtype": torch.float32, "batch": BATCH,
            "kv_cache_state": "fresh", "run_note": "ci"}
    with collectors.capture(tmp_path / "out", provenance=prov, name="hf") as cap:
        _generate(cfg, model, key, cap)
    res = cap.result

    assert res.error is None and res.path == tmp_path / "out" / "hf.pt.trace.json.gz"
    assert res.path.is_file() and res.bytes == res.path.stat().st_size
    assert res.steps == [("prefill", BATCH * PROMPT)] + [("decode", BATCH)] * DECODE
    assert res.stop_s >= 0 and res.export_s > 0
    assert _spans(res.path) == {f"prefill (tokens={BATCH * PROMPT})": 1, f"decode (tokens={BATCH})": DECODE}
    events = _events(res.path)
    assert any(e.get("cat") == "python_function" and e["name"].startswith("nn.Module: LlamaDecoderLayer")
               for e in events), "with_stack=True should give module frames"
    assert any("Input Dims" in e.get("args", {}) for e in events if e.get("cat") == "cpu_op")
    assert not list((tmp_path / "out").glob(".*")), "no partial files left behind"

    stamp = read_sidecar(res.path)
    assert res.sidecar == sidecar_path(res.path) == Path(str(res.path) + ".attrib.json")
    assert stamp["schema"] == SCHEMA and stamp["trace"] == "hf.pt.trace.json.gz"
    assert stamp["model"] == "random-init llama-2L-64" and stamp["dtype"] == "torch.float32"
    assert stamp["batch"] == BATCH and stamp["kv_cache_state"] == "fresh"
    for unknown in ("quantization", "context_length", "speculative", "correctness_gate", "baseline_id",
                    "kv_cache_dtype", "concurrency"):
        assert stamp[unknown] is None
    assert stamp["extra"] == {"run_note": "ci"}
    assert stamp["steps"] == [{"phase": "prefill", "tokens": BATCH * PROMPT}] + \
        [{"phase": "decode", "tokens": BATCH}] * DECODE
    assert stamp["versions"]["torch"] == torch.__version__
    assert stamp["versions"]["hip"] == torch.version.hip and stamp["versions"]["cuda"] == torch.version.cuda
    assert stamp["gpu"] is None if not torch.cuda.is_available() else stamp["gpu"]["name"]
    env = stamp["env"]
    assert env["PYTORCH_TUNABLEOP_ENABLED"] == "1" and env["VLLM_ATTENTION_BACKEND"] == "ROCM_AITER_FA"
    assert env["VLLM_API_KEY"] == "<redacted>" and "UNRELATED_SETTING" not in env
    assert stamp["capture"]["steps_recorded"] == 1 + DECODE and stamp["capture"]["with_stack"] is True
    assert stamp["capture"]["export_s"] == pytest.approx(res.export_s)

    # attrib analyze splits it into the captured steps and carries the stamp into the analysis JSON
    from attrib import analyze

    doc = analyze(res.path).to_dict()
    phases = {p["phase"]: p for p in doc["phases"]}
    assert (phases["prefill"]["steps"], phases["prefill"]["tokens_per_step"]) == (1, BATCH * PROMPT)
    # every decode step is counted, or left out as a warm-up outlier (a first step of 3x the median:
    # on a loaded CPU the first decode step's one-off setup can be): none is lost
    dec = phases["decode"]
    assert dec["steps"] + len(dec["excluded_steps"]) == DECODE and dec["tokens_per_step"] == BATCH
    assert {x["reason"] for x in dec["excluded_steps"]} <= {"warm-up"} and dec["steps"] >= DECODE - 1
    assert phases["decode"]["tokens_from"] == "annotation"
    assert doc["provenance"]["model"] == "random-init llama-2L-64" and doc["provenance"]["batch"] == BATCH
    assert doc["provenance"]["env"]["VLLM_ATTENTION_BACKEND"] == "ROCM_AITER_FA"


def test_warmup_skipped_and_window_closes_at_steps(tmp_path):
    with collectors.capture(tmp_path, warmup=2, steps=3, name="w", with_stack=False) as cap:
        got = []
        for i in range(7):
            with cap.phase(f"s{i}", tokens=i):
                got.append(_work(i))
            if i == 4:  # the 3rd recorded step closed the window: exported before the block ends
                assert cap.result.path is not None and cap.result.path.is_file()
    assert got == [_work(i) for i in range(7)]
    assert cap.result.warmup_skipped == 2
    assert cap.result.steps == [("s2", 2), ("s3", 3), ("s4", 4)]
    assert _spans(cap.result.path) == {"s2 (tokens=2)": 1, "s3 (tokens=3)": 1, "s4 (tokens=4)": 1}


def test_open_window_exports_at_close_and_names(tmp_path):
    with collectors.capture(tmp_path, warmup=1, name="open", with_stack=False) as cap:
        for i in range(4):
            with cap.phase("decode" if i else "prefill", tokens=None if i == 3 else 8):
                _work(i)
        assert cap.result.path is None  # steps=None: nothing exported until the capture closes
    assert _spans(cap.result.path) == {"decode (tokens=8)": 2, "decode": 1}
    assert step_name("decode", 8) == "decode (tokens=8)" and step_name("prefill") == "prefill"


def test_step_exception_passes_through_and_is_recorded(tmp_path):
    with pytest.warns(CaptureWarning, match="non-negative"):
        with collectors.capture(tmp_path / "bad", name="bad", with_stack=False) as bad:
            with bad.phase("decode", tokens=-1):
                pass
    assert bad.result.steps == [("decode", None)] and _spans(bad.result.path) == {"decode": 1}
    with collectors.capture(tmp_path, name="exc", with_stack=False) as cap:
        with pytest.raises(KeyError, match="boom"):
            with cap.phase("decode", tokens=1):
                raise KeyError("boom")
    assert cap.result.steps == [("decode", 1)] and _spans(cap.result.path) == {"decode (tokens=1)": 1}


def test_unwritable_out_dir_warns_and_keeps_results(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    with pytest.warns(CaptureWarning, match="unusable"):
        with collectors.capture(blocker / "traces") as cap:
            with cap.phase("decode", tokens=1):
                value = _work(3)
    assert value == _work(3)
    assert cap.result.path is None and cap.result.error and not cap.result.steps
    assert blocker.read_text() == "not a directory"


def test_export_failure_warns(tmp_path):
    out = tmp_path / "gone"
    with pytest.warns(CaptureWarning, match="export"):
        with collectors.capture(out, name="x", with_stack=False) as cap:
            with cap.phase("decode", tokens=1):
                value = _work(2)
            out.rmdir()
            out.write_text("the directory was replaced by a file")  # the export cannot land
    assert value == _work(2) and cap.result.path is None and "export" in cap.result.error
    assert out.read_text() == "the directory was replaced by a file"


def test_profiler_already_running_warns_and_leaves_it_alone(tmp_path):
    from torch.profiler import ProfilerActivity, profile, record_function

    outer = profile(activities=[ProfilerActivity.CPU])
    outer.start()
    try:
        with pytest.warns(CaptureWarning, match="already running"):
            with collectors.capture(tmp_path / "inner") as cap:
                with cap.phase("decode", tokens=4):
                    with record_function("user_marker"):
                        value = _work(5)
    finally:
        outer.stop()
    assert value == _work(5) and cap.result.path is None
    assert not (tmp_path / "inner").exists() or not any((tmp_path / "inner").iterdir())
    assert "user_marker" in {e.name for e in outer.events()}, "the user's profiler still recorded"


def test_disabled_imports_nothing_and_writes_nothing(tmp_path):
    code = """
import os, sys
import collectors
en = None if os.environ.get("ATTRIB_PROFILE") else False
with collectors.capture(sys.argv[1], enabled=en) as cap:
    for i in range(3):
        with cap.phase("decode", tokens=1):
            pass
step = collectors.wrap(lambda x: x + 1, phase=lambda x: "decode", out_dir=sys.argv[1], enabled=en)
assert step(1) == 2 and step.finish().enabled is False and cap.result.enabled is False
assert "torch" not in sys.modules and "torch.profiler" not in sys.modules, sorted(sys.modules)
print("ok")
"""
    for extra_env in ({}, {"ATTRIB_PROFILE": "0"}):
        out = tmp_path / f"out{len(extra_env)}"
        env = {**os.environ, "PYTHONPATH": str(ROOT), **extra_env}
        run = subprocess.run([sys.executable, "-c", code, str(out)], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
        assert not out.exists()


def test_env_kill_switch_overrides_enabled_true(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTRIB_PROFILE", "0")
    with collectors.capture(tmp_path / "o", enabled=True) as cap:
        with cap.phase("decode", tokens=1):
            pass
    assert cap.result.enabled is False and not (tmp_path / "o").exists()


def test_wrap_records_phases_from_the_callable(tmp_path):
    def runner_step(batch, *, n_prefill=0, dummy=False):
        return _work(len(batch) + n_prefill)

    def phase(batch, *, n_prefill=0, dummy=False):
        if dummy:
            return None
        return ("prefill", n_prefill) if n_prefill else ("decode", len(batch))

    step = collectors.wrap(runner_step, phase=phase, out_dir=tmp_path, name="wrapped",
                           warmup=1, with_stack=False)
    assert step.__name__ == "runner_step"
    calls = [([1], {"n_prefill": 7}),           # warmup, not recorded
             ([1, 2], {"dummy": True}),         # phase None: not a step
             ([1, 2], {"n_prefill": 30}),
             ([1, 2], {}), ([1, 2, 3], {}), ([1], {"dummy": True}), ([1, 2, 3], {})]
    results = [step(b, **kw) for b, kw in calls]
    assert results == [runner_step(b, **kw) for b, kw in calls]
    res = step.finish()
    assert res is step.capture.result and res.warmup_skipped == 1
    assert res.steps == [("prefill", 30), ("decode", 2), ("decode", 3), ("decode", 3)]
    assert _spans(res.path) == {"prefill (tokens=30)": 1, "decode (tokens=2)": 1, "decode (tokens=3)": 2}
    assert read_sidecar(res.path)["steps"][0] == {"phase": "prefill", "tokens": 30}
    assert step([9]) == runner_step([9])  # after finish: a plain call


def test_wrap_decorator_closes_itself_at_steps(tmp_path):
    @collectors.wrap(phase=lambda n: ("decode", n), out_dir=tmp_path, steps=2, name="deco",
                     with_stack=False)
    def step(n):
        if n > 5:
            raise ValueError("too big")
        return _work(n)

    assert step(1) == _work(1)
    with pytest.raises(ValueError, match="too big"):
        step(6)
    assert step.capture.result.path is not None  # window of 2 closed without finish()
    assert _spans(step.capture.result.path) == {"decode (tokens=1)": 1, "decode (tokens=6)": 1}
    assert step(2) == _work(2) and step.capture.result.steps == [("decode", 1), ("decode", 6)]
    broken = collectors.wrap(lambda: 5, phase=lambda: 1 / 0, out_dir=tmp_path / "b")
    with pytest.warns(CaptureWarning, match="phase callable failed"):
        assert broken() == 5
    broken.finish()


def test_read_sidecar_absent_corrupt_and_foreign(tmp_path):
    trace = tmp_path / "t.pt.trace.json.gz"
    assert read_sidecar(trace) == {}
    side = sidecar_path(trace)
    side.write_text("{not json")
    got = read_sidecar(trace)
    assert set(got) == {"warning"} and str(side) in got["warning"] and "corrupt" in got["warning"]
    side.write_text('["a list"]')
    assert "not a JSON object" in read_sidecar(trace)["warning"]
    side.write_text('{"schema": "other/9"}')
    assert "other/9" in read_sidecar(trace)["warning"]
    side.write_text(json.dumps({"schema": SCHEMA, "model": "m"}))
    assert read_sidecar(trace) == {"schema": SCHEMA, "model": "m"}


def test_rocm_build_also_emits_roctx_ranges(tmp_path, monkeypatch):
    from collectors.rocprof import roctx
    calls = []
    monkeypatch.setattr(torch.version, "hip", "6.4.0", raising=False)   # as a ROCm build reports
    monkeypatch.setattr(roctx, "range_push", lambda name: calls.append(("push", name)) or 0)
    monkeypatch.setattr(roctx, "range_pop", lambda: calls.append(("pop",)) or 0)
    with collectors.capture(tmp_path, name="r", with_stack=False) as cap:
        for tokens in (6, 2):
            with cap.phase("decode", tokens=tokens):
                _work(tokens)
    assert calls == [("push", "decode (tokens=6)"), ("pop",), ("push", "decode (tokens=2)"), ("pop",)]
    assert _spans(cap.result.path) == {"decode (tokens=6)": 1, "decode (tokens=2)": 1}


def test_step_costs_few_python_calls_and_leaves_no_probe_span(tmp_path):
    """Under with_stack the Python tracer records every call a step makes; the capture's own share
    per step stays a handful (a plain context manager, no generator/contextlib, direct span ops),
    and probing the span ops before the window leaves no stray annotation in the trace."""
    with collectors.capture(tmp_path, warmup=1, steps=6, name="cost", with_stack=True) as cap:
        for _ in range(7):
            with cap.phase("decode", tokens=8):
                _work(3)
    ev = _events(cap.result.path)
    assert _spans(cap.result.path) == Counter({"decode (tokens=8)": 6})
    assert not any(e.get("name") == "attrib.capture.probe" for e in ev)
    steps = sorted((e for e in ev if e.get("name", "").startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    mid = steps[1:-1]   # whole steps: not the first (window start) nor the last (stamp + export)
    assert mid
    lo, hi = mid[0]["ts"], mid[-1]["ts"] + mid[-1]["dur"]
    own = [e["name"] for e in ev if e.get("cat") == "python_function" and lo <= e["ts"] < hi
           and ("torch_capture.py" in e["name"] or "contextlib.py" in e["name"])]
    assert not any("contextlib.py" in n for n in own), own
    assert len(own) / len(mid) <= 7, Counter(own)


def _per_step_events(path: Path) -> tuple[Counter, int]:
    """Events inside the whole steps of a trace (not the first two nor the last two), by
    category and name (object addresses dropped), and the number of those steps."""
    import re

    ev = _events(path)
    steps = sorted((e for e in ev if e.get("name", "").startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])[2:-2]
    lo, hi = steps[0]["ts"], steps[-1]["ts"] + steps[-1]["dur"]
    return Counter((e.get("cat"), re.sub(r" at 0x[0-9a-f]+", "", e["name"])) for e in ev
                   if e.get("ph") == "X" and lo <= e["ts"] < hi
                   and not e["name"].startswith("ProfilerStep#")), len(steps)


def test_step_adds_few_events_over_a_bare_profiler(tmp_path):
    """What a capture step records beyond torch.profiler alone with the same options (the
    per-step cost under with_stack is about proportional to it): the span, the capture's own
    frames and a few builtins; the span ops are called as C++ functions, so none of torch's
    op-dispatch Python (`torch/_ops.py`, 10 events a step before) is traced, and the span closes
    under DisableTorchFunctionSubclass as record_function's does (without it the close cost ~80 us
    more per decode step on the H200: README, "Capture overhead")."""
    from torch import profiler as tp

    with collectors.capture(tmp_path, steps=None, name="cap", with_stack=True) as cap:
        for _ in range(10):
            with cap.phase("decode", tokens=8):
                _work(3)
    with tp.profile(activities=[tp.ProfilerActivity.CPU], record_shapes=True, with_stack=True,
                    schedule=lambda s: tp.ProfilerAction.RECORD) as prof:
        for _ in range(10):
            _work(3)
            prof.step()
    prof.export_chrome_trace(str(tmp_path / "bare.json"))
    raw = (tmp_path / "bare.json").read_bytes()
    (tmp_path / "bare.json.gz").write_bytes(gzip.compress(raw))
    (c, nc), (b, nb) = _per_step_events(cap.result.path), _per_step_events(tmp_path / "bare.json.gz")
    extra = {k: c[k] / nc - b[k] / nb for k in c.keys() | b.keys() if c[k] / nc != b[k] / nb}
    assert extra[("user_annotation", "decode (tokens=8)")] == 1
    assert not any("torch/_ops.py" in name for _, name in extra), extra
    assert [v for (_, name), v in extra.items() if "DisableTorchFunctionSubclass" in name] == [1], extra
    assert 0 < sum(extra.values()) <= 12, extra


def test_machine_fields_collected_once_and_reused(tmp_path, monkeypatch):
    """The stamp's slow part (versions, GPU, env) is collected before the window opens."""
    from collectors import provenance

    calls = []
    real = provenance.machine_fields
    monkeypatch.setattr(provenance, "machine_fields", lambda t: calls.append(1) or real(t))
    with collectors.capture(tmp_path, steps=2, name="m", with_stack=False) as cap:
        assert calls == [1]   # at start, before any step
        for i in range(2):
            with cap.phase("decode", tokens=1):
                _work(i)
    assert calls == [1]
    doc = read_sidecar(cap.result.path)
    assert doc["versions"]["torch"] == torch.__version__
    assert doc["steps"] == [{"phase": "decode", "tokens": 1}] * 2


CAPTURED = ROOT / "tests" / "fixtures" / "captured"
# name -> (batch, prompt, decode steps); see tests/fixtures/captured/README.md
H200_TRACES = {
    "compile_decode": (8, 512, 6), "qwen3next_decode": (1, 256, 4), "deepseekv3_decode": (1, 256, 4),
    "eager_attn": (8, 2048, 8), "sdpa_attn_a": (8, 2048, 8), "sdpa_attn_b": (8, 2048, 8),
    "slope_ctx1024": (8, 1024, 6), "slope_ctx4096": (8, 4096, 6), "slope_ctx16384": (8, 16384, 6),
    "sampler_b1_v152k": (1, 512, 8), "blocking_copy_decode": (8, 512, 8),
    "tp2_decode_rank0": (8, 512, 6), "tp2_decode_rank1": (8, 512, 6),
}


@pytest.mark.parametrize("name", sorted(H200_TRACES))
def test_h200_fixture_steps_stamp_and_window(name):
    """The H200 fixtures as the capture wrote them: one prefill and N decode spans, a stamp that
    says batch and context, and what each was captured to show."""
    batch, prompt, n = H200_TRACES[name]
    path = CAPTURED / f"{name}.pt.trace.json.gz"
    trace = _document(path)  # read once
    ev = trace["traceEvents"]
    spans = _spans(path, ev)
    assert spans[f"prefill (tokens={batch * prompt})"] == 1
    assert spans[f"decode (tokens={batch})"] == n
    doc = read_sidecar(path)
    assert doc["batch"] == batch and doc["context_length"] == prompt
    assert doc["gpu"]["name"].startswith("NVIDIA H200")
    assert doc["versions"]["torch"].startswith("2.11.0") and doc["versions"]["transformers"] == "5.17.0"
    assert doc["steps"] == [{"phase": "prefill", "tokens": batch * prompt}] + \
        [{"phase": "decode", "tokens": batch}] * n
    names = Counter(e.get("name") for e in ev)
    kernels = [e["name"] for e in ev if e.get("cat") == "kernel"]
    if name == "compile_decode":
        assert names["entire_frame_compile"] >= 1 and any(k.startswith("triton_") for k in kernels)
    if name.startswith("tp2_"):
        info = trace.get("distributedInfo")
        assert info["backend"] == "nccl" and info["world_size"] == 2
        assert info["rank"] == int(name[-1])
        # 2 all-reduces per layer, 4 layers, 7 recorded steps
        assert sum("AllReduce" in k for k in kernels) == 8 * (n + 1)
    if name == "blocking_copy_decode":
        assert names["Memcpy HtoD (Pageable -> Device)"] == n
    if name == "sampler_b1_v152k":
        assert names["aten::multinomial"] == n + 1 and names["aten::sort"] >= n + 1   # prefill samples too


def test_h200_fixture_model_json_matches_hand_derived_weights():
    """README's hand derivation of the L4 weights equals the parameter bytes the capture counted."""
    attn = 4 * (2048 * 2048 + 2 * 2048 * 1024 + 2048 * 2048) * 2
    mlp = 4 * 3 * 2048 * 5632 * 2
    for name in ("sdpa_attn_a", "eager_attn", "slope_ctx16384", "blocking_copy_decode", "compile_decode"):
        parts = json.loads((CAPTURED / f"{name}.model.json").read_text())["param_bytes"]["bytes_by_part"]
        assert parts["attention"] == attn == 100_663_296
        assert parts["dense_mlp"] == mlp == 276_824_064
        assert parts["lm_head"] == 32000 * 2048 * 2
        assert parts["norms_other"] == 9 * 2048 * 2
    tp = json.loads((CAPTURED / "tp2_decode_rank0.model.json").read_text())
    assert tp["shard_param_bytes"] == attn // 2 + mlp // 2 + 9 * 2048 * 2 + 2 * 32000 * 2048 * 2
