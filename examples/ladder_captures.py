"""Captures for `attrib ladder` (issue 41): one small random-init Llama tuned in steps, each step
captured RUNS times in its own process with its output digest recorded by the capture API.

    python examples/ladder_captures.py run s1_sdpa 0 --device cuda --out traces/
    python examples/ladder_captures.py all --device cuda --out $OUT     # every step x RUNS
    python examples/ladder_captures.py all --device cpu --tiny --out /tmp/l   # CPU smoke test

Steps (L4: hidden 2048, 4 layers, batch 4, prompt 256, greedy, DECODE decode steps):
  s0_eager    eager attention, dynamic cache, eager forwards
  s1_sdpa     SDPA
  s2_static   SDPA over a StaticCache (cache_position), eager forwards
  s3_graphs   s2 with the decode step torch.compile(mode="reduce-overhead"): CUDA graph replays
  s4_again    s3 again: a step that changes nothing
  s5_wrong    s3 picking the second-best token: the same work, other outputs

The token embedding is scaled by EMB_SCALE so the residual stream is mostly the input token's
embedding and the greedy tokens do not depend on the attention backend's or Inductor's rounding (with
random weights, a first capture gave other tokens for eager than for SDPA attention, and for one of
three compiled runs): the outputs of s0-s4 are the same tokens, s5's are not. The work per step is
unchanged. Each run writes RUN.pt.trace.json.gz, its stamp (extra.step: the step;
correctness_gate: the digest of the generated ids) and RUN.model.json with the run's own timing
(`decode_step_s` per decode step, around the step and its synchronize) and the generated ids.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import collectors  # noqa: E402
from h200_captures import build, model_config  # noqa: E402

STEPS = ("s0_eager", "s1_sdpa", "s2_static", "s3_graphs", "s4_again", "s5_wrong")
RUNS = 3
BATCH, PROMPT, DECODE = 4, 256, 12
EMB_SCALE = 64.0


def run(step: str, rep: int, device_name: str, out: Path, tiny: bool) -> int:
    import torch
    from transformers import DynamicCache, StaticCache

    cuda = device_name == "cuda"
    device = torch.device(device_name)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    attn = "eager" if step == "s0_eager" else "sdpa"
    static = step not in ("s0_eager", "s1_sdpa")
    graphs = step in ("s3_graphs", "s4_again", "s5_wrong")
    max_len = PROMPT + DECODE + 2
    config = model_config("llama", tiny, None, max_len, attn)
    model = build(config, torch.bfloat16 if cuda else torch.float32, device, attn)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(EMB_SCALE)
    rank = 1 if step == "s5_wrong" else 0

    def pick(logits):
        return logits[:, -1].topk(2, dim=-1).indices[:, rank:rank + 1]

    def forward(ids, cache, pos):
        kw = {"cache_position": pos} if static else {}
        return pick(model(input_ids=ids, past_key_values=cache, use_cache=True, **kw).logits)

    step_fn = (torch.compile(forward, mode="reduce-overhead") if graphs and cuda else forward)
    torch.manual_seed(1)
    prompt = torch.randint(0, config.vocab_size, (BATCH, PROMPT), device=device)

    def generation(cap, timed: list[float] | None):
        cache = (StaticCache(config=config, max_cache_len=max_len) if static
                 else DynamicCache(config=config))
        out_ids = []
        with torch.inference_mode():
            with cap.phase("prefill", tokens=BATCH * PROMPT):
                pos = torch.arange(PROMPT, device=device)
                kw = {"cache_position": pos} if static else {}
                nxt = pick(model(input_ids=prompt, past_key_values=cache, use_cache=True,
                                 logits_to_keep=1, **kw).logits)
                sync()
            out_ids.append(nxt)
            for i in range(DECODE):
                pos = torch.tensor([PROMPT + i], device=device)
                t0 = time.perf_counter()
                with cap.phase("decode", tokens=BATCH):
                    nxt = step_fn(nxt, cache, pos)
                    if graphs and cuda:
                        nxt = nxt.clone()   # a replay's output buffer is reused by the next
                    sync()
                if timed is not None:
                    timed.append(time.perf_counter() - t0)
                out_ids.append(nxt)
        return torch.cat(out_ids, dim=1)

    name = f"{step}_r{rep}"
    prov = {"model": "random-init llama L4 (ladder)", "batch": BATCH, "context_length": max_len,
            "dtype": "bfloat16" if cuda else "float32", "quantization": "none",
            "speculative": "none", "step": step, "run": rep}
    t_all = time.perf_counter()
    null = collectors.capture(out, enabled=False)
    for _ in range(2):   # unrecorded: compile, graph recording, allocator warm-up
        generation(null, None)
    timed: list[float] = []
    with collectors.capture(out, warmup=0, steps=1 + DECODE, provenance=prov, name=name,
                            with_stack=False) as cap:
        ids = generation(cap, timed)
    res = cap.result
    cap.outputs(ids)   # after the window closed: the written stamp gets the digest
    info = {"name": name, "step": step, "run": rep, "batch": BATCH, "prompt": PROMPT,
            "decode_steps": DECODE, "decode_step_s": timed,
            "generated_ids": ids.tolist(), "emb_scale": EMB_SCALE, "attn": attn,
            "static_cache": static, "cuda_graphs": graphs and cuda,
            "torch": torch.__version__, "wall_s": time.perf_counter() - t_all,
            "trace": str(res.path) if res.path else None, "error": res.error}
    (out / f"{name}.model.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps({k: info[k] for k in ("name", "wall_s", "error")}))
    return 0 if res.path else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=("run", "all"))
    ap.add_argument("step", nargs="?", choices=STEPS)
    ap.add_argument("rep", nargs="?", type=int, default=0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--steps", default=",".join(STEPS), help="all: the steps, comma-separated")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.what == "run":
        return run(a.step, a.rep, a.device, a.out, a.tiny)
    bad = 0
    for step in a.steps.split(","):
        for rep in range(RUNS):
            cmd = [sys.executable, __file__, "run", step, str(rep), "--device", a.device,
                   "--out", str(a.out)] + (["--tiny"] if a.tiny else [])
            bad += subprocess.run(cmd).returncode != 0
    return int(bad > 0)


if __name__ == "__main__":
    sys.exit(main())
