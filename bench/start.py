"""Start time of the CLI: `attrib --version` and `attrib analyze` of a small trace, wall seconds,
as a ratio to the floor, `python -c "import polars, numpy"` (what `analyze` cannot avoid).

    python bench/start.py [--runs 9] [--trace T] [--before /tmp/old-checkout] [--format json]

Each figure is the median of `--runs` fresh processes run as a user's shell runs them: the
`attrib` console script beside this interpreter (else `python -m attrib.cli`), bytecode cached as
an installed package has it, PYTHONDONTWRITEBYTECODE unset. The floor and every command (and,
with `--before ROOT`, another checkout's) run in the same rounds, interleaved, every other round
reversed, so a load that drifts weighs on all alike. Prints one line per figure and the ratios.
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
TRACE = ROOT / "tests/fixtures/torch/h200_dense_prefill_cudagraph_decode.json.gz"

Cmd = tuple[list[str], dict[str, str], Path]


def wall(cmd: list[str], env: dict[str, str], cwd: Path = ROOT) -> tuple[float, float]:
    """(wall, CPU) seconds of one run of `cmd` (it must exit 0); CPU is user + system of the
    process tree, what a loaded machine changes least."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    t = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return t, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def medians(cmds: list[Cmd], runs: int) -> list[tuple[float, float]]:
    """Median (wall, CPU) seconds of each (cmd, env, cwd) over `runs` rounds, after one run
    each to warm up; a round runs each once, every other round in reverse order."""
    for cmd, env, cwd in cmds:
        wall(cmd, env, cwd)  # warm: bytecode written, file in the page cache
    got: list[list[tuple[float, float]]] = [[] for _ in cmds]
    for r in range(runs):
        order = list(enumerate(cmds))
        for i, (cmd, env, cwd) in order if r % 2 == 0 else order[::-1]:
            got[i].append(wall(cmd, env, cwd))
    return [(statistics.median(w for w, _ in g), statistics.median(c for _, c in g)) for g in got]


def environment(root: Path | None) -> dict[str, str]:
    """The environment a user's shell gives (bytecode written and read), the checkout at `root`
    first on the path (None: the floor, no checkout)."""
    env = {**os.environ}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if root is not None:
        env["PYTHONPATH"] = str(root)
        env["PYTHONPYCACHEPREFIX"] = tempfile.gettempdir() + f"/attrib_start_{root.name}"
    return env


def attrib_command() -> list[str]:
    """The `attrib` console script of this interpreter's environment, as a shell runs it."""
    script = Path(sys.executable).parent / "attrib"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "attrib.cli"]


def commands(root: Path, trace: Path, fmt: str | None = None) -> dict[str, Cmd]:
    """{figure: (cmd, env, cwd)} for the checkout at `root`; `fmt`: analyze's --format (None:
    its default, the table)."""
    env = environment(root)
    attrib = attrib_command()
    analyze = [*attrib, "analyze", str(trace.resolve()), *(["--format", fmt] if fmt else [])]
    return {"--version": ([*attrib, "--version"], env, root), "analyze": (analyze, env, root)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--before", type=Path, help="another checkout to time the same way")
    ap.add_argument("--format", help="analyze's --format (default: its own, the table)")
    args = ap.parse_args()
    roots = ([args.before] if args.before is not None else []) + [ROOT]
    names = ["before", "after"][2 - len(roots):]
    floor: Cmd = ([sys.executable, "-c", "import polars, numpy"], environment(None), ROOT)
    bare: Cmd = ([sys.executable, "-c", "pass"], environment(None), ROOT)
    cmds = [commands(root, args.trace, args.format) for root in roots]
    every = [bare, floor, *(c[f] for c in cmds for f in ("--version", "analyze"))]
    got = medians(every, args.runs)
    (b, f), rest = got[:2], got[2:]
    size = args.trace.stat().st_size / 1e6
    print(f"trace {args.trace.name} ({size:.2f} MB on disk), --format {args.format or 'table'}; "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; medians of {args.runs} "
          f"interleaved rounds; `{' '.join(attrib_command())}`")
    print(f"floor (wall, cpu s): python {b[0]:.3f}, {b[1]:.3f}; python -c 'import polars, numpy' "
          f"{f[0]:.3f}, {f[1]:.3f}")
    for i, name in enumerate(names):
        v, a = rest[2 * i], rest[2 * i + 1]
        print(f"{name} (wall, cpu s): attrib --version {v[0]:.3f}, {v[1]:.3f}; attrib analyze "
              f"{a[0]:.3f}, {a[1]:.3f}; analyze / floor {a[0] / f[0]:.2f}x wall, "
              f"{a[1] / f[1]:.2f}x cpu")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
