"""Headless Chromium for the HTML tests: load a page at 1280x900, measure it with a script injected
into a copy (the page itself has none), and read the results back from the dumped DOM
(`chromium --headless --dump-dom`: no DevTools client, no dependency beyond Debian's chromium)."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

WIDTH, HEIGHT = 1280, 900
FOLD = 900  # px: the summary box must end above it
OUT_ID = "attrib-measure"
# In one browser: a frame per page, each 1280x900; when all have loaded, per page every <text> box
# of each plot, the page's width and what overflows it, the resources it loaded (Resource
# Timing) and the summary box's place, written into the wrapper's DOM as JSON.
SCRIPT = """
window.addEventListener('load', function () {
  const r = e => { const b = e.getBoundingClientRect();
                   return {x0: b.left, y0: b.top, x1: b.right, y1: b.bottom}; };
  const measure = f => {
    const doc = f.contentDocument, win = f.contentWindow;
    const plots = [...doc.querySelectorAll('svg')].map(svg =>
      [...svg.querySelectorAll('text')].map(t => Object.assign(r(t), {text: t.textContent}))
        .filter(b => b.x1 - b.x0 > 0.5 && b.y1 - b.y0 > 0.5));
    const wide = [...doc.querySelectorAll('body *')]
      .filter(e => e.getBoundingClientRect().right > win.innerWidth + 0.5)
      .slice(0, 5).map(e => e.tagName + ' ' + (e.textContent || '').slice(0, 60));
    const s = doc.querySelector('section#summary');
    return {name: f.id, inner_width: win.innerWidth, scroll_width: doc.documentElement.scrollWidth,
            wide: wide, plots: plots, summary: s ? r(s) : null,
            resources: win.performance.getEntriesByType('resource').map(e => e.name)};
  };
  const pre = document.createElement('pre');
  pre.id = '%(id)s';
  pre.textContent = JSON.stringify([...document.querySelectorAll('iframe')].map(measure));
  document.body.appendChild(pre);
});
""" % {"id": OUT_ID}


MISSING = ("chromium is not installed: apt-get install chromium (`make test` installs it when "
           "run as root)")


def chromium() -> str:
    """The browser's path. Missing, the test is skipped with the reason on a developer's machine
    (`make test` installs it when it can: .ci/chromium.sh) and fails under CI=true, which always
    runs the browser tests."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(MISSING + "; CI must run the browser tests")
        pytest.skip(MISSING)
    return path


def _command(url: str, *extra: str, height: int = HEIGHT) -> list[str]:
    return [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--no-first-run", "--disable-extensions", "--disable-background-networking",
            "--host-resolver-rules=MAP * ~NOTFOUND", f"--window-size={WIDTH},{height}", *extra, url]


def measure(pages: dict[str, Path], work: Path, timeout: float = 90) -> dict[str, dict]:
    """name -> measurements of each page, all loaded in one headless Chromium."""
    frames = "".join(f'<iframe id="{n}" src="{p.resolve().as_uri()}" width="{WIDTH}" '
                     f'height="{HEIGHT}" style="border:0;display:block"></iframe>'
                     for n, p in pages.items())
    wrapper = work / "measure.html"
    wrapper.write_text(f"<!DOCTYPE html><html><body style='margin:0'>{frames}"
                       f"<script>{SCRIPT}</script></body></html>")
    cmd = _command(wrapper.as_uri(), "--dump-dom", "--allow-file-access-from-files",
                   "--virtual-time-budget=10000", f"--user-data-dir={work / 'profile'}",
                   height=HEIGHT * len(pages))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env=os.environ | {"HOME": str(work)})
    m = re.search(rf'<pre id="{OUT_ID}">(.*?)</pre>', r.stdout, re.S)
    assert m, f"no measurement in the dumped DOM (rc {r.returncode}): {r.stderr[-1500:]}"
    text = html.unescape(m.group(1))
    return {d["name"]: d for d in json.loads(text)}


def overlaps(boxes: list[dict], slack: float = 0.5) -> list[tuple[str, str]]:
    """Pairs of text boxes that overlap by more than `slack` px each way."""
    out = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if (min(a["x1"], b["x1"]) - max(a["x0"], b["x0"]) > slack
                    and min(a["y1"], b["y1"]) - max(a["y0"], b["y0"]) > slack):
                out.append((a["text"], b["text"]))
    return out


def check_summary_above_fold(m: dict) -> None:
    """The summary box (section#summary) lies within the first FOLD px."""
    s = m["summary"]
    assert s is not None, "the page has no section#summary"
    assert s["y0"] >= 0 and s["y1"] <= FOLD, f"section#summary spans {s['y0']:.0f}..{s['y1']:.0f} px"


def check_page(m: dict, name: str) -> None:
    """Nothing wider than the window, no overlapping plot texts, no request, the summary on top."""
    assert m["inner_width"] == WIDTH, m["inner_width"]
    assert m["scroll_width"] <= WIDTH and not m["wide"], (name, m["scroll_width"], m["wide"])
    for i, boxes in enumerate(m["plots"]):
        assert not overlaps(boxes), (name, f"plot {i}", overlaps(boxes)[:5])
    assert [u for u in m["resources"]] == [], (name, m["resources"])
    if m["summary"] is not None:  # the analysis report has one (tested there); compare/slope not
        check_summary_above_fold(m)


def screenshot(page: Path, png: Path, height: int = HEIGHT) -> None:
    """A PNG of the page's first `height` px at the window's width."""
    subprocess.run(_command(page.resolve().as_uri(), f"--screenshot={png}", height=height),
                   capture_output=True, timeout=90, check=False)
