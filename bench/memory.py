"""Peak RSS and time of reading one huge Kineto trace, against the orjson parse floor.

    python bench/memory.py [--sizes 1,4,8] [--gzip] [--dir DIR] [--floor-max 1] [--analyze-max 1]
                           [--reuse] [--no-reader] [--chunk-steps N]

For each size (GB of raw JSON) it builds a trace from the demo trace with bench/scale.py (events
repeated with shifted times and ids; plain JSON, or gzip'd with --gzip), then runs, each in a
fresh process: the Kineto reader (`collectors.kineto.read`), `attrib analyze TRACE --format json`
(up to --analyze-max GB), the whole-text reader it replaced (`read(..., block=0)`, up to
--before-max GB), and the floor (read, gunzip, `orjson.loads` of the whole file; up to
--floor-max GB: it holds ~6.4x the raw JSON; larger sizes are scaled linearly from the largest
measured and marked so). Peak RSS is of the whole process tree: the sum of VmRSS over the process
and its descendants, polled every 20 ms, or the kernel's own peak of the process (wait4) where
that is larger. Wall and CPU (user + system, the process and its reaped children) per run. Each
trace is deleted after its runs (--keep keeps them; --reuse takes one already in --dir and
keeps it, so two checkouts run on one file; --chunk-steps N is passed to `attrib analyze`).
Prints a table and writes JSON lines to -o.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "traces" / "h200_qwen3moe_eager_prefill_decode.json.gz"
COPY_BYTES = 24.32e6  # raw JSON per copy of the demo trace as bench/scale.py writes it

_READ = """
import sys, time
from collectors import kineto
t = time.perf_counter()
tr = kineto.read(sys.argv[1])
wall = time.perf_counter() - t
import polars as pl
def size(df):  # text columns: 16-byte views plus each distinct value's bytes past 12, once
    out = 0
    for s in df.get_columns():
        if s.dtype != pl.Utf8:
            out += s.estimated_size()
            continue
        n = s.unique().str.len_bytes()
        out += 16 * s.len() + n.filter(n > 12).sum()
    return out
names = ("kernels", "ops", "frames", "launches", "markers", "copies")
tables = sum(size(getattr(tr, n)) for n in names)
print({"wall_s": wall, "events": tr.meta.events, "tables_mb": tables / 1e6})
"""
_BEFORE = _READ.replace(
    "kineto.read(sys.argv[1])", "kineto.read(sys.argv[1], block=0)"
)  # the whole-text reader
_ANALYZE = """
import contextlib, io, sys, time
t = time.perf_counter()
from attrib.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    rc = main(["analyze", sys.argv[1], "--format", "json", *sys.argv[2:]])
assert rc == 0, rc
print({"wall_s": time.perf_counter() - t})
"""
_FLOOR = """
import gzip, sys, time
import orjson
t = time.perf_counter()
raw = open(sys.argv[1], 'rb').read()
if raw[:2] == b'\\x1f\\x8b':
    raw = gzip.decompress(raw)
doc = orjson.loads(raw)
print({"wall_s": time.perf_counter() - t, "events": len(doc["traceEvents"])})
"""


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return out


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _tree_rss_mb(pid: int) -> float:
    todo, total = [pid], 0.0
    while todo:
        p = todo.pop()
        total += _rss_mb(p)
        todo += _children(p)
    return total


def measure(code: str, trace: Path, *extra: str) -> dict:
    """Run `code` on the trace (and `extra` arguments) in a fresh interpreter: its printed
    dict, peak tree RSS, CPU."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(trace), *extra], stdout=subprocess.PIPE, env=env,
        text=True)
    peak = 0.0
    t = time.perf_counter()
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        peak = max(peak, _tree_rss_mb(proc.pid))
        time.sleep(0.02)
    wall = time.perf_counter() - t
    out = proc.stdout.read() if proc.stdout else ""
    if status:
        raise RuntimeError(f"{code.split()[1]} failed on {trace} (status {status})")
    got = eval(out.strip().splitlines()[-1])  # the dict our own snippet printed
    return got | {"peak_rss_mb": max(peak, ru.ru_maxrss / 1024), "cpu_s": ru.ru_utime + ru.ru_stime,
                  "process_s": wall}


def build(gb: float, gz: bool, where: Path, reuse: bool = False) -> Path:
    copies = max(1, round(gb * 1e9 / COPY_BYTES))
    out = where / f"scaled_{gb:g}gb.json{'.gz' if gz else ''}"
    if reuse and out.exists():  # bench/scale.py writes the same file each time
        return out
    subprocess.run([sys.executable, str(ROOT / "bench" / "scale.py"), str(DEMO), str(copies), str(out)],
                   check=True, stdout=subprocess.DEVNULL)
    return out


def _commit() -> str:
    """The checkout's commit (which side of a before/after a row is)."""
    got = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True)
    return got.stdout.strip()


def _raw_bytes(trace: Path, gb: float) -> float:
    return trace.stat().st_size if trace.suffix != ".gz" else gb * 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,4,8", help="GB of raw JSON, comma-separated")
    ap.add_argument("--gzip", action="store_true", help="write the scaled traces gzip'd")
    ap.add_argument("--dir", type=Path, default=ROOT / "out", help="where the traces are written")
    ap.add_argument("--floor-max", type=float, default=1.0, help="largest size (GB) the floor is run on")
    ap.add_argument(
        "--analyze-max", type=float, default=1.0, help="largest size (GB) attrib analyze is run on"
    )
    ap.add_argument("--before-max", type=float, default=0.0,
                    help="largest size (GB) the whole-text reader (the reader before streaming) is run on")
    ap.add_argument("--keep", action="store_true", help="keep the traces")
    ap.add_argument("--reuse", action="store_true",
                    help="use a trace already in --dir (implies --keep): before/after on one file")
    ap.add_argument("--no-reader", action="store_true", help="skip the reader-only run")
    ap.add_argument("--chunk-steps", type=int, default=None,
                    help="attrib analyze --chunk-steps N (0: read whole; default: its own)")
    ap.add_argument("-o", type=Path, help="append JSON lines of the results here")
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    floor_per_gb: tuple[float, float] | None = None
    rows = []
    for gb in (float(s) for s in args.sizes.split(",")):
        trace = build(gb, args.gzip, args.dir, args.reuse)
        try:
            row: dict = {"gb": gb, "file": trace.name, "disk_mb": trace.stat().st_size / 1e6,
                         "raw_mb": _raw_bytes(trace, gb) / 1e6, "load": os.getloadavg()[0],
                         "commit": _commit()}
            if not args.no_reader:
                row["read"] = measure(_READ, trace)
            if gb <= args.before_max:
                row["before"] = measure(_BEFORE, trace)
            if gb <= args.analyze_max:
                try:
                    chunks = () if args.chunk_steps is None else ("--chunk-steps",
                                                                  str(args.chunk_steps))
                    row["analyze"] = measure(_ANALYZE, trace, *chunks)
                    row["chunk_steps"] = args.chunk_steps
                except RuntimeError as exc:  # e.g. an optional dependency missing where it runs
                    print(exc, file=sys.stderr)
            if gb <= args.floor_max:
                row["floor"] = measure(_FLOOR, trace)
                floor_per_gb = (row["floor"]["wall_s"] / gb, row["floor"]["peak_rss_mb"] / gb)
            elif floor_per_gb is not None:
                row["floor"] = {"wall_s": floor_per_gb[0] * gb, "peak_rss_mb": floor_per_gb[1] * gb,
                                "scaled": True}
        finally:
            if not (args.keep or args.reuse):
                trace.unlink()
        rows.append(row)
        print(_line(row), flush=True)
        if args.o:
            with args.o.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
    return 0


def _line(row: dict) -> str:
    r, f = row.get("read"), row.get("floor")
    out = f"{row['file']}: {row['raw_mb']:.0f} MB raw"
    if r:
        ratio = f" = {r['wall_s'] / f['wall_s']:.2f}x floor{' (scaled)' if f.get('scaled') else ''}" if f else ""
        out += (
            f", {r['events']:,} events; read {r['wall_s']:.1f} s{ratio}, CPU {r['cpu_s']:.1f} s, "
            f"peak RSS {r['peak_rss_mb']:.0f} MB (tables {r['tables_mb']:.0f} MB)"
        )
    if "before" in row:
        b = row["before"]
        out += f"; whole-text reader {b['wall_s']:.1f} s, peak RSS {b['peak_rss_mb']:.0f} MB"
    if "analyze" in row:
        a = row["analyze"]
        out += f"; analyze {a['wall_s']:.1f} s, CPU {a['cpu_s']:.1f} s, peak RSS {a['peak_rss_mb']:.0f} MB"
    if f:
        out += f"; floor {f['wall_s']:.1f} s, {f['peak_rss_mb']:.0f} MB"
    return out + f"; load {row['load']:.1f}"


if __name__ == "__main__":
    sys.exit(main())
