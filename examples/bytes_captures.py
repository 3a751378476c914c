"""Captures for issues #20 and #36 (sliding windows, grouped routing, vision forwards: a ViT
classifier, an OWLv2 detector with its text tower, a LLaVA generation), each a
`collectors.capture` of a random-init HF model; helpers from examples/h200_captures.py.

    python examples/bytes_captures.py all --device cuda --out $OUT     # every capture, own process each
    python examples/bytes_captures.py run mistral_swa --device cpu --tiny --out /tmp/t

Beside each `<name>.pt.trace.json.gz` goes `<name>.model.json` (config, parameter bytes per part,
the cache tensors after the run), from which tests/fixtures/captured/README.md derives GB/token.
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
import capture_common  # noqa: E402
from h200_captures import build, cache_tensors, param_bytes  # noqa: E402

MISTRAL = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=4, num_attention_heads=16,
               num_key_value_heads=8, head_dim=128, vocab_size=32000, sliding_window=256)
GPTOSS = dict(hidden_size=1024, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=16,
              num_key_value_heads=4, head_dim=64, num_local_experts=8, num_experts_per_tok=4,
              vocab_size=32000, sliding_window=128,
              layer_types=["sliding_attention", "full_attention"] * 2)
DSV3 = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=3, num_attention_heads=8,
            num_key_value_heads=8, q_lora_rank=384, kv_lora_rank=256, qk_nope_head_dim=64,
            qk_rope_head_dim=32, v_head_dim=64, n_routed_experts=32, num_experts_per_tok=6,
            n_group=8, topk_group=4, n_shared_experts=1, moe_intermediate_size=256,
            first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True,
            vocab_size=32000)
VIT = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
           image_size=224, patch_size=16, num_labels=1000)
# a CLIP ViT-L/14-336-shaped tower over 4 layers and a small Llama text tower; 576 image tokens
LLAVA = dict(vision_config=dict(model_type="clip_vision_model", hidden_size=1024, intermediate_size=4096,
                                num_hidden_layers=4, num_attention_heads=16, image_size=336,
                                patch_size=14, projection_dim=768),
             text_config=dict(model_type="llama", hidden_size=2048, intermediate_size=5632,
                              num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=8,
                              head_dim=128, vocab_size=32064),
             image_token_index=32000, vision_feature_layer=-2)
TINY = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, vocab_size=512)

CAPTURES: dict[str, dict] = {
    "mistral_swa_b4": dict(arch="mistral", cfg=MISTRAL, batch=4, prompt=2048, steps=6, attn="sdpa"),
    "gptoss_swa_b1": dict(arch="gpt_oss", cfg=GPTOSS, batch=1, prompt=1024, steps=6, attn="eager"),
    "dsv3_group_b1": dict(arch="deepseek_v3", cfg=DSV3, batch=1, prompt=256, steps=4),
    "dsv3_group_b4": dict(arch="deepseek_v3", cfg=DSV3, batch=4, prompt=256, steps=4),
    "vit_forward_b8": dict(arch="vit", cfg=VIT, batch=8, steps=4, kind="vision"),
    "owlv2_b5": dict(arch="owlv2", cfg={}, batch=5, queries=2, steps=3, kind="detector"),
    "llava_b2": dict(arch="llava", cfg=LLAVA, batch=2, prompt=64, steps=4, kind="vlm"),
}


def config_for(spec: dict, tiny: bool, max_len: int):
    from transformers import AutoConfig

    kw = dict(spec["cfg"])
    if spec["arch"] == "owlv2":
        kw = dict(vision_config=dict(image_size=960 if not tiny else 64, patch_size=16))
        if tiny:
            kw["vision_config"]["num_hidden_layers"] = 1
            kw["text_config"] = dict(num_hidden_layers=1)
        return AutoConfig.for_model("owlv2", **kw)
    if spec["arch"] == "llava":
        kw = json.loads(json.dumps(kw))
        kw["text_config"]["max_position_embeddings"] = max_len + 576
        if tiny:
            kw["vision_config"].update(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                       num_attention_heads=4, image_size=56)
            kw["text_config"].update(TINY, vocab_size=32064)
        return AutoConfig.for_model("llava", **kw)
    if spec["arch"] != "vit":
        kw["max_position_embeddings"] = max_len
    if tiny and spec["arch"] == "vit":
        kw.update(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                  image_size=64)
    elif tiny:
        kw.update(TINY)
        if spec["arch"] == "deepseek_v3":
            kw.pop("head_dim")
            kw.update(num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=8,
                      qk_rope_head_dim=8, v_head_dim=8, moe_intermediate_size=32)
        if "sliding_window" in kw:
            kw["sliding_window"] = 8
    config = AutoConfig.for_model(spec["arch"], **kw)
    if spec.get("attn"):
        config._attn_implementation = spec["attn"]
    return config


def run_one(name: str, device_name: str, out: Path, tiny: bool) -> int:
    import torch
    import transformers

    spec = CAPTURES[name]
    batch, prompt, steps = spec["batch"], spec.get("prompt", 0), spec["steps"]
    if tiny:
        prompt, steps = min(prompt, 32), min(steps, 3)
    device = torch.device(device_name)
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    max_len = prompt + steps + 8
    config = config_for(spec, tiny, max_len)
    torch.manual_seed(0)
    kind = spec.get("kind")
    if kind in ("vision", "detector", "vlm"):
        import transformers as tf

        cls = {"vision": tf.ViTForImageClassification, "detector": tf.Owlv2ForObjectDetection,
               "vlm": tf.LlavaForConditionalGeneration}[kind]
        with torch.device(device):
            model = cls(config)
        model = model.to(device=device, dtype=dtype).eval()
    else:
        model = build(config, dtype, device, spec.get("attn"))
    pbytes = param_bytes(model)
    dt = str(dtype).removeprefix("torch.")
    cfgd = {k: v for k, v in config.to_dict().items() if k not in ("id2label", "label2id")
            if isinstance(v, (int, float, str, bool, list, type(None)))}
    prov = {"model": f"random-init {config.model_type} ({name})", "quantization": "none", "dtype": dt,
            "context_length": prompt, "batch": batch, "concurrency": 1, "kv_cache_dtype": dt,
            "speculative": "none", "runner": f"transformers {transformers.__version__} forward, "
            f"examples/bytes_captures.py {name}", "capture_name": name, "decode_steps": steps,
            "attn_implementation": getattr(config, "_attn_implementation", None),
            "experts_implementation": getattr(config, "_experts_implementation", None),
            "model_config": cfgd, "param_bytes": pbytes, "tiny": tiny}
    out.mkdir(parents=True, exist_ok=True)
    full = {k: v for k, v in config.to_dict().items() if k not in ("id2label", "label2id")}
    info: dict = {"name": name, "config": full, "param_bytes": pbytes, "batch": batch,
                  "prompt": prompt, "decode_steps": steps, "dtype": dt, "device": str(device),
                  "torch": torch.__version__, "transformers": transformers.__version__}
    t0 = time.perf_counter()
    if kind in ("vision", "detector"):
        size = (config.vision_config if kind == "detector" else config).image_size
        px = torch.randn(batch, 3, size, size, device=device, dtype=dtype)
        text = {}
        if kind == "detector":  # `queries` text queries per image, 16 tokens each
            text = dict(input_ids=torch.randint(0, config.text_config.vocab_size,
                                                (batch * spec["queries"], 16), device=device))
            info["text_queries"] = batch * spec["queries"]
        with collectors.capture(out, warmup=2, steps=steps, provenance=prov, with_stack=True,
                                name=name) as cap, torch.inference_mode():
            for _ in range(2 + steps):
                with cap.phase("forward"):
                    model(pixel_values=px, **text).logits.argmax(-1)
                    sync()
        cache = None
    elif kind == "vlm":
        cache = _vlm(model, config, spec, batch, prompt, steps, device, dtype, sync, prov, out, info)
        cap = cache.pop("cap")
        cache = cache["cache"]
    else:
        key = _cache_key(model)

        def generation(cap):
            ids = torch.randint(0, config.vocab_size, (batch, prompt), device=device)
            return capture_common.greedy_generation(cap, model, ids, steps, sync, key)[0]

        with collectors.capture(out, warmup=1 + steps, steps=1 + steps, provenance=prov,
                                with_stack=True, name=name) as cap:
            for _ in range(2):
                cache = generation(cap)
    info["cache_tensors"] = cache_tensors(cache) if cache is not None else []
    res = cap.result
    info.update(wall_s=time.perf_counter() - t0, trace=str(res.path) if res.path else None,
                trace_bytes=res.bytes, steps_recorded=len(res.steps), error=res.error)
    (out / f"{name}.model.json").write_text(json.dumps(info, indent=1, default=str) + "\n")
    print(json.dumps({k: info[k] for k in ("name", "trace_bytes", "steps_recorded", "wall_s", "error")},
                     default=str), flush=True)
    return 0 if res.path else 1


def _cache_key(model) -> str:
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _vlm(model, config, spec, batch, prompt, steps, device, dtype, sync, prov, out, info) -> dict:
    """LLaVA: a prefill over one image per sequence (its image tokens and `prompt` text tokens),
    then greedy decode steps of text tokens."""
    import torch

    vc = config.vision_config
    n_img = (vc.image_size // vc.patch_size) ** 2
    img_tok = torch.full((batch, n_img), config.image_token_index, device=device)
    text = torch.randint(0, config.image_token_index, (batch, prompt), device=device)
    ids = torch.cat([img_tok, text], 1)
    px = torch.randn(batch, 3, vc.image_size, vc.image_size, device=device, dtype=dtype)
    info.update(image_tokens=n_img, prefill_tokens=batch * (n_img + prompt))
    with collectors.capture(out, warmup=1 + steps, steps=1 + steps, provenance=prov,
                            with_stack=True, name=info["name"]) as cap:
        for _ in range(2):
            with torch.inference_mode():
                with cap.phase("prefill", tokens=batch * (n_img + prompt)):
                    o = model(input_ids=ids, pixel_values=px, use_cache=True, logits_to_keep=1)
                    nxt = o.logits[:, -1].argmax(-1, keepdim=True)
                    sync()
                cache = o.past_key_values
                for _ in range(steps):
                    with cap.phase("decode", tokens=batch):
                        o = model(input_ids=nxt, use_cache=True, **{_cache_key(model): cache})
                        nxt = o.logits[:, -1].argmax(-1, keepdim=True)
                        sync()
    return {"cap": cap, "cache": cache}


def run_all(names: list[str], device: str, out: Path, tiny: bool, budget: float) -> int:
    t_end = time.monotonic() + budget
    for name in names:
        left = t_end - time.monotonic()
        if left < 20:
            print(json.dumps({"name": name, "status": "skipped (budget)"}), flush=True)
            continue
        cmd = [sys.executable, __file__, "run", name, "--device", device, "--out", str(out)]
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd + (["--tiny"] if tiny else []), timeout=min(120, left),
                               capture_output=True, text=True)
            status, tail = f"rc={p.returncode}", (p.stdout + p.stderr)[-1500:]
        except subprocess.TimeoutExpired as exc:
            status, tail = "timeout", str(exc.stdout or "")[-800:]
        trace = out / f"{name}.pt.trace.json.gz"
        size = trace.stat().st_size if trace.exists() else None
        print(json.dumps({"name": name, "status": status, "s": round(time.monotonic() - t0, 1),
                          "bytes": size}), flush=True)
        if status != "rc=0":
            print(tail, flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cmd", choices=["run", "all"])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="traces")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--budget", type=float, default=400)
    a = ap.parse_args(argv)
    if a.cmd == "run":
        return max(run_one(n, a.device, Path(a.out), a.tiny) for n in a.names)
    return run_all(a.names or list(CAPTURES), a.device, Path(a.out), a.tiny, a.budget)


if __name__ == "__main__":
    raise SystemExit(main())
