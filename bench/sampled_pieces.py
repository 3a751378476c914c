"""Where one sample's cost goes (issue 21, item 4): each piece of a sampled capture timed.

    python bench/sampled_pieces.py --device cuda --samples 20 --json pieces.json
    python bench/sampled_pieces.py --device cpu --tiny --samples 3     # a CPU check

The same decode loop as bench/sampled_overhead.py. Each sample drives torch.profiler by hand the
way `collectors.capture(every=N)` does (schedule: one warmup step, one recorded step) with a
cuda-synchronised perf_counter around each piece: the profile object's construction, start
(the WARMUP transition: Kineto's prepare, CUPTI), the warmup step, the switch to recording
(enable), the recorded step, stop (Kineto's disable and its C++ post-processing), the JSON save
and the gzip, then the next plain step. Also: whether torch built FunctionEvents (the Python
parse) by then, whether `save` holds the GIL (a Python counter running in the main thread while
a thread saves), and the env/torch facts the analysis depends on.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sampled_overhead import build  # noqa: E402


def _med(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {"median": statistics.median(xs), "min": xs[0], "max": xs[-1], "n": len(xs)}


def one_sample(torch, step, sync, out: Path, stack: bool, k: int, trace_only: bool = False) -> dict:
    """One sample, each piece timed (ms)."""
    from torch import profiler as tp

    clock, t = time.perf_counter, {}
    acts = [tp.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(tp.ProfilerActivity.CUDA)
    sched = tp.schedule(wait=0, warmup=1, active=1, repeat=1)
    ready = {}

    def on_ready(p) -> None:
        ready["t"] = clock()

    t0 = clock()
    extra = {}
    if trace_only:
        extra["experimental_config"] = torch._C._profiler._ExperimentalConfig(trace_only=True)
    prof = tp.profile(activities=acts, schedule=sched, on_trace_ready=on_ready,
                      record_shapes=True, with_stack=stack, **extra)
    t1 = clock()
    prof.start()
    sync()
    t2 = clock()
    with torch.profiler.record_function("decode (tokens=8)"):
        step()
    t3 = clock()
    prof.step()
    sync()
    t4 = clock()
    with torch.profiler.record_function("decode (tokens=8)"):
        step()
    t5 = clock()
    prof.step()   # stop + on_ready
    t6 = clock()
    lazy = getattr(prof.profiler, "_function_events", "n/a") is None
    raw = out / f"s{k}.json"
    prof.export_chrome_trace(str(raw))
    t7 = clock()
    with open(raw, "rb") as fin, gzip.open(out / f"s{k}.json.gz", "wb", 6) as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
    t8 = clock()
    step()
    t9 = clock()
    size = raw.stat().st_size
    cats = {}
    if k == 1:   # what the trace holds, by category (the variants must agree)
        for e in json.loads(raw.read_text()).get("traceEvents", []):
            c = e.get("cat", e.get("ph"))
            cats[c] = cats.get(c, 0) + 1
    raw.unlink()
    ms = lambda a, b: (b - a) * 1e3  # noqa: E731
    return {"construct": ms(t0, t1), "start": ms(t1, t2), "warmup_step": ms(t2, t3),
            "enable": ms(t3, t4), "recorded_step": ms(t4, t5), "stop": ms(t5, ready["t"]),
            "after_ready": ms(ready["t"], t6), "save": ms(t6, t7), "gzip": ms(t7, t8),
            "next_step": ms(t8, t9), "json_bytes": size, "events_lazy": lazy, "cats": cats}


def gil_probe(torch, step, sync, out: Path, stack: bool) -> dict:
    """Does `save` let a Python loop run? Loop iterations/ms while a thread saves vs alone."""
    from torch import profiler as tp

    acts = [tp.ProfilerActivity.CPU] + ([tp.ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    profs = []
    for _ in range(2):   # a result saves once
        with tp.profile(activities=acts, record_shapes=True, with_stack=stack) as prof:
            step()
        profs.append(prof)
    raw = str(out / "gil.json")

    def spin(stop_at: float) -> int:
        n = 0
        while time.perf_counter() < stop_at:
            n += 1
        return n

    t0 = time.perf_counter()
    profs[0].export_chrome_trace(raw)
    save_ms = (time.perf_counter() - t0) * 1e3
    alone = spin(time.perf_counter() + save_ms / 1e3)
    th = threading.Thread(target=profs[1].export_chrome_trace, args=(raw,))
    t0 = time.perf_counter()
    th.start()
    during = spin(t0 + save_ms / 1e3)
    th.join()
    return {"save_ms": save_ms, "loop_alone": alone, "loop_during_thread_save": during,
            "ratio": during / max(alone, 1)}


def _trace_only_ok(torch) -> bool:
    try:
        return bool(torch._C._profiler._ExperimentalConfig(trace_only=True).trace_only)
    except Exception:
        return False


def facts(torch) -> dict:
    import inspect

    from torch.autograd import profiler as ap

    src = inspect.getsource(ap.profile.__exit__)
    return {"torch": torch.__version__, "cuda": torch.version.cuda,
            "exit_parses_eagerly": "_parse_kineto_results" in src,
            "has_ensure_function_events": hasattr(ap.profile, "_ensure_function_events"),
            "env": {k: v for k, v in os.environ.items() if "CUPTI" in k or "KINETO" in k},
            "python_export": hasattr(ap.profile.export_chrome_trace, "__code__") and
            "use_python_export" in inspect.signature(ap.profile.export_chrome_trace).parameters,
            "trace_only": _trace_only_ok(torch),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--gap", type=int, default=20, help="plain steps between samples")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    import torch

    dims = (2, 128, 1024, 32) if a.tiny else (8, 1024, 32000, 256)
    step, reset = build(a.device, dims[0], dims[1], dims[2], 8, dims[3])
    sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
    doc = {"facts": facts(torch)}
    print(json.dumps(doc["facts"]), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        variants = [("with_stack", True, False), ("no_stack", False, False)]
        if doc["facts"]["trace_only"]:
            variants.append(("no_stack_trace_only", False, True))
        for name, stack, trace_only in variants:
            rows, bare = [], []
            reset()
            for k in range(a.samples + 1):
                for _ in range(a.gap):
                    t0 = time.perf_counter()
                    step()
                    bare.append((time.perf_counter() - t0) * 1e3)
                row = one_sample(torch, step, sync, Path(tmp), stack, k, trace_only)
                if k:   # the first is the profiler's one-time start
                    rows.append(row)
                else:
                    first = row
                if k % 5 == 0:
                    reset()
            keys = [k for k, v in rows[0].items() if isinstance(v, float)]
            med = {k: _med([r[k] for r in rows]) for k in keys}
            bare_ms = statistics.median(bare)
            excess = sum(med[k]["median"] for k in keys if k != "next_step" and k != "gzip")
            excess -= 2 * bare_ms
            doc[name] = {"bare_step_ms": _med(bare), "pieces_ms": med, "first_sample": first,
                         "excess_on_thread_ms": excess, "json_bytes": rows[0]["json_bytes"],
                         "events_lazy": all(r["events_lazy"] for r in rows), "rows": rows,
                         "cats": rows[0]["cats"],
                         "gil": gil_probe(torch, step, sync, Path(tmp), stack)}
            print(name, f"bare {bare_ms:.2f} ms; excess on the thread {excess:.1f} ms;",
                  {k: round(v["median"], 2) for k, v in med.items()}, doc[name]["gil"], flush=True)
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
