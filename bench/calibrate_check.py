"""`attrib calibrate`'s measurement against a hand-written copy/read benchmark (issue 21, item 2).

    python bench/calibrate_check.py --json calib_check.json                  # on the GPU
    python bench/calibrate_check.py --device cpu --sizes 16,32 --n 128       # a CPU check

The hand benchmark shares no code with collectors.calibrate: one buffer pair per size, a loop of
`--loops` calls of `dst.copy_(src)` (2 x bytes moved) or `src.sum()` (bytes read) between two CUDA
events, GB/s = bytes x loops / elapsed (a mean over the loop, not a median of repetitions). The
JSON holds both results and their ratio per kind.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import collectors  # noqa: E402


def hand_bench(torch, device: str, sizes_mib: list[int], loops: int) -> dict:
    """GB/s of copy_ and sum per size, timed as one loop between events."""
    dev = torch.device(device)
    gpu = dev.type == "cuda"
    out: dict = {"copy": {}, "read": {}}
    for mib in sizes_mib:
        n = mib * 2**20 // 4
        src = torch.rand(n, device=dev)
        dst = torch.zeros(n, device=dev)
        for kind, fn, moved in (("copy", lambda: dst.copy_(src), 8 * n),
                                ("read", lambda: src.sum(), 4 * n)):
            fn()
            if gpu:
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(loops):
                    fn()
                b.record()
                torch.cuda.synchronize()
                secs = a.elapsed_time(b) / 1e3
            else:
                t0 = time.perf_counter()
                for _ in range(loops):
                    fn()
                secs = time.perf_counter() - t0
            out[kind][str(mib)] = moved * loops / secs / 1e9
        del src, dst
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sizes", default="1024,2048,4096", help="MiB, comma-separated")
    ap.add_argument("--n", type=int, default=8192, help="matmul size")
    ap.add_argument("--loops", type=int, default=50)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    import torch

    sizes = [int(s) for s in a.sizes.split(",")]
    t0 = time.perf_counter()
    cal = collectors.measure_device(a.device, sizes_mib=tuple(sizes), matmul_n=a.n,
                                    tick=lambda label: print(f"calibrate: {label}", flush=True))
    t_cal = time.perf_counter() - t0
    hand = hand_bench(torch, a.device, sizes, a.loops)
    hand_gbs = {k: sorted(v.values())[len(v) // 2] for k, v in hand.items()}   # median over sizes
    doc = {"calibrate": cal.to_dict(), "calibrate_s": round(t_cal, 2), "hand": hand,
           "hand_gbs": hand_gbs, "hand_loops": a.loops,
           "ratio": {k: cal.bandwidth[k] / hand_gbs[k] for k in hand_gbs}}
    print(json.dumps({"bandwidth_gbs": cal.bandwidth, "matrix_tflops": cal.tflops,
                      "skipped": cal.skipped, "hand_gbs": hand_gbs, "ratio": doc["ratio"]}, indent=1))
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
