"""Wall time, CPU time and peak RSS of `attrib analyze` against the bare orjson parse floor.

    python bench/load.py TRACE [--repeat N]

Each side runs in its own fresh Python process (so peak RSS is its own) and reads the same file:
the floor reads it, gunzips it if needed and calls orjson.loads on the whole document; attrib runs
the command a user runs, `attrib analyze TRACE --format json` (its imports, read, link, phases,
components, costs, roofline, rules, the JSON written to stdout), in-process through `attrib.cli.main`. The two
alternate, N runs each; the medians are printed with the ratios attrib/floor (lower is better; the
goal is wall <= 0.6 and RSS <= 0.5) and the load average, since on a shared machine wall time
depends on it. CPU time is user + system of all the process's threads (polars runs several) and of
its child processes, if any. Peak RSS of attrib is the process's own peak plus the largest child's
peak (RUSAGE_CHILDREN), a sum of two peaks that need not coincide, so an upper bound; the child's
figure as the kernel counts it includes the parent's resident pages at the moment the child was
started (exec after vfork), so it overstates the child too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

_FLOOR = r"""
import gzip, json, resource, sys, time
import orjson
t = time.perf_counter()
raw = open(sys.argv[1], 'rb').read()
if raw[:2] == b'\x1f\x8b':
    raw = gzip.decompress(raw)
doc = orjson.loads(raw)
n = len(doc.get('traceEvents', []))
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({'wall_s': time.perf_counter() - t, 'cpu_s': ru.ru_utime + ru.ru_stime, 'rss_mb': ru.ru_maxrss / 1024, 'events': n}))
"""

_ATTRIB = r"""
import contextlib, io, json, resource, sys, time
t = time.perf_counter()
from attrib.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    rc = main(["analyze", sys.argv[1], "--format", "json"])
wall = time.perf_counter() - t
assert rc == 0, rc
ru, ch = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
doc = json.loads(out.getvalue())
print(json.dumps({'wall_s': wall, 'cpu_s': ru.ru_utime + ru.ru_stime + ch.ru_utime + ch.ru_stime,
                  'rss_mb': (ru.ru_maxrss + ch.ru_maxrss) / 1024, 'child_rss_mb': ch.ru_maxrss / 1024,
                  'events': doc['source']['events'], 'kernels': doc['source']['kernels']}))
"""


def _run(code: str, trace: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", code, str(trace)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _median(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in ("wall_s", "cpu_s", "rss_mb", "child_rss_mb")
            if k in runs[0]} | {
        k: runs[0][k] for k in ("events", "kernels") if k in runs[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each side (alternating); medians are kept")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    floors, ours = [], []
    for _ in range(args.repeat):
        floors.append(_run(_FLOOR, args.trace))
        ours.append(_run(_ATTRIB, args.trace))
    floor, mine = _median(floors), _median(ours)
    size = args.trace.stat().st_size / 1e6
    print(f"trace: {args.trace} ({size:.1f} MB on disk, {floor['events']} events, {mine['kernels']} kernels)")
    print(f"medians of {args.repeat} runs each; load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at "
          f"the end, on {os.cpu_count()} CPUs")
    for label, r in (("orjson.loads floor", floor), ("attrib analyze", mine)):
        child = f" (of which child processes {r['child_rss_mb']:.0f} MB)" if r.get("child_rss_mb") else ""
        print(f"{label:<19}: wall {r['wall_s']:7.2f} s  CPU {r['cpu_s']:7.2f} s  {r['rss_mb']:8.0f} MB peak RSS{child}")
    print(f"ratio attrib/floor : wall {mine['wall_s'] / floor['wall_s']:.2f}x  CPU {mine['cpu_s'] / floor['cpu_s']:.2f}x  "
          f"RSS {mine['rss_mb'] / floor['rss_mb']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
