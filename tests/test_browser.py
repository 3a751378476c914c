"""The HTML outputs in a real browser (headless Chromium, issue 18 item 8): the analyze report of a
decode trace, a compare, a slope, a sweep, the ranks of a TP=2 run and a trend, each at 1280x900: nothing wider than the window, no two text
boxes of a plot overlapping, no network request, and the summary box above the fold where the page
has one. A variant of the report derived inside the test (a wide block, an external image and
stylesheet, a duplicated plot label) shows each check catches what it is for. Without chromium
it is skipped with the reason, but fails under CI=true (`make test` installs Debian's chromium as root)."""

from __future__ import annotations

import re
import time

import pytest

import browser
from attrib.app import analyze
from attrib.cli import main
from attrib.report import compare_render, plots, renderers, slope_render
from attrib.multi.compare import compare
from attrib.report.renderers import View
from attrib.multi.slope import slope

from conftest import FIXTURES

CAP = FIXTURES / "captured"
EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//|url\(\s*["']?(?:https?:)?//|@import""", re.I)


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """The three pages as the CLI writes them (its renderers and plots), from four real traces
    analysed once each: a prefill+decode report, a compare with a real attention regression, a
    slope over two contexts."""
    d = tmp_path_factory.mktemp("html")
    an = {n: analyze(CAP / f"{n}.pt.trace.json.gz")
          for n in ("sdpa_attn_a", "eager_attn", "slope_ctx1024", "slope_ctx16384")}
    report = renderers.by_name("html").render(an["sdpa_attn_a"],
                                              View(plots=plots.report_plots(an["sdpa_attn_a"])))
    cmp = compare([an["sdpa_attn_a"]], [an["eager_attn"]])
    sl = slope([an["slope_ctx1024"], an["slope_ctx16384"]])
    out = {"report": report, "compare": compare_render.render_html(cmp, plots.compare_plots(cmp.phases)),
           "slope": slope_render.render_html(sl, plots.slope_plots(sl))}
    for name, text in out.items():
        (d / f"{name}.html").write_text(text)
    # the sweep (two backends x two batches: one plot per varying key, its figures as panels),
    # the TP=2 ranks and the rolling trend as the CLI writes them
    grid = [str(CAP / "sweep" / f"sweep_{b}_b{n}_p512.pt.trace.json.gz")
            for b in ("eager", "sdpa") for n in (1, 8)]
    ranks = [str(CAP / f"tp2_decode_rank{r}.pt.trace.json.gz") for r in (0, 1)]
    for name, args in {"sweep": ["sweep", *grid, "-j", "1"], "ranks": ["ranks", *ranks],
                       "trend": ["trend", str(CAP / "rolling_h200")]}.items():
        assert main([*args, "-o", str(d / f"{name}.html")]) == 0, name
    return {name: d / f"{name}.html" for name in (*out, "sweep", "ranks", "trend")}


def _bad_variant(page, dst):
    """The real report with a 1500 px block, an external image and stylesheet, and its first plot's
    first text written twice (the same box)."""
    s = page.read_text()
    s = s.replace("</main>", '<img src="https://example.invalid/x.png" alt="">'
                  '<link rel=stylesheet href="http://example.invalid/a.css">'
                  '<div style="width:1500px">wide</div></main>', 1)
    i = s.index("<text")
    j = s.index("</text>", i) + len("</text>")
    dst.write_text(s[:j] + s[i:j] + s[j:])
    return dst


def _summary_variants(page, tmp_path):
    """Copies of the report with a section#summary first, and pushed below 900 px."""
    s = page.read_text()
    top = tmp_path / "top.html"
    top.write_text(s.replace("<main>", "<main><section id=summary>verdict</section>", 1))
    low = tmp_path / "low.html"
    low.write_text(s.replace("<main>", "<main><div style='height:950px'></div>"
                             "<section id=summary>verdict</section>", 1))
    return {"top": top, "low": low}


def test_pages_in_headless_chromium(pages, tmp_path):
    for name, page in pages.items():
        html = page.read_text()
        # self-contained: no script, nothing fetched from elsewhere (a finding's reference is a link)
        assert "<script" not in html.lower() and not EXTERNAL.findall(html.replace("<a href=", "<a ")), name
        assert html.count("<svg") >= (name not in ("ranks", "trend")), name
    bad = _bad_variant(pages["report"], tmp_path / "bad.html")
    t = time.perf_counter()
    got = browser.measure(pages | {"bad": bad} | _summary_variants(pages["report"], tmp_path), tmp_path)
    took = time.perf_counter() - t
    assert took < 60, took
    for name in pages:
        m = got[name]
        browser.check_page(m, name)
        if name not in ("ranks", "trend"):  # tables only
            assert m["plots"] and all(len(boxes) >= 5 for boxes in m["plots"]), (name, m["plots"])
    # the report's plots: the timeline, and per phase a roofline (and decode's step stack); the
    # sweep's: one per varying key (backend, batch; micro_batch follows batch)
    assert len(got["report"]["plots"]) == 4 and len(got["compare"]["plots"]) == 2
    assert len(got["sweep"]["plots"]) == 2
    # compare opens with its verdict (section#summary) above the fold too
    assert got["compare"]["summary"] is not None
    # what each check is for, on the derived variant
    b = got["bad"]
    assert b["scroll_width"] > browser.WIDTH and b["wide"]
    assert b["resources"] == ["https://example.invalid/x.png", "http://example.invalid/a.css"]
    assert browser.overlaps(b["plots"][0]) and not any(browser.overlaps(p) for p in b["plots"][1:])
    # the report opens with its verdict (section#summary) above the fold; the check fires below it
    browser.check_summary_above_fold(got["report"])
    browser.check_summary_above_fold(got["top"])
    with pytest.raises(AssertionError, match="section#summary spans"):
        browser.check_summary_above_fold(got["low"])
