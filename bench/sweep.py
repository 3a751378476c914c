"""`attrib sweep` wall time over the H200 grid: --jobs 1 against --jobs 2 (and --ray).

    python bench/sweep.py [--runs 3] [--ray] [FOLDER]

Each figure is the median of `--runs` runs of the CLI (`python -m attrib.cli sweep FOLDER -j N
--format json`), bytecode cached; the tables of all runs must be equal. Prints one line each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRID = ROOT / "tests/fixtures/captured/sweep"


def timed(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "attrib.cli", "sweep", *args, "--format", "json"],
                         env=env, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - t0, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", nargs="?", type=Path, default=GRID)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ray", action="store_true", help="also time --ray (a local Ray)")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = tempfile.gettempdir() + "/attrib_sweep_bench"
    n = len(list(args.folder.glob("*.pt.trace.json.gz")))
    ways = {"--jobs 1": ["-j", "1"], "--jobs 2": ["-j", "2"]}
    if args.ray:
        ways["--ray (local)"] = ["--ray="]
    timed([str(args.folder), "-j", "1"], env)  # warm: bytecode, page cache
    tables, medians = set(), {}
    for name, extra in ways.items():
        runs = [timed([str(args.folder), *extra], env) for _ in range(args.runs)]
        medians[name] = statistics.median(t for t, _ in runs)
        tables |= {out for _, out in runs}
        print(f"{name}: {medians[name]:.2f} s median of {args.runs} "
              f"({', '.join(f'{t:.2f}' for t, _ in runs)})", flush=True)
    print(f"{n} traces; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; "
          f"tables identical: {len(tables) == 1}; --jobs 2 speed-up "
          f"{medians['--jobs 1'] / medians['--jobs 2']:.2f}x")
    return 0 if len(tables) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
