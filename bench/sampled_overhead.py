"""What always-on sampled capture costs a decode loop, averaged over all steps (issue 21, item 4).

    python bench/sampled_overhead.py --device cuda --seconds 150 --json r.json --rolling DIR
    python bench/sampled_overhead.py --device cpu --tiny --seconds 10        # a CPU check

One random-init Llama decode loop (one token per sequence per step, the GPU waited on at the end
of each step, as a server does to sample). Blocks of 2 x `--every` steps, in rounds A S S A:
A runs the bare step, S runs it inside `collectors.capture(..., every=N)`'s phase, one sampler
kept across S blocks (its first window, the profiler's one-time start, runs before timing).
Each block starts from the same cropped KV cache, so every block does the same work; the
wall time of every step is summed per block. Per round: overhead = (S1 + S2) / (A1 + A2) - 1,
and the cost of one window = (S1 + S2 - A1 - A2) / windows; also timed directly (added after the
2026-12-01 run, so not in its results): the window steps of each S block against the median of
its other steps, and the median unsampled S step against the median A step. Reported: the mean
over rounds with a bootstrap 95% CI, the median step of each variant, and the overhead this window
cost gives at other N (cost / (N x step)), with the N that keeps it under 0.1%.

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
    return {"mean": statistics.fmean(values), "ci95": [means[int(0.025 * n)], means[int(0.975 * n) - 1]],
            "n": len(values)}


def overhead(args, out_dir: Path) -> dict:
    step, reset = build(args.device, args.layers, args.hidden, args.vocab, args.batch, args.prompt)
    n = 2 * args.every
    for _ in range(3):
        block(step, reset, n)
    cap = collectors.capture(out_dir, every=args.every, keep=2, warmup=args.every // 2,
                             with_stack=not args.no_stack)
    t0 = time.perf_counter()
    block(step, reset, n, cap, args.batch)   # the profiler's one-time start
    cap.flush()
    first_s = time.perf_counter() - t0
    rounds, a_steps, s_steps, direct, unsampled = [], [], [], [], []
    seen = n   # steps through the sampler so far (the warm block)
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        sums, plain, bare = {}, [], []
        for label in ("A1", "S1", "S2", "A2"):
            ts = block(step, reset, n, cap if label[0] == "S" else None, args.batch)
            cap.flush()   # the window's gzip finished inside the S block, or is waited for here
            sums[label] = sum(ts)
            (s_steps if label[0] == "S" else a_steps).extend(ts)
            if label[0] == "S":   # the window steps themselves against the block's other steps
                pos = set(window_steps(seen, n, args.every, args.every // 2))
                rest = [t for i, t in enumerate(ts) if i not in pos]
                direct.append((sum(ts[i] for i in pos) - len(pos) * statistics.median(rest))
                              / max(len(pos) // 2, 1) * 1e3)
                plain.extend(rest)
                seen += n
            else:
                bare.extend(ts)
        unsampled.append((statistics.median(plain) / statistics.median(bare) - 1) * 100)
        a, s = sums["A1"] + sums["A2"], sums["S1"] + sums["S2"]
        rounds.append({"a_s": a, "s_s": s, "pct": (s / a - 1) * 100, "window_ms": (s - a) / 4 * 1e3})
        print(f"round {len(rounds)}: {rounds[-1]['pct']:+.3f}% ({rounds[-1]['window_ms']:.2f} ms/window)",
              flush=True)
    res = cap.close()
    step_ms = statistics.median(a_steps) * 1e3
    pct = mean_ci([r["pct"] for r in rounds])
    win = mean_ci([r["window_ms"] for r in rounds])
    at = {str(k): {"pct": win["mean"] / (k * step_ms) * 100,
                   "ci95": [c / (k * step_ms) * 100 for c in win["ci95"]]} for k in (100, 1000, 10000)}
    need = win["ci95"][1] / (0.001 * step_ms)
    return {
        "every": args.every,
        "block_steps": n,
        "rounds": len(rounds),
        "steps_timed": len(a_steps) + len(s_steps),
        "median_step_ms": {"bare": step_ms, "sampled": statistics.median(s_steps) * 1e3},
        "overhead_pct": pct,
        "window_cost_ms": win,
        "overhead_pct_at_every": at,
        "every_for_0.1pct": int(need) + 1,
        "first_window_s": first_s,
        "window_cost_direct_ms": mean_ci(direct),
        "unsampled_step_median_pct": mean_ci(unsampled),
        "samples": res.samples,
        "skipped": res.skipped,
        "errors": res.errors,
        "with_stack": not args.no_stack,
        "model": {
            "layers": args.layers,
            "hidden": args.hidden,
            "vocab": args.vocab,
            "batch": args.batch,
            "prompt": args.prompt,
        },
        "per_round": rounds,
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="2 layers, hidden 128 (a CPU check)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--no-stack", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--rolling", type=Path, help="also write the rolling-capture fixture folder here")
    a = ap.parse_args()
    if a.tiny:
        a.layers, a.hidden, a.vocab, a.prompt = 2, 128, 1024, 32
    with tempfile.TemporaryDirectory() as tmp:
        doc = overhead(a, Path(tmp))
    print(json.dumps({k: v for k, v in doc.items() if k != "per_round"}, indent=1), flush=True)
    if a.rolling is not None:
        doc["rolling"] = rolling(a, a.rolling)
        print(json.dumps(doc["rolling"], indent=1))
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
