"""Capture a grid for `attrib sweep`: batch x prompt x attention backend, each stamped by
`collectors.capture` (batch, prompt, backend in the provenance sidecar).

    python examples/sweep_capture.py --device cuda --out traces/sweep

One random-init Llama (examples/hf_capture.py's build_model: nothing downloaded) per attention
backend (transformers' "sdpa" and "eager"); for each batch and prompt one warmup generation, then
one prefill and `--decode-steps` decode steps recorded. Prints one line per trace.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout
sys.path.insert(0, str(HERE))

import collectors  # noqa: E402
from hf_capture import generate  # noqa: E402


def build(attn: str, layers: int, hidden: int, vocab: int, max_len: int, dtype, device):
    """A random-init Llama with transformers' attention implementation `attn`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    heads = max(1, hidden // 64)
    config = AutoConfig.for_model(
        "llama", hidden_size=hidden, intermediate_size=hidden * 3,
        num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2), head_dim=hidden // heads,
        vocab_size=vocab, max_position_embeddings=max_len)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attn)
    return config, model.to(device=device, dtype=dtype).eval()


def stamp(args, attn: str, batch: int, prompt: int, dtype_name: str) -> dict:
    """The provenance of one grid point (USER_FIELDS; the rest lands under "extra")."""
    return {"model": f"random-init llama layers={args.layers} hidden={args.hidden} "
                     f"vocab={args.vocab}",
            "quantization": "none", "dtype": dtype_name,
            "context_length": prompt + args.decode_steps, "batch": batch,
            "concurrency": 1, "kv_cache_dtype": dtype_name,
            "kv_cache_state": "fresh DynamicCache per generation",
            "speculative": "none", "backend": f"transformers-{attn}",
            "prompt": prompt, "micro_batch": batch,
            "runner": "transformers eager forward, examples/sweep_capture.py"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--batches", default="1,4,8")
    ap.add_argument("--prompts", default="128,512")
    ap.add_argument("--attn", default="sdpa,eager")
    ap.add_argument("--decode-steps", type=int, default=4)
    ap.add_argument("--out", default="traces/sweep")
    args = ap.parse_args(argv)

    import torch

    cuda = args.device == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    dtype_name = str(dtype).removeprefix("torch.")
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    batches = [int(b) for b in args.batches.split(",")]
    prompts = [int(p) for p in args.prompts.split(",")]
    max_len = max(prompts) + args.decode_steps + 8
    per_gen = 1 + args.decode_steps
    for attn in args.attn.split(","):
        config, model = build(attn, args.layers, args.hidden, args.vocab, max_len,
                              dtype, device)
        for batch in batches:
            for prompt in prompts:
                t0 = time.perf_counter()
                name = f"sweep_{attn}_b{batch}_p{prompt}"
                prov = stamp(args, attn, batch, prompt, dtype_name)
                with collectors.capture(args.out, warmup=per_gen, steps=per_gen,
                                        provenance=prov, name=name) as cap:
                    for _ in range(2):
                        generate(model, config, cap, batch, prompt, args.decode_steps,
                                 device, sync)
                res = cap.result
                size = (res.bytes or 0) / 1e6
                print(f"{name}: {len(res.steps)} steps, {size:.2f} MB, "
                      f"{time.perf_counter() - t0:.1f} s, error={res.error}", flush=True)
        del model
        if cuda:
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
