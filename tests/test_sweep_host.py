"""Sweeps and trends check their conditions (issue 37 item 4): a host-bound row whose host differs
from the others' (launch gaps beyond attrib.multi.host_check.BOUND, a declared load, launch calls
descheduled) is marked not comparable, says why, and crowns no winner.

Real H200 captures: tests/fixtures/captured/issue37/loadsweep_b{1,4}_p{128,512} (the p512 ones
while 32 CPU-spinning processes loaded the 16-CPU host) and the older tests/fixtures/captured/sweep
grid. Truths come from the raw trace events and the stamps."""

from __future__ import annotations

import gzip
import json
import shutil
import statistics
from pathlib import Path

import pytest

from attrib.analysis.model import Analysis
from attrib.cli import main
from attrib.multi import host_check
from attrib.sweep import run

ROOT = Path(__file__).resolve().parents[1]
CAP = ROOT / "tests/fixtures/captured"
LOAD = [CAP / f"issue37/loadsweep_b{b}_p{p}.pt.trace.json.gz" for b in (1, 4) for p in (128, 512)]
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")


def _raw(trace: Path) -> dict:
    """From the raw events of the decode steps: the median start-to-start gap of consecutive
    kernel-launch calls (us) and the launch calls that took 1 ms or more."""
    ev = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    steps = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("decode")]
    calls = sorted((e for e in ev if e.get("cat") == "cuda_runtime" and e["name"] in LAUNCHES),
                   key=lambda e: e["ts"])
    gaps, long_calls = [], 0
    for s in steps:
        mine = [e for e in calls if s["ts"] <= e["ts"] < s["ts"] + s["dur"]]
        gaps += [b["ts"] - a["ts"] for a, b in zip(mine, mine[1:])]
        long_calls += sum(e["dur"] >= 1000 for e in mine)
    return {"gap_us": statistics.median(gaps), "long_calls": long_calls}


def _stamp(trace: Path) -> dict:
    return json.loads(Path(f"{trace}.attrib.json").read_text())


@pytest.fixture(scope="module")
def swept():
    res = run(LOAD, jobs=1)
    assert res.failed == ()
    return res.table


def test_the_stamps_and_raw_events_say_which_captures_ran_loaded():
    """The truth the checks are held to: the p512 captures ran beside 32 spinning processes, and
    their raw events show it (b1_p512's launch gaps 2x the unloaded ones', launch calls of ~4
    ms)."""
    raw = {t.name.split(".")[0]: _raw(t) for t in LOAD}
    for t in LOAD:
        load = _stamp(t)["extra"]["host_load"]
        assert load["spinners"] == (32 if "p512" in t.name else 0) and load["nproc"] == 16
    idle = [raw["loadsweep_b1_p128"]["gap_us"], raw["loadsweep_b4_p128"]["gap_us"]]
    assert max(idle) / min(idle) < 1.2                        # one host state: 20.2, 23.7 us
    assert raw["loadsweep_b1_p512"]["gap_us"] > 1.7 * max(idle)   # 41.0 us
    assert raw["loadsweep_b1_p128"]["long_calls"] == raw["loadsweep_b4_p128"]["long_calls"] == 0
    # the OS took the CPU inside a launch call 4 and 7 times over 12 steps
    assert raw["loadsweep_b1_p512"]["long_calls"] == 4
    assert raw["loadsweep_b4_p512"]["long_calls"] == 7


def test_loaded_rows_are_flagged_and_the_unloaded_are_not(swept):
    for r in swept.iter_rows(named=True):
        loaded = "p512" in r["trace"]
        assert (r["comparable"] == "yes") != loaded, (r["trace"], r["phase"], r["comparable"])
        if loaded:
            assert r["not_comparable"].startswith("stamp: host loaded (32 CPU-spinning")
            assert r["host_share"] > host_check.HOST_SHARE
    decode = {Path(r["trace"]).name.split(".")[0]: r
              for r in swept.iter_rows(named=True) if r["phase"] == "decode"}
    # b1_p512's launch gaps are beyond the bound of the unloaded rows'; both loaded decodes had
    # launch calls descheduled (the ledger's cudaLaunchKernel rows of ~4 ms)
    assert "host slower: launch gaps 37 us" in decode["loadsweep_b1_p512"]["not_comparable"]
    for name in ("loadsweep_b1_p512", "loadsweep_b4_p512"):
        assert "descheduled" in decode[name]["not_comparable"] and decode[name]["stalls_ms"] > 1
    raw = _raw(LOAD[0])["gap_us"]
    assert decode["loadsweep_b1_p128"]["gap_us"] == pytest.approx(raw, rel=0.15)


def test_the_routing_rule_crowns_no_winner_from_them(swept):
    from attrib.multi.sweep import routing

    for r in routing(swept).iter_rows(named=True):
        if r["prompt"] == 512:
            assert r["winner"] is None and r["not_comparable"] == 1 and r["achieved_tok_s"] is None
        else:
            assert r["winner"] == "the one configuration" and r["not_comparable"] == 0


def test_without_the_stamp_the_trace_alone_flags_the_descheduled_rows(tmp_path):
    """The stamp's host_load removed (a derived copy): the decode rows still show the load."""
    copies = []
    for t in LOAD:
        dst = tmp_path / t.name
        shutil.copy(t, dst)
        stamp = _stamp(t)
        del stamp["extra"]["host_load"]
        Path(f"{dst}.attrib.json").write_text(json.dumps(stamp))
        copies.append(dst)
    table = run(copies, jobs=1).table
    got = {(Path(r["trace"]).name.split(".")[0], r["phase"]): r["comparable"]
           for r in table.iter_rows(named=True)}
    assert got[("loadsweep_b1_p512", "decode")] == "no: slower+stalls"
    assert got[("loadsweep_b4_p512", "decode")] == "no: stalls"
    assert got[("loadsweep_b1_p512", "prefill")] == "no: stalls"
    # the b4_p512 prefill (one step, no launch call descheduled) shows nothing to go by
    assert got[("loadsweep_b4_p512", "prefill")] == "yes"
    assert all(v == "yes" for (n, _), v in got.items() if "p128" in n)


def test_the_older_sweep_grid_flags_the_sdpa_rows_captured_on_a_slower_host():
    """tests/fixtures/captured/sweep: the sdpa decode rows but b8_p512 ran with launch gaps of
    35-37 us against 22-30 us for the rest (the ledger's medians; the raw events split the same)."""
    traces = sorted((CAP / "sweep").glob("*.pt.trace.json.gz"))
    table = run(traces, jobs=2).table
    flagged = sorted(Path(r["trace"]).name.split(".")[0] for r in table.iter_rows(named=True)
                     if r["comparable"] != "yes")
    assert flagged == [f"sweep_sdpa_{s}" for s in ("b1_p128", "b1_p512", "b4_p128", "b4_p512",
                                                   "b8_p128")]
    assert set(table.filter(table["comparable"] != "yes")["phase"]) == {"decode"}
    raw = {t.name.split(".")[0]: _raw(t)["gap_us"] for t in traces}
    slow = [raw[n] for n in flagged]
    rest = [v for n, v in raw.items() if n not in flagged]
    assert min(slow) > max(rest)   # raw: 38.2-40.1 us against 23.6-32.9 us
    from attrib.multi.sweep import routing

    decode = routing(table).filter(routing(table)["phase"] == "decode")
    assert decode["winner"].to_list() == [None] * 5 + ["backend=transformers-sdpa"]


def test_every_output_says_it(tmp_path, capsys, analysed_once):
    """JSON, the table, markdown and HTML of one sweep (its four traces analysed once)."""
    args = ["sweep", *map(str, LOAD), "-j", "1"]
    assert main([*args, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["host_check"]["bound"] == host_check.BOUND
    assert doc["host_check"]["common"]["decode"]["rows"] == 2
    assert [r["comparable"] for r in doc["rows"]].count("yes") == 4
    assert sum(r["winner"] is None for r in doc["routing"]) == 4
    assert main(args) == 0
    text = capsys.readouterr().out
    assert text.count("! not comparable: ") == 4 and text.count("decode !") == 2
    assert "routing: no winner where a shape's rows are not comparable" in text
    for fmt in ("md", "html"):
        out = tmp_path / f"s.{fmt}"
        assert main([*args, "-o", str(out)]) == 0
        body = out.read_text()
        assert body.count("not comparable: ") == 4 and "stamp: host loaded" in body


def test_trend_does_not_compare_a_file_on_a_loaded_host(tmp_path):
    """b1_p128 then b1_p512 (captured in that order, one token a step): the second is not compared;
    its label and flag say why."""
    docs = []
    for t in LOAD[:2]:
        out = tmp_path / f"{t.name}.json"
        assert main(["analyze", str(t), "--format", "json", "-o", str(out)]) == 0
        docs.append(Analysis.load(out))  # the documents analyze wrote
    from attrib.multi.trend import trend
    from attrib.report.trend_render import render

    doc = trend(docs)
    second = doc["rows"][1]
    assert second["vs_previous"]["verdict"] == "not comparable: host"
    assert second["vs_previous"]["label"].startswith("not comparable: host +")
    assert second["changes"][0].startswith("not comparable: stamp: host loaded")
    assert doc["changed"] == [second["path"]] and "not comparable: host" in render(doc, 100)


@pytest.mark.parametrize("value, words", [
    ({"spinners": 32, "nproc": 16}, "32 CPU-spinning processes"), ({"spinners": 0}, None),
    ("none", None), ("2x nproc spinners", "2x nproc spinners"), (0, None), (3, "load 3"),
    (True, "loaded"), (None, None)])
def test_declared_load_reads_the_stamp(value, words):
    stamp = _stamp(LOAD[0])
    stamp["extra"]["host_load"] = value
    assert host_check.declared_load(stamp) == words
