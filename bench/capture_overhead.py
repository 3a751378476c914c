"""What `collectors.capture` adds to a decode step beyond torch.profiler alone (issue 8, item 5).

    python bench/capture_overhead.py --device cuda            # the H200 figure (8-layer Llama)
    python bench/capture_overhead.py --device cpu --tiny      # a CPU check

One random-init Llama, one decode loop (batch 8, one token per sequence, a synchronize per step),
timed per step (host wall clock around the step, GPU work included) under four variants:

  none      no profiler
  bare      torch.profiler.profile with the capture's options (activities, record_shapes,
            with_stack) and schedule (record every step), `prof.step()` after each step
  bare+span bare, plus the `record_function("decode (tokens=8)")` span the capture puts on each step
  capture   collectors.capture(..., steps=None) with `cap.phase("decode", tokens=8)` per step

Repetitions are interleaved (the variants' order rotates each round), every window starts from
the same prefilled KV cache (cropped back to the prompt), each window's first `--skip` steps are
dropped (profiler warm-up). Reported: the pooled medians of all kept steps, and -- the figure to
quote, since the host's speed drifts between rounds by more than the effect -- the per-round
paired ratio (capture's median over bare's in the same round), its median and quartiles.
Export is outside the timed steps (bare: nothing exported; capture: exported at close).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import collectors  # noqa: E402

VARIANTS = ("none", "bare", "bare+span", "capture")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--steps", type=int, default=40, help="timed decode steps per window")
    ap.add_argument("--skip", type=int, default=5, help="steps dropped at each window's start")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset")
    ap.add_argument("--no-stack", action="store_true")
    ap.add_argument("--json", default=None, help="write the result here too")
    args = ap.parse_args(argv)

    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if args.tiny:
        args.layers, args.hidden, args.prompt = 2, 128, 32
    heads = max(1, args.hidden // 64)
    cfg = AutoConfig.for_model("llama", hidden_size=args.hidden, intermediate_size=args.hidden * 3,
                               num_hidden_layers=args.layers, num_attention_heads=heads,
                               num_key_value_heads=max(1, heads // 2), head_dim=args.hidden // heads,
                               vocab_size=32000, max_position_embeddings=args.prompt + 4096)
    torch.manual_seed(0)
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()
    import inspect

    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    n_total = args.skip + args.steps
    acts = None
    fast: list[bool] = []   # whether the capture called the record_function ops directly

    def prefill():
        try:
            cache = DynamicCache(config=cfg)
        except TypeError:
            cache = DynamicCache()
        ids = torch.randint(0, cfg.vocab_size, (args.batch, args.prompt), device=dev)
        with torch.inference_mode():
            o = model(input_ids=ids, use_cache=True, logits_to_keep=1, **{key: cache})
        sync()
        return cache, o.logits[:, -1].argmax(-1, keepdim=True)

    base_cache, first = prefill()

    def fresh():
        """The same prefilled cache for every window (cropped back to the prompt): same work."""
        extra = base_cache.get_seq_length() - args.prompt
        if extra > 0:
            base_cache.crop(-extra)   # a negative count: accepted by old and new transformers
        return base_cache, first

    def one_step(cache, nxt):
        o = model(input_ids=nxt, use_cache=True, **{key: cache})
        nxt = o.logits[:, -1].argmax(-1, keepdim=True)
        sync()
        return nxt

    label = f"decode (tokens={args.batch})"
    stack = not args.no_stack

    def window(variant: str, tmp: Path) -> list[float]:
        from torch import profiler as tp

        nonlocal acts
        acts = [tp.ProfilerActivity.CPU] + ([tp.ProfilerActivity.CUDA] if cuda else [])
        cache, nxt = fresh()
        times = []
        with torch.inference_mode():
            if variant == "none":
                for _ in range(n_total):
                    t0 = time.perf_counter()
                    nxt = one_step(cache, nxt)
                    times.append(time.perf_counter() - t0)
            elif variant.startswith("bare"):
                span = variant == "bare+span"
                sched = lambda step: tp.ProfilerAction.RECORD  # noqa: E731  (as capture, steps=None)
                with tp.profile(activities=acts, schedule=sched, record_shapes=True,
                                with_stack=stack, profile_memory=False, with_flops=False) as prof:
                    for _ in range(n_total):
                        t0 = time.perf_counter()
                        if span:
                            with torch.profiler.record_function(label):
                                nxt = one_step(cache, nxt)
                        else:
                            nxt = one_step(cache, nxt)
                        prof.step()
                        times.append(time.perf_counter() - t0)
            else:
                cap = collectors.capture(tmp, warmup=0, steps=None, with_stack=stack,
                                         name=f"overhead_{time.time_ns()}",
                                         provenance={"model": "capture_overhead bench"})
                with cap:
                    fast.append(getattr(cap, "_span_enter", None) is not None)
                    for _ in range(n_total):
                        t0 = time.perf_counter()
                        with cap.phase("decode", tokens=args.batch):
                            nxt = one_step(cache, nxt)
                        times.append(time.perf_counter() - t0)
                for p in tmp.glob("overhead_*"):
                    p.unlink()
        return times[args.skip:]

    variants = tuple(v for v in VARIANTS if v in args.variants.split(","))
    # untimed warm-up of every path (cuBLAS, profiler init)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        for v in variants:
            window(v, tmp)
        per: dict[str, list[float]] = {v: [] for v in variants}
        rounds = []
        for r in range(args.rounds):
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            row = {}
            for v in order:
                t = window(v, tmp)
                per[v] += t
                row[v] = statistics.median(t) * 1e3
            rounds.append(row)
            print(f"round {r}: " + "  ".join(f"{v} {row[v]:.3f}" for v in variants), flush=True)
    med = {v: statistics.median(per[v]) * 1e3 for v in variants}

    def paired(a: str, b: str) -> dict | None:
        """Per round, a's median over b's (neighbouring windows), in %: median and quartiles."""
        if a not in variants or b not in variants:
            return None
        pct = sorted(100 * (row[a] / row[b] - 1) for row in rounds)
        q = statistics.quantiles(pct, n=4) if len(pct) > 1 else pct * 3
        return {"median_pct": statistics.median(pct), "q1_pct": q[0], "q3_pct": q[2],
                "rounds": len(pct)}

    res = {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
           "transformers": transformers.__version__, "layers": args.layers, "hidden": args.hidden,
           "batch": args.batch, "prompt": args.prompt, "with_stack": stack,
           "steps_per_window": args.steps, "rounds": args.rounds, "median_ms_per_step": med,
           "rounds_median_ms": rounds,
           "seconds": round(time.perf_counter() - t_start, 1),
           "capture_span_ops_direct": all(fast) if fast else None,
           "pooled_pct": {f"{a}_vs_{b}": 100 * (med[a] / med[b] - 1)
                          for a, b in (("capture", "bare"), ("capture", "bare+span"),
                                       ("bare+span", "bare"), ("bare", "none"))
                          if a in med and b in med},
           "paired_pct": {f"{a}_vs_{b}": paired(a, b)
                          for a, b in (("capture", "bare"), ("capture", "bare+span"),
                                       ("bare+span", "bare"), ("bare", "none"))}}
    print(json.dumps(res, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
