"""`attrib sweep` (#22 item 3) over the H200 batch x prompt x attention grid in
tests/fixtures/captured/sweep/ (examples/sweep_capture.py, stamped by collectors.capture)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import attrib
from attrib.cli import main

ROOT = Path(__file__).resolve().parents[1]
GRID = ROOT / "tests/fixtures/captured/sweep"
TRACES = sorted(GRID.glob("*.pt.trace.json.gz"))
# both backends at three shapes (the grid's corners and middle): what the tests analyse, to stay fast
SHAPES = ("b1_p128", "b4_p512", "b8_p512")
PICKED = [t for t in TRACES if t.name.split("_", 2)[2].startswith(SHAPES)]


def cli_json(*args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "attrib.cli", "sweep", *args, "--format", "json"],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


@pytest.fixture(scope="module")
def pooled() -> dict:
    """Six traces of the grid swept by the CLI with a pool of two workers."""
    return cli_json(*map(str, PICKED), "--jobs", "2")


def test_folder_is_the_captured_batch_by_prompt_by_backend_grid():
    from attrib.sweep import traces

    assert traces([GRID]) == TRACES  # the stamps, logs beside them are not traces
    assert len(TRACES) == 12
    stamps = [json.loads(Path(f"{t}.attrib.json").read_text()) for t in TRACES]
    grid = {(s["extra"]["backend"], s["batch"], s["extra"]["prompt"]) for s in stamps}
    assert grid == {(f"transformers-{a}", b, p) for a in ("sdpa", "eager")
                    for b in (1, 4, 8) for p in (128, 512)}


def test_each_row_is_its_traces_analyze(pooled):
    assert pooled["schema"] == "attrib.sweep/1"
    rows = pooled["rows"]
    assert len(PICKED) == 6
    assert [r["trace"] for r in rows] == [str(t) for t in PICKED for _ in (0, 1)]
    for trace in PICKED:
        doc = attrib.analyze(trace).to_dict()
        stamp = json.loads(Path(f"{trace}.attrib.json").read_text())
        mine = [r for r in rows if r["trace"] == str(trace)]
        assert [r["phase"] for r in mine] == [p["phase"] for p in doc["phases"]]
        for row, ph in zip(mine, doc["phases"]):
            assert row["achieved_tok_s"] == ph["achieved_tok_s"]
            assert row["ceiling_tok_s"] == ph["ceiling_tok_s"]
            assert row["gb_per_token"] == ph["gb_per_token"]
            assert row["step_ms"] == ph["step_ms"]["mean"]
            causes = [r for r in ph["ledger"] if r["cause"] != "profiler"]  # a caveat, no cause
            top = max(causes, key=lambda r: r["ms_per_step"])
            assert row["top_cause"] == f"{top['cause']}: {top['what']}"
            assert (row["batch"], row["prompt"]) == (stamp["batch"], stamp["extra"]["prompt"])
            assert row["backend"] == stamp["extra"]["backend"]
            assert row["context"] == stamp["context_length"] == row["prompt"] + 4
            assert row["arch"] == doc["device"]["arch"] == "sm_90"


def test_decode_tok_s_is_tokens_over_step_time(pooled):
    for r in pooled["rows"]:
        if r["phase"] == "decode":  # one new token per sequence each step
            assert r["achieved_tok_s"] == pytest.approx(r["batch"] / r["step_ms"] * 1e3, rel=1e-3)


def test_routing_names_the_fastest_configuration_of_each_shape(pooled):
    """Of comparable rows only (attrib.multi.host_check; tests/test_sweep_host.py): the sdpa
    decode rows at b1_p128 and b4_p512 ran on a host whose launch gaps were 1.6x the others'."""
    from attrib.multi.sweep import routing, table

    df = table(pooled["rows"])
    rule = routing(df)
    assert rule.height == 6  # 3 shapes x 2 phases
    crowned = 0
    for r in rule.iter_rows(named=True):
        same = [x for x in pooled["rows"] if (x["batch"], x["prompt"], x["phase"])
                == (r["batch"], r["prompt"], r["phase"])]
        if any(x["comparable"] != "yes" for x in same):
            assert r["winner"] is None and r["not_comparable"] == 1
            continue
        best = max(same, key=lambda x: x["achieved_tok_s"])
        assert r["configurations"] == 2 and r["trace"] == best["trace"]
        assert r["winner"] == f"backend={best['backend']}"  # micro_batch equals batch here
        crowned += 1
    assert crowned == 4  # three prefills and the b8_p512 decode


def test_ray_gives_the_pools_table(pooled):
    import ray  # a dev dependency: the test runs in CI, never skipped

    from attrib.sweep import run

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        res = run(PICKED[:2], use_ray=True)
    finally:
        ray.shutdown()
    assert res.failed == ()
    pool = pl.DataFrame(pooled["rows"][:4], schema=res.table.schema)
    assert res.table.height == 4 and res.table.equals(pool)


def test_a_bad_trace_is_one_line_and_skipped(tmp_path, capsys):
    bad = tmp_path / "cut.pt.trace.json.gz"
    bad.write_bytes(gzip.compress(gzip.decompress(TRACES[0].read_bytes())[:5000]))
    out = tmp_path / "t.csv"
    assert main(["sweep", str(bad), str(TRACES[0]), "-j", "1", "-o", str(out)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    skipped = [e for e in err if e.startswith("attrib: skipped: ")]
    assert len(skipped) == 1 and str(bad) in skipped[0]
    table = pl.read_csv(out)
    assert table["trace"].unique().to_list() == [str(TRACES[0])] and table.height == 2
    assert main(["sweep", str(bad), "-j", "1"]) == 2  # nothing analysed: an error


def test_outputs_refuse_overwrite_and_round_trip(tmp_path, capsys):
    out = tmp_path / "t.parquet"
    out.write_bytes(b"mine")
    args = ["sweep", str(TRACES[0]), str(TRACES[-1]), "-j", "1", "-o", str(out)]
    assert main(args) == 2 and out.read_bytes() == b"mine"
    assert "exists; pass --force" in capsys.readouterr().err
    assert main([*args, "--force", "-j", "2", "--arch", "h200"]) == 0  # options reach the pool
    df = pl.read_parquet(out)
    assert df.height == 4 and df["trace"].to_list() == [str(TRACES[0])] * 2 + [str(TRACES[-1])] * 2
    # no --format: the one -o's suffix names (none: the table), as every command does
    assert main(["sweep", str(TRACES[0]), "-o", str(tmp_path / "t.xlsx")]) == 2
    assert main(["sweep", str(TRACES[0]), "-j", "1", "-o", str(tmp_path / "t.txt")]) == 0
    assert "decode" in (tmp_path / "t.txt").read_text()


def test_reports_hold_the_routing_rule_and_a_plot_per_varying_key(tmp_path, analysed_once):
    """The markdown and the HTML page of one sweep (its two traces analysed once)."""
    pair = [str(t) for t in TRACES if "_b1_p128" in t.name]  # eager, sdpa: only backend varies
    md = tmp_path / "s.md"
    assert main(["sweep", *pair, "-j", "1", "-o", str(md)]) == 0
    text = md.read_text()
    assert "## Routing rule" in text and "backend=transformers-eager" in text
    from attrib.report import plots

    svgs = sorted(p.name for p in tmp_path.glob("s.*.svg"))
    if plots.available():
        assert svgs == ["s.vs-backend.svg"]  # the four figures as panels of one plot
        assert all(f"]({n})" in text for n in svgs)
    html = tmp_path / "s.html"
    assert main(["sweep", *pair, "-j", "1", "-o", str(html)]) == 0
    assert html.read_text().count("<svg") == (1 if plots.available() else 0)
