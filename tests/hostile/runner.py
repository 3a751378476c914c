"""Run the hostile corpus: `attrib analyze` per variant in its own process, bounded in time and memory.

Each run gets RLIMIT_AS (MEMORY_BYTES) and a wall-clock limit (SECONDS); its peak RSS is its own
VmHWM. `check()` lists what a result breaks of issue 13's rules; `python -m` prints totals.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import ROOT, TORCH, VARIANTS, Variant  # noqa: E402

SECONDS = 20
MEMORY_BYTES = 2 << 30
# The child bounds its address space before attrib is imported, and at exit writes its own peak RSS
# (VmHWM: ru_maxrss would include this parent's RSS, inherited through fork and exec).
_CHILD = ("import atexit, resource, sys; resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]),) * 2); "
          "atexit.register(lambda: open(sys.argv[2], 'w').write(open('/proc/self/status').read())); "
          "from attrib.cli import main; sys.exit(main(sys.argv[3:]))")
_ESCAPES = ("\x1b", "\r", "\x00", "\x07")
# a markdown link or image whose brackets are not escaped, or an HTML link to a script
_LIVE_LINK = re.compile(r"(?<!\\)\[[^\]]*(?<!\\)\]\(\s*javascript:|href=[\"']?\s*javascript:", re.I)


@dataclass
class Result:
    variant: Variant
    path: Path
    rc: int
    seconds: float
    rss_mb: float
    stdout: str
    stderr: str
    table: str = ""
    report: str = ""  # the text of `attrib report` where the variant asks for one
    touched: str = ""  # how the input's folder changed during the runs (nothing may be created there)

    @property
    def outcome(self) -> str:
        if self.rc == 2:
            return "clean error"
        if self.rc == 0:
            return "salvaged with a warning" if "attrib: warning:" in self.stderr else "accepted"
        return f"exit {self.rc}"


def _attrib(args: list[str]) -> tuple[int, float, float, str, str]:
    """(exit code, seconds, peak RSS MB, stdout, stderr); -9 when killed past SECONDS."""
    t = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r") as status:
        p = subprocess.Popen([sys.executable, "-c", _CHILD, str(MEMORY_BYTES), status.name] + args, stdout=out,
                             stderr=err, stdin=subprocess.DEVNULL, cwd=ROOT, start_new_session=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        timer = threading.Timer(SECONDS, lambda: os.killpg(p.pid, signal.SIGKILL))
        timer.start()
        rc = p.wait()
        timer.cancel()
        hwm = re.search(r"VmHWM:\s*(\d+) kB", status.read())
        out.seek(0)
        err.seek(0)
        return (rc, time.monotonic() - t, int(hwm.group(1)) / 1024 if hwm else 0.0,
                out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace"))


def run_one(v: Variant, folder: Path) -> Result:
    folder.mkdir(parents=True, exist_ok=True)
    path = v.build(folder)
    before = _listing(folder)
    args = [str(TORCH), v.option, str(path)] + ["--context", "8"] * (v.option == "--model") if v.option else [str(path)]
    rc, secs, rss, stdout, stderr = _attrib(["analyze", *args, "--format", "json"])
    res = Result(v, path, rc, secs, rss, stdout, stderr)
    if rc == 0 and v.table:  # the terminal table of the same input: no escape or control character in it
        res.table = _attrib(["analyze", *args])[3]
    if rc == 0 and v.report:
        out = folder.with_name(folder.name + "-report") / f"report.{v.report}"
        out.parent.mkdir()
        if _attrib(["report", *args, "-o", str(out)])[0] == 0:
            res.report = out.read_text(encoding="utf-8")
    after = _listing(folder)
    res.touched = "" if after == before else f"{sorted(set(after) ^ set(before))} {before} -> {after}"
    return res


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    """Every entry under `folder`: (size, mtime ns), links not followed."""
    return {p.relative_to(folder).as_posix(): (p.lstat().st_size, p.lstat().st_mtime_ns)
            for p in folder.rglob("*")}


def run(folder: Path, workers: int = 2, variants: list[Variant] = VARIANTS) -> list[Result]:
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda iv: run_one(iv[1], folder / f"{iv[0]:02d}-{iv[1].name}"),
                             enumerate(variants)))


def _numbers(obj, key: str = ""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numbers(v, k)
    elif isinstance(obj, list):
        for v in obj:
            yield from _numbers(v, key)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield key, obj


def absurd(doc: dict) -> list[str]:
    """Figures that cannot be true: NaN/inf, negative amounts, shares over 1, steps over an hour."""
    out = []
    for key, x in _numbers(doc):
        if isinstance(x, float) and not math.isfinite(x):
            out.append(f"{key}={x}")
        elif x < 0 and key not in ("gap_ms", "delta_ms", "pid", "tid"):
            out.append(f"{key}={x} < 0")
        elif key.endswith(("share", "fraction")) and x > 1.0001:
            out.append(f"{key}={x} > 1")
    for ph in doc.get("phases", []):
        if (ph.get("step_ms") or {}).get("median") and ph["step_ms"]["median"] > 3.6e6:
            out.append(f"{ph['phase']} step of {ph['step_ms']['median']:.0f} ms")
    return out


def check(r: Result) -> list[str]:
    """What this result breaks: exit code, a traceback, the stderr line, figures, expectations."""
    bad = []
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    if r.rc not in (0, 2):
        bad.append(f"exit {r.rc}" + (" (killed: time limit)" if r.rc == -9 else ""))
    if "Traceback" in r.stderr or "internal error" in r.stderr:
        bad.append("traceback or internal error")
    if r.rss_mb > MEMORY_BYTES / 2**20:
        bad.append(f"{r.rss_mb:.0f} MB RSS")
    if r.rc == 2:
        if len(lines) != 1 or not lines[0].startswith("attrib: error: "):
            bad.append(f"error is not one line: {r.stderr[:300]!r}")
        elif r.path.name not in lines[0]:
            bad.append(f"error does not name the file: {lines[0][:200]}")
    if r.rc == 0:
        if any(not x.startswith("attrib: warning: ") for x in lines):
            bad.append(f"stray stderr: {r.stderr[:300]!r}")
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            return bad + ["stdout is not the analysis JSON"]
        if not doc["source"]["kernels"]:
            bad.append("exit 0 with no kernel analysed")
        bad += absurd(doc)
        if any(c in r.table for c in _ESCAPES) or (r.variant.table and not r.table):
            bad.append("control characters reach the terminal table (or no table)")
    if r.variant.report and not r.report:
        bad.append("no report written")
    if _LIVE_LINK.search(r.report) or any(c in r.report for c in _ESCAPES):
        bad.append("a live javascript: link or a control character in the report")
    if r.touched:
        bad.append(f"the input's folder changed: {r.touched}")
    want = {"error": (2,), "salvage": (0,), "ok": (0,), "any": (0, 2)}[r.variant.expect]
    if r.rc not in want:
        bad.append(f"expected {r.variant.expect}, got {r.outcome}: {r.stderr.strip()[:200]}")
    if r.variant.expect == "salvage" and r.rc == 0 and "attrib: warning:" not in r.stderr:
        bad.append("salvaged without a warning on stderr")
    if r.variant.says and r.variant.says.lower() not in r.stderr.lower():
        bad.append(f"stderr lacks {r.variant.says!r}: {r.stderr.strip()[:300]}")
    return bad


def totals(results: list[Result]) -> dict[str, int]:
    out = {"variants": len(results)}
    for r in results:
        out[r.outcome] = out.get(r.outcome, 0) + 1
    out["classes"] = len({r.variant.cls for r in results})
    return out


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        t = time.monotonic()
        results = run(Path(tmp))
        for r in results:
            problems = check(r)
            print(f"{r.variant.name:<36} {r.outcome:<24} {r.seconds:5.1f} s {r.rss_mb:6.0f} MB  "
                  f"{'; '.join(problems) or 'pass'}")
            first = (r.stderr.strip().splitlines() or [""])[0]
            print(f"    {first[:160]}")
        print(totals(results), f"{time.monotonic() - t:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
