"""`attrib export`: the Kineto trace with attrib's attribution in each kernel's args and a track per
component, nested so the Perfetto UI loads it (checked on the written file, not on attrib's tables)."""

from __future__ import annotations

import gzip

import orjson

from attrib.app import analyze, attribution, model_budget
from attrib.options import Options
from attrib.cli import main

from conftest import FIXTURES
from test_numbers_cost import GPT_OSS, VLLM

LLAMA = FIXTURES / "captured" / "hf_llama_cuda_b8_p512.pt.trace.json.gz"


def test_export_annotates_kernels_and_adds_nested_component_tracks(tmp_path, capsys):
    out = tmp_path / "annotated.json.gz"
    assert main(["export", str(LLAMA), "-o", str(out)]) == 0
    assert "ui.perfetto.dev" in capsys.readouterr().out
    original = orjson.loads(gzip.decompress(LLAMA.read_bytes()))
    doc = orjson.loads(gzip.decompress(out.read_bytes()))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert len(kernels) == sum(1 for e in original["traceEvents"] if e.get("cat") == "kernel") == 3152
    comps = set()
    for e in kernels:
        a = e["args"]
        assert {"component", "phase", "bytes", "gbs", "correlation"} <= set(a)  # added beside Kineto's own args
        comps.add(a["component"])
        if a["bytes"] and e["dur"] > 0:  # GB/s = bytes / ns, from the event's own duration (us)
            assert abs(a["gbs"] - a["bytes"] / (e["dur"] * 1e3)) <= 0.05 + 1e-3 * a["gbs"]
    assert {"attention", "qkv_proj", "mlp_gate_up", "lm_head"} <= comps
    pid = next(e["pid"] for e in doc["traceEvents"] if e.get("ph") == "M" and e.get("name") == "process_name"
               and e["args"]["name"] == "attrib: components")
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e.get("pid") == pid and e.get("ph") == "M" and e.get("name") == "thread_name"}
    tracks: dict[int, list] = {}
    for e in doc["traceEvents"]:
        if e.get("pid") == pid and e.get("ph") == "X":
            tracks.setdefault(e["tid"], []).append(e)
    assert set(tracks) <= set(names) and names[0] == "steps" and len(tracks[0]) == 9  # 1 prefill + 8 decode
    assert sum(len(v) for t, v in tracks.items() if t != 0) == len(kernels)
    assert comps <= {n.split(" #")[0] for t, n in names.items() if t != 0}
    for evs in tracks.values():  # slices on one track never partly overlap (Perfetto needs them nested)
        evs.sort(key=lambda e: e["ts"])
        for a, b in zip(evs, evs[1:]):
            assert b["ts"] >= a["ts"] + a["dur"] - 1e-3
    # the export is still a trace attrib reads the same way
    before, after = analyze(LLAMA).to_dict(), analyze(out).to_dict()
    assert after["source"]["kernels"] == before["source"]["kernels"]
    assert [c["ms"] for c in after["phases"][1]["components"]] == [c["ms"] for c in before["phases"][1]["components"]]


def test_export_refuses_what_it_cannot_rewrite(tmp_path, capsys):
    db = FIXTURES / "rocprof" / "gfx1151_llamacpp_rocprofv3_csv" / "decode_kernel_trace.csv"
    assert main(["export", str(db), "-o", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "torch-profiler (Kineto)" in err[0]
    (tmp_path / "x.json").write_text("{}")
    assert main(["export", str(LLAMA), "-o", str(tmp_path / "x.json")]) == 2
    assert "exists; pass --force" in capsys.readouterr().err


def test_export_takes_the_capture_and_the_model_config(tmp_path, capsys):
    # the MI300 vLLM graph replay: without its capture 362 of 413 kernels have no bytes (no shapes in
    # a replay); with --capture 73; with --model too (gpt-oss-20b's config: the MXFP4 experts) 1.
    # Each kernel's bytes are the analysis's own (the same attribution, aligned by event index).
    cfg = tmp_path / "config.json"
    cfg.write_bytes(orjson.dumps(GPT_OSS))
    trace, cap = VLLM / "graph_execution.json.gz", VLLM / "graph_capture_rank_0.pt.trace.json.gz"
    nulls = []
    for extra in ([], ["--capture", str(cap)], ["--capture", str(cap), "--model", str(cfg)]):
        out = tmp_path / f"x{len(extra)}.json"
        assert main(["export", str(trace), "-o", str(out), *extra]) == 0
        kernels = [e for e in orjson.loads(out.read_bytes())["traceEvents"] if e.get("cat") == "kernel"]
        nulls.append(sum(e["args"]["gbs"] is None for e in kernels))
    assert len(kernels) == 413 and nulls == [362, 73, 1]
    a = attribution(trace, Options(capture=cap, budget=model_budget(cfg)))
    want = sorted(round(b) for b in a.kernels["bytes"].drop_nulls())
    assert sorted(e["args"]["bytes"] for e in kernels if e["args"]["bytes"] is not None) == want
