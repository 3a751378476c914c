"""Start time of the CLI: `attrib --version` and `attrib analyze` of a ~1 MB trace, wall seconds.

    python bench/start.py [--runs 7] [--trace T] [--before /work/main] [--format json]

Each figure is the median of `--runs` fresh processes (`python -m attrib.cli ...`, bytecode
cached as an installed package has it), next to the floor of the same interpreter importing
polars and numpy (what `analyze` cannot avoid). `--before ROOT` times another checkout too.
Prints one line per figure and the README line.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests/fixtures/captured/hf_llama_cuda_b8_p512.pt.trace.json.gz"


def wall(cmd: list[str], env: dict[str, str], cwd: Path = ROOT) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of `cmd` (it must exit 0); CPU is user + system of the
    process tree, what a loaded machine changes least."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    t = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return t, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median(cmd: list[str], env: dict[str, str], runs: int,
           cwd: Path = ROOT) -> tuple[float, float]:
    """Median (wall, CPU) seconds over `runs` runs in `cwd` (`-m` puts it first on sys.path),
    after one to warm up."""
    wall(cmd, env, cwd)  # warm: bytecode written, file in the page cache
    got = [wall(cmd, env, cwd) for _ in range(runs)]
    return statistics.median(w for w, _ in got), statistics.median(c for _, c in got)


def figures(root: Path, trace: Path, runs: int,
            fmt: str | None = None) -> dict[str, tuple[float, float]]:
    """{figure: median seconds} for the checkout at `root`; `fmt`: analyze's --format (None:
    its default, the table)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = tempfile.gettempdir() + f"/attrib_start_{root.name}"
    py = [sys.executable]
    return {
        "--version": median([*py, "-m", "attrib.cli", "--version"], env, runs, root),
        "analyze": median([*py, "-m", "attrib.cli", "analyze", str(trace.resolve()),
                           *(["--format", fmt] if fmt else [])], env, runs, root),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--before", type=Path, help="another checkout to time the same way")
    ap.add_argument("--format", help="analyze's --format (default: its own, the table)")
    args = ap.parse_args()
    env = {**os.environ}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    floor = median([sys.executable, "-c", "import polars, numpy"], env, args.runs)
    bare = median([sys.executable, "-c", "pass"], env, args.runs)
    size = args.trace.stat().st_size / 1e6
    print(f"trace {args.trace.name} ({size:.2f} MB on disk); {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}; median of {args.runs}")
    print(f"floor (wall, cpu s): python {bare[0]:.3f}, {bare[1]:.3f}; python + import polars, "
          f"numpy {floor[0]:.3f}, {floor[1]:.3f}")
    rows = [("after", figures(ROOT, args.trace, args.runs, args.format))]
    if args.before is not None:
        rows.insert(0, ("before", figures(args.before, args.trace, args.runs, args.format)))
    for name, f in rows:
        v, a = f["--version"], f["analyze"]
        print(f"{name} (wall, cpu s): attrib --version {v[0]:.3f}, {v[1]:.3f}; "
              f"attrib analyze {a[0]:.3f}, {a[1]:.3f}")
    v, a = rows[-1][1]["--version"], rows[-1][1]["analyze"]
    print(f"README: `attrib --version` {v[0]:.2f} s wall ({v[1]:.2f} s CPU), `attrib analyze` of "
          f"a {size:.1f} MB trace {a[0]:.2f} s wall ({a[1]:.2f} s CPU); import polars+numpy "
          f"alone {floor[0]:.2f} s ({floor[1]:.2f} s CPU); {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
