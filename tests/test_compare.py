"""`attrib compare`: statistics over steps, verdicts, host-side vs kernel changes, --gate, provenance diff,
the JSON contract. Candidates with a known change are derived inside the test from a real trace."""

from __future__ import annotations

import gzip
import json
from functools import cache

import orjson
import pytest
from msgspec.structs import replace

from attrib.app import analyze
from attrib.cli import main
from attrib.multi.compare import compare, stats

from conftest import FIXTURES

LLAMA = FIXTURES / "captured" / "hf_llama_cuda_b8_p512.pt.trace.json.gz"
# each (trace, options) analysed once for the module: its tests compare the analyses many ways
pytestmark = pytest.mark.usefixtures("module_analysed_once")
ROW_KEYS = {"base_ms", "cand_ms", "delta_ms", "delta_pct", "p_value", "ci_low_ms", "ci_high_ms", "verdict"}
GPU = ("kernel", "gpu_memcpy", "gpu_memset")


def _dilated(src, dst, factor, kernels_too):
    """The real trace with time stretched by `factor` from its first event: every timestamp, and the
    duration of every event (kernels' only when kernels_too: else only host time grows)."""
    doc = orjson.loads(gzip.decompress(src.read_bytes()))
    t0 = min(e["ts"] for e in doc["traceEvents"] if isinstance(e.get("ts"), (int, float)))
    for e in doc["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = t0 + (e["ts"] - t0) * factor
        if isinstance(e.get("dur"), (int, float)) and (kernels_too or e.get("cat") not in GPU):
            e["dur"] = e["dur"] * factor
    dst.write_bytes(orjson.dumps(doc))
    for side in src.parent.glob(src.name + ".attrib.json"):  # keep the provenance stamp: same run, same stack
        (dst.parent / (dst.name + ".attrib.json")).write_bytes(side.read_bytes())
    return dst


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    return _dilated(LLAMA, tmp_path_factory.mktemp("cmp") / "slow.json", 1.25, kernels_too=True)


@pytest.fixture(scope="module")
def host_slow(tmp_path_factory):
    return _dilated(LLAMA, tmp_path_factory.mktemp("cmp") / "host.json", 1.25, kernels_too=False)


def _json(tmp_path, *args):
    out = tmp_path / "c.json"
    rc = main(["compare", *map(str, args), "--format", "json", "-o", str(out), "--force"])
    return rc, json.loads(out.read_text())


def _rows(doc, phase):
    step, *comps = doc["phases"][phase]
    return step, {r["component"]: r for r in comps}


def test_same_trace_twice_no_change_and_gate_passes(tmp_path):
    rc, doc = _json(tmp_path, LLAMA, LLAMA, "--gate", "15")
    assert rc == 0 and doc["gate"]["failed_phases"] == [] and doc["gate"]["exit_code"] == 0
    assert doc["schema"] == "attrib.compare/1" and doc["matched_baseline"]
    assert doc["run_to_run_variance"].startswith("unknown: one trace per side")
    for phase, rows in doc["phases"].items():
        assert "phase" in rows[0] and all("component" in r for r in rows[1:])
        for r in rows:
            assert ROW_KEYS <= set(r) and r["delta_ms"] == 0
            # one prefill step per side: nothing to test against, no zero-width CI
            one = r["n_base"] == 1 and r["n_cand"] == 1
            assert r["verdict"] == ("not testable" if one else "no significant change"), (phase, r)
            assert (r["ci_low_ms"] is None) == one
    assert [r["n_base"] for r in doc["phases"]["prefill"]][:1] == [1]


def test_everything_slower_is_a_significant_kernel_regression(tmp_path, slow):
    rc, doc = _json(tmp_path, LLAMA, slow, "--gate", "15")
    step, comps = _rows(doc, "decode")
    assert rc == 1 and doc["gate"]["failed_phases"] == ["decode"]
    assert doc["gate"]["reasons"]["decode"] == ["GPU kernel time per token +25.0%"]
    # every time x1.25: +25 %, Mann-Whitney on 8 vs 8 fully separated steps: p = 2 / C(16, 8) = 1.55e-4
    assert step["delta_pct"] == pytest.approx(25, abs=0.5)
    assert step["p_value"] == pytest.approx(2 / 12870, rel=0.05) and 0 < step["ci_low_ms"] < step["ci_high_ms"]
    # but these decode steps are 93% host time: the kernels' +25% is 0.28 ms of the +4.1 ms, and a
    # uniform +25% of host time is what a second run of the same job can give: the step as a whole is
    # inconclusive with one trace per side, the kernel time is not (it is stable between runs)
    assert step["verdict"] == "inconclusive" and step["kernel_ms"]["verdict"] == "slower"
    level = doc["summary"]["decode"]["run_level"]
    assert level["device_ms"] == pytest.approx(0.25 * level["device_bound_ms"] / 0.03, rel=0.02)
    assert abs(level["beyond_ms"]) < 0.03 * step["base_ms"] and level["runs"] >= 3
    for name in ("mlp_gate_up", "norm", "qkv_proj"):
        assert comps[name]["verdict"] == "slower" and comps[name]["delta_pct"] == pytest.approx(25, abs=1)
    # the other direction is faster and passes the gate
    rc, doc = _json(tmp_path, slow, LLAMA, "--gate", "15")
    step, _ = _rows(doc, "decode")
    assert rc == 0 and step["kernel_ms"]["verdict"] == "faster" and doc["gate"]["exit_code"] == 0
    # a gate above the change passes
    rc, _ = _json(tmp_path, LLAMA, slow, "--gate", "30")
    assert rc == 0


def test_host_side_change_is_not_a_kernel_regression(tmp_path, host_slow):
    rc, doc = _json(tmp_path, LLAMA, host_slow, "--gate", "15")
    step, comps = _rows(doc, "decode")
    assert step["verdict"] == "inconclusive" and step["delta_pct"] == pytest.approx(25, abs=0.5)
    assert step["kernel_ms"]["verdict"] == "no significant change" and step["cause"].startswith("host-side")
    assert all(r["verdict"] == "no significant change" for r in comps.values())
    # one trace per side: a +25% of host time is within the run-to-run bound, so the gate reports it and passes
    assert rc == 0 and "inconclusive" in doc["gate"]["not_gated"]["decode"]
    # runs on each side: the host-side slowdown holds across them, and the gate fails on it
    rc, doc = _json(tmp_path, "-b", LLAMA, "-b", LLAMA, "-c", host_slow, "-c", host_slow, "--gate", "15")
    assert rc == 1 and doc["gate"]["reasons"]["decode"] == ["step time per token +25.0%"]
    assert "run_level" not in doc["summary"]["decode"]


def test_several_traces_per_side_include_run_to_run_variance(tmp_path, slow):
    rc, doc = _json(tmp_path, "-b", LLAMA, "-b", LLAMA, "-c", slow, "-c", slow)
    assert rc == 0 and doc["run_to_run_variance"].startswith("included: 2 base and 2 candidate")
    step, _ = _rows(doc, "decode")
    assert step["verdict"] == "slower"


def test_mismatched_provenance_is_not_a_matched_baseline(tmp_path, capsys):
    mi300 = FIXTURES / "torch" / "mi300_hf_qwen1.5-0.5b-chat.json.gz"
    h100 = FIXTURES / "torch" / "h100_hf_qwen1.5-0.5b-chat.json.gz"
    assert main(["compare", str(mi300), str(h100)]) == 0
    out = capsys.readouterr().out
    assert "NOT A MATCHED BASELINE: arch: gfx942 vs sm_90" in out and "no provenance stamp" in out
    for fmt in ("md", "html"):
        path = tmp_path / f"c.{fmt}"
        assert main(["compare", str(mi300), str(h100), "-o", str(path)]) == 0
        assert "NOT A MATCHED BASELINE" in path.read_text()


def test_compare_usage_errors(capsys):
    assert main(["compare", str(LLAMA)]) == 2
    assert main(["compare", str(LLAMA), str(LLAMA), "-b", str(LLAMA)]) == 2
    assert "not both" in capsys.readouterr().err


def test_stats_of_identical_and_shifted_values():
    base = [[1.0, 1.1, 0.9, 1.05, 0.95, 1.02]]
    same = stats(base, base)
    assert same.p_value == 1 and same.verdict == "no significant change"
    shifted = stats(base, [[x + 0.5 for x in base[0]]])
    # medians 1.01 and 1.51: +0.5 ms (+49.5 %), 6 vs 6 fully separated: p = 2 / C(12, 6) = 0.00216
    assert shifted.delta_ms == pytest.approx(0.5) and shifted.p_value == pytest.approx(2 / 924, rel=0.01)
    assert shifted.verdict == "slower" and shifted.ci_low_ms > 0
    # a 1 % change is below the default minimum effect: no verdict of change even if consistent
    tiny = stats(base, [[x * 1.01 for x in base[0]]])
    assert tiny.verdict == "no significant change"


def _rocpd_with_kernels_slowed(tmp_path, factor: float):
    """The real R9700 rocpd database, decompressed, with every kernel's duration multiplied by factor
    (start kept) inside the test: the uniform slow state P22 describes."""
    import shutil
    import sqlite3

    out = tmp_path / f"slow_{factor:g}_results.db"
    with gzip.open(FIXTURES / "rocprof/gfx1201_llamacpp_rocpd_rocm7.2/32432_results.db.gz") as src, out.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    con = sqlite3.connect(out)
    [table] = [r[0] for r in con.execute("select name from sqlite_master where type='table' "
                                         "and name like 'rocpd_kernel_dispatch%'")]
    con.execute(f'update "{table}" set "end" = start + cast(("end" - start) * ? as integer)', (factor,))
    con.commit()
    con.close()
    return out


def test_compare_runs_the_baseline_rule_p22_on_a_real_pair(tmp_path, capsys) -> None:
    base = FIXTURES / "rocprof/gfx1201_llamacpp_rocpd_rocm7.2/32432_results.db.gz"
    out = tmp_path / "cmp.json"
    main(["compare", str(base), str(_rocpd_with_kernels_slowed(tmp_path, 1 / 0.65)), "--format", "json", "-o", str(out)])
    [f] = orjson.loads(out.read_bytes())["findings"]
    assert f["rule"].startswith("P22") and f["ms_per_step"] > 0
    assert main(["compare", str(base), str(base)]) == 0
    assert "finding P22" not in capsys.readouterr().out


@cache
def _doc(path):
    return analyze(path)


def test_gate_on_a_mismatched_pair_is_not_comparable(capsys):
    """MI300 vs H100 of the same model: the stamps differ in arch, so --gate exits 3 whatever the
    numbers; --allow-mismatch gates on them (0 or 1, what the numbers say)."""
    mi300 = FIXTURES / "torch" / "mi300_hf_qwen1.5-0.5b-chat.json.gz"
    h100 = FIXTURES / "torch" / "h100_hf_qwen1.5-0.5b-chat.json.gz"
    b, c = [_doc(mi300)], [_doc(h100)]
    for pct in (1, 1000):  # a gate every change fails, and one nothing fails
        g = compare(b, c, gate_pct=pct).gate
        assert g.exit_code == 3 and g.not_comparable == "not a matched baseline (arch differ)"
    assert compare(b, c, gate_pct=1000, allow_mismatch=True).gate.exit_code == 0
    g = compare(b, c, gate_pct=1, allow_mismatch=True).gate
    assert g.exit_code == (1 if g.failed_phases else 0) and g.allow_mismatch
    assert main(["compare", str(mi300), str(h100), "--gate", "1000"]) == 3
    out = capsys.readouterr().out
    assert "NOT COMPARABLE (exit 3)" in out and "--allow-mismatch" in out
    # without --gate the exit is 0: a comparison is not a gate
    assert compare(b, c).gate is None


def test_none_spelled_differently_in_stamps_is_no_mismatch():
    """The real stamp says quantization "none" and speculative "none"; the candidate's copy says
    null and "None": a matched baseline. A real difference (batch 8 -> 4) still is not."""
    base = _doc(FIXTURES / "captured" / "sdpa_attn_a.pt.trace.json.gz")
    cand = _doc(FIXTURES / "captured" / "sdpa_attn_b.pt.trace.json.gz")
    prov = dict(cand.provenance)
    assert prov["quantization"] == "none" and prov["speculative"] == "none"
    same = replace(cand, provenance=prov | {"quantization": None, "speculative": "None"})
    cmp = compare([base], [same], gate_pct=15)
    assert cmp.matched_baseline and cmp.gate.exit_code != 3
    other = replace(cand, provenance=prov | {"quantization": None, "batch": 4})
    assert [m["key"] for m in compare([base], [other]).provenance_diff["mismatch"]] == ["batch"]


@pytest.mark.parametrize("width", [80, 100, 160])
def test_the_compare_table_fits_the_terminal(width):
    """Every line of the terminal table fits; columns drop in DROP's order, the verdict stays."""
    from attrib.report.compare_render import DROP, HEAD, render_table

    base = _doc(FIXTURES / "captured" / "sdpa_attn_a.pt.trace.json.gz")
    cand = _doc(FIXTURES / "captured" / "eager_attn.pt.trace.json.gz")
    text = render_table(compare([base], [cand]), width)
    lines = text.splitlines()
    assert max(map(len, lines)) <= width
    head = next(x for x in lines if x.lstrip().startswith("row "))
    kept = [h for h in HEAD if h in head]
    assert "verdict" in kept and "delta %" in kept
    dropped = [h for h in HEAD if h not in kept]
    assert set(dropped) == set(DROP[: len(dropped)])
    assert (width == 160) == (not dropped)
