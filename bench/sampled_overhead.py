"""What always-on sampled capture costs a decode loop, averaged over all steps (issue 21, item 4).

    python bench/sampled_overhead.py --device cuda --every 100,2000 --seconds 90,120 --json r.json
    python bench/sampled_overhead.py --device cpu --tiny --every 40 --block 40 --tail 4 --seconds 5

One random-init Llama decode loop (one token per sequence per step, the GPU waited on at the end
of each step, as a server does to sample), every step timed. Per `--every` value, rounds A S S A
of `--block` steps: A runs the bare step, S runs it inside `collectors.capture(..., every=N)`'s
phase, one sampler kept across S blocks (its one-time first start runs before timing), windows
placed mid-block; each block starts from the same cropped KV cache. Three measures:
- a sample's cost: its warmup step, its recorded step (stop and save included) and the `--tail`
  steps after (the gzip thread runs then), each against the mean of the block's other S steps
  (against their median too: biased up by the steps' skew); the mean over samples, bootstrap CI;
- the unsampled step: the CPU microbench (`with cap.phase()` around nothing, us per step), and
  the median unsampled S step against the median A step per round (noisy);
- direct: the block sums, (S1 + S2) / (A1 + A2) - 1 per round (noisy: host jitter is large).
The overhead averaged over all steps at N is cost / (N x mean bare step) + the microbench's
unsampled step (the CI from resampling the samples); `every_for_0.1pct` uses the cost's upper
CI. Also the sampler's own timings per sample (start, stop, save, export) and each window
block's step times (`window_blocks`).

`--rolling DIR`: then a rolling capture of a smaller model (every 25 steps, 4 steps a file, the
last 8 kept: 7 written), its batch changed from 4 to 16 after 100 steps: the folder `attrib trend`
is tested on.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import collectors  # noqa: E402


def build(device: str, layers: int, hidden: int, vocab: int, batch: int, prompt: int):
    """A random-init Llama, its prefilled cache and a step function (one decode token)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

    dev = torch.device(device)
    heads = max(1, hidden // 64)
    cfg = AutoConfig.for_model("llama", hidden_size=hidden, intermediate_size=hidden * 3,
                               num_hidden_layers=layers, num_attention_heads=heads,
                               num_key_value_heads=max(1, heads // 2), head_dim=64,
                               vocab_size=vocab, max_position_embeddings=prompt + 8192)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()
    cache = DynamicCache()
    ids = torch.randint(0, vocab, (batch, prompt), device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1, past_key_values=cache)
    state = {"tok": out.logits[:, -1].argmax(-1, keepdim=True)}

    def step() -> None:
        with torch.inference_mode():
            o = model(input_ids=state["tok"], use_cache=True, logits_to_keep=1, past_key_values=cache)
            state["tok"] = o.logits[:, -1].argmax(-1, keepdim=True)
        sync()

    def reset() -> None:
        extra = cache.get_seq_length() - prompt
        if extra > 0:   # a negative crop removes tokens in old and new transformers alike
            cache.crop(-extra)
        sync()

    return step, reset


def block(step, reset, n: int, cap=None, batch: int = 1) -> list[float]:
    """n steps from the cropped cache; each step's wall time (s)."""
    reset()
    times = []
    clock = time.perf_counter
    if cap is None:
        for _ in range(n):
            t0 = clock()
            step()
            times.append(clock() - t0)
    else:
        for _ in range(n):
            t0 = clock()
            with cap.phase("decode", tokens=batch):
                step()
            times.append(clock() - t0)
    return times


def window_steps(n0: int, n: int, every: int, warmup: int) -> list[int]:
    """Indices, in a block of n steps after the sampler's n0th, of its window steps (the warmup
    step, residue every - 1, and the recorded one, residue 0: `collectors.sampled`'s rule)."""
    return [i for i in range(n) if n0 + i + 1 > warmup
            and (n0 + i + 1 - warmup) % every in (every - 1, 0)]


def mean_ci(values: list[float], n: int = 4000, seed: int = 21) -> dict:
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(n))
    return {"mean": statistics.fmean(values),
            "ci95": [means[int(0.025 * n)], means[int(0.975 * n) - 1]], "n": len(values)}


def excess(ts: list[float], pos: list[int], tail: int) -> list[dict]:
    """Each sample of one S block: its window steps and the `tail` steps after (the gzip
    thread runs then) against the mean of the block's other steps (ms; `cost_ms`), and
    against their median (`cost_vs_median_ms`: biased up by the steps' skew, kept to compare)."""
    taken = {i for w in pos[1::2] for i in range(w + 1, w + 1 + tail)} | set(pos)
    rest = [t for i, t in enumerate(ts) if i not in taken]
    mean, med = statistics.fmean(rest), statistics.median(rest)
    out = []
    for k in range(0, len(pos) - 1, 2):
        w, r = pos[k], pos[k + 1]
        after = ts[r + 1:r + 1 + tail]
        parts = {"warmup_ms": (ts[w] - mean) * 1e3, "recorded_ms": (ts[r] - mean) * 1e3,
                 "tail_ms": (sum(after) - len(after) * mean) * 1e3}
        parts["cost_ms"] = sum(parts.values())
        parts["cost_vs_median_ms"] = (ts[w] + ts[r] + sum(after) - (2 + len(after)) * med) * 1e3
        out.append(parts)
    return out


def at_every(costs: list[float], unsampled_us: float, step_ms: float, ns: list[int],
             draws: int = 4000, seed: int = 21) -> dict:
    """Overhead averaged over all steps at each N, pct: cost / (N x mean bare step) plus the
    unsampled step's own cost (the CPU microbench); 95% CI from resampling the samples."""
    rng = random.Random(seed)
    boots = sorted(statistics.fmean(rng.choices(costs, k=len(costs))) for _ in range(draws))
    lo, hi = boots[int(0.025 * draws)], boots[int(0.975 * draws) - 1]
    own = unsampled_us / 1e3 / step_ms * 100

    def pct(c: float, n: int) -> float:
        return c / (n * step_ms) * 100 + own

    return {str(n): {"pct": pct(statistics.fmean(costs), n), "ci95": [pct(lo, n), pct(hi, n)]}
            for n in ns}


def unsampled_us(n: int = 200_000) -> dict:
    """The sampler's unsampled step on the CPU: `with cap.phase(...)` around nothing, against
    a bare loop, microseconds per step (median of 5)."""
    with tempfile.TemporaryDirectory() as tmp:
        cap = collectors.capture(tmp, every=10 ** 9, with_stack=False)
        clock, runs = time.perf_counter, []
        for _ in range(5):
            t0 = clock()
            for _ in range(n):
                pass
            t1 = clock()
            for _ in range(n):
                with cap.phase("decode", tokens=8):
                    pass
            runs.append(((clock() - t1) - (t1 - t0)) / n * 1e6)
        cap.close()
    return {"us_per_step": statistics.median(runs), "runs": runs}


def overhead(args, out_dir: Path, step, reset, every: int, seconds: float,
             unsampled: float) -> dict:
    """Rounds A S S A of `block` steps at `every`; the costs measured three ways (module doc)."""
    n = min(every, args.block)
    if every % n or n < 2 * args.tail + 8:
        raise SystemExit(f"--block {n} must divide every={every} and exceed 2 x --tail + 8")
    warm = n // 2   # windows open mid-block: the warmup at index n/2 - 2, recorded n/2 - 1
    cap = collectors.capture(out_dir, every=every, keep=2, warmup=warm,
                             with_stack=not args.no_stack, gzip_level=args.gzip_level)
    seen = 0
    t0 = time.perf_counter()
    while seen < warm + every:   # the profiler's one-time start, untimed
        block(step, reset, n, cap, args.batch)
        cap.flush()
        seen += n
    first_s = time.perf_counter() - t0
    rounds, samples, a_steps, s_steps, raw = [], [], [], [], []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sums, plain, bare = {}, [], []
        for label in ("A1", "S1", "S2", "A2"):
            sampled = label[0] == "S"
            ts = block(step, reset, n, cap if sampled else None, args.batch)
            cap.flush()   # the gzip finished inside the block's tail, or is waited for here
            sums[label] = sum(ts)
            if not sampled:
                bare.extend(ts)
                continue
            pos = window_steps(seen, n, every, warm)
            seen += n
            samples.extend(excess(ts, pos, args.tail))
            if pos:
                raw.append({"pos": pos, "ms": [round(t * 1e3, 4) for t in ts]})
            taken = {i for w in pos[1::2] for i in range(w + 1, w + 1 + args.tail)} | set(pos)
            plain.extend(t for i, t in enumerate(ts) if i not in taken)
        a_steps.extend(bare)
        s_steps.extend(plain)
        a, s = sums["A1"] + sums["A2"], sums["S1"] + sums["S2"]
        m_a, m_s = statistics.median(bare), statistics.median(plain)
        rounds.append({"a_s": a, "s_s": s, "direct_pct": (s / a - 1) * 100,
                       "unsampled_pct": (m_s / m_a - 1) * 100,
                       "unsampled_us": (m_s - m_a) * 1e6})
        print(f"every={every} round {len(rounds)}: direct {rounds[-1]['direct_pct']:+.3f}%, "
              f"unsampled {rounds[-1]['unsampled_us']:+.1f} us, samples {len(samples)}", flush=True)
    res = cap.close()
    step_ms = statistics.fmean(a_steps) * 1e3
    costs = [x["cost_ms"] for x in samples]
    timed = [t for t in res.timings if t["stop_s"] is not None][1:]   # the first: one-time
    own = {k: statistics.median(t[k] for t in timed) * 1e3
           for k in ("start_s", "stop_s", "save_s", "export_s") if timed and timed[0][k] is not None}
    cost = mean_ci(costs)
    own_pct = unsampled / 1e3 / step_ms * 100
    return {
        "every": every,
        "block_steps": n,
        "tail_steps": args.tail,
        "rounds": len(rounds),
        "steps_timed": len(a_steps) + len(s_steps) + len(samples) * (2 + args.tail),
        "median_step_ms": {"bare": statistics.median(a_steps) * 1e3,
                           "unsampled": statistics.median(s_steps) * 1e3},
        "mean_step_ms": {"bare": step_ms, "unsampled": statistics.fmean(s_steps) * 1e3},
        "sample_cost_ms": cost,
        "sample_cost_vs_median_ms": mean_ci([x["cost_vs_median_ms"] for x in samples]),
        "sample_pieces_ms": {k: mean_ci([x[k] for x in samples])
                             for k in ("warmup_ms", "recorded_ms", "tail_ms")},
        "sampler_timings_ms": own,
        "unsampled_step_pct": mean_ci([r["unsampled_pct"] for r in rounds]),
        "unsampled_step_us": mean_ci([r["unsampled_us"] for r in rounds]),
        "direct_pct": mean_ci([r["direct_pct"] for r in rounds]),
        "direct_pct_pooled": (sum(r["s_s"] for r in rounds) / sum(r["a_s"] for r in rounds) - 1) * 100,
        "overhead_pct_at_every": at_every(costs, unsampled, step_ms,
                                          sorted({every, 1000, 5000, 10000, 20000})),
        "every_for_0.1pct": int(cost["ci95"][1] / ((0.1 - own_pct) / 100 * step_ms)) + 1,
        "first_window_s": first_s,
        "samples": res.samples,
        "skipped": res.skipped,
        "errors": res.errors,
        "per_round": rounds,
        "per_sample": samples,
        "window_blocks": raw,
    }


def rolling(args, out: Path) -> dict:
    """Rolling captures over a batch change: the trend fixture."""
    cap = collectors.capture(out, every=25, steps=4, keep=8, warmup=5,
                             provenance={"model": "random-init llama 2x512", "dtype": "bf16"})
    for batch in (4, 16):
        step, reset = build(args.device, 2, 512, 8192, batch, 64)
        reset()
        for _ in range(100):
            with cap.phase("decode", tokens=batch):
                step()
    res = cap.close()
    return {"files": [p.name for p in res.paths], "samples": res.samples, "deleted": res.deleted,
            "errors": res.errors}


def model_options(ap: argparse.ArgumentParser) -> None:
    """The decode loop's options, shared by the sampled-capture benches (`build`'s arguments)."""
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="2 layers, hidden 128 (a CPU check)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=256)


def model_parsed(a: argparse.Namespace) -> argparse.Namespace:
    """`a` with `--tiny`'s dimensions applied."""
    if a.tiny:
        a.layers, a.hidden, a.vocab, a.prompt = 2, 128, 1024, 32
    return a


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    model_options(ap)
    ap.add_argument("--every", default="100", help="comma-separated: one run per value")
    ap.add_argument("--seconds", default="120", help="comma-separated, one per --every")
    ap.add_argument("--block", type=int, default=100, help="steps per A/S block (divides every)")
    ap.add_argument("--tail", type=int, default=20, help="steps after a window counted in its cost")
    ap.add_argument("--gzip-level", type=int, default=6)
    ap.add_argument("--no-stack", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--traces", type=Path, help="keep the last 2 samples of each run here")
    ap.add_argument("--rolling", type=Path, help="also write the rolling-capture fixture folder here")
    a = model_parsed(ap.parse_args())
    everys = [int(x) for x in a.every.split(",")]
    secs = [float(x) for x in a.seconds.split(",")]
    step, reset = build(a.device, a.layers, a.hidden, a.vocab, a.batch, a.prompt)
    for _ in range(3):
        block(step, reset, a.block)
    doc = {"with_stack": not a.no_stack, "gzip_level": a.gzip_level,
           "model": {"layers": a.layers, "hidden": a.hidden, "vocab": a.vocab, "batch": a.batch,
                     "prompt": a.prompt},
           "unsampled_cpu": unsampled_us(), "runs": []}
    print("unsampled step, CPU:", doc["unsampled_cpu"], flush=True)
    for every, sec in zip(everys, secs * len(everys) if len(secs) == 1 else secs):
        with tempfile.TemporaryDirectory() as tmp:
            out = a.traces / f"every{every}" if a.traces else Path(tmp)
            run = overhead(a, out, step, reset, every, sec, doc["unsampled_cpu"]["us_per_step"])
        doc["runs"].append(run)
        print(json.dumps({k: v for k, v in run.items()
                          if k not in ("per_round", "per_sample", "window_blocks")},
                         indent=1), flush=True)
    if a.rolling is not None:
        doc["rolling"] = rolling(a, a.rolling)
        print(json.dumps(doc["rolling"], indent=1))
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
