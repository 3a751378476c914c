"""`--format csv|parquet|xlsx`: the analysis' tables for users' own tools, read back with polars
equal to the tables attrib built; a folder with index.json; refusals before any work, nothing
created on error; xlsx without its extra is one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from attrib.app import analyze
from attrib.cli import main
from attrib.report.tables import NAMES, SCHEMA_ID, tables

from conftest import FIXTURES

TRACE = FIXTURES / "captured" / "sdpa_attn_a.pt.trace.json.gz"


@pytest.fixture(scope="module")
def want():
    return tables(analyze(TRACE))


def test_csv_and_parquet_folders_read_back_equal(tmp_path, want):
    an = analyze(TRACE)
    dec = an.phase("decode")
    # the tables hold the analysis' figures: a row per component and step, the ledger rows
    assert want["components"].filter(pl.col("phase") == "decode").height == len(dec.component_rows)
    steps = want["steps"].filter(pl.col("phase") == "decode")
    assert steps["step_ms"].to_list() == list(dec.per_step.step_ms)
    led = want["step_ledger"].filter(pl.col("phase") == "decode")
    # each step's ledger rows sum to its window
    per = led.group_by("step").agg(pl.col("ms_per_step").sum()).sort("step")
    assert per["ms_per_step"].to_list() == pytest.approx(
        [s for s in dec.per_step.step_ms if s is not None], abs=2e-3)
    for fmt, read in (("csv", pl.read_csv), ("parquet", pl.read_parquet)):
        out = tmp_path / fmt
        assert main(["analyze", str(TRACE), "--format", fmt, "-o", str(out)]) == 0
        idx = json.loads((out / "index.json").read_text())
        assert idx["schema"] == SCHEMA_ID and [t["name"] for t in idx["tables"]] == list(NAMES)
        assert sorted(p.name for p in out.iterdir()) == sorted(
            ["index.json"] + [f"{n}.{fmt}" for n in NAMES])
        for t in idx["tables"]:
            df = want[t["name"]]
            assert t["rows"] == df.height and [c["name"] for c in t["columns"]] == df.columns
            got = read(out / t["file"], schema=df.schema) if fmt == "csv" else read(out / t["file"])
            assert_frame_equal(got, df)


def test_xlsx_workbook_reads_back_equal(tmp_path, want):
    out = tmp_path / "t.xlsx"
    assert main(["report", str(TRACE), "-o", str(out)]) == 0
    sheets = pl.read_excel(out, sheet_id=0)
    assert list(sheets) == ["index", *NAMES]
    assert sheets["index"]["rows"].to_list() == [want[n].height for n in NAMES]
    for n in NAMES:
        got, df = sheets[n], want[n]
        assert got.columns == df.columns and got.height == df.height
        nums = [c for c, t in df.schema.items() if t.is_numeric()]
        assert_frame_equal(got.select(nums).cast(pl.Float64), df.select(nums).cast(pl.Float64),
                           check_exact=False, rel_tol=1e-9)


def test_refusals_and_nothing_created_on_error(tmp_path, capsys):
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("the user's")
    assert main(["analyze", str(TRACE), "--format", "csv", "-o", str(full)]) == 2
    assert "not empty; pass --force" in capsys.readouterr().err
    assert [p.name for p in full.iterdir()] == ["mine.txt"]
    # with --force: the tables go in beside the user's file, which stays
    assert main(["analyze", str(TRACE), "--format", "parquet", "-o", str(full), "--force"]) == 0
    assert (full / "mine.txt").read_text() == "the user's" and (full / "index.json").exists()
    # a bad trace: exit 2 and no folder (nor a temporary one) left
    bad = tmp_path / "bad.json"
    bad.write_bytes(TRACE.read_bytes()[:4000])
    out = tmp_path / "new"
    assert main(["analyze", str(bad), "--format", "csv", "-o", str(out)]) == 2
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "full"]
    assert main(["analyze", str(TRACE), "--format", "csv"]) == 2
    assert "give -o DIR" in capsys.readouterr().err
    assert main(["analyze", str(TRACE), "--format", "csv", "-o", str(tmp_path / "no" / "d")]) == 2
    assert not (tmp_path / "no").exists()


def test_xlsx_without_its_extra_is_one_line(tmp_path):
    out = tmp_path / "t.xlsx"
    code = ("import sys; sys.modules['xlsxwriter'] = None; from attrib.cli import main; "
            f"sys.exit(main(['analyze', {str(TRACE)!r}, '--format', 'xlsx', '-o', {str(out)!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 2 and not out.exists()
    assert r.stderr.strip().splitlines() == [
        "attrib: error: xlsx needs the xlsx extra: pip install 'attrib[xlsx]' (xlsxwriter)"]
