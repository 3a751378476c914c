"""Captures for issue 37: an A/A pair, a host-work A/B, a kernel-only A/B and a host-loaded sweep.

Each a `collectors.capture` of the common small Llama "L4" (helpers from examples/h200_captures.py),
each in its own process:

    python examples/issue37_captures.py all --device cuda --out $OUT --budget 540   # every capture
    python examples/issue37_captures.py run aa2_a --device cuda --out traces/
    python examples/issue37_captures.py list
    python examples/issue37_captures.py all --device cpu --tiny --out /tmp/t        # CPU smoke test

Captures (kept in tests/fixtures/captured/issue37/; its README section has configs and figures):
  aa2_a, aa2_b                   the identical job twice, in two processes (A/A)
  hostwork_base, hostwork_cand   cand adds a forward pre-hook on every decoder layer that runs
                                 HOSTWORK_MM fp32 torch.mm of 256x256 CPU tensors: host aten ops, no
                                 kernel
  kernelonly_base, kernelonly_cand   SDPA held to FLASH_ATTENTION vs EFFICIENT_ATTENTION
                                 (sdpa_kernel) at batch 8, 8192 tokens; L4 with 16 KV heads (MHA)
                                 so that neither side expands K/V for GQA; with_stack off
  loadsweep_b{1,4}_p{128,512}    a batch x prompt sweep; during the p512 captures 2 x nproc
                                 CPU-spinning processes load the host (`host_load` in the stamp)

Window: one unrecorded warmup generation, then prefill + STEPS decode steps, each step ending with
torch.cuda.synchronize(). Beside each trace goes `<name>.model.json` (config, parameter bytes,
cache tensors, and what was added: `hostwork`, `sdpa_backend`, `host_load`).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from a checkout (or .dev/)

import capture_common  # noqa: E402
import collectors  # noqa: E402
from h200_captures import build, cache_tensors, model_config, param_bytes  # noqa: E402

STEPS = 12
HOSTWORK_MM = 3          # torch.mm per decoder layer per forward (candidate only)
HOSTWORK_N = 256         # square fp32 CPU operands
SPIN = "while True: pass"
MHA = dict(num_key_value_heads=16)

CAPTURES: dict[str, dict] = {
    "aa2_a": dict(batch=4, prompt=512),
    "aa2_b": dict(batch=4, prompt=512),
    "hostwork_base": dict(batch=4, prompt=512),
    "hostwork_cand": dict(batch=4, prompt=512, hostwork=HOSTWORK_MM),
    "kernelonly_base": dict(batch=8, prompt=8192, sdpa="flash", config=MHA, stack=False),
    "kernelonly_cand": dict(batch=8, prompt=8192, sdpa="efficient", config=MHA, stack=False),
    "loadsweep_b1_p128": dict(batch=1, prompt=128),
    "loadsweep_b1_p512": dict(batch=1, prompt=512, load=True),
    "loadsweep_b4_p128": dict(batch=4, prompt=128),
    "loadsweep_b4_p512": dict(batch=4, prompt=512, load=True),
}
ORDER = list(CAPTURES)


def add_hostwork(model, n_mm: int, size: int) -> dict:
    """Pre-hooks on every decoder layer running `n_mm` fp32 torch.mm of CPU [size, size] tensors."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)

    def hook(module, args):
        for _ in range(n_mm):
            torch.mm(a, b)

    layers = model.model.layers
    for layer in layers:
        layer.register_forward_pre_hook(hook)
    return {"op": "aten::mm", "device": "cpu", "dtype": "float32", "shape": [size, size],
            "per_layer_per_forward": n_mm, "layers": len(layers),
            "per_decode_step": n_mm * len(layers), "torch_num_threads": torch.get_num_threads(),
            "how": "layer.register_forward_pre_hook on every model.model.layers[i]"}


@contextlib.contextmanager
def host_load(n: int, seen: dict):
    """`n` CPU-spinning python processes for the duration of the block (given 1 s to start);
    `seen` gets the spinners' CPU seconds and this process's involuntary context switches and
    CPU time over the block (what the load did to it)."""
    import resource

    procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(n)]
    if procs:
        time.sleep(1.0)
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    seen["loadavg_1m_at_start"] = os.getloadavg()[0]
    try:
        yield
    finally:
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        seen.update(block_wall_s=round(time.perf_counter() - t0, 3),
                    block_cpu_s=round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 3),
                    involuntary_switches=r1.ru_nivcsw - r0.ru_nivcsw,
                    spinner_cpu_s=[_cpu_s(p.pid) for p in procs])
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def _cpu_s(pid: int) -> float | None:
    """utime + stime of a live process, from /proc (None where there is no /proc)."""
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return round((int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK"), 2)


def run_one(name: str, device_name: str, out: Path, tiny: bool) -> int:
    import torch
    import transformers

    spec = CAPTURES[name]
    batch, prompt, steps = spec["batch"], spec["prompt"], STEPS
    if tiny:
        batch, prompt, steps = min(batch, 2), min(prompt, 32), 3
    device = torch.device(device_name)
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    max_len = prompt + steps + 8
    config = model_config("llama", tiny, None, max_len, "sdpa", spec.get("config"))
    model = build(config, dtype, device, "sdpa")
    pbytes = param_bytes(model)
    dt = str(dtype).removeprefix("torch.")
    n_spin = (1 if tiny else 2 * (os.cpu_count() or 1)) if spec.get("load") else 0
    load = {"spinners": n_spin, "nproc": os.cpu_count(),
            "what": f"{n_spin} `python -c '{SPIN}'` processes, started 1 s before the warmup "
                    "generation, killed after the last recorded step" if n_spin else "none"}
    hostwork = add_hostwork(model, spec["hostwork"], HOSTWORK_N) if spec.get("hostwork") else None
    # the same model string for every capture of one model (the name is `capture_name`): a sweep
    # or compare reads `model` as the workload
    prov = {"model": f"random-init llama L4: hidden {config.hidden_size}, "
                     f"{config.num_hidden_layers} layers, {config.num_attention_heads} heads, "
                     f"{config.num_key_value_heads} KV heads, vocab {config.vocab_size}",
            "quantization": "none", "dtype": dt, "context_length": prompt, "batch": batch,
            "concurrency": 1, "kv_cache_dtype": dt, "speculative": "none",
            "kv_cache_state": "fresh DynamicCache per generation, prefill then decode",
            "runner": f"transformers {transformers.__version__} forward, "
                      f"examples/issue37_captures.py {name}",
            "backend": "transformers-sdpa", "prompt": prompt, "micro_batch": batch,
            "attn_implementation": "sdpa", "sdpa_backend": spec.get("sdpa", "default"),
            "capture_name": name, "decode_steps": steps, "host_load": load,
            "hostwork": hostwork, "tiny": tiny}
    key = "past_key_values"

    def generation(cap):
        ids = torch.randint(0, config.vocab_size, (batch, prompt), device=device)
        return capture_common.greedy_generation(cap, model, ids, steps, sync, key)[0]

    backend = contextlib.nullcontext()
    if spec.get("sdpa") and cuda:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION,
                               "efficient": SDPBackend.EFFICIENT_ATTENTION}[spec["sdpa"]])
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with backend, collectors.capture(out, warmup=1 + steps, steps=1 + steps, provenance=prov,
                                     with_stack=spec.get("stack", True), name=name) as cap:
        with host_load(n_spin, load):
            for _ in range(2):
                cache = generation(cap)
    res = cap.result
    info = {"name": name, "config": config.to_dict(), "param_bytes": pbytes, "batch": batch,
            "prompt": prompt, "decode_steps": steps, "dtype": dt, "device": str(device),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "sdpa_backend": spec.get("sdpa", "default"), "with_stack": spec.get("stack", True),
            "hostwork": hostwork, "host_load": load, "cache_tensors": cache_tensors(cache),
            "wall_s": time.perf_counter() - t0, "trace": str(res.path) if res.path else None,
            "trace_bytes": res.bytes, "steps_recorded": len(res.steps), "error": res.error,
            "stop_s": res.stop_s, "export_s": res.export_s}
    (out / f"{name}.model.json").write_text(json.dumps(info, indent=1, default=str) + "\n")
    print(json.dumps({k: info[k] for k in ("name", "trace_bytes", "steps_recorded", "wall_s",
                                           "export_s", "error")}, default=str), flush=True)
    return 0 if res.path else 1


def main(argv=None) -> int:
    return capture_common.cli(argv, __doc__, __file__, CAPTURES, run_one, ORDER, budget=540)


if __name__ == "__main__":
    raise SystemExit(main())
