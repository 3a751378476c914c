"""Speculative-decoding captures (issue #21 item 1): HF assisted generation and prompt lookup,
random-init Llama models from configs (nothing downloaded), plain torch profiler.

    python3 bench/spec_capture.py OUT [--device cuda|cpu]

Each trace NAME.json.gz (one `record_function("generate")` around one `generate()`, after one
unrecorded warm-up generate) comes with NAME.truth.json: HF's own per-round figures, recorded by
wrapping the candidate generator `generate()` builds (`get_candidates`: tokens proposed;
`update_candidate_strategy`: n_matches accepted) plus each round's host wall time.

plain     the target alone: greedy generate, one token a pass (the baseline)
copy      draft = exact copy of the target, K fixed at 3 (constant schedule, no confidence stop)
noised    draft = the target with Gaussian noise on its weights, K = 3
random    draft = an independently random 1-layer model, K = 3 (acceptance near zero)
lookup    prompt lookup decoding (prompt_lookup_num_tokens=3) on a repetitive prompt, no draft model
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import os
import shutil
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function
from transformers import GenerationMixin, LlamaConfig, LlamaForCausalLM

TARGET = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=8,
              num_key_value_heads=4, head_dim=128, vocab_size=32000)
RANDOM_DRAFT = dict(TARGET, num_hidden_layers=1, hidden_size=512, intermediate_size=1024,
                    num_attention_heads=4, num_key_value_heads=2)
K = 3
PROMPT = 64
NOISE = 0.05  # noise std relative to each weight tensor's std (tuned on CPU: ~50% accepted)


def log(*a):
    print(*a, flush=True)


def llama(cfg, dev, seed):
    torch.manual_seed(seed)
    c = LlamaConfig(**cfg, attn_implementation="sdpa")
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    return LlamaForCausalLM(c).to(device=dev, dtype=dtype).eval()


def noised(model, rel, seed):
    m = copy.deepcopy(model)
    g = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            n = torch.randn(p.shape, generator=g).to(p.device, p.dtype)
            p.add_(n * (rel * p.float().std().item()))
    return m


class Truth:
    """Wraps the candidate generator of the next generate(): per round proposed/accepted."""

    def __init__(self):
        self.rounds = []
        self.orig = GenerationMixin._get_candidate_generator

    def __enter__(self):
        truth = self

        def wrapped(model_self, *a, **kw):
            gen = truth.orig(model_self, *a, **kw)
            get, upd = gen.get_candidates, gen.update_candidate_strategy

            def get_candidates(input_ids, *ga, **gk):
                t0 = time.perf_counter()
                out = get(input_ids, *ga, **gk)
                truth.rounds.append({"cur_len": int(input_ids.shape[1]),
                                     "proposed": int(out[0].shape[1] - input_ids.shape[1]),
                                     "t0": t0, "draft_s": time.perf_counter() - t0})
                return out

            def update(input_ids, scores, num_matches):
                r = truth.rounds[-1]
                r["accepted"] = int(num_matches)
                r["new_len"] = int(input_ids.shape[1])
                r["round_s"] = time.perf_counter() - r.pop("t0")
                return upd(input_ids, scores, num_matches)

            gen.get_candidates, gen.update_candidate_strategy = get_candidates, update
            return gen

        GenerationMixin._get_candidate_generator = wrapped
        return self

    def __exit__(self, *exc):
        GenerationMixin._get_candidate_generator = self.orig


def acts(dev):
    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def save(prof, out, name, meta):
    raw = os.path.join(out, name + ".json")
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as f, gzip.open(raw + ".gz", "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    os.remove(raw)
    with open(os.path.join(out, name + ".truth.json"), "w") as f:
        json.dump(meta, f, indent=1)
    log(f"  {name}: {os.path.getsize(raw + '.gz') / 1e6:.2f} MB")


def prompt_ids(kind, dev):
    g = torch.Generator(device="cpu").manual_seed(3)
    if kind == "repetitive":  # a 16-token phrase four times: prompt lookup finds n-gram matches
        phrase = torch.randint(0, TARGET["vocab_size"], (16,), generator=g)
        return phrase.repeat(PROMPT // 16).view(1, -1).to(dev)
    return torch.randint(0, TARGET["vocab_size"], (1, PROMPT), generator=g).to(dev)


def run(name, target, dev, out, new_tokens, draft=None, lookup=False):
    ids = prompt_ids("repetitive" if lookup else "random", dev)
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    if draft is not None:
        gc = draft.generation_config
        gc.num_assistant_tokens, gc.num_assistant_tokens_schedule = K, "constant"
        gc.assistant_confidence_threshold = 0.0
        kw |= dict(assistant_model=draft, num_assistant_tokens=K,
                   num_assistant_tokens_schedule="constant", assistant_confidence_threshold=0.0)
    if lookup:
        kw |= dict(prompt_lookup_num_tokens=K)
    with torch.no_grad():
        target.generate(ids[:, :32], **kw)  # warm
        sync(dev)
        with Truth() as truth, profile(activities=acts(dev), record_shapes=True, with_stack=True) as prof:
            t0 = time.perf_counter()
            with record_function("generate"):
                seq = target.generate(ids, **kw)
            sync(dev)
            wall = time.perf_counter() - t0
    rounds = truth.rounds
    meta = {"name": name, "prompt": int(ids.shape[1]), "new_tokens": int(seq.shape[1] - ids.shape[1]),
            "generate_s": wall, "rounds": rounds, "k": K if (draft is not None or lookup) else 0,
            "target": TARGET, "draft": getattr(draft, "_spec_kind", None),
            "torch": torch.__version__, "transformers": __import__("transformers").__version__,
            "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu"}
    acc = sum(r["accepted"] for r in rounds)
    prop = sum(r["proposed"] for r in rounds)
    log(f"[{name}] {len(rounds)} rounds, accepted {acc}/{prop}, new tokens {meta['new_tokens']}, "
        f"{wall * 1e3:.1f} ms: {[(r['proposed'], r['accepted']) for r in rounds]}")
    save(prof, out, name, meta)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--only", default="plain,copy,noised,random,lookup")
    ap.add_argument("--no-cudnn-sdpa", action="store_true",
                    help="SDPA without its cuDNN backend (no per-shape plan build in a pass)")
    a = ap.parse_args()
    if a.no_cudnn_sdpa:
        torch.backends.cuda.enable_cudnn_sdp(False)
    os.makedirs(a.out, exist_ok=True)
    dev = a.device
    target = llama(TARGET, dev, seed=0)
    jobs = {
        "spec_plain": lambda: run("spec_plain", target, dev, a.out, 12),
        "spec_copy": lambda: run("spec_copy", target, dev, a.out, 16, draft=copy.deepcopy(target)),
        "spec_noised": lambda: run("spec_noised", target, dev, a.out, 16, draft=noised(target, NOISE, 1)),
        "spec_random": lambda: run("spec_random", target, dev, a.out, 8, draft=llama(RANDOM_DRAFT, dev, 2)),
        "spec_lookup": lambda: run("spec_lookup", target, dev, a.out, 16, lookup=True),
    }
    for key in a.only.split(","):
        t0 = time.perf_counter()
        try:
            jobs["spec_" + key]()
        except Exception as exc:  # one failing capture never stops the others
            log(f"[{key}] FAILED: {type(exc).__name__}: {exc}")
        log(f"[{key}] {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
