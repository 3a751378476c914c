"""The single-GPU captures the open issues need, each a `collectors.capture` of a random-init HF model.

    python examples/h200_captures.py all --device cuda --out traces/ --budget 480   # every capture,
        # each in its own process (one failing capture never stops the others), then a summary
    python examples/h200_captures.py run sdpa_attn_a --device cuda --out traces/     # one capture
    python examples/h200_captures.py list                                           # names + configs
    python examples/h200_captures.py all --device cpu --tiny --out /tmp/t           # a CPU smoke test

Captures (see tests/fixtures/captured/README.md for configs and hand-derived bytes per token):
compile_decode (torch.compile of the decode step, first compiled call inside the window),
compile_decode_autotune (the same with mode="max-autotune-no-cudagraphs", when time allows),
qwen3next_decode, deepseekv3_decode, eager_attn, sdpa_attn_a, sdpa_attn_b, slope_ctx1024,
slope_ctx4096, slope_ctx16384, sampler_b1_v152k, blocking_copy_decode, nosplit_ctx2048 and
nosplit_ctx16384 (SDPA held to its memory-efficient kernel: decode attention without split-KV).

Beside each trace `<name>.pt.trace.json.gz` (+ `.attrib.json` stamp) goes `<name>.model.json`: the
exact HF config, parameter bytes per part of the model and the cache tensors after the run, from
which the decode bytes per token are derived.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout (or .dev/)

import capture_common  # noqa: E402
import collectors  # noqa: E402

# One small Llama for the dense captures: 4 layers, hidden 2048, 16 heads of 128, 8 KV heads.
LLAMA = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=4, num_attention_heads=16,
             num_key_value_heads=8, head_dim=128, vocab_size=32000)
LLAMA_TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, vocab_size=512)

QWEN3NEXT = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                 num_attention_heads=8, num_key_value_heads=2, head_dim=128,
                 linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=128,
                 linear_value_head_dim=128, linear_conv_kernel_dim=4,
                 layer_types=["linear_attention", "linear_attention", "linear_attention",
                              "full_attention"],
                 num_experts=16, num_experts_per_tok=4, moe_intermediate_size=256,
                 shared_expert_intermediate_size=512, decoder_sparse_step=1, norm_topk_prob=True,
                 vocab_size=32000)
QWEN3NEXT_TINY = dict(QWEN3NEXT, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                      head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                      linear_key_head_dim=16, linear_value_head_dim=16, num_experts=4,
                      num_experts_per_tok=2, moe_intermediate_size=32,
                      shared_expert_intermediate_size=32, vocab_size=512)

DEEPSEEKV3 = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=3,
                  num_attention_heads=8, num_key_value_heads=8, q_lora_rank=384, kv_lora_rank=256,
                  qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64, n_routed_experts=16,
                  num_experts_per_tok=4, n_group=4, topk_group=2, n_shared_experts=1,
                  moe_intermediate_size=256, first_k_dense_replace=1, routed_scaling_factor=2.5,
                  norm_topk_prob=True, vocab_size=32000)
DEEPSEEKV3_TINY = dict(DEEPSEEKV3, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                       num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=8,
                       qk_rope_head_dim=8, v_head_dim=8, n_routed_experts=8, num_experts_per_tok=2,
                       n_group=2, topk_group=1, moe_intermediate_size=32, vocab_size=512)

# name -> (family, config overrides, run settings). batch/prompt/steps shrink under --tiny.
CAPTURES: dict[str, dict] = {
    "compile_decode": dict(arch="llama", batch=8, prompt=512, steps=6, kind="compile",
                           compile_mode="default", stack=False),
    "qwen3next_decode": dict(arch="qwen3_next", batch=1, prompt=256, steps=4),
    "deepseekv3_decode": dict(arch="deepseek_v3", batch=1, prompt=256, steps=4),
    "eager_attn": dict(arch="llama", batch=8, prompt=2048, steps=8, attn="eager"),
    "sdpa_attn_a": dict(arch="llama", batch=8, prompt=2048, steps=8, attn="sdpa"),
    "sdpa_attn_b": dict(arch="llama", batch=8, prompt=2048, steps=8, attn="sdpa"),
    "slope_ctx1024": dict(arch="llama", batch=8, prompt=1024, steps=6, attn="sdpa"),
    "slope_ctx4096": dict(arch="llama", batch=8, prompt=4096, steps=6, attn="sdpa"),
    "slope_ctx16384": dict(arch="llama", batch=8, prompt=16384, steps=6, attn="sdpa"),
    "sampler_b1_v152k": dict(arch="llama", batch=1, prompt=512, steps=8, attn="sdpa",
                             vocab=151936, kind="sample"),
    "blocking_copy_decode": dict(arch="llama", batch=8, prompt=512, steps=8, attn="sdpa",
                                 kind="blocking_copy", copy_mb=128),
    "compile_decode_autotune": dict(arch="llama", batch=8, prompt=512, steps=6, kind="compile",
                                    compile_mode="max-autotune-no-cudagraphs", stack=False),
    # decode attention without split-KV: SDPA held to its memory-efficient (cutlass) kernel, which
    # parallelizes over batch x heads x query blocks only, so a batch-1 decode runs 16 CTAs over the
    # whole context; MHA (16 KV heads) because that kernel takes no GQA
    "nosplit_ctx2048": dict(arch="llama", batch=1, prompt=2048, steps=6, attn="sdpa", sdpa="efficient",
                            config=dict(num_key_value_heads=16)),
    "nosplit_ctx16384": dict(arch="llama", batch=1, prompt=16384, steps=6, attn="sdpa", sdpa="efficient",
                             config=dict(num_key_value_heads=16)),
}
ORDER = ["compile_decode", "qwen3next_decode", "deepseekv3_decode", "eager_attn", "sdpa_attn_a",
         "sdpa_attn_b", "slope_ctx1024", "slope_ctx4096", "slope_ctx16384", "sampler_b1_v152k",
         "blocking_copy_decode", "compile_decode_autotune", "nosplit_ctx2048", "nosplit_ctx16384"]
TIMEOUT_S = {"compile_decode": 150, "compile_decode_autotune": 150}


def model_config(arch: str, tiny: bool, vocab: int | None, max_len: int, attn: str | None,
                 overrides: dict | None = None):
    from transformers import AutoConfig

    base = {"llama": (LLAMA, LLAMA_TINY), "qwen3_next": (QWEN3NEXT, QWEN3NEXT_TINY),
            "deepseek_v3": (DEEPSEEKV3, DEEPSEEKV3_TINY)}[arch][int(tiny)]
    kw = dict(base, max_position_embeddings=max_len, **({} if tiny else overrides or {}))
    if vocab and not tiny:
        kw["vocab_size"] = vocab
    if tiny and arch == "qwen3_next":
        kw["layer_types"] = ["linear_attention", "full_attention"]
        kw["num_hidden_layers"] = 2
    config = AutoConfig.for_model(arch, **kw)
    if attn:
        config._attn_implementation = attn
    return config


def build(config, dtype, device, attn: str | None):
    """Random weights, made on the device in `dtype` (nothing is downloaded)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    extra = {"attn_implementation": attn} if attn else {}
    try:
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, **extra)
    except TypeError:
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, torch_dtype=dtype, **extra)
    return model.to(device=device, dtype=dtype).eval()


def param_bytes(model) -> dict:
    """Parameter bytes per part: what one decode step reads (experts per expert)."""
    parts: dict[str, int] = {}
    per_expert: dict[str, int] = {}
    for name, p in model.named_parameters():
        n = p.numel() * p.element_size()
        if ".mlp.experts." in name:
            key = "routed_experts"
            # fused experts are 3-D [E, ...]: one expert is 1/E of it
            e = p.shape[0] if p.dim() == 3 else None
            per_expert[name.split(".mlp.experts.")[0]] = per_expert.get(
                name.split(".mlp.experts.")[0], 0) + (n // e if e else 0)
        elif "shared_expert" in name:
            key = "shared_experts"
        elif ".mlp.gate." in name or name.endswith("mlp.gate.weight") or "e_score_correction" in name:
            key = "router"
        elif "embed_tokens" in name:
            key = "embedding"
        elif name.startswith("lm_head"):
            key = "lm_head"
        elif "linear_attn" in name:
            key = "linear_attention"
        elif "self_attn" in name:
            key = "attention"
        elif ".mlp." in name:
            key = "dense_mlp"
        else:
            key = "norms_other"
        parts[key] = parts.get(key, 0) + n
    return {"bytes_by_part": parts, "total_bytes": sum(parts.values()),
            "routed_expert_bytes_per_expert_by_layer": per_expert or None}


def cache_tensors(cache) -> list[dict]:
    """Shapes, dtypes and bytes of every tensor the cache holds (KV, conv and recurrent state)."""
    import torch

    out, seen = [], set()

    def visit(obj, path, depth=0):
        if depth > 4 or id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            out.append({"path": path, "shape": list(obj.shape), "dtype": str(obj.dtype),
                        "bytes": obj.numel() * obj.element_size()})
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                visit(v, f"{path}[{i}]", depth + 1)
        elif isinstance(obj, dict):
            for k, v in obj.items():
                visit(v, f"{path}.{k}", depth + 1)
        elif hasattr(obj, "__dict__") and not isinstance(obj, type):
            for k, v in vars(obj).items():
                if not k.startswith("__"):
                    visit(v, f"{path}.{k}", depth + 1)

    visit(cache, "cache")
    return out


class Sampler:
    """Temperature, top-k, top-p, softmax and torch.multinomial over the last position's logits."""

    def __init__(self, top_k=50, top_p=0.9, temperature=0.8):
        self.top_k, self.top_p, self.temperature = top_k, top_p, temperature

    def __call__(self, logits):
        import torch

        logits = logits.float() / self.temperature
        kth = torch.topk(logits, self.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
        srt, idx = torch.sort(logits, dim=-1, descending=True)
        cum = torch.softmax(srt, dim=-1).cumsum(-1)
        drop = cum - torch.softmax(srt, dim=-1) > self.top_p
        srt = srt.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, idx, srt)
        probs = torch.softmax(logits, dim=-1)
        return torch.multinomial(probs, 1)


def run_one(name: str, device_name: str, out: Path, tiny: bool) -> int:
    if CAPTURES[name].get("kind") == "compile":   # a real compile in the window, not a cache hit
        os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
        os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")
    import torch
    import transformers

    spec = dict(CAPTURES[name])
    kind = spec.get("kind", "plain")
    batch, prompt, steps = spec["batch"], spec["prompt"], spec["steps"]
    if tiny:
        batch, prompt, steps = min(batch, 2), min(prompt, 32), min(steps, 3)
    device = torch.device(device_name)
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    max_len = prompt + steps + 8
    attn = spec.get("attn")
    config = model_config(spec["arch"], tiny, spec.get("vocab"), max_len, attn, spec.get("config"))
    model = build(config, dtype, device, attn)
    pbytes = param_bytes(model)
    dt = str(dtype).removeprefix("torch.")
    stack = spec.get("stack", True)
    cfgd = {k: v for k, v in config.to_dict().items()
            if isinstance(v, (int, float, str, bool, list, type(None)))}
    shown = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "head_dim", "intermediate_size", "vocab_size", "layer_types", "num_experts",
             "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
             "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
             "linear_value_head_dim", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
             "qk_rope_head_dim", "v_head_dim", "n_routed_experts", "n_shared_experts",
             "first_k_dense_replace")
    prov = {"model": f"random-init {config.model_type} ({name}): "
                     + ", ".join(f"{k}={getattr(config, k)}" for k in shown
                                 if getattr(config, k, None) is not None),
            "quantization": "none", "dtype": dt, "context_length": prompt, "batch": batch,
            "concurrency": 1, "kv_cache_dtype": dt, "speculative": "none",
            "kv_cache_state": "StaticCache, compiled decode" if kind == "compile"
            else "fresh cache per generation, prefill then decode",
            "runner": f"transformers {transformers.__version__} forward, examples/h200_captures.py {name}",
            "attn_implementation": getattr(config, "_attn_implementation", None),
            "experts_implementation": getattr(config, "_experts_implementation", None),
            "capture_name": name, "decode_steps": steps, "prompt_tokens": prompt,
            "max_cache_len": max_len, "model_config": cfgd, "param_bytes": pbytes,
            "tiny": tiny}
    if kind == "compile":
        prov["compile_mode"] = spec["compile_mode"]
        prov["window"] = ("prefill (eager) + the first compiled decode call (dynamo+inductor compile "
                          "inside the window, marked decode) + further compiled decode steps")
    if kind == "sample":
        prov["sampler"] = "temperature 0.8, top-k 50, top-p 0.9, softmax, torch.multinomial (fp32)"
    if spec.get("sdpa"):
        prov["sdpa_backend"] = spec["sdpa"]
    if kind == "blocking_copy":
        prov["blocking_copy"] = (f"each decode step first copies a {spec['copy_mb']} MB pageable "
                                 "host tensor to the GPU (non_blocking=False)")
    out.mkdir(parents=True, exist_ok=True)
    import inspect

    params = inspect.signature(model.forward).parameters
    key = "cache" if "cache" in params else "past_key_values"   # transformers >= 5.2x renamed it
    gens = 2  # one unrecorded warmup generation, then the recorded one
    warmup_steps = (1 + steps) if kind != "compile" else 0
    sampler = Sampler() if kind == "sample" else None
    host = None
    if kind == "blocking_copy":
        n = (spec["copy_mb"] << 20) // 2 if not tiny else 1 << 16
        host = torch.ones(n, dtype=torch.bfloat16)   # pageable (not pinned) on purpose
    info: dict = {"name": name, "config": config.to_dict(), "param_bytes": pbytes, "batch": batch,
                  "prompt": prompt, "decode_steps": steps, "dtype": dt, "device": str(device),
                  "torch": torch.__version__, "transformers": transformers.__version__}

    def pick(logits):
        if sampler is not None:
            return sampler(logits[:, -1])
        return logits[:, -1].argmax(-1, keepdim=True)

    def generation(cap):
        ids = torch.randint(0, config.vocab_size, (batch, prompt), device=device)
        with torch.inference_mode():
            out_ = None
            with cap.phase("prefill", tokens=batch * prompt):
                out_ = model(input_ids=ids, use_cache=True, logits_to_keep=1)
                nxt = pick(out_.logits)
                sync()
            cache = out_.past_key_values
            for _ in range(steps):
                with cap.phase("decode", tokens=batch):
                    if host is not None:
                        staged = host.to(device)   # blocking: pageable memory
                    o = model(input_ids=nxt, use_cache=True, **{key: cache})
                    nxt = pick(o.logits)
                    sync()
            if host is not None:
                del staged
        return cache

    t0 = time.perf_counter()
    if kind == "compile":
        from transformers import StaticCache

        def decode_fn(ids, cache, pos):
            return model(input_ids=ids, **{key: cache}, cache_position=pos,
                         use_cache=True).logits[:, -1].argmax(-1, keepdim=True)

        backend = "inductor"
        step = torch.compile(decode_fn, mode=spec["compile_mode"], backend=backend)
        cache = StaticCache(config=config, max_cache_len=max_len)
        ids = torch.randint(0, config.vocab_size, (batch, prompt), device=device)
        with collectors.capture(out, warmup=0, steps=1 + steps, provenance=prov, with_stack=stack,
                                name=name) as cap, torch.inference_mode():
            with cap.phase("prefill", tokens=batch * prompt):
                pos = torch.arange(prompt, device=device)
                nxt = model(input_ids=ids, **{key: cache}, cache_position=pos,
                            use_cache=True, logits_to_keep=1).logits[:, -1].argmax(-1, keepdim=True)
                sync()
            times = []
            for i in range(steps):
                pos = torch.tensor([prompt + i], device=device)
                t1 = time.perf_counter()
                with cap.phase("decode", tokens=batch):
                    nxt = step(nxt, cache, pos)
                    sync()
                times.append(time.perf_counter() - t1)
        info["decode_step_s"] = times
        info["cache_tensors"] = cache_tensors(cache)
    else:
        import contextlib

        backend = contextlib.nullcontext()
        if spec.get("sdpa") and cuda:  # (on CPU that kernel does not exist: the smoke test runs the default)
            from torch.nn.attention import SDPBackend, sdpa_kernel

            backend = sdpa_kernel({"efficient": SDPBackend.EFFICIENT_ATTENTION}[spec["sdpa"]])
        with backend, collectors.capture(out, warmup=warmup_steps, steps=1 + steps, provenance=prov,
                                         with_stack=stack, name=name) as cap:
            for _ in range(gens):
                cache = generation(cap)
        info["cache_tensors"] = cache_tensors(cache)
    res = cap.result
    info.update(wall_s=time.perf_counter() - t0, trace=str(res.path) if res.path else None,
                trace_bytes=res.bytes, steps_recorded=len(res.steps), error=res.error,
                stop_s=res.stop_s, export_s=res.export_s)
    (out / f"{name}.model.json").write_text(json.dumps(info, indent=1, default=str) + "\n")
    print(json.dumps({k: info[k] for k in ("name", "trace_bytes", "steps_recorded", "wall_s",
                                           "stop_s", "export_s", "error")}, default=str))
    return 0 if res.path else 1


def main(argv=None) -> int:
    return capture_common.cli(argv, __doc__, __file__, CAPTURES, run_one, ORDER, budget=480,
                              timeouts=TIMEOUT_S)


if __name__ == "__main__":
    raise SystemExit(main())
