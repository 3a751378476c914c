"""Does a sample leave the process slower after it (issue 21, item 4)? CUPTI stays set up.

    python bench/sampled_residual.py --device cuda --rounds 8 --json residual.json

Kineto keeps CUPTI initialised after a profiler stops unless TEARDOWN_CUPTI=1 (read at each
stop), so every step after the first sample, sampled or not, runs in that state: an A/B of
unsampled against bare steps in one process cannot see a cost it adds. Here each round takes two
samples, one stopped with TEARDOWN_CUPTI=1 (CUPTI finalised: the state before any profiling)
and one with TEARDOWN_CUPTI=0 (kept, the default), and after each times `--steps` decode steps
and a launch-bound loop of tiny kernels; the paired difference (kept - torn down) per round,
mean and bootstrap CI. The next sample's start shows whether the teardown happened (a
re-initialised CUPTI starts slowly).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sampled_overhead import build, mean_ci  # noqa: E402


def sample(torch, step, teardown: str) -> float:
    """One profiled step stopped under TEARDOWN_CUPTI=teardown; its start (prepare), ms."""
    from torch import profiler as tp

    os.environ["TEARDOWN_CUPTI"] = teardown
    acts = [tp.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(tp.ProfilerActivity.CUDA)
    prof = tp.profile(activities=acts, record_shapes=True)
    t0 = time.perf_counter()
    prof.start()
    start_ms = (time.perf_counter() - t0) * 1e3
    step()
    prof.stop()
    time.sleep(0.5)   # a teardown may finish in Kineto's own thread
    return start_ms


def timed(torch, step, steps: int, launches: int) -> dict:
    x = torch.zeros(16, device="cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    ts = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t0)
    sync()
    t0 = time.perf_counter()
    for _ in range(launches):
        x.add_(1.0)
    sync()
    return {"step_ms": statistics.median(ts) * 1e3, "step_mean_ms": statistics.fmean(ts) * 1e3,
            "launch_us": (time.perf_counter() - t0) / launches * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--launches", type=int, default=20000)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    import torch

    dims = (2, 128, 1024, 32) if a.device == "cpu" else (8, 1024, 32000, 256)
    step, reset = build(a.device, dims[0], dims[1], dims[2], 8, dims[3])
    reset()
    fresh = timed(torch, step, a.steps, a.launches)   # before any profiler
    reset()
    rows = []
    for r in range(a.rounds):
        row = {}
        for mode in ("1", "0"):
            reset()
            row[f"start_ms_{mode}"] = sample(torch, step, mode)
            reset()
            row[mode] = timed(torch, step, a.steps, a.launches)
        rows.append(row)
        print(r, json.dumps(row), flush=True)
    doc = {"fresh": fresh, "rounds": rows}
    for key in ("step_ms", "step_mean_ms", "launch_us"):
        doc[f"kept_minus_torn_{key}"] = mean_ci([x["0"][key] - x["1"][key] for x in rows])
    # each round's kept sample starts after its torn-down one, its torn-down one after the last
    # round's kept one: a start after a teardown re-initialises CUPTI
    doc["start_ms_after_teardown"] = statistics.median(x["start_ms_0"] for x in rows)
    doc["start_ms_after_kept"] = statistics.median(x["start_ms_1"] for x in rows[1:])
    print(json.dumps({k: v for k, v in doc.items() if k != "rounds"}, indent=1), flush=True)
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
