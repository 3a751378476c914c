"""The report's plots on real traces: the timeline at true GPU times (checked against the raw
events), every roofline point labelled (numbers and k1.. named in the legend), the per-step stack
in a colour per component and per ledger cause, compare's delta bars, slope's fitted lines."""

from __future__ import annotations

import gzip
import re
from html import unescape

import orjson
import pytest

from attrib.app import analyze
from attrib.cli import main
from attrib.report import plots

from conftest import FIXTURES

DENSE = FIXTURES / "torch" / "h200_dense_prefill_cudagraph_decode.json.gz"
MOE = FIXTURES / "torch" / "h200_qwen3moe_eager_prefill_decode.json.gz"
CAP = FIXTURES / "captured"


@pytest.fixture(scope="module")
def dense():
    return analyze(DENSE)


@pytest.fixture(scope="module")
def moe():
    return analyze(MOE)


def _texts(svg: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", t).strip() for t in re.findall(r"<text\b.*?</text>", svg, re.S)]


def test_timeline_fills_where_the_kernels_ran(dense):
    """The replayed decode: each step window opens at its CPU annotation, and its kernels run
    later, inside the GPU annotation. The fill starts at the first kernel and ends at the last,
    as the raw events say (t0: the prefill CPU annotation, where the first window opens)."""
    ev = orjson.loads(gzip.decompress(DENSE.read_bytes()))["traceEvents"]
    t0 = min(e["ts"] for e in ev if e.get("name") == "prefill" and e.get("cat") == "user_annotation")
    gpu = sorted((e for e in ev if e.get("name") == "decode" and e.get("cat") == "gpu_user_annotation"),
                 key=lambda e: e["ts"])
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    ser = dense.phase("decode").per_step
    assert len(gpu) == len(ser.step) == 16
    for g, start, busy in zip(gpu, ser.start_ms, ser.busy_ms):
        inside = [k for k in kernels if g["ts"] <= k["ts"] < g["ts"] + g["dur"]]
        first = min(k["ts"] for k in inside)
        last = max(k["ts"] + k["dur"] for k in inside)
        assert busy[0][0] == pytest.approx((first - t0) / 1e3, abs=2e-3)
        assert busy[-1][1] == pytest.approx((last - t0) / 1e3, abs=2e-3)
        assert busy[0][0] > start  # not at the window's start, where the old fill began
    # step 0: window from 50.966 ms, its kernels 51.081 .. 53.672 ms (measured)
    assert ser.start_ms[0] == pytest.approx(50.966, abs=1e-3)
    assert ser.busy_ms[0][-1][1] == pytest.approx(53.672, abs=1e-3)
    assert "when kernels ran" in plots.timeline(dense)
    # the JSON is unchanged: the spans are the plot's
    # in the document too (a saved analysis draws the same timeline)
    doc_busy = dense.to_dict()["phases"][1]["per_step"]["busy_ms"]
    assert doc_busy == [[list(b) for b in step] for step in ser.busy_ms]


def test_busy_spans_are_as_fine_as_the_timeline_shows(moe):
    """The eager MoE decode has a busy span per kernel or so at 20 us; the series keeps them
    only as fine as a pixel of the phase's axis, and the timeline, which closes gaps under a
    pixel of its own (longer) axis, draws the same fill from either."""
    from attrib.analysis.series import BUSY_GAP_MS, TIMELINE_PIXELS, _busy
    from attrib.app import attribution

    a = attribution(MOE)
    ser = moe.phase("decode").per_step
    t0 = int(a.steps["window_start"].min())
    fine = _busy(a.kernels, list(ser.step), t0, BUSY_GAP_MS)
    ends = [s + d for ph in moe.phases for s, d in zip(ph.per_step.start_ms, ph.per_step.step_ms)]
    gap = max(ends) / TIMELINE_PIXELS
    assert sum(map(len, fine)) > 10 * sum(map(len, ser.busy_ms))
    drawn = [plots._merged(sorted(b for st in spans for b in st), gap)
             for spans in (fine, ser.busy_ms)]
    flat = [[x for span in d for x in span] for d in drawn]
    assert len(drawn[0]) == len(drawn[1]) and flat[0] == pytest.approx(flat[1], abs=2e-4)


def test_roofline_numbers_every_point_and_names_it(moe, dense):
    for an in (moe, dense):
        for ph in an.phases:
            svg = plots.roofline(an, ph)
            comps = [c for c in ph.component_rows if (c.intensity or 0) > 0 and (c.achieved_tflops or 0) > 0]
            kerns = [k for k in ph.kernel_rows if (k.intensity or 0) > 0 and (k.achieved_tflops or 0) > 0]
            if svg is None:
                assert not comps and not kerns
                continue
            texts = _texts(svg)
            for i, c in enumerate(comps):
                assert str(i + 1) in texts and f"{i + 1}  {c.component}" in texts, (ph.phase, c.component)
            labelled = [t for t in texts if re.fullmatch(r"k\d+", t)]
            assert len(labelled) == len(kerns), (ph.phase, labelled)
    # the MoE decode cluster: 16 components, every one numbered
    dec = moe.phase("decode")
    assert len([c for c in dec.component_rows if (c.intensity or 0) > 0]) >= 10


def test_step_stack_colours_components_and_ledger_causes(moe):
    dec = moe.phase("decode")
    svg = plots.step_stack(dec)
    texts = _texts(svg)
    causes = {r.cause for rows in dec.per_step.ledger for r in rows if r.cause != "kernels"}
    assert {"host", "launch"} <= causes
    for c in causes:
        assert f"idle: {c}" in texts
    fills = set(re.findall(r"#[0-9a-f]{6}", svg))  # fill styles and hatch patterns
    shown = min(8, len(dec.per_step.components))
    # a colour per component shown, one for the rest, one per cause: none of them all grey
    assert len(fills & set(plots.PALETTE)) == shown
    assert {plots.CAUSE_COLORS[c] for c in causes} <= fills
    assert plots.IDLE not in fills


def test_compare_html_highlights_and_draws_deltas(tmp_path):
    out = tmp_path / "c.html"
    assert main(["compare", str(CAP / "sdpa_attn_a.pt.trace.json.gz"),
                 str(CAP / "eager_attn.pt.trace.json.gz"), "-o", str(out)]) == 0
    html = out.read_text()
    assert '<tr class="slower"><td>attention</td>' in html and "tr.slower td{" in html
    assert html.count("<svg") == 2 and "decode: change per component" in html
    # one prefill step per side: not testable, no CI
    assert "not testable (1 vs 1 steps)" in html
    # the cause line: the ledger rows that moved, the larger side first, each side's rows largest
    # change first, with the ms
    cause = re.search(r"<p>cause: (.*?)</p>", html.split("<h2>decode</h2>")[1]).group(1)
    kernels, host = unescape(cause).split("; ")
    assert kernels.startswith("kernels +0.9") and "attention +0.90" in kernels
    ms = [abs(float(x)) for x in re.findall(r"([+-][0-9.]+) ms", host.split(": ", 1)[1])]
    assert host.startswith("host-side +") and ms == sorted(ms, reverse=True)


def test_slope_html_has_the_fitted_lines(tmp_path):
    out = tmp_path / "s.html"
    paths = [str(CAP / f"slope_ctx{n}.pt.trace.json.gz") for n in (1024, 16384)]
    assert main(["slope", *paths, "-o", str(out)]) == 0
    html = out.read_text()
    texts = _texts(html)
    att = next(t for t in texts if t.startswith("attention: +"))
    # the fit's slope in the legend equals the table's row
    row = re.search(r"<tr><td>attention</td><td class=\"n\">([0-9.]+)</td>", html).group(1)
    assert att == f"attention: +{float(row):.1f} us/1k" and "step: " in " ".join(texts)
    assert main(["slope", *paths, "--format", "json", "-o", str(tmp_path / "s.json")]) == 0
