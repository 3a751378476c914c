"""A tensor-parallel decode, captured per rank with `collectors.capture` (Megatron-style TP of a HF Llama).

    python examples/tp_capture.py --world 2 --device cuda --out traces/      # NCCL, one GPU a rank
    python examples/tp_capture.py --world 2 --device cpu --tiny --out /tmp/t  # gloo, a CPU check

Every rank builds the same random-init Llama (same seed), then keeps its shard: q/k/v_proj and
gate/up_proj column-parallel (its 1/world of the heads, KV heads and intermediate features),
o_proj and down_proj row-parallel (its 1/world of the input features) followed by
`dist.all_reduce` of their output (a forward hook, so the all-reduce runs inside the module's
scope). Embedding, norms and lm_head are replicated. Module names stay HF's
(`model.layers.N.self_attn.q_proj`, ...). Each rank records one prefill and N decode steps after
one unrecorded warmup generation into `<out>/tp{world}_decode_rank{r}.pt.trace.json.gz`; the
profiler writes `distributedInfo` (backend, rank, world size) into each trace.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

# NVLink multicast stays off (the device machines' rule), also for the spawned ranks.
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LLAMA = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=4, num_attention_heads=16,
             num_key_value_heads=8, head_dim=128, vocab_size=32000)
LLAMA_TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, vocab_size=512)


def shard(model, rank: int, world: int) -> None:
    """Keep this rank's slices of the attention and MLP weights; all-reduce after the row-parallel ones."""
    import torch
    import torch.distributed as dist

    def keep(lin, dim):
        w = lin.weight.data
        n = w.shape[dim] // world
        lin.weight = torch.nn.Parameter(w.narrow(dim, rank * n, n).contiguous(), requires_grad=False)
        if dim == 0:
            lin.out_features = n
            if lin.bias is not None:
                lin.bias = torch.nn.Parameter(lin.bias.data.narrow(0, rank * n, n).contiguous(),
                                              requires_grad=False)
        else:
            lin.in_features = n
            if lin.bias is not None and rank != 0:   # the bias is added once, on rank 0
                lin.bias.data.zero_()

    def all_reduce(_mod, _inp, out):
        dist.all_reduce(out)
        return out

    for layer in model.model.layers:
        att, mlp = layer.self_attn, layer.mlp
        for lin in (att.q_proj, att.k_proj, att.v_proj, mlp.gate_proj, mlp.up_proj):
            keep(lin, 0)
        for lin in (att.o_proj, mlp.down_proj):
            keep(lin, 1)
            lin.register_forward_hook(all_reduce)
        for attr in ("num_heads", "num_key_value_heads"):   # older transformers keep these
            if hasattr(att, attr):
                setattr(att, attr, getattr(att, attr) // world)


def worker(rank: int, world: int, args) -> None:
    import torch
    import torch.distributed as dist
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    import capture_common
    import collectors

    cuda = args.device == "cuda"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    if cuda:
        torch.cuda.set_device(rank)
    dev = torch.device(f"cuda:{rank}" if cuda else "cpu")
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world,
                            **({"device_id": dev} if cuda else {}))
    sync = (lambda: torch.cuda.synchronize(dev)) if cuda else (lambda: None)
    dtype = torch.bfloat16 if cuda else torch.float32
    base = LLAMA_TINY if args.tiny else LLAMA
    batch, prompt, steps = (2, 16, 3) if args.tiny else (args.batch, args.prompt, args.decode_steps)
    config = AutoConfig.for_model("llama", **base, max_position_embeddings=prompt + steps + 8)
    torch.manual_seed(0)   # identical full weights on every rank, then each keeps its shard
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    model = model.to(dev, dtype).eval()
    full_logits = None
    if args.check:   # the unsharded model's prefill logits, to compare with the sharded ones
        g = torch.Generator(device=dev).manual_seed(2)
        probe = torch.randint(0, config.vocab_size, (2, 8), device=dev, generator=g)
        with torch.inference_mode():
            full_logits = model(input_ids=probe).logits.float()
    shard(model, rank, world)
    if full_logits is not None:
        with torch.inference_mode():
            tp_logits = model(input_ids=probe).logits.float()
        err = (tp_logits - full_logits).abs().max().item() / full_logits.abs().max().item()
        print(json.dumps({"rank": rank, "tp_vs_full_max_rel_err": err}), flush=True)
    import inspect

    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    shard_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    dt = str(dtype).removeprefix("torch.")
    prov = {"model": "random-init llama, Megatron-style tensor parallel: "
                     + ", ".join(f"{k}={v}" for k, v in base.items()),
            "quantization": "none", "dtype": dt, "context_length": prompt, "batch": batch,
            "concurrency": 1, "kv_cache_dtype": dt, "speculative": "none",
            "kv_cache_state": "fresh DynamicCache per generation (this rank's KV heads)",
            "runner": f"transformers {transformers.__version__} forward, examples/tp_capture.py",
            "attn_implementation": "sdpa", "tp_size": world, "rank": rank,
            "sharding": "q/k/v/gate/up column-parallel, o/down row-parallel + all_reduce (NCCL), "
                        "embedding/norms/lm_head replicated",
            "decode_steps": steps, "prompt_tokens": prompt, "model_config": base,
            "param_bytes_this_rank": shard_bytes}
    name = f"tp{world}_decode_rank{rank}"
    out = Path(args.out)
    gen_steps = 1 + steps

    def generation(cap):
        g = torch.Generator(device=dev).manual_seed(1)   # the same prompt on every rank
        ids = torch.randint(0, config.vocab_size, (batch, prompt), device=dev, generator=g)
        return capture_common.greedy_generation(cap, model, ids, steps, sync, key)[1]

    t0 = time.perf_counter()
    enabled = rank in args.ranks
    with collectors.capture(out, warmup=gen_steps, steps=gen_steps, provenance=prov,
                            with_stack=True, name=name, enabled=enabled) as cap:
        for _ in range(2):
            nxt = generation(cap)
    # the ranks must agree (replicated logits after the all-reduces)
    gathered = [torch.zeros_like(nxt) for _ in range(world)]
    dist.all_gather(gathered, nxt)
    agree = all(bool((g == gathered[0]).all()) for g in gathered)
    res = cap.result
    print(json.dumps({"rank": rank, "trace": str(res.path) if res.path else None,
                      "bytes": res.bytes, "steps": len(res.steps), "error": res.error,
                      "ranks_agree": agree, "wall_s": round(time.perf_counter() - t0, 2),
                      "shard_param_bytes": shard_bytes}), flush=True)
    if enabled:
        info = {"name": name, "config": config.to_dict(), "tp_size": world, "rank": rank,
                "batch": batch, "prompt": prompt, "decode_steps": steps, "dtype": dt,
                "shard_param_bytes": shard_bytes, "ranks_agree": agree,
                "torch": torch.__version__, "transformers": transformers.__version__}
        (out / f"{name}.model.json").write_text(json.dumps(info, indent=1, default=str) + "\n")
    dist.barrier()
    dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode-steps", type=int, default=6)
    ap.add_argument("--ranks", default="all", help="ranks to capture: all, or e.g. 0")
    ap.add_argument("--port", type=int, default=29531)
    ap.add_argument("--check", action="store_true", help="compare sharded vs full prefill logits")
    ap.add_argument("--out", default="traces")
    args = ap.parse_args(argv)
    args.ranks = set(range(args.world)) if args.ranks == "all" else {int(r) for r in args.ranks.split(",")}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    import torch.multiprocessing as mp

    mp.spawn(worker, args=(args.world, args), nprocs=args.world, join=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
