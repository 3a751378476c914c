"""Wall time and peak RSS of `attrib analyze` against the bare orjson parse floor, one run.

    python bench/load.py TRACE [--repeat N]

Each side runs in its own fresh Python process (so peak RSS is its own) and reads the same file:
the floor reads it, gunzips it if needed and calls orjson.loads on the whole document; attrib runs
the whole analysis (read, link, phases, components, JSON document). Prints both and the ratios
attrib/floor (lower is better; the goal is wall <= 1.0 and RSS <= 0.75).
"""

from __future__ import annotations

import argparse
import json
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
print(json.dumps({'wall_s': time.perf_counter() - t, 'rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 'events': n}))
"""

_ATTRIB = r"""
import json, resource, sys, time
t = time.perf_counter()
import orjson
from attrib.app import analyze_path
doc = analyze_path(sys.argv[1])
orjson.dumps(doc)
print(json.dumps({'wall_s': time.perf_counter() - t, 'rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 'events': doc['source']['events'], 'kernels': doc['source']['kernels']}))
"""


def _run(code: str, trace: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", code, str(trace)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=1, help="runs of each side; the best wall and RSS are kept")
    args = ap.parse_args()
    floor = min((_run(_FLOOR, args.trace) for _ in range(args.repeat)), key=lambda r: r["wall_s"])
    ours = min((_run(_ATTRIB, args.trace) for _ in range(args.repeat)), key=lambda r: r["wall_s"])
    size = args.trace.stat().st_size / 1e6
    print(f"trace: {args.trace} ({size:.1f} MB on disk, {floor['events']} events, {ours['kernels']} kernels)")
    print(f"orjson.loads floor : {floor['wall_s']:7.2f} s  {floor['rss_mb']:8.0f} MB peak RSS")
    print(f"attrib analyze     : {ours['wall_s']:7.2f} s  {ours['rss_mb']:8.0f} MB peak RSS")
    print(f"ratio attrib/floor : wall {ours['wall_s'] / floor['wall_s']:.2f}x   RSS {ours['rss_mb'] / floor['rss_mb']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
