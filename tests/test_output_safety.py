"""Issue 39, data loss: an output is never an input of the command (any spelling, a symlink either
way, --force or not), and an output that is not a regular file keeps its type (a FIFO and a device
are written through; a symlink's target is replaced, the link kept). Every input is a copy of the
repo's demo trace made inside the test."""

from __future__ import annotations

import os
import re
import shutil
import threading
from pathlib import Path

import pytest

from attrib.cli import main

from conftest import EXAMPLE_TRACE, FIXTURES


@pytest.fixture
def trace(tmp_path):
    t = tmp_path / "run.json.gz"
    shutil.copy(EXAMPLE_TRACE, t)
    return t


def _refused(capsys, args, out, src) -> None:
    code = main([str(a) for a in args])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err == (f"attrib: error: {out}: is an input of this command ({src}); attrib never "
                   "writes over its input: give the output another name")


@pytest.mark.parametrize("command", [["analyze"], ["analyze", "--format", "json"],
                                     ["report", "--format", "md"], ["export"]])
def test_the_input_itself_is_refused_with_force(capsys, trace, command):
    _refused(capsys, [*command, trace, "-o", trace, "--force"], trace, trace)
    assert trace.read_bytes() == EXAMPLE_TRACE.read_bytes()


def test_other_spellings_and_symlinks_are_refused(capsys, trace, tmp_path):
    dotted = tmp_path / "." / "." / trace.name
    _refused(capsys, ["analyze", trace, "-o", f"{tmp_path}/./{trace.name}", "--force"], trace, trace)
    link = tmp_path / "link.json.gz"
    link.symlink_to(trace)
    _refused(capsys, ["analyze", link, "-o", trace, "--force"], trace, link)
    _refused(capsys, ["analyze", trace, "-o", link, "--force"], link, trace)
    assert dotted.read_bytes() == EXAMPLE_TRACE.read_bytes() and link.is_symlink()


def test_an_input_of_compare_is_refused(capsys, trace, tmp_path):
    other = tmp_path / "other.json.gz"
    shutil.copy(EXAMPLE_TRACE, other)
    _refused(capsys, ["compare", trace, other, "-o", other, "--force"], other, other)
    assert other.read_bytes() == EXAMPLE_TRACE.read_bytes()


def test_config_and_baseline_inputs_are_refused(capsys, trace, tmp_path):
    model = tmp_path / "config.json"
    shutil.copy(FIXTURES / "captured" / "slope_ctx1024.model.json", model)
    _refused(capsys, ["analyze", trace, "--model", model, "-o", model, "--force"], model, model)
    base = tmp_path / "base.json.gz"
    shutil.copy(EXAMPLE_TRACE, base)
    _refused(capsys, ["analyze", trace, "--baseline", base, "-o", base, "--force"], base, base)
    assert model.read_bytes() == (FIXTURES / "captured" / "slope_ctx1024.model.json").read_bytes()
    assert base.read_bytes() == EXAMPLE_TRACE.read_bytes()


def test_a_file_of_an_input_folder_is_refused(capsys, tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    shutil.copy(EXAMPLE_TRACE, folder / "a.json.gz")
    shutil.copy(EXAMPLE_TRACE, folder / "b.json.gz")
    _refused(capsys, ["sweep", folder, "-j", "1", "-o", folder / "b.json.gz", "--format", "json",
                      "--force"], folder / "b.json.gz", folder / "b.json.gz")
    assert (folder / "b.json.gz").read_bytes() == EXAMPLE_TRACE.read_bytes()


def test_a_report_left_in_an_input_folder_is_replaced(capsys, tmp_path):
    """A folder's files are inputs, but not the reports attrib writes and never reads as a trace:
    a sweep report kept beside its traces is written again with --force."""
    folder = tmp_path / "runs"
    folder.mkdir()
    shutil.copy(EXAMPLE_TRACE, folder / "a.json.gz")
    shutil.copy(EXAMPLE_TRACE, folder / "b.json.gz")
    report = folder / "sweep.html"
    report.write_text("old")
    assert main(["sweep", str(folder), "-j", "1", "-o", str(report), "--force"]) == 0, \
        capsys.readouterr().err
    assert "<html" in report.read_text() and "a.json.gz" in report.read_text()
    assert (folder / "b.json.gz").read_bytes() == EXAMPLE_TRACE.read_bytes()


def test_a_plot_beside_a_report_that_is_the_input_is_refused(capsys, tmp_path):
    """The report's plots go beside it as REPORT.NAME.svg: a trace so named is not replaced by one
    (the check is in attrib.output, which every write goes through), and nothing is written."""
    trace = tmp_path / "r.timeline.svg"
    shutil.copy(EXAMPLE_TRACE, trace)
    _refused(capsys, ["report", trace, "-o", tmp_path / "r.md", "--force"], trace, trace)
    assert trace.read_bytes() == EXAMPLE_TRACE.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.timeline.svg"]


def test_a_protected_input_is_never_written(trace, tmp_path):
    """attrib.output refuses a protected input itself, by any spelling, whoever writes."""
    from attrib.errors import TraceError
    from attrib.output import protect, write_file

    link = tmp_path / "link"
    link.symlink_to(trace)
    protect([trace])
    try:
        for spelling in (trace, tmp_path / "." / trace.name, link):
            with pytest.raises(TraceError, match="is an input of this command"):
                write_file(spelling, b"{}", force=True)
        write_file(tmp_path / "other.json", b"{}", force=False)
    finally:
        protect(())
    assert trace.read_bytes() == EXAMPLE_TRACE.read_bytes()
    assert (tmp_path / "other.json").read_bytes() == b"{}"


@pytest.mark.parametrize("command", ["analyze", "report", "export", "compare", "slope", "sweep"])
def test_the_output_help_says_what_happens_to_an_existing_name(capsys, command):
    assert main([command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "symlink's target is replaced (atomically, the link kept)" in text
    assert "FIFO or device (/dev/stdout) is written through" in text
    assert "an input of the command is refused, --force or not" in text


def test_a_fifo_is_written_through(capsys, trace, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    assert main(["analyze", str(trace), "--format", "json", "-o", str(fifo)]) == 0
    reader.join(30)
    assert got and got[0].startswith(b"{") and fifo.is_fifo()


def test_a_device_keeps_its_type(capsys, trace):
    assert main(["analyze", str(trace), "--format", "json", "-o", os.devnull]) == 0
    assert os.path.exists(os.devnull) and not os.path.isfile(os.devnull)


def test_a_symlink_output_replaces_its_target_and_stays_a_link(capsys, trace, tmp_path):
    target = tmp_path / "old.json"
    target.write_text("{}")
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    assert main(["analyze", str(trace), "--format", "json", "-o", str(link), "--force"]) == 0
    assert link.is_symlink() and target.read_text().startswith('{\n  "schema"')


def test_xlsx_cells_of_trace_names_are_text_not_formulas(capsys, tmp_path):
    # the demo trace with its most frequent kernel renamed to a formula (names are untrusted input)
    import gzip
    import json
    import zipfile
    from collections import Counter

    doc = json.loads(gzip.decompress(EXAMPLE_TRACE.read_bytes()))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    top = Counter(e["name"] for e in kernels).most_common(1)[0][0]
    evil = '=HYPERLINK("http://example.invalid","x")'
    for e in kernels:
        if e["name"] == top:
            e["name"] = evil
    bad = tmp_path / "evil.json"
    bad.write_text(json.dumps(doc))
    out = tmp_path / "tables.xlsx"
    assert main(["report", str(bad), "--format", "xlsx", "-o", str(out)]) == 0, \
        capsys.readouterr().err
    with zipfile.ZipFile(out) as z:
        sheets = [z.read(n).decode() for n in z.namelist() if n.startswith("xl/worksheets/")]
        strings = z.read("xl/sharedStrings.xml").decode()
    assert not any("<f>" in s for s in sheets)
    assert '=HYPERLINK("http://example.invalid","x")' in strings.replace("&quot;", '"')


ESC_NAME = "Acme \x1b[31mQ9\x1b[0m \x1b]0;owned\x07GPU\x9b1m\x85\r"
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _escaped_trace(tmp_path) -> Path:
    """The demo trace with its device renamed to ESC_NAME and made one the database does not know
    (compute capability 12.7), so that the trace's own name is the one every output shows, and its
    most frequent kernel's name given an escape sequence too."""
    import gzip
    import json
    from collections import Counter

    doc = json.loads(gzip.decompress(EXAMPLE_TRACE.read_bytes()))
    dev = doc["deviceProperties"][0]
    dev.update(name=ESC_NAME, computeMajor=12, computeMinor=7)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    top = Counter(e["name"] for e in kernels).most_common(1)[0][0]
    for e in kernels:
        if e["name"] == top:
            e["name"] = "\x1b[2Jwiped_" + top
    bad = tmp_path / "esc.json"
    bad.write_text(json.dumps(doc))
    return bad


def test_escape_sequences_in_trace_text_reach_no_output(capsys, tmp_path, analysed_once):
    """An ESC sequence in deviceProperties.name and a kernel name (trace text is untrusted) is in
    no output format (table, JSON, markdown, HTML, the plots' SVG, CSV, parquet, xlsx) and no
    warning, and matplotlib warns of no missing glyph (it warned 14 times). The trace is analysed
    once for all of them (its warnings said again each time)."""
    import json
    import warnings
    import zipfile

    import polars as pl

    bad = _escaped_trace(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    runs = [["analyze", bad], ["analyze", bad, "-v", "--format", "json", "-o", out / "a.json"],
            ["report", bad, "--format", "json", "-o", out / "r.json"],
            ["report", bad, "-o", out / "r.html"], ["report", bad, "-o", out / "r.md"],
            ["report", bad, "--format", "csv", "-o", out / "csv"],
            ["report", bad, "--format", "parquet", "-o", out / "parquet"],
            ["report", bad, "--format", "xlsx", "-o", out / "r.xlsx"]]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for args in runs:
            assert main([str(a) for a in args]) == 0, capsys.readouterr().err
    cap = capsys.readouterr()
    texts = {p.name: p.read_text() for p in out.rglob("*") if p.suffix in
             (".json", ".md", ".html", ".svg", ".csv")}
    texts["stdout"], texts["stderr"] = cap.out, cap.err
    for f in (out / "parquet").glob("*.parquet"):
        texts[f.name] = pl.read_parquet(f).write_csv()
    with zipfile.ZipFile(out / "r.xlsx") as z:
        texts["r.xlsx"] = "".join(z.read(n).decode() for n in z.namelist() if n.endswith(".xml"))
    svgs = [n for n in texts if n.endswith(".svg")]
    assert len(svgs) >= 3 and len(texts) >= 12
    assert "Acme Q9 GPU" in texts["stdout"] and "Acme Q9 GPU" in texts["r.html"]
    assert any("Acme Q9 GPU" in texts[n] for n in svgs)  # the roofline's title: the name, cleaned
    assert any("wiped_" in t for n, t in texts.items() if n.endswith(".csv"))
    for name, text in texts.items():
        assert not CONTROLS.search(text), (name, CONTROLS.search(text))
    doc = json.loads(texts["a.json"])
    assert "\x1b" not in json.dumps(doc, ensure_ascii=False) and "\\u001b" not in texts["a.json"]
    assert not [w for w in caught if "Glyph" in str(w.message)]
    assert "Glyph" not in cap.err


def test_the_template_of_an_escaped_device_name_is_clean(capsys, tmp_path):
    """`archs --template --trace` prints the trace's device name (an --arch-file entry to keep):
    without its escapes (the reader's device records are cleaned, attrib.trace.Meta)."""
    bad = _escaped_trace(tmp_path)
    assert main(["archs", "--template", "--trace", str(bad)]) == 0
    out = capsys.readouterr().out
    assert 'name = "Acme Q9 GPU"' in out and not CONTROLS.search(out)


def test_csv_safe_neutralises_formula_cells_and_csv_keeps_them(capsys, tmp_path, analysed_once):
    import gzip
    import json
    from collections import Counter

    doc = json.loads(gzip.decompress(EXAMPLE_TRACE.read_bytes()))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    top = Counter(e["name"] for e in kernels).most_common(1)[0][0]
    for e in kernels:
        if e["name"] == top:
            e["name"] = "=cmd|' /C calc'!A0"
    bad = tmp_path / "evil.json"
    bad.write_text(json.dumps(doc))
    for fmt in ("csv", "csv-safe"):
        assert main(["report", str(bad), "--format", fmt, "-o", str(tmp_path / fmt)]) == 0
    raw = (tmp_path / "csv" / "top_kernels.csv").read_text()
    safe = (tmp_path / "csv-safe" / "top_kernels.csv").read_text()
    assert "\n=cmd" in raw or ",=cmd" in raw or '"=cmd' in raw
    assert "=cmd" in safe and not any(cell.startswith(("=", '"=')) for line in safe.splitlines()
                                      for cell in line.split(","))
    assert "'=cmd" in safe
