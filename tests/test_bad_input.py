"""Bad arguments as a new user gives them, on real traces: one line, exit 2, nothing written or created.

And the Python API as a user calls it: typed keyword-only `attrib.analyze`, `arch="gfx1201"`, UsageError.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
import pydoc
import tomllib
import typing


import pytest

import attrib
import attrib.app
from attrib.cli import main
from attrib.errors import UsageError

from conftest import EXAMPLE_TRACE, FIXTURES, ROOT

# the smallest real eager trace with bytes priced (HF Qwen1.5-0.5B-Chat on an H100; one prefill phase)
H100 = FIXTURES / "torch" / "h100_hf_qwen1.5-0.5b-chat.json.gz"


def _one_line_exit_2(capsys, *args: str) -> str:
    code = main(["analyze", *map(str, args)])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and lines[0].startswith("attrib: error: "), err
    return lines[0]


@pytest.fixture
def no_analysis(monkeypatch):
    """Fails the test if the CLI gets as far as loading the trace (the checks must come before the work)."""
    calls = []
    # the CLI imports analyze_path from attrib.app inside each command (a fast start)
    monkeypatch.setattr(
        attrib.app, "analyze_path", lambda *a, **k: calls.append(a) or pytest.fail("analysis ran")
    )
    return calls


def test_misspelled_phase_lists_the_phases_found(capsys):
    line = _one_line_exit_2(capsys, EXAMPLE_TRACE, "--phase", "decod")
    # the trace's annotations are record_function("prefill") and ("decode") (tests/fixtures/README.md)
    assert str(EXAMPLE_TRACE) in line and "'decod'" in line and "phases found: decode, prefill" in line


@pytest.mark.parametrize("args, words", [
    (["--weight-bits", "-3"], "--weight-bits: weight bits = -3: must be a finite number in 1..32"),
    (["--weight-bits", "0"], "--weight-bits: weight bits = 0: must be a finite number in 1..32"),
    (["--context", "-5"], "--context = -5: must be a whole number in 1..16777216"),
    (["--context", "0"], "--context = 0: must be a whole number in 1..16777216"),
    (["--arch", "gfx9999"], "unknown arch 'gfx9999' (closest: gfx950, gfx942); known: "),
])
def test_bad_numbers_and_names_rejected_before_the_work(capsys, no_analysis, args, words):
    line = _one_line_exit_2(capsys, EXAMPLE_TRACE, *args)
    assert words in line
    assert not no_analysis


def test_arch_file_binary_or_not_toml(capsys, no_analysis, tmp_path):
    gz = FIXTURES / "torch" / "h200_dense_prefill_cudagraph_decode.json.gz"  # a real gzip file: not text
    line = _one_line_exit_2(capsys, EXAMPLE_TRACE, "--arch-file", gz)
    assert str(gz) in line and "not UTF-8" in line
    readme = FIXTURES / "README.md"  # UTF-8 text, not TOML
    line = _one_line_exit_2(capsys, EXAMPLE_TRACE, "--arch-file", readme)
    assert str(readme) in line and "not valid TOML" in line
    # the real device database cut in the middle of a table header
    db = (ROOT / "attrib" / "data" / "archs.toml").read_text()
    cut = tmp_path / "cut.toml"
    cut.write_text(db[: db.index("[", db.index("[", 1) + 1) + 3])
    line = _one_line_exit_2(capsys, EXAMPLE_TRACE, "--arch-file", cut)
    assert str(cut) in line and "not valid TOML" in line
    assert not no_analysis


def test_output_into_a_missing_folder_creates_nothing(capsys, no_analysis, tmp_path):
    out = tmp_path / "nonexistent_dir" / "x.json"
    line = _one_line_exit_2(capsys, EXAMPLE_TRACE, "--format", "json", "-o", out)
    assert str(out) in line and "does not exist" in line
    assert not out.parent.exists() and list(tmp_path.iterdir()) == []
    assert not no_analysis


def test_existing_output_is_left_unchanged_without_force(capsys, no_analysis, tmp_path):
    out = tmp_path / "a.json"
    before = (FIXTURES / "README.md").read_bytes()
    out.write_bytes(before)
    line = _one_line_exit_2(capsys, EXAMPLE_TRACE, "--format", "json", "-o", out)
    assert str(out) in line and "exists; pass --force" in line
    assert out.read_bytes() == before
    assert not no_analysis


def test_output_that_is_a_directory(capsys, no_analysis, tmp_path):
    line = _one_line_exit_2(capsys, EXAMPLE_TRACE, "-o", tmp_path)
    assert "is a directory" in line
    assert not no_analysis


def test_api_signature_is_typed_and_keyword_only():
    sig = inspect.signature(attrib.analyze)
    params = list(sig.parameters.values())
    assert params[0].name == "path" and params[0].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    names = [p.name for p in params[1:]]
    assert names == ["phase", "phase_map", "arch", "arch_file", "model", "weight_bits", "kv_dtype", "context",
                     "capture", "capture_batch", "top", "what_if", "baseline"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[1:])
    hints = typing.get_type_hints(attrib.analyze)
    assert set(hints) == {"path", "return", *names}
    # weight bits: one figure, "CLASS=BITS,..." or a mapping per tensor class (MXFP4 experts, bf16 attention)
    assert hints["weight_bits"] == float | str | Mapping[str, float] | None and hints["context"] == int | None
    text = pydoc.render_doc(attrib.analyze, renderer=pydoc.plaintext)
    # help() shows every option with its type (quoted: the module uses postponed annotations)
    for shown in ("*, phase: 'str | None' = None", "arch: 'str | Arch | None' = None",
                  "weight_bits: 'float | str | Mapping[str, float] | None' = None", "context: 'int | None' = None"):
        assert shown in text, shown
    assert "UsageError" in text  # the docstring says what bad input raises
    with pytest.raises(TypeError):
        attrib.analyze(H100, "decode")  # phase is keyword-only


def test_api_arch_by_name_measures_against_the_r9700():
    db = tomllib.loads((ROOT / "attrib" / "data" / "archs.toml").read_text())
    r9700 = next(v for v in db.values() if isinstance(v, dict) and v.get("name") == "AMD Radeon AI PRO R9700")
    doc = attrib.analyze(H100, arch="gfx1201").to_dict()
    dev = doc["device"]
    assert (dev["arch"], dev["name"], dev["detected_from"]) == ("gfx1201", "AMD Radeon AI PRO R9700", "override")
    assert dev["peak_bw_gbs"] == r9700["peak_bw_gbs"] and dev["roofline_bw_gbs"] == r9700["sustained_bw_gbs"]
    # every priced component's roofline is the R9700's: max(bytes / sustained GB/s, FLOPs / matrix TFLOP/s of
    # its dtype), from the database entry above (the document rounds ms to 4 decimals)
    comps = [c for c in doc["phases"][0]["components"] if c["bytes"]]
    assert len(comps) >= 5
    for c in comps:
        mem_ms = c["bytes"] / (r9700["sustained_bw_gbs"] * 1e9) * 1e3
        tflops = r9700["matrix_tflops"].get(c["dtype"]) if c["bound"] == "compute" else None
        expect = max(mem_ms, c["flops"] / (tflops * 1e12) * 1e3) if tflops else mem_ms
        assert c["roofline_ms"] == pytest.approx(expect, abs=2e-4), c


@pytest.mark.parametrize("kwargs, words", [
    ({"phase": "decod"}, "phases found: prefill"),
    ({"arch": "gfx9999"}, "unknown arch"),
    ({"weight_bits": -3}, "weight bits"),
    ({"weight_bits": 0}, "weight bits"),
    ({"context": -5}, "context"),
    ({"kv_dtype": "fp3"}, "unknown KV-cache dtype"),
])
def test_api_bad_arguments_raise_usage_error(kwargs, words):
    with pytest.raises(UsageError, match=words):
        attrib.analyze(H100, **kwargs)
