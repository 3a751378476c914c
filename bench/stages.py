"""Where `attrib analyze` spends its time, stage by stage, against the bare orjson parse floor.

    python bench/stages.py TRACE [--repeat N]

Runs `attrib analyze TRACE --format json` under cProfile in a fresh process, one thread
(ATTRIB_THREADS=1, and the stages polars' pool would run called in order: cProfile sees only the
thread it runs on), and reports the cumulative time of each stage's entry point (the reader,
linking, steps, components, costs, the ledger, the analysis, the rules, the JSON) as seconds and as
a ratio to the floor (orjson.loads of the same file, its own fresh process, as bench/load.py runs
it). Profiling slows Python-heavy stages more than the ones in polars' and msgspec's C code, so the
shares are an upper bound for the Python parts; the floor ratio of the whole run is what
bench/load.py measures without the profiler. The stages overlap where one calls another (the
analysis calls the roofline); each row is a function's own subtree.
"""

from __future__ import annotations

import argparse
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load import _FLOOR  # noqa: E402  (the floor exactly as bench/load.py measures it)

# (label, module path suffix, function): each stage's entry point
STAGES = (
    ("read (collectors)", "collectors/__init__.py", "load"),
    ("attribute (pipeline)", "attrib/pipeline.py", "attribute"),
    ("  link", "attrib/link/launches.py", "link"),
    ("  step spans", "attrib/steps/phases.py", "step_spans"),
    ("  assign steps", "attrib/steps/phases.py", "assign_steps"),
    ("  classify", "attrib/components/classify.py", "classify"),
    ("  ledger", "attrib/steps/ledger.py", "ledger"),
    ("analysis (build)", "attrib/analysis/build.py", "build"),
    ("rules", "rules/__init__.py", "run"),
    ("JSON out", "attrib/analysis/model.py", "to_json"),
)


def _floor(trace: Path) -> float:
    out = subprocess.run([sys.executable, "-c", _FLOOR, str(trace)], capture_output=True,
                         text=True, check=True)
    import json

    return float(json.loads(out.stdout)["wall_s"])


# The command in one thread, profiled: the stages polars' pool would run (attrib.threads) are
# called in order here instead, as cProfile sees only the thread it runs on; `main` is given its
# arguments, so it returns (as the console script it ends the process before the profile is kept).
_PROFILED = """
import cProfile, sys
import attrib.threads
from attrib.cli import main
attrib.threads._on_pool = lambda stages: [s() for s in stages]
out, argv = sys.argv[1], sys.argv[2:]
prof = cProfile.Profile()
prof.enable()
main(argv)
prof.disable()
prof.dump_stats(out)
"""


def _profile(trace: Path, out: Path) -> None:
    env = dict(os.environ, ATTRIB_THREADS="1")
    cmd = [sys.executable, "-c", _PROFILED, str(out), "analyze", str(trace), "--format", "json"]
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=True)


def _stages(prof: Path) -> tuple[float, dict[str, float]]:
    st = pstats.Stats(str(prof))
    got: dict[str, float] = {}
    for (path, _line, name), (_cc, _nc, _tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        for label, suffix, func in STAGES:
            if name == func and path.endswith(suffix):
                got[label] = max(got.get(label, 0.0), ct)
    return st.total_tt, got  # type: ignore[attr-defined]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    floors, totals, rows = [], [], {label: [] for label, _, _ in STAGES}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            floors.append(_floor(args.trace))
            prof = Path(tmp) / f"p{i}.prof"
            _profile(args.trace, prof)
            total, got = _stages(prof)
            totals.append(total)
            for label in rows:
                rows[label].append(got.get(label, 0.0))
    floor = statistics.median(floors)
    total = statistics.median(totals)
    print(f"floor (orjson.loads): {floor:.2f} s; profiled run: {total:.2f} s "
          f"({total / floor:.2f}x); load {os.getloadavg()[0]:.1f}")
    for label, vals in rows.items():
        v = statistics.median(vals)
        print(f"  {label:<24} {v:7.2f} s  {v / floor:5.2f}x floor  {v / total:6.1%} of run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
