"""Capture prefill + decode of a Hugging Face causal LM with `collectors.capture`, then analyze it.

The model is built from a config with random weights (nothing is downloaded), so the trace shows
real kernels of a real architecture at whatever size you choose:

    python examples/hf_capture.py --device cuda --arch qwen3_moe --layers 4 --hidden 1024 \\
        --batch 8 --prompt 512 --decode-steps 16 --out traces/

One prefill step (`prefill (tokens=batch*prompt)`) and N decode steps (`decode (tokens=batch)`,
one new token per sequence, reusing the KV cache) are recorded after `--warmup` whole generations
that are run but not recorded (the capture's `warmup` counts their steps).
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import collectors  # noqa: E402


def build_model(arch: str, layers: int, hidden: int, vocab: int, max_len: int, dtype, device,
                experts: str | None = None):
    """A random-init causal LM of family `arch` ("llama" or "qwen3_moe") at small dims.

    experts: transformers' MoE experts implementation ("eager", "grouped_mm", ...); None = its
    default for the device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    heads = max(1, hidden // 64)
    kw = dict(hidden_size=hidden, intermediate_size=hidden * 3, num_hidden_layers=layers,
              num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
              head_dim=hidden // heads, vocab_size=vocab, max_position_embeddings=max_len)
    if arch == "qwen3_moe":
        kw.update(moe_intermediate_size=max(16, hidden // 2), num_experts=8, num_experts_per_tok=2,
                  decoder_sparse_step=1)
    config = AutoConfig.for_model(arch, **kw)
    torch.manual_seed(0)
    extra = {"experts_implementation": experts} if experts and arch == "qwen3_moe" else {}
    model = AutoModelForCausalLM.from_config(config, **extra)  # float32 init, then cast
    return config, model.to(device=device, dtype=dtype).eval()


def new_cache(config):
    """An empty DynamicCache (its constructor changed across transformers versions)."""
    from transformers import DynamicCache

    try:
        return DynamicCache(config=config)
    except TypeError:
        return DynamicCache()


def cache_kwarg(model) -> str:
    """The forward() keyword of the KV cache: `cache` (transformers >= 5.x) or `past_key_values`."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def generate(model, config, cap, batch: int, prompt: int, decode_steps: int, device, sync) -> None:
    """One prefill and `decode_steps` decode steps, each a marked step of `cap`."""
    import torch

    key = cache_kwarg(model)
    cache = new_cache(config)
    ids = torch.randint(0, config.vocab_size, (batch, prompt), device=device)
    with torch.inference_mode():
        with cap.phase("prefill", tokens=batch * prompt):
            logits = model(input_ids=ids, use_cache=True, **{key: cache}).logits
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            sync()
        for _ in range(decode_steps):
            with cap.phase("decode", tokens=batch):
                logits = model(input_ids=nxt, use_cache=True, **{key: cache}).logits
                nxt = logits[:, -1].argmax(-1, keepdim=True)
                sync()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda also means ROCm (torch's HIP build uses the cuda device)")
    ap.add_argument("--arch", choices=["llama", "qwen3_moe"], default="qwen3_moe")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--decode-steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=1, help="whole unrecorded generations first")
    ap.add_argument("--dtype", default=None, help="float32|bfloat16|float16 "
                    "(default: bfloat16 on cuda, float32 on cpu)")
    ap.add_argument("--no-stack", action="store_true", help="with_stack=False (faster export, "
                    "no module attribution)")
    ap.add_argument("--experts", default=None, help="MoE experts implementation (transformers "
                    ">= 5: eager|grouped_mm|batched_mm; default: transformers' choice)")
    ap.add_argument("--out", default="traces")
    args = ap.parse_args(argv)

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA/ROCm GPU")
    dtype = getattr(torch, args.dtype or ("bfloat16" if args.device == "cuda" else "float32"))
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    max_len = args.prompt + args.decode_steps + 8
    config, model = build_model(args.arch, args.layers, args.hidden, args.vocab, max_len, dtype,
                                device, args.experts)

    steps_per_gen = 1 + args.decode_steps
    prov = {"model": f"random-init {args.arch} layers={args.layers} hidden={args.hidden} "
                     f"vocab={args.vocab}",
            "quantization": "none", "dtype": str(dtype).removeprefix("torch."),
            "context_length": max_len, "batch": args.batch, "concurrency": 1,
            "kv_cache_dtype": str(dtype).removeprefix("torch."),
            "kv_cache_state": "fresh DynamicCache per generation", "speculative": "none",
            "runner": "transformers eager forward, examples/hf_capture.py",
            "experts_implementation": args.experts}
    t0 = time.perf_counter()
    with collectors.capture(args.out, warmup=args.warmup * steps_per_gen, steps=steps_per_gen,
                            provenance=prov, with_stack=not args.no_stack,
                            name=f"hf_{args.arch}_{args.device}_b{args.batch}_p{args.prompt}") as cap:
        for _ in range(args.warmup + 1):
            generate(model, config, cap, args.batch, args.prompt, args.decode_steps, device, sync)
    res = cap.result
    print(f"captured {len(res.steps)} steps (skipped {res.warmup_skipped} warmup) in "
          f"{time.perf_counter() - t0:.1f}s; stop {res.stop_s or 0:.2f}s, export "
          f"{res.export_s or 0:.2f}s")
    if res.path is None:
        print(f"no trace written: {res.error}", file=sys.stderr)
        return 1
    print(f"trace:      {res.path} ({(res.bytes or 0) / 1e6:.1f} MB)")
    print(f"provenance: {res.sidecar}")
    analyze(res.path)
    return 0


def analyze(path: Path) -> None:
    """Print attrib's analysis of the capture: the terminal table of `attrib analyze TRACE`."""
    from attrib.cli import main as attrib_cli

    attrib_cli(["analyze", str(path)])


if __name__ == "__main__":
    raise SystemExit(main())
