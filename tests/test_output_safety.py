"""Issue 39, data loss: an output is never an input of the command (any spelling, a symlink either
way, --force or not), and an output that is not a regular file keeps its type (a FIFO and a device
are written through; a symlink's target is replaced, the link kept). Every input is a copy of the
repo's demo trace made inside the test."""

from __future__ import annotations

import os
import shutil
import threading

import pytest

from attrib.cli import main

from conftest import EXAMPLE_TRACE


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


def test_escape_sequences_in_the_device_name_reach_no_output(capsys, tmp_path):
    """An ESC sequence in deviceProperties.name (trace text is untrusted) is in no page, plot,
    markdown or terminal line, and matplotlib warns of no missing glyph."""
    import gzip
    import json

    doc = json.loads(gzip.decompress(EXAMPLE_TRACE.read_bytes()))
    doc["deviceProperties"][0]["name"] = "NVIDIA \x1b[31mH200\x1b[0m \x1b]0;owned\x07SXM"
    bad = tmp_path / "esc.json"
    bad.write_text(json.dumps(doc))
    for suffix in ("html", "md"):
        assert main(["report", str(bad), "-o", str(tmp_path / f"r.{suffix}")]) == 0
    assert main(["analyze", str(bad)]) == 0
    cap = capsys.readouterr()
    outputs = [p.read_text() for p in tmp_path.iterdir() if p.suffix in (".html", ".md", ".svg")]
    assert len(outputs) >= 3 and not any("\x1b" in t or "\x07" in t for t in outputs)
    assert "\x1b" not in cap.out and "\x1b" not in cap.err and "Glyph" not in cap.err


def test_csv_safe_neutralises_formula_cells_and_csv_keeps_them(capsys, tmp_path):
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
