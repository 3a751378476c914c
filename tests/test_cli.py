"""`attrib analyze` end to end, and bad input: one line, exit code 2, no traceback."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import orjson

from attrib.cli import main

from conftest import EXAMPLE_TRACE, FIXTURES


def run(*args):
    return subprocess.run([sys.executable, "-m", "attrib.cli", *map(str, args)], capture_output=True, text=True)


def test_table_and_json(tmp_path):
    r = run("analyze", EXAMPLE_TRACE)
    assert r.returncode == 0, r.stderr
    assert "== decode: 6 steps, 4 tokens/step" in r.stdout
    out = tmp_path / "a.json"
    assert main(["analyze", str(EXAMPLE_TRACE), "--format", "json", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == "attrib.analysis/1"
    # an existing output is not overwritten without --force
    r = run("analyze", EXAMPLE_TRACE, "--format", "json", "-o", out)
    assert r.returncode == 2 and "exists; pass --force" in r.stderr
    r = run("analyze", EXAMPLE_TRACE, "--phase", "decode", "--format", "json", "-o", out, "--force")
    assert r.returncode == 0 and [p["phase"] for p in json.loads(out.read_text())["phases"]] == ["decode"]


def _bad(tmp_path):
    text = gzip.decompress(EXAMPLE_TRACE.read_bytes())
    doc = orjson.loads(text)
    doc["traceEvents"] = []
    mid = len(text) // 2
    cases = {
        "missing": (tmp_path / "nope.json", "no such file"),
        "directory": (tmp_path, "directory"),
        "other format": (FIXTURES / "LICENSE.TraceLens", "not a trace"),
        "empty events": (tmp_path / "empty.json", "no events"),
        "corrupt": (tmp_path / "corrupt.json", "not valid JSON"),
        "gzip cut early": (tmp_path / "early.json.gz", "truncated"),
        "other JSON": (tmp_path / "other.json", "not a torch-profiler"),
    }
    (tmp_path / "empty.json").write_bytes(orjson.dumps(doc))
    (tmp_path / "corrupt.json").write_bytes(text[:mid] + b"@@@ not json @@@" + text[mid:])
    (tmp_path / "early.json.gz").write_bytes(EXAMPLE_TRACE.read_bytes()[:200])
    (tmp_path / "other.json").write_bytes(orjson.dumps({"rows": doc["deviceProperties"]}))
    return cases


def test_bad_input_is_one_line_exit_2(tmp_path):
    for case, (path, words) in _bad(tmp_path).items():
        r = run("analyze", path)
        assert r.returncode == 2, (case, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in r.stderr, (case, r.stderr)
        assert str(path) in lines[0] and words in lines[0], (case, lines[0])


def test_truncated_trace_warns_and_still_analyzes(tmp_path):
    text = gzip.decompress(EXAMPLE_TRACE.read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[: len(text) * 7 // 10])
    r = run("analyze", cut)
    assert r.returncode == 0
    assert "warning" in r.stderr and "truncated" in r.stderr
    assert "== prefill" in r.stdout


def test_analyze_replay_with_its_capture(tmp_path):
    d = FIXTURES / "torch" / "mi300_vllm_prefilldecode_piecewise"
    out = tmp_path / "c.json"
    assert main(["analyze", str(d / "graph_execution.json.gz"), "--capture", str(d / "graph_capture_rank_0.pt.trace.json.gz"),
                 "--format", "json", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert any("361 of 361 replayed kernels matched" in n for n in doc["notes"])
    without = json.loads(run("analyze", d / "graph_execution.json.gz", "--format", "json").stdout)
    assert doc["coverage"]["bytes_known_share"] > without["coverage"]["bytes_known_share"]
    mixed = doc["phases"][0]
    experts = next(c for c in mixed["components"] if c["component"] == "moe_experts")
    # 24 layers x (2 matmul_ogs + the fused pad under moe_forward); the finalize scatter is moe_combine
    assert experts["evidence"].get("op") == 72 and experts["bytes"] > 0


def test_offline_analysis_never_imports_torch():
    code = ("import sys; from attrib.app import analyze_path; "
            f"analyze_path({str(EXAMPLE_TRACE)!r}); "
            "bad = [m for m in sys.modules if m == 'torch' or m.startswith('torch.')]; "
            "print('imported:', bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_command_lines_format_names_are_the_renderers():
    """attrib.report.formats (what the CLI offers before importing a renderer) names exactly the
    formats the registries render."""
    from attrib.report import compare_render, formats, renderers, slope_render

    assert formats.TABLE_FORMATS == renderers.TABLE_FORMATS
    assert formats.COMPARE_FORMATS == tuple(compare_render.FORMATS)
    assert formats.SLOPE_FORMATS == tuple(slope_render.FORMATS)
