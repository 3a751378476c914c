"""Captures for the step-time ledger (issue #23), plain torch profiler, random-init models.

    python3 bench/ledger_capture.py OUT [--device cuda|cpu] [--only a,b,c,d,e,m]

a  cudnn_decode:   HF Llama eager decode, SDPA pinned to cuDNN, no warm-up at the decode shapes
                   (every step has a new KV length): a host stall in aten::_cudnn_attention_forward.
b  graph_ahead:    a Llama-shaped decoder (own modules, static KV) replayed from one CUDA graph per
                   step, no host sync between steps: the host runs ahead of the GPU.
g  graph_attn_{sdpa,eager}: the same decoder with 4 layers, one graph each, attention as SDPA or
                   written out (repeat K/V, Q.K^T, scale, mask, fp32 softmax, P.V, as HF's eager):
                   one kernel swapped for several inside a replay that has no per-kernel ops.
c  generate:       model.generate() under one record_function("generate"): 1 prefill + N decode.
e  assisted:       model.generate(assistant_model=draft) under record_function("generate").
d  host_sampling:  HF eager decode, logits .cpu() and numpy top-p in `sample_top_p` per step.
m  measure.json:   the same eager decode loop without the profiler, with it (record_shapes), and
                   with record_shapes + with_stack: per-step wall time and event counts, from
                   which the profiler's per-event host cost is derived.
On CPU (a smoke test) b is skipped and SDPA is not pinned.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import sys
import time
from collections import Counter

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile, record_function
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

SMALL = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=8,
             num_key_value_heads=4, head_dim=128, vocab_size=32000)
DRAFT = dict(SMALL, num_hidden_layers=1, hidden_size=512, intermediate_size=1024, num_attention_heads=4,
             num_key_value_heads=2)
BIG_VOCAB = dict(SMALL, vocab_size=128256)
GRAPH = dict(hidden=4096, ffn=11008, layers=8, heads=32, kv_heads=8, head_dim=128, vocab=32000)


def log(*a):
    print(*a, flush=True)


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def llama(cfg, dev, seed=0):
    torch.manual_seed(seed)
    c = LlamaConfig(**cfg, attn_implementation="sdpa", torch_dtype="bfloat16")
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    return LlamaForCausalLM(c).to(device=dev, dtype=dtype).eval(), c


def acts(dev):
    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])


def save(prof, out, name):
    raw = os.path.join(out, name + ".json")
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as f, gzip.open(raw + ".gz", "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    os.remove(raw)
    ev = json.loads(gzip.open(raw + ".gz").read())["traceEvents"]
    cats = Counter(e.get("cat") for e in ev)
    log(f"  {name}: {os.path.getsize(raw + '.gz') / 1e6:.2f} MB, {dict(cats)}")
    return cats


def prefill(model, batch, prompt, dev):
    ids = torch.randint(0, model.config.vocab_size, (batch, prompt), device=dev)
    cache = DynamicCache()
    out = model(input_ids=ids, past_key_values=cache, use_cache=True)
    return out.logits[:, -1].argmax(-1, keepdim=True), cache


def cap_cudnn(out, dev, steps=6):
    model, _ = llama(SMALL, dev)
    pin = sdpa_kernel(SDPBackend.CUDNN_ATTENTION) if dev == "cuda" else contextlib.nullcontext()
    with torch.no_grad():
        prefill(model, 4, 64, dev)  # warm the process (cuBLAS, allocator), not the decode shapes
        sync(dev)
        with profile(activities=acts(dev), record_shapes=True, with_stack=True) as prof:
            with pin:
                with record_function("prefill (tokens=1024)"):
                    nxt, cache = prefill(model, 4, 256, dev)
                    sync(dev)
                for _ in range(steps):
                    with record_function("decode (tokens=4)"):
                        o = model(input_ids=nxt, past_key_values=cache, use_cache=True)
                        nxt = o.logits[:, -1].argmax(-1, keepdim=True)
                        sync(dev)
    save(prof, out, "ledger_cudnn_decode")


class GraphDecoder(torch.nn.Module):
    """A Llama-shaped decoder over a static KV buffer, graph-safe: the position lives on the GPU."""

    def __init__(self, g, batch, ctx, dev, eager=False):
        super().__init__()
        self.eager = eager
        h, d, kvh = g["hidden"], g["head_dim"], g["kv_heads"]
        self.g, self.b = g, batch
        mk = lambda i, o: torch.nn.Linear(i, o, bias=False)
        self.emb = torch.nn.Embedding(g["vocab"], h)
        self.qkv = torch.nn.ModuleList(mk(h, (g["heads"] + 2 * kvh) * d) for _ in range(g["layers"]))
        self.o = torch.nn.ModuleList(mk(g["heads"] * d, h) for _ in range(g["layers"]))
        self.gu = torch.nn.ModuleList(mk(h, 2 * g["ffn"]) for _ in range(g["layers"]))
        self.dn = torch.nn.ModuleList(mk(g["ffn"], h) for _ in range(g["layers"]))
        self.head = mk(h, g["vocab"])
        self.to(device=dev, dtype=torch.bfloat16)
        shape = (g["layers"], batch, kvh, ctx, d)
        self.k = torch.randn(shape, device=dev, dtype=torch.bfloat16)
        self.v = torch.randn(shape, device=dev, dtype=torch.bfloat16)
        self.pos = torch.tensor([ctx // 2], device=dev)
        self.ids = torch.zeros(batch, 1, dtype=torch.long, device=dev)
        self.ar = torch.arange(ctx, device=dev)

    def forward(self):
        g, b = self.g, self.b
        d, hq, kvh = g["head_dim"], g["heads"], g["kv_heads"]
        x = self.emb(self.ids)
        mask = (self.ar <= self.pos).view(1, 1, 1, -1)
        bias = None
        if self.eager:
            bias = torch.zeros(mask.shape, device=x.device, dtype=x.dtype).masked_fill(~mask, float("-inf"))
        for i in range(g["layers"]):
            y = torch.nn.functional.rms_norm(x, (g["hidden"],))
            q, k, v = self.qkv[i](y).split([hq * d, kvh * d, kvh * d], -1)
            q = q.view(b, 1, hq, d).transpose(1, 2)
            self.k[i].index_copy_(2, self.pos, k.view(b, 1, kvh, d).transpose(1, 2))
            self.v[i].index_copy_(2, self.pos, v.view(b, 1, kvh, d).transpose(1, 2))
            if self.eager:
                a = self.eager_attention(q, self.k[i], self.v[i], bias)
            else:
                a = torch.nn.functional.scaled_dot_product_attention(q, self.k[i], self.v[i],
                                                                      attn_mask=mask, enable_gqa=True)
            x = x + self.o[i](a.transpose(1, 2).reshape(b, 1, hq * d))
            y = torch.nn.functional.rms_norm(x, (g["hidden"],))
            gt, up = self.gu[i](y).chunk(2, -1)
            x = x + self.dn[i](torch.nn.functional.silu(gt) * up)
        logits = self.head(torch.nn.functional.rms_norm(x, (g["hidden"],)))
        self.ids.copy_(logits[:, -1:].argmax(-1))
        self.pos.add_(1)


    def eager_attention(self, q, k, v, bias):
        """HF's eager attention: K/V repeated to the query heads, softmax in fp32."""
        b, kvh, ctx, d = k.shape
        rep = self.g["heads"] // kvh
        k = k[:, :, None].expand(b, kvh, rep, ctx, d).reshape(b, kvh * rep, ctx, d)
        v = v[:, :, None].expand(b, kvh, rep, ctx, d).reshape(b, kvh * rep, ctx, d)
        w = torch.matmul(q, k.transpose(2, 3)) * d**-0.5 + bias
        w = torch.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(w, v)


def cap_graph_attn(out, dev):
    """The SDPA and the eager-attention graph decoder, 4 layers, 12 replays each."""
    for eager in (False, True):
        name = "graph_attn_" + ("eager" if eager else "sdpa")
        cap_graph(out, dev, steps=12, g=dict(GRAPH, layers=4), eager=eager, name=name)


def cap_graph(out, dev, steps=24, batch=8, ctx=2048, g=GRAPH, eager=False, name="ledger_graph_ahead"):
    if dev != "cuda":
        log(f"  {name}: skipped on cpu")
        return
    torch.manual_seed(0)
    m = GraphDecoder(g, batch, ctx, dev, eager=eager)
    with torch.no_grad():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                m()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            m()
        for _ in range(3):
            graph.replay()
        sync(dev)
        m.pos.fill_(ctx // 2)
        with profile(activities=acts(dev), record_shapes=True) as prof:
            t0 = time.perf_counter()
            for _ in range(steps):
                with record_function(f"decode (tokens={batch})"):
                    graph.replay()
            t1 = time.perf_counter()
            sync(dev)
            t2 = time.perf_counter()
    log(
        f"  {name}: host enqueued {steps} steps in {1e3 * (t1 - t0):.2f} ms, GPU done after "
        f"{1e3 * (t2 - t0):.2f} ms"
    )
    save(prof, out, name)


def cap_generate(out, dev, assisted=False):
    model, _ = llama(SMALL, dev)
    draft = llama(DRAFT, dev, seed=1)[0] if assisted else None
    ids = torch.randint(0, SMALL["vocab_size"], (1 if assisted else 4, 128), device=dev)
    kw = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0)
    if assisted:
        kw |= dict(assistant_model=draft)
    with torch.no_grad():
        model.generate(ids[:, :32], **kw)  # warm
        sync(dev)
        with profile(activities=acts(dev), record_shapes=True, with_stack=True) as prof:
            with record_function("generate"):
                model.generate(ids, **kw)
            sync(dev)
    save(prof, out, "ledger_assisted" if assisted else "ledger_generate")


def sample_top_p(logits, p=0.9, rng=np.random.default_rng(0)):
    """Host-side nucleus sampling over numpy logits [batch, vocab]."""
    z = logits - logits.max(-1, keepdims=True)
    probs = np.exp(z)
    probs /= probs.sum(-1, keepdims=True)
    order = np.argsort(-probs, -1)
    sorted_p = np.take_along_axis(probs, order, -1)
    keep = np.cumsum(sorted_p, -1) - sorted_p < p
    out = []
    for row in range(probs.shape[0]):
        pr = sorted_p[row][keep[row]]
        out.append(order[row][rng.choice(len(pr), p=pr / pr.sum())])
    return np.array(out)


def decode_loop(model, dev, steps, host_sampling, batch=4):
    with torch.no_grad():
        nxt, cache = prefill(model, batch, 128, dev)
        sync(dev)
        for _ in range(steps):
            with record_function(f"decode (tokens={batch})"):
                o = model(input_ids=nxt, past_key_values=cache, use_cache=True)
                if host_sampling:
                    toks = sample_top_p(o.logits[:, -1].float().cpu().numpy())
                    nxt = torch.from_numpy(toks).view(-1, 1).to(dev)
                else:
                    nxt = o.logits[:, -1].argmax(-1, keepdim=True)
                sync(dev)


def cap_host_sampling(out, dev, steps=6):
    model, _ = llama(BIG_VOCAB, dev)
    decode_loop(model, dev, 2, True)
    with profile(activities=acts(dev), record_shapes=True, with_stack=True) as prof:
        decode_loop(model, dev, steps, True)
    save(prof, out, "ledger_host_sampling")


def measure(out, dev, steps=40):
    """Per-step wall time of the same eager decode without/with the profiler, and its event counts."""
    model, _ = llama(dict(SMALL, num_hidden_layers=2), dev)
    decode_loop(model, dev, 4, False, batch=1)
    res = {}
    for mode in ("none", "shapes", "shapes_stack", "none_again"):
        if mode.startswith("none"):
            t0 = time.perf_counter()
            decode_loop(model, dev, steps, False, batch=1)
            res[mode] = {"s": time.perf_counter() - t0}
            continue
        with profile(activities=acts(dev), record_shapes=True, with_stack=mode == "shapes_stack") as prof:
            t0 = time.perf_counter()
            decode_loop(model, dev, steps, False, batch=1)
            dt = time.perf_counter() - t0
        path = os.path.join(out, f"_m_{mode}.json")
        prof.export_chrome_trace(path)
        ev = json.load(open(path))["traceEvents"]
        os.remove(path)
        res[mode] = {"s": dt, "events": dict(Counter(e.get("cat") for e in ev if e.get("ph") == "X"))}
    res |= {"steps": steps, "note": "decode loop incl. one prefill; events are the whole loop's"}
    res |= {"torch": torch.__version__, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu"}
    json.dump(res, open(os.path.join(out, "ledger_measure.json"), "w"), indent=1)
    log("  measure:", json.dumps(res))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--only", default="a,b,c,e,d,m")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    import transformers
    log("torch", torch.__version__, "transformers", transformers.__version__, "device", a.device,
        torch.cuda.get_device_name() if a.device == "cuda" else "")
    jobs = {"a": cap_cudnn, "b": cap_graph, "g": cap_graph_attn, "c": cap_generate,
            "e": lambda o, d: cap_generate(o, d, True),
            "d": cap_host_sampling, "m": measure}
    for key in a.only.split(","):
        t0 = time.perf_counter()
        log(f"[{key}] start")
        try:
            jobs[key](a.out, a.device)
        except Exception as exc:  # one failing capture never stops the others
            log(f"[{key}] FAILED: {type(exc).__name__}: {exc}")
        log(f"[{key}] {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
