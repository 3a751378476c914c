"""Speculative-decoding captures (issue #21 item 1): HF assisted generation and prompt lookup,
random-init Llama models from configs (nothing downloaded), plain torch profiler.

    python3 bench/spec_capture.py OUT [--device cuda|cpu]

Each trace NAME.json.gz (one `record_function("generate")` around one `generate()`, after one
unrecorded warm-up generate) comes with NAME.truth.json: HF's own per-round figures, recorded by
wrapping the candidate generator `generate()` builds (`get_candidates`: tokens proposed;
`update_candidate_strategy`: n_matches accepted) plus each round's host wall time.

plain     the target alone: greedy generate, one token a pass (the baseline)
copy      draft = exact copy of the target, K fixed at 3 (constant schedule, no confidence stop)
noised    draft = the target with Gaussian noise on its weights (0.05 x each tensor's std), K = 3
random    draft = an independently random 1-layer model, K = 3 (acceptance near zero)
lookup    prompt lookup decoding (prompt_lookup_num_tokens=3) on a repetitive prompt, no draft model

A small draft against a larger target (BIG: 8 layers, hidden 2048; SMALL: 1 layer, hidden 512, the
same vocab), built so the draft agrees often: the target's embeddings are the draft's padded with
zeros and its lm_head reads only those 512 dimensions (the draft's head, the rest zero), and every
layer's residual writes (o_proj, down_proj) of both models are scaled by ALPHA, so the greedy next
token is mostly the embedding-head bigram both compute (ALPHA tuned on CPU: ~85% agreement).

big_plain   the BIG target alone (its baseline, same process)
big_draft   the derived SMALL draft, K = 3 (acceptance high)
big_random  an independently random SMALL draft (same shape, same ALPHA), K = 3 (acceptance ~0)

--pack writes the files into tars of at most 15 MB in OUT (a call brings back at most 8 files).
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function
from transformers import GenerationMixin, LlamaConfig, LlamaForCausalLM

TARGET = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=8,
              num_key_value_heads=4, head_dim=128, vocab_size=32000)
RANDOM_DRAFT = dict(TARGET, num_hidden_layers=1, hidden_size=512, intermediate_size=1024,
                    num_attention_heads=4, num_key_value_heads=2)
BIG = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8, num_attention_heads=16,
           num_key_value_heads=8, head_dim=128, vocab_size=32000)
SMALL = dict(BIG, hidden_size=512, intermediate_size=1408, num_hidden_layers=1,
             num_attention_heads=4, num_key_value_heads=2)
ALPHA = 5e-4  # residual-write scale of BIG and SMALL (see the module docstring)
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


def scale_writes(model, alpha):
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(alpha)
            layer.mlp.down_proj.weight.mul_(alpha)
    return model


def derive(target, draft):
    """The target's embeddings := the draft's padded with zeros; its head reads those dims only."""
    d = draft.config.hidden_size
    with torch.no_grad():
        target.model.embed_tokens.weight.zero_()
        target.model.embed_tokens.weight[:, :d] = draft.model.embed_tokens.weight
        target.lm_head.weight.zero_()
        target.lm_head.weight[:, :d] = draft.lm_head.weight
    return target


def big_models(dev):
    """BIG target, its derived SMALL draft and an independent SMALL draft (module docstring)."""
    draft = scale_writes(llama(SMALL, dev, seed=4), ALPHA)
    target = scale_writes(derive(llama(BIG, dev, seed=0), draft), ALPHA)
    other = scale_writes(llama(SMALL, dev, seed=5), ALPHA)
    draft._spec_kind, other._spec_kind = "derived SMALL", "independent SMALL"
    return target, draft, other


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


def _plain(d):
    return {k: v for k, v in d.items() if isinstance(v, (int, float, str, bool))}


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


def run(name, target, dev, out, new_tokens, draft=None, lookup=False, cfg=TARGET):
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
            "target": cfg, "draft_config": None if draft is None else _plain(draft.config.to_dict()),
            "alpha": ALPHA if cfg is BIG else None, "cudnn_sdpa": torch.backends.cuda.cudnn_sdp_enabled(),
            "draft": getattr(draft, "_spec_kind", None),
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
    ap.add_argument("--only", default="plain,copy,noised,random,lookup,big_plain,big_draft,big_random")
    ap.add_argument("--pack", action="store_true", help="tars of at most 15 MB in OUT")
    ap.add_argument("--no-cudnn-sdpa", action="store_true",
                    help="SDPA without its cuDNN backend (no per-shape plan build in a pass)")
    a = ap.parse_args()
    if a.no_cudnn_sdpa:
        torch.backends.cuda.enable_cudnn_sdp(False)
    out = a.out
    if a.pack:
        out = os.path.join(tempfile.mkdtemp(), "spec")
    os.makedirs(out, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    dev = a.device
    log(f"torch {torch.__version__}, cudnn sdpa {torch.backends.cuda.cudnn_sdp_enabled()}, {dev}")
    keys = a.only.split(",")
    target = llama(TARGET, dev, seed=0)
    big = big_models(dev) if any(k.startswith("big_") for k in keys) else None
    jobs = {
        "spec_plain": lambda: run("spec_plain", target, dev, out, 12),
        "spec_copy": lambda: run("spec_copy", target, dev, out, 16, draft=copy.deepcopy(target)),
        "spec_noised": lambda: run("spec_noised", target, dev, out, 16, draft=noised(target, NOISE, 1)),
        "spec_random": lambda: run("spec_random", target, dev, out, 8, draft=llama(RANDOM_DRAFT, dev, 2)),
        "spec_lookup": lambda: run("spec_lookup", target, dev, out, 16, lookup=True),
        "spec_big_plain": lambda: run("spec_big_plain", big[0], dev, out, 16, cfg=BIG),
        "spec_big_draft": lambda: run("spec_big_draft", big[0], dev, out, 32, draft=big[1], cfg=BIG),
        "spec_big_random": lambda: run("spec_big_random", big[0], dev, out, 8, draft=big[2], cfg=BIG),
    }
    for key in keys:
        t0 = time.perf_counter()
        try:
            jobs["spec_" + key]()
        except Exception as exc:  # one failing capture never stops the others
            log(f"[{key}] FAILED: {type(exc).__name__}: {exc}")
        log(f"[{key}] {time.perf_counter() - t0:.1f} s")
    if a.pack:
        pack(out, a.out)


def pack(src, dst, limit=15e6):
    """src's files into dst/spec_N.tar, each at most `limit` bytes (a file alone may pass it)."""
    groups, size = [[]], 0
    for name in sorted(os.listdir(src)):
        n = os.path.getsize(os.path.join(src, name))
        if groups[-1] and size + n > limit:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += n
    for i, names in enumerate(groups):
        with tarfile.open(os.path.join(dst, f"spec_{i}.tar"), "w") as tar:
            for name in names:
                tar.add(os.path.join(src, name), arcname=name)
        log(f"spec_{i}.tar: {names}")


if __name__ == "__main__":
    sys.exit(main())
