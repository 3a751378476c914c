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

Repetitions are interleaved (the variants' order rotates each round), each variant's first
`--skip` steps of a window are dropped (profiler warm-up), and the medians of all kept steps are
compared. Export is outside the timed steps (bare: nothing exported; capture: exported at close).
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

    def fresh():
        try:
            cache = DynamicCache(config=cfg)
        except TypeError:
            cache = DynamicCache()
        ids = torch.randint(0, cfg.vocab_size, (args.batch, args.prompt), device=dev)
        with torch.inference_mode():
            o = model(input_ids=ids, use_cache=True, logits_to_keep=1, **{key: cache})
        sync()
        return cache, o.logits[:, -1].argmax(-1, keepdim=True)

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
                    for _ in range(n_total):
                        t0 = time.perf_counter()
                        with cap.phase("decode", tokens=args.batch):
                            nxt = one_step(cache, nxt)
                        times.append(time.perf_counter() - t0)
                for p in tmp.glob("overhead_*"):
                    p.unlink()
        return times[args.skip:]

    # untimed warm-up of every path (cuBLAS, profiler init)
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        for v in VARIANTS:
            window(v, tmp)
        per: dict[str, list[float]] = {v: [] for v in VARIANTS}
        rounds = []
        for r in range(args.rounds):
            order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
            row = {}
            for v in order:
                t = window(v, tmp)
                per[v] += t
                row[v] = statistics.median(t) * 1e3
            rounds.append(row)
            print(f"round {r}: " + "  ".join(f"{v} {row[v]:.3f}" for v in VARIANTS), flush=True)
    med = {v: statistics.median(per[v]) * 1e3 for v in VARIANTS}
    res = {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
           "transformers": transformers.__version__, "layers": args.layers, "hidden": args.hidden,
           "batch": args.batch, "prompt": args.prompt, "with_stack": stack,
           "steps_per_window": args.steps, "rounds": args.rounds, "median_ms_per_step": med,
           "rounds_median_ms": rounds,
           "capture_vs_bare_pct": 100 * (med["capture"] / med["bare"] - 1),
           "capture_vs_bare_span_pct": 100 * (med["capture"] / med["bare+span"] - 1),
           "bare_vs_none_pct": 100 * (med["bare"] / med["none"] - 1)}
    print(json.dumps(res, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
