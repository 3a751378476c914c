"""What `collectors.capture` adds to a decode step beyond torch.profiler alone (issue 8, item 5).

    python bench/capture_overhead.py --device cuda --json r.json     # the H200 figure (8-layer Llama)
    python bench/capture_overhead.py --device cpu --tiny              # a CPU check

One random-init Llama decode loop (one token per sequence per step, the GPU waited on with a
blocking CUDA event so the wait sleeps instead of spinning). Variants of a step:

  none       no profiler
  bare       torch.profiler.profile with the capture's options (CPU+CUDA, record_shapes, with_stack)
             and schedule (record every step); `prof.step()` after the step
  bare+span  bare plus `torch.profiler.record_function("decode (tokens=B)")` around the step
  capture    `with cap.phase("decode", tokens=B)` in a `collectors.capture(..., steps=None)`

Every step is timed the same way in every variant: host wall time and the main thread's CPU time
(`time.thread_time_ns`) around the whole step, and the variant's own code (`own`: everything but
the model call and its GPU wait) from `perf_counter_ns` stamps around its hooks, split into
`pre1` (making the span/step object), `pre2` (opening it) and `post` (closing it and `prof.step()`).

Two designs, both reported with a median and a bootstrap 95% CI:

  mixed    (the precise one) one capture session; its steps alternate between a capture step
           and a bare / bare+span step driving the same profiler, in blocks A B C C B A (the first
           variant rotating per window): same profiler, same buffers, neighbouring steps. Per block,
           each variant's two steps are summed and the ratios taken.
  windows  separate profiler sessions per variant (what a user compares), short windows, the
           order rotating and reversing each round (ABBA); the ratio of window medians per round.

Also counted, deterministically: the host events per whole step of a bare and a capture trace,
and what the capture adds by name (`events_per_step`). The run is bounded by time (`--mixed-s`,
`--windows-s`), not by a round count.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import random
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import collectors  # noqa: E402

VARIANTS = ("none", "bare", "bare+span", "capture")
MIXED = ("bare", "bare+span", "capture")
PAIRS = (("capture", "bare"), ("capture", "bare+span"), ("bare+span", "bare"), ("bare", "none"))
PARTS = ("pre1", "pre2", "post")
HOST = ("python_function", "user_annotation", "cpu_op", "cuda_runtime", "cuda_driver")


def median_ci(values: list[float], n: int = 2000, seed: int = 0) -> dict:
    """Median and percentile-bootstrap 95% CI of the median (fixed seed)."""
    rng, k = random.Random(seed), len(values)
    meds = sorted(statistics.median(rng.choices(values, k=k)) for _ in range(n))
    return {"median": statistics.median(values), "ci95": [meds[int(0.025 * n)], meds[int(0.975 * n) - 1]],
            "n": k}


def pct(d: dict) -> dict:
    """A ratio summary as percent change."""
    return {"median_pct": round(100 * (d["median"] - 1), 3),
            "ci95_pct": [round(100 * (c - 1), 3) for c in d["ci95"]], "n": d["n"]}


def step_events(path: Path) -> tuple[Counter, int]:
    """Host-side events inside a trace's whole steps (not the first two nor the last two), by
    category and name (object addresses dropped), and the number of those steps."""
    raw = path.read_bytes()
    ev = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)["traceEvents"]
    steps = sorted((e for e in ev if e.get("cat") == "user_annotation"
                    and e.get("name", "").startswith("ProfilerStep#")), key=lambda e: e["ts"])[2:-2]
    lo, hi = steps[0]["ts"], steps[-1]["ts"] + steps[-1]["dur"]
    return Counter((e.get("cat"), re.sub(r" at 0x[0-9a-f]+", "", e["name"])) for e in ev
                   if e.get("ph") == "X" and e.get("cat") in HOST and lo <= e["ts"] < hi
                   and not e["name"].startswith("ProfilerStep#")), len(steps)


def build(args):
    """Model, config, prefilled cache, first tokens and the blocking GPU wait."""
    import inspect

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    heads = args.heads or max(1, args.hidden // 64)
    cfg = AutoConfig.for_model("llama", hidden_size=args.hidden,
                               intermediate_size=args.intermediate or args.hidden * 3,
                               num_hidden_layers=args.layers, num_attention_heads=heads,
                               num_key_value_heads=args.kv_heads or max(1, heads // 2),
                               head_dim=args.hidden // heads, vocab_size=args.vocab,
                               max_position_embeddings=args.prompt + 4096)
    torch.manual_seed(0)
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16 if cuda else torch.float32).eval()
    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    if cuda:
        ev = torch.cuda.Event(blocking=True)   # synchronize() sleeps: waiting is not CPU time

        def wait() -> None:
            ev.record()
            ev.synchronize()
    else:
        def wait() -> None:
            return None
    try:
        cache = DynamicCache(config=cfg)
    except TypeError:
        cache = DynamicCache()
    ids = torch.randint(0, cfg.vocab_size, (args.batch, args.prompt), device=dev)
    with torch.inference_mode():
        o = model(input_ids=ids, use_cache=True, logits_to_keep=1, **{key: cache})
    wait()
    return model, key, cache, o.logits[:, -1].argmax(-1, keepdim=True), wait, cuda


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tiny", action="store_true", help="2 layers, hidden 128, prompt 32")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=0, help="default 3 x hidden")
    ap.add_argument("--heads", type=int, default=0, help="default hidden / 64")
    ap.add_argument("--kv-heads", type=int, default=0, help="default heads / 2")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--skip", type=int, default=4, help="steps dropped at each window's start")
    ap.add_argument("--steps", type=int, default=16, help="timed steps per window (windows design)")
    ap.add_argument("--blocks", type=int, default=8, help="blocks per window (mixed design)")
    ap.add_argument("--mixed-s", type=float, default=60, help="seconds for the mixed design")
    ap.add_argument("--windows-s", type=float, default=60, help="seconds for the windows design")
    ap.add_argument("--no-stack", action="store_true")
    ap.add_argument("--json", default=None, help="write the result here too")
    args = ap.parse_args(argv)
    if args.tiny:
        args.layers, args.hidden, args.prompt = 2, 128, 32

    import torch
    import transformers
    from torch import profiler as tp

    t_start = time.perf_counter()
    model, key, base_cache, first, wait, cuda = build(args)
    acts = [tp.ProfilerActivity.CPU] + ([tp.ProfilerActivity.CUDA] if cuda else [])
    stack, label, batch = not args.no_stack, f"decode (tokens={args.batch})", args.batch
    opts = dict(record_shapes=True, with_stack=stack, profile_memory=False, with_flops=False)
    clock, cpu, rf = time.perf_counter_ns, time.thread_time_ns, torch.profiler.record_function
    direct: list[bool] = []   # whether the capture called the record_function ops directly

    def fresh():
        """The same prefilled cache for every window (cropped back to the prompt): same work."""
        extra = base_cache.get_seq_length() - args.prompt
        if extra > 0:
            base_cache.crop(-extra)   # a negative count: accepted by old and new transformers
        return base_cache, first

    def body(cache, nxt):
        o = model(input_ids=nxt, use_cache=True, **{key: cache})
        nxt = o.logits[:, -1].argmax(-1, keepdim=True)
        wait()
        return nxt

    def step(variant: str, ctx, cache, nxt, out: list):
        """One step; the same stamps in every variant. ctx: the capture, or the profiler."""
        c0 = cpu()
        t0 = clock()
        if variant == "capture":
            s = ctx.phase("decode", tokens=batch)
            ta = clock()
            s.__enter__()
        elif variant == "bare+span":
            s = rf(label)
            ta = clock()
            s.__enter__()
        else:
            ta = clock()
        t1 = clock()
        nxt = body(cache, nxt)
        t2 = clock()
        if variant == "capture":
            s.__exit__(None, None, None)
        elif variant == "bare+span":
            s.__exit__(None, None, None)
            ctx.step()
        elif variant == "bare":
            ctx.step()
        t3 = clock()
        c1 = cpu()
        out.append((t3 - t0, c1 - c0, ta - t0, t1 - ta, t3 - t2))
        return nxt

    def new_capture(tmp: Path):
        return collectors.capture(tmp, warmup=0, steps=None, with_stack=stack, gzip_level=1,
                                  name=f"overhead_{time.time_ns()}",
                                  provenance={"model": "capture_overhead bench"})

    def window(variant: str, tmp: Path) -> list[tuple]:
        """One profiler session (or none) of skip + steps steps of one variant; the kept steps."""
        gc.collect()
        cache, nxt = fresh()
        out: list[tuple] = []
        with torch.inference_mode():
            if variant == "none":
                for _ in range(args.skip + args.steps):
                    nxt = step(variant, None, cache, nxt, out)
            elif variant == "capture":
                with new_capture(tmp) as cap:
                    direct.append(cap._span_enter is not None)
                    for _ in range(args.skip + args.steps):
                        nxt = step(variant, cap, cache, nxt, out)
            else:
                with tp.profile(activities=acts, schedule=lambda s: tp.ProfilerAction.RECORD,
                                **opts) as prof:
                    for _ in range(args.skip + args.steps):
                        nxt = step(variant, prof, cache, nxt, out)
        for p in tmp.glob("overhead_*"):
            p.unlink()
        return out[args.skip:]

    def mixed_window(first_v: int, tmp: Path) -> list[dict]:
        """One capture session, blocks A B C C B A of MIXED (rotated); per block, per variant,
        the sums of its two steps."""
        order = MIXED[first_v:] + MIXED[:first_v]
        seq = (order + order[::-1]) * args.blocks
        gc.collect()
        cache, nxt = fresh()
        out: list[tuple] = []
        with torch.inference_mode(), new_capture(tmp) as cap:
            prof = cap._prof
            if prof is None:
                raise SystemExit(f"capture did not start: {cap.result.error}")
            direct.append(cap._span_enter is not None)
            for _ in range(args.skip):
                nxt = step("capture", cap, cache, nxt, [])
            for v in seq:
                nxt = step(v, cap if v == "capture" else prof, cache, nxt, out)
        for p in tmp.glob("overhead_*"):
            p.unlink()
        blocks, n = [], 2 * len(order)
        for b in range(args.blocks):
            blk = {v: [0] * 5 for v in order}
            for v, rec in zip(seq[b * n:(b + 1) * n], out[b * n:(b + 1) * n]):
                blk[v] = [a + r for a, r in zip(blk[v], rec)]
            blocks.append(blk)
        return blocks

    def event_diff(tmp: Path) -> dict:
        """Trace events per whole step: bare, capture, and what the capture adds, by name."""
        cache, nxt = fresh()
        with torch.inference_mode():
            with tp.profile(activities=acts, schedule=lambda s: tp.ProfilerAction.RECORD,
                            **opts) as prof:
                for _ in range(args.skip + 4):
                    nxt = step("bare", prof, cache, nxt, [])
            prof.export_chrome_trace(str(tmp / "bare_events.json"))
            cache, nxt = fresh()
            with new_capture(tmp) as cap:
                for _ in range(args.skip + 4):
                    nxt = step("capture", cap, cache, nxt, [])
        (b, nb), (c, nc) = step_events(tmp / "bare_events.json"), step_events(cap.result.path)
        cap.result.path.unlink()
        extra = {f"{k[0]}: {k[1]}": round(c[k] / nc - b[k] / nb, 2)
                 for k in c.keys() | b.keys() if c[k] / nc != b[k] / nb}
        return {"bare": round(sum(b.values()) / nb, 1), "capture": round(sum(c.values()) / nc, 1),
                "capture_minus_bare": round(sum(extra.values()), 2),
                "by_name": dict(sorted(extra.items(), key=lambda kv: -kv[1]))}

    def summary(recs: dict[str, list[tuple]]) -> dict:
        """Per variant: medians over its steps (ms of wall and CPU, us of own code and parts)."""
        res = {}
        for v, rs in recs.items():
            if not rs:
                continue
            col = list(zip(*rs))
            res[v] = {"wall_ms": statistics.median(col[0]) / 1e6, "cpu_ms": statistics.median(col[1]) / 1e6,
                      "own_us": statistics.median([a + b + c for _, _, a, b, c in rs]) / 1e3,
                      **{f"{p}_us": statistics.median(col[2 + i]) / 1e3 for i, p in enumerate(PARTS)},
                      "steps": len(rs)}
        return res

    result = {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
              "transformers": transformers.__version__, "python": sys.version.split()[0],
              "model": {"layers": args.layers, "hidden": args.hidden,
                        "params_M": round(sum(p.numel() for p in model.parameters()) / 1e6, 1)},
              "batch": args.batch, "prompt": args.prompt, "with_stack": stack,
              "gpu_wait": "cuda.Event(blocking=True).synchronize()" if cuda else None,
              "skip": args.skip}
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        for v in VARIANTS:   # untimed warm-up of every path (cuBLAS, CUPTI, profiler init)
            window(v, tmp)
        mixed_window(0, tmp)
        try:
            result["events_per_step"] = event_diff(tmp)
        except Exception as exc:   # a trace torch wrote as invalid JSON: the timings still count
            result["events_per_step"] = {"error": f"{type(exc).__name__}: {exc}"}

        # the mixed design
        blocks: list[dict] = []
        recs: dict[str, list[tuple]] = {v: [] for v in MIXED}
        t0, w = time.perf_counter(), 0
        while time.perf_counter() - t0 < args.mixed_s:
            got = mixed_window(w % len(MIXED), tmp)
            blocks += got
            for blk in got:
                for v in MIXED:
                    recs[v] += [tuple(x / 2 for x in blk[v])]   # the two steps' mean
            w += 1
            print(f"mixed window {w}: {len(blocks)} blocks", flush=True)
        mixed = {"windows": w, "blocks": len(blocks), "blocks_per_window": args.blocks,
                 "per_variant": summary(recs), "seconds": round(time.perf_counter() - t0, 1),
                 "ratio": {}}
        for a, b in PAIRS:
            if a in MIXED and b in MIXED:
                mixed["ratio"][f"{a}/{b}"] = {
                    kind: pct(median_ci([blk[a][i] / blk[b][i] for blk in blocks]))
                    for kind, i in (("wall", 0), ("cpu", 1))}
        mixed["capture_minus_bare_own_us"] = median_ci(
            [(sum(blk["capture"][2:]) - sum(blk["bare"][2:])) / 2e3 for blk in blocks])
        result["mixed"] = mixed
        if args.json:   # so far, in case the run is cut short
            Path(args.json).write_text(json.dumps(result, indent=1) + "\n")

        # the windows design
        rounds: list[dict] = []
        recs = {v: [] for v in VARIANTS}
        t0, r = time.perf_counter(), 0
        while time.perf_counter() - t0 < args.windows_s:
            order = VARIANTS[r % 4:] + VARIANTS[:r % 4]
            row = {}
            for v in (order if r % 2 == 0 else order[::-1]):
                got = window(v, tmp)
                recs[v] += got
                row[v] = [statistics.median(x[i] for x in got) for i in (0, 1)]
            rounds.append(row)
            r += 1
            print(f"round {r}: " + "  ".join(f"{v} {row[v][0] / 1e6:.3f}" for v in VARIANTS), flush=True)
        result["windows"] = {
            "rounds": r, "steps_per_window": args.steps, "per_variant": summary(recs),
            "seconds": round(time.perf_counter() - t0, 1),
            "ratio": {f"{a}/{b}": {kind: pct(median_ci([row[a][i] / row[b][i] for row in rounds]))
                                   for kind, i in (("wall", 0), ("cpu", 1))}
                      for a, b in PAIRS} if r > 1 else {},
            "round_wall_ms": {v: [round(row[v][0] / 1e6, 3) for row in rounds] for v in VARIANTS}}
    result["capture_span_ops_direct"] = all(direct) if direct else None
    result["seconds"] = round(time.perf_counter() - t_start, 1)
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
