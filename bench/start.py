"""Start time of the CLI: `attrib --version` and `attrib analyze` of a ~1 MB trace, wall seconds.

    python bench/start.py [--runs 7] [--trace T] [--before /work/main]

Each figure is the median of `--runs` fresh processes (`python -m attrib.cli ...`, bytecode
cached as an installed package has it), next to the floor of the same interpreter importing
polars and numpy (what `analyze` cannot avoid). `--before ROOT` times another checkout too.
Prints one line per figure and the README line.
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
TRACE = ROOT / "tests/fixtures/captured/hf_llama_cuda_b8_p512.pt.trace.json.gz"


def wall(cmd: list[str], env: dict[str, str]) -> float:
    """Seconds one run of `cmd` takes (it must exit 0)."""
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def median(cmd: list[str], env: dict[str, str], runs: int) -> float:
    wall(cmd, env)  # warm: bytecode written, file in the page cache
    return statistics.median(wall(cmd, env) for _ in range(runs))


def figures(root: Path, trace: Path, runs: int) -> dict[str, float]:
    """{figure: median seconds} for the checkout at `root`."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = tempfile.gettempdir() + f"/attrib_start_{root.name}"
    py = [sys.executable]
    return {
        "--version": median([*py, "-m", "attrib.cli", "--version"], env, runs),
        "analyze": median([*py, "-m", "attrib.cli", "analyze", str(trace)], env, runs),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--before", type=Path, help="another checkout to time the same way")
    args = ap.parse_args()
    env = {**os.environ}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    floor = median([sys.executable, "-c", "import polars, numpy"], env, args.runs)
    bare = median([sys.executable, "-c", "pass"], env, args.runs)
    size = args.trace.stat().st_size / 1e6
    print(f"trace {args.trace.name} ({size:.2f} MB on disk); {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}; median of {args.runs}")
    print(f"floor: python {bare:.3f} s, python + import polars, numpy {floor:.3f} s")
    rows = [("after", figures(ROOT, args.trace, args.runs))]
    if args.before is not None:
        rows.insert(0, ("before", figures(args.before, args.trace, args.runs)))
    for name, f in rows:
        print(f"{name}: attrib --version {f['--version']:.3f} s, "
              f"attrib analyze {f['analyze']:.3f} s")
    f = rows[-1][1]
    print(f"README: `attrib --version` {f['--version']:.2f} s, `attrib analyze` of a "
          f"{size:.1f} MB trace {f['analyze']:.2f} s (import polars+numpy alone "
          f"{floor:.2f} s; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
