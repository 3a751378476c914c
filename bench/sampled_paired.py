"""Sampled capture's overhead over all steps, from two processes that take turns (issue 21, item 4).

    python bench/sampled_paired.py --device cuda --every 1000 --seconds 420 --json r.json
    python bench/sampled_paired.py --device cpu --tiny --every 40 --block 20 --tail 4 --seconds 20

One process at a time block A/B cannot resolve 0.1%: the host's step moves by 5-13 ms between
blocks. Here two processes build the same random-init Llama decode loop (bench/sampled_overhead.py's
`build`), each pinned to its own cores, and run strictly alternating steps (a semaphore each):
process A runs the bare step, process S the same step, for the first `--control` seconds bare
too (the control: the two processes' own difference) and then inside `collectors.capture(...,
every=N)`'s phase. A pair is A's step and the S step after it, so a change of the host's pace
reaches both; state a sample leaves behind (CUPTI, the allocator, the GIL) stays in S's process.
Every `--block` pairs both crop their cache back to the prompt, untimed.

Measures, each against the control's ratio S/A (`bias`), with 95% CIs from a block bootstrap
(blocks of `--block` pairs):
- `direct_pct`: sum(S) / sum(A) over the sampled pairs: the overhead averaged over all steps at N,
  measured directly; `direct_pct_no_first` leaves out the first sample (its one-time start);
- `unsampled_pct`: the same over the pairs outside any window and its `--tail`;
- `sample_cost_ms`: per sample (the first, with the profiler's one-time start, left out), S's
  steps over its window and tail against S's mean over the clean pairs within `--reach`: what
  the serving process pays; the prediction at each N is cost / (N x mean A) (the unsampled
  step's own cost, 0.2-0.5 us, is bench/sampled_overhead.py's microbench), `every_for_0.1pct`
  from the cost's upper CI; `pairs_for_a_0.1pct_ci`: how many pairs a direct figure this precise
  to +-0.1 points would need at this run's noise;
- `a_excess_in_windows_ms`: A's steps over the same pairs against A's local mean (a sample
  slowing another process, or the local baseline's own bias: the first pair's A step runs before
  the sample starts); `sample_cost_paired_ms`: S's excess less A's.
`--reanalyse FILE` recomputes all of it from a saved `--json` file.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sampled_overhead import build, mean_ci, model_options, model_parsed, window_steps  # noqa: E402


def pin(cores: list[int]) -> list[int]:
    """Pin this process to `cores` where the machine has them; the cores it runs on."""
    have = sorted(os.sched_getaffinity(0))
    want = [c for c in cores if c in have] or have
    os.sched_setaffinity(0, want)
    return want


def player(role: str, a: argparse.Namespace, mine, theirs, stop, conn) -> None:
    """One process: build, then steps taken in turn with the other; times sent back."""
    cores = pin([int(c) for c in (a.cores_a if role == "A" else a.cores_s).split(",")])
    import collectors

    if a.device == "cpu":
        import torch

        torch.set_num_threads(1)   # the two processes share the cores
    step, reset = build(a.device, a.layers, a.hidden, a.vocab, a.batch, a.prompt)
    for _ in range(3 * a.block):
        step()
    conn.send("ready")
    t_go = conn.recv()
    cap, times, started = None, [], None
    tmp = tempfile.mkdtemp(prefix="paired_")
    clock = time.perf_counter
    k = 0
    while True:
        mine.acquire()
        if role == "A" and stop.value < 0 and time.time() > t_go + a.seconds:
            stop.value = k   # A leads each pair: both end before pair k
        if stop.value >= 0:
            theirs.release()
            break
        if k % a.block == 0:
            reset()
        if role == "S" and cap is None and time.time() > t_go + a.control:
            cap = collectors.capture(tmp, every=a.every, keep=2, warmup=a.every // 2,
                                     with_stack=not a.no_stack)
            started = k
        t0 = clock()
        if cap is None:
            step()
        else:
            with cap.phase("decode", tokens=a.batch):
                step()
        times.append(clock() - t0)
        k += 1
        theirs.release()
    out = {"role": role, "cores": cores, "times": times, "sampled_from": started}
    if cap is not None:
        res = cap.close()
        out.update(samples=res.samples, errors=res.errors[:3],
                   timings=[{k2: v for k2, v in t.items() if k2.endswith("_s")}
                            for t in res.timings])
    conn.send(out)


def ratio(a: list[float], s: list[float], idx: list[int]) -> float:
    return sum(s[i] for i in idx) / sum(a[i] for i in idx)


def boot(blocks: list[list[int]], stat, n: int = 2000, seed: int = 21) -> list[float]:
    """95% CI of `stat(indices)` resampling whole blocks of pair indices."""
    rng = random.Random(seed)
    vals = sorted(stat([i for b in rng.choices(blocks, k=len(blocks)) for i in b])
                  for _ in range(n))
    return [vals[int(0.025 * n)], vals[int(0.975 * n) - 1]]


def analyse(a: argparse.Namespace, ta: list[float], ts: list[float], first: int) -> dict:
    """The measures of the module doc from the pairs' times."""
    n = min(len(ta), len(ts))
    ta, ts = ta[:n], ts[:n]
    pos = [first + i for i in window_steps(0, n - first, a.every, a.every // 2)]
    groups = [pos[j:j + 2] + list(range(pos[j + 1] + 1, min(n, pos[j + 1] + 1 + a.tail)))
              for j in range(0, len(pos) - 1, 2)]
    taken = {i for g in groups for i in g}
    first_group = set(groups[0]) if groups else set()

    def blocks(lo: int, hi: int, drop: set[int] = set()) -> list[list[int]]:
        return [[i for i in range(b, min(b + a.block, hi)) if i not in drop]
                for b in range(lo, hi, a.block)]

    ctrl, samp = blocks(0, first), blocks(first, n)
    samp_nf, unsamp = blocks(first, n, first_group), blocks(first, n, taken)

    c_idx = [i for b in ctrl for i in b]
    bias = ratio(ta, ts, c_idx)
    rng = random.Random(5)

    def vs_control(arm: list[list[int]], draws: int = 2000) -> dict:
        idx = [i for b in arm for i in b]
        point = (ratio(ta, ts, idx) / bias - 1) * 100
        vals = []
        for _ in range(draws):
            ci = [i for b in rng.choices(ctrl, k=len(ctrl)) for i in b]
            si = [i for b in rng.choices(arm, k=len(arm)) for i in b]
            vals.append((ratio(ta, ts, si) / ratio(ta, ts, ci) - 1) * 100)
        vals.sort()
        return {"pct": point, "ci95": [vals[int(0.025 * draws)], vals[int(0.975 * draws) - 1]],
                "pairs": len(idx)}

    u_idx = [i for b in unsamp for i in b]
    u_diff = statistics.fmean(ts[i] - ta[i] for i in u_idx)

    def excess(t: list[float], g: list[int]) -> float:
        """ms over `g` against t's mean over the clean pairs within `--reach` of it."""
        near = [i for i in range(max(first, g[0] - a.reach), min(n, g[-1] + a.reach))
                if i not in taken]
        return (sum(t[i] for i in g) - len(g) * statistics.fmean(t[i] for i in near)) * 1e3

    own = [excess(ts, g) for g in groups[1:]]        # the first: the profiler's one-time start
    other = [excess(ta, g) for g in groups[1:]]
    step_ms = statistics.fmean(ta[i] for i in range(first, n)) * 1e3
    unsampled = vs_control(unsamp)
    cost = mean_ci(own) if own else None

    def predict(n_every: int) -> dict | None:
        if cost is None:
            return None
        per = [c / (n_every * step_ms) * 100 for c in (cost["mean"], *cost["ci95"])]
        return {"pct": per[0], "ci95": per[1:]}

    direct = vs_control(samp)
    half = (direct["ci95"][1] - direct["ci95"][0]) / 2

    return {
        "pairs": n, "control_pairs": first, "samples_seen": len(groups),
        "mean_step_ms": {"A": step_ms,
                         "S": statistics.fmean(ts[i] for i in range(first, n)) * 1e3},
        "control_ratio": {"ratio": bias, "ci95": boot(ctrl, lambda idx: ratio(ta, ts, idx))},
        "direct_pct": direct,
        "pairs_for_a_0.1pct_ci": int(direct["pairs"] * (half / 0.1) ** 2),
        "direct_pct_no_first": vs_control(samp_nf),
        "unsampled_pct": unsampled,
        "unsampled_us": u_diff * 1e6 - (bias - 1) * step_ms * 1e3,
        "sample_cost_ms": cost,
        "sample_cost_paired_ms": mean_ci([o - x for o, x in zip(own, other)]) if own else None,
        "a_excess_in_windows_ms": mean_ci(other) if other else None,
        "predicted_pct_at_every": {str(k): predict(k) for k in (a.every, 1000, 10000, 20000)},
        "every_for_0.1pct": int(cost["ci95"][1] / (0.001 * step_ms)) + 1 if cost else None,
        "per_sample_cost_ms": [round(c, 3) for c in own],
        "per_sample_a_excess_ms": [round(c, 3) for c in other],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    model_options(ap)
    ap.add_argument("--every", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=420, help="all pairs, control included")
    ap.add_argument("--control", type=float, default=120, help="seconds of bare pairs first")
    ap.add_argument("--block", type=int, default=100, help="pairs per cache crop and bootstrap block")
    ap.add_argument("--tail", type=int, default=20, help="steps after a window counted in its cost")
    ap.add_argument("--no-stack", action="store_true")
    ap.add_argument("--cores-a", default="2,3")
    ap.add_argument("--cores-s", default="4,5")
    ap.add_argument("--reach", type=int, default=100, help="pairs each side of a sample's baseline")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--reanalyse", type=Path, help="recompute from a saved --json file")
    a = model_parsed(ap.parse_args())
    if a.reanalyse:
        saved = json.loads(a.reanalyse.read_text())
        a.every, a.block, a.tail = saved["every"], saved["block"], saved["tail"]
        t = {r: [x / 1e3 for x in saved["times_ms"][r]] for r in "AS"}
        print(json.dumps(analyse(a, t["A"], t["S"], saved["control_pairs"]), indent=1))
        return
    ctx = mp.get_context("spawn")
    sem_a, sem_s, stop = ctx.Semaphore(0), ctx.Semaphore(0), ctx.Value("i", -1)
    pipes = {r: ctx.Pipe() for r in "AS"}
    procs = [ctx.Process(target=player, args=("A", a, sem_a, sem_s, stop, pipes["A"][1])),
             ctx.Process(target=player, args=("S", a, sem_s, sem_a, stop, pipes["S"][1]))]
    for p in procs:
        p.start()
    for r in "AS":
        assert pipes[r][0].recv() == "ready"
    t_go = time.time()
    for r in "AS":
        pipes[r][0].send(t_go)
    sem_a.release()
    res = {r: pipes[r][0].recv() for r in "AS"}
    for p in procs:
        p.join()
    first = res["S"]["sampled_from"]
    if first is None:
        raise SystemExit("the sampled part never started: --seconds must exceed --control")
    doc = {"with_stack": not a.no_stack, "every": a.every, "block": a.block, "tail": a.tail,
           "model": {"layers": a.layers, "hidden": a.hidden, "vocab": a.vocab, "batch": a.batch,
                     "prompt": a.prompt},
           "cores": {"A": res["A"]["cores"], "S": res["S"]["cores"]},
           "sampler": {k: res["S"].get(k) for k in ("samples", "errors", "timings")},
           **analyse(a, res["A"]["times"], res["S"]["times"], first)}
    brief = {k: v for k, v in doc.items() if k not in ("sampler", "per_sample_cost_ms")}
    print(json.dumps(brief, indent=1), flush=True)
    if a.json:
        a.json.write_text(json.dumps({**doc, "times_ms": {
            r: [round(t * 1e3, 4) for t in res[r]["times"]] for r in "AS"}}) + "\n")


if __name__ == "__main__":
    main()
