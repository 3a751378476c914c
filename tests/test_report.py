"""`attrib report`: the bottleneck report (HTML in headless Chromium, markdown with SVG plots beside it),
the ranked bottlenecks, the per-step series, the table's units, and progress on a terminal only."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys

import numpy as np
import orjson
import pytest

import browser

from attrib.app import analyze
from attrib.cli import main
from attrib.report.progress import progress
from attrib.analysis import Finding
from attrib.analysis.bottlenecks import phase_bottlenecks

from conftest import EXAMPLE_TRACE, FIXTURES

LLAMA = FIXTURES / "captured" / "hf_llama_cuda_b8_p512.pt.trace.json.gz"
EVIL = "<script>alert('attrib')</script>"


@pytest.fixture(scope="module")
def moe_doc():
    return analyze(EXAMPLE_TRACE).to_dict()


def _phase(doc, name):
    return next(p for p in doc["phases"] if p["phase"] == name)


def _png_pixels(path):
    """RGB pixels of the screenshot (Pillow comes with matplotlib, in the dev extra)."""
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"), dtype=np.int32)


def _evil_trace(tmp_path):
    """The captured H200 Llama trace with the name of its longest-running kernel (so a top kernel of the
    report) rewritten to hold a <script> tag."""
    doc = orjson.loads(gzip.decompress(LLAMA.read_bytes()))
    total: dict[str, float] = {}
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            total[e["name"]] = total.get(e["name"], 0.0) + e.get("dur", 0)
    old = max(total, key=total.get)
    for e in doc["traceEvents"]:
        if e.get("name") == old:
            e["name"] = EVIL + old
    path = tmp_path / "evil.json"
    path.write_bytes(orjson.dumps(doc))
    return path


def test_html_report_in_headless_chromium(tmp_path):
    """A real trace's report renders (not blank), holds its plots, and escapes a hostile kernel name."""
    trace = _evil_trace(tmp_path)
    out = tmp_path / "report.html"
    assert main(["report", str(trace), "-o", str(out)]) == 0
    html = out.read_text()
    assert EVIL not in html and "&lt;script&gt;alert(" in html
    assert html.count("<svg") >= 3 and "<script" not in html.lower()  # timeline, roofline(s), per-step stack
    # self-contained: nothing loaded from elsewhere (links are only the findings' references)
    head = html.split("<h2>Findings</h2>")[0]
    assert "<link" not in html and " src=" not in html and 'href="http' not in head and "@import" not in html
    chromium = browser.chromium()  # missing: a skip, a failure under CI
    png = tmp_path / "shot.png"
    r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--screenshot={png}", "--window-size=1280,900", out.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert png.exists(), r.stderr[-2000:]
    px = _png_pixels(png)
    assert px.shape[:2] == (900, 1280)
    gray = px.mean(axis=2)
    assert gray.std() > 10, "the screenshot is blank"
    # the page shows text (dark pixels) on a light page, and colour (the plots), not only grey
    assert (gray < 100).mean() > 0.002 and (gray > 200).mean() > 0.5
    assert (px.max(axis=2) - px.min(axis=2) > 60).mean() > 0.001


def test_markdown_report_plots_beside_it_and_overwrite_rules(tmp_path, moe_doc, capsys, analysed_once):
    """The demo trace analysed once for its reports."""
    out = tmp_path / "r.md"
    assert main(["report", str(EXAMPLE_TRACE), "-o", str(out)]) == 0
    svgs = sorted(p.name for p in tmp_path.glob("r.*.svg"))
    assert svgs == ["r.decode_roofline.svg", "r.decode_steps.svg", "r.prefill_roofline.svg", "r.timeline.svg"]
    text = out.read_text()
    for name in svgs:
        assert f"]({name})" in text
    assert "## decode" in text and "## prefill" in text and "**Bottlenecks**" in text
    # kernel names whole in a file: the longest top-kernel name appears entire
    longest = max((t["name"] for p in moe_doc["phases"] for t in p["top_kernels"]), key=len)
    assert len(longest) > 200 and longest in text
    assert main(["report", str(EXAMPLE_TRACE), "-o", str(out)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    out.unlink()  # the report is gone, its plots are not: still refused, before any work
    assert main(["report", str(EXAMPLE_TRACE), "-o", str(out)]) == 2
    assert "r.decode_roofline.svg: exists" in capsys.readouterr().err and not out.exists()
    assert main(["report", str(EXAMPLE_TRACE), "-o", str(out), "--force"]) == 0
    assert main(["report", str(EXAMPLE_TRACE), "-o", str(tmp_path / "no" / "r.html")]) == 2
    assert "does not exist" in capsys.readouterr().err and not (tmp_path / "no").exists()
    # no --format: the one -o's suffix names, else the first listed (md), as every command does
    assert main(["report", str(EXAMPLE_TRACE), "-o", str(tmp_path / "r.csv")]) == 2
    assert "its suffix names csv, which report does not write to a file" in capsys.readouterr().err
    assert main(["report", str(EXAMPLE_TRACE), "-o", str(tmp_path / "r.txt"), "--force"]) == 0
    assert "## decode" in (tmp_path / "r.txt").read_text()


def test_report_without_matplotlib_says_plots_are_omitted(tmp_path):
    out = tmp_path / "r.html"
    code = ("import sys; sys.modules['matplotlib'] = None; from attrib.cli import main; "
            f"sys.exit(main(['report', {str(EXAMPLE_TRACE)!r}, '-o', {str(out)!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    assert "plots omitted: matplotlib is not installed" in html and "<svg" not in html
    assert "Bottlenecks, ranked by recoverable ms per step" in html


def test_bottlenecks_ranked_by_recoverable_ms(moe_doc):
    dec = _phase(moe_doc, "decode")
    ranked = dec["bottlenecks"]["ranked"]
    ms = [r["ms_per_step"] for r in ranked]
    assert ms == sorted(ms, reverse=True) and [r["rank"] for r in ranked] == list(range(1, len(ranked) + 1))
    # eager decode of the MoE trace: the GPU idles most of each step, so idle leads
    idle = ranked[0]
    attached = [moe_doc["findings"][i]["ms_per_step"] for i in idle["findings"]]
    assert idle["kind"] == "GPU idle" and idle["ms_per_step"] == max([dec["idle_ms"], *attached])
    gaps = {c["component"]: c["gap_ms"] for c in dec["components"] if (c.get("gap_ms") or 0) > 0}
    assert {r["component"]: r["ms_per_step"] for r in ranked if r["kind"] == "roofline gap"} == gaps
    # the ledger's host-stall finding (it accounts for idle time: the cuDNN SDPA op) is attached to
    # the idle row
    host = next(i for i, f in enumerate(moe_doc["findings"])
                if f["rule"] == "ledger-host" and f["evidence"]["phase"] == "decode")
    assert host in ranked[0]["findings"]
    # the whole-step distance from the floor is the phase's total, not one more row on top
    total = dec["bottlenecks"]["total"]
    assert total is not None and moe_doc["findings"][total["finding"]]["rule"] == "decode-below-bandwidth-ceiling"
    assert all(total["finding"] not in r["findings"] for r in ranked)


def test_finding_estimates_join_the_ranking():
    """A finding's ms_per_step (the rules' estimate) ranks it; one that names a component raises that row."""
    dec = analyze(EXAMPLE_TRACE).phase("decode")
    norm = dec.component("norm")
    findings = (Finding(rule="X1", severity="medium", title="fuse the norms", ms_per_step=norm.ms,
                        phase="decode", components=("norm",)),
                Finding(rule="X2", severity="info", title="something else", ms_per_step=0.3,
                        phase="decode"),
                Finding(rule="X3", severity="info", title="prefill only", ms_per_step=99.0,
                        phase="prefill"))
    b = phase_bottlenecks(dec, findings).ranked
    row = next(r for r in b if r.component == "norm")
    assert row.ms_per_step == norm.ms > norm.gap_ms and row.findings == (0,)
    own = next(r for r in b if r.kind == "finding")
    assert own.ms_per_step == 0.3 and own.findings == (1,) and own.what == "something else"
    assert not any(2 in r.findings for r in b)


def test_per_step_series(moe_doc):
    dec = _phase(moe_doc, "decode")
    s = dec["per_step"]
    assert len(s["step"]) == dec["steps"] == 6
    for i in range(6):  # the component times of a step add up to its kernel time
        assert sum(v[i] for v in s["components"].values()) == pytest.approx(s["kernel_ms"][i], abs=1e-3)
        assert s["kernels"][i] == 703
    # fixture README: prompt 512, so decode step n reads 512 + n K/V positions (SDPA's K shape)
    assert s["context"] == [513, 514, 515, 516, 517, 518] and dec["context_from"] == "attention shapes"
    assert s["start_ms"] == sorted(s["start_ms"]) and _phase(moe_doc, "prefill")["per_step"]["start_ms"] == [0.0]


def test_table_units_top_and_whole_names(tmp_path, moe_doc):
    wide = {**os.environ, "COLUMNS": "200"}  # every column fits (a narrower terminal drops some)
    r = subprocess.run([sys.executable, "-m", "attrib.cli", "analyze", str(EXAMPLE_TRACE), "--top", "3"],
                       capture_output=True, text=True, env=wide)
    assert r.returncode == 0, r.stderr
    for head in ("kernels/step", "ms/step", "TFLOP/s", "bound", "bytes known", "evidence (kernels/step)",
                 "calls/step", "(total)"):
        assert head in r.stdout, head
    blocks = r.stdout.split("top kernels (per step):")[1:]
    assert [len([ln for ln in b.split("\n\n")[0].splitlines()[2:] if ln.strip()]) for b in blocks] == [3, 3]
    assert "…" in r.stdout  # cut on a terminal
    out = tmp_path / "t.txt"
    assert main(["analyze", str(EXAMPLE_TRACE), "-o", str(out)]) == 0
    longest = max((t["name"] for p in moe_doc["phases"] for t in p["top_kernels"]), key=len)
    assert longest in out.read_text()  # whole in a file
    # per-step units: 16 calls of the top MoE GEMM over the 6 decode steps' 96 launches
    top = _phase(moe_doc, "decode")["top_kernels"][0]
    assert top["calls"] == 96 and top["calls_per_step"] == 16.0


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal_and_only_when_slow():
    import time

    term, pipe, quick = _Terminal(), io.StringIO(), _Terminal()
    with progress("analyzing x", stream=term, after=0.05):
        time.sleep(0.2)
    with progress("analyzing x", stream=pipe, after=0.0):
        time.sleep(0.05)
    with progress("analyzing x", stream=quick, after=5.0):
        pass
    assert "attrib: analyzing x ..." in term.getvalue() and "done in" in term.getvalue()
    assert pipe.getvalue() == "" and quick.getvalue() == ""
    r = subprocess.run([sys.executable, "-m", "attrib.cli", "analyze", str(EXAMPLE_TRACE)], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == ""  # stderr is a pipe: no progress
