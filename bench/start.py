"""Start time of the CLI: `attrib --version` and `attrib analyze` of a ~1 MB trace, wall seconds.

    python bench/start.py [--runs 7] [--trace T] [--before /work/main] [--format json]

Each figure is the median of `--runs` fresh processes (`python -m attrib.cli ...`, bytecode
cached as an installed package has it), next to the floor of the same interpreter importing
polars and numpy (what `analyze` cannot avoid). `--before ROOT` times another checkout too,
its runs and this checkout's interleaved.
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
    return medians([(cmd, env, cwd)], runs)[0]


def medians(cmds: list[tuple[list[str], dict[str, str], Path]],
            runs: int) -> list[tuple[float, float]]:
    """Median (wall, CPU) seconds of each (cmd, env, cwd) over `runs` rounds, after one run
    each to warm up; a round runs each once, every other round in reverse order (so a load
    that drifts weighs on all alike)."""
    for cmd, env, cwd in cmds:
        wall(cmd, env, cwd)  # warm: bytecode written, file in the page cache
    got: list[list[tuple[float, float]]] = [[] for _ in cmds]
    for r in range(runs):
        order = list(enumerate(cmds))
        for i, (cmd, env, cwd) in order if r % 2 == 0 else order[::-1]:
            got[i].append(wall(cmd, env, cwd))
    return [(statistics.median(w for w, _ in g), statistics.median(c for _, c in g)) for g in got]


def commands(root: Path, trace: Path,
             fmt: str | None = None) -> dict[str, tuple[list[str], dict[str, str], Path]]:
    """{figure: (cmd, env, cwd)} for the checkout at `root`; `fmt`: analyze's --format (None:
    its default, the table)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = tempfile.gettempdir() + f"/attrib_start_{root.name}"
    py = [sys.executable, "-m", "attrib.cli"]
    analyze = [*py, "analyze", str(trace.resolve()), *(["--format", fmt] if fmt else [])]
    return {"--version": ([*py, "--version"], env, root), "analyze": (analyze, env, root)}


def figures(roots: list[Path], trace: Path, runs: int,
            fmt: str | None = None) -> list[dict[str, tuple[float, float]]]:
    """{figure: median seconds} for each checkout of `roots`, their runs interleaved."""
    cmds = [commands(root, trace, fmt) for root in roots]
    out: list[dict[str, tuple[float, float]]] = [{} for _ in roots]
    for name in cmds[0]:
        for o, m in zip(out, medians([c[name] for c in cmds], runs)):
            o[name] = m
    return out


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
    roots = ([args.before] if args.before is not None else []) + [ROOT]
    got = figures(roots, args.trace, args.runs, args.format)
    rows = list(zip(["before", "after"][2 - len(roots):], got))
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
