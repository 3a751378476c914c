"""Captures for issue 36: low-bit weight-only GEMMs, compiled decode, worker-thread runners.

Each a `collectors.capture` of a small random-init HF model (helpers from examples/h200_captures.py),
each in its own process:

    python examples/lowbit_captures.py all --device cuda --out $OUT --budget 540   # every capture
    python examples/lowbit_captures.py run int4_tinygemm_b1 --device cuda --out traces/
    python examples/lowbit_captures.py list
    python examples/lowbit_captures.py all --device cpu --tiny --out /tmp/t          # CPU smoke test

Captures (kept in tests/fixtures/captured/issue36/; its README section of 2026-12-04 has configs and
bytes):
  int4_tinygemm_b1/_b8   decoder linears as `aten._weight_int4pack_mm` (tinygemm, group 128, bf16
                         scales+zeros, packed by `aten._convert_weight_to_int4pack`), Llama
  int8_wo_b1/_b8         decoder linears as `aten._weight_int8pack_mm` (per-channel bf16 scales), Qwen2
  int4_triton_awq_b1     decoder linears as a Triton AWQ-style GEMM written here (`awq_gemm_kernel`:
                         int4 packed 8 to an int32 in AWQ order, group 128 scales/zeros, dequant in
                         the kernel), Mistral
  bnb_nf4_b1/_b8         decoder linears as bitsandbytes NF4 (what `bnb.nn.Linear4bit` runs:
                         `bitsandbytes::gemm_4bit`, blocksize 64, fp32 absmax), Llama; bitsandbytes
                         imported from PYTHONPATH (a wheel's Python files and one CUDA library)
  bnb_int8_b1            decoder linears as `bnb.nn.Linear8bitLt` (LLM.int8(), threshold 6.0), Qwen2
  static_generate_b4     `generate(cache_implementation="static")`: HF compiles the decode forward itself
  reduce_overhead_b4     `torch.compile(mode="reduce-overhead")` decode step over a StaticCache (CUDA
                         graph trees), compile and graph recording outside the window
  cb_generate_batch      transformers continuous batching `generate_batch` (the model runs on the
                         manager's worker thread), default profiler: the worker's CPU ops are missing
  cb_generate_batch_allthreads   the same with `_ExperimentalConfig(profile_all_threads=True)`
  thread_serve_b4        a serving loop on a `threading.Thread` that opens the capture itself; the
                         main thread only starts and joins it

Beside each `<name>.pt.trace.json.gz` (+ `.attrib.json` stamp) goes `<name>.model.json`: the exact HF
config, parameter bytes per part, weight bytes per part counting the packed low-bit buffers, every
quantized linear's packed tensors (shape, dtype, bytes) and group size, and the cache after the run.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from a checkout (or .dev/)

import capture_common  # noqa: E402
import collectors  # noqa: E402
from h200_captures import LLAMA, build, cache_tensors, param_bytes  # noqa: E402

QWEN2 = dict(hidden_size=1536, intermediate_size=4096, num_hidden_layers=4, num_attention_heads=12,
             num_key_value_heads=2, head_dim=128, vocab_size=32000, tie_word_embeddings=False,
             use_sliding_window=False)
MISTRAL = dict(LLAMA, sliding_window=None)
TINY = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=64, vocab_size=512)
FAMILY = {"llama": LLAMA, "qwen2": QWEN2, "mistral": MISTRAL}
GROUP = 128

CAPTURES: dict[str, dict] = {
    "int4_tinygemm_b1": dict(arch="llama", batch=1, prompt=512, steps=4, quant="int4_tinygemm"),
    "int4_tinygemm_b8": dict(arch="llama", batch=8, prompt=512, steps=4, quant="int4_tinygemm"),
    "int8_wo_b1": dict(arch="qwen2", batch=1, prompt=512, steps=4, quant="int8_weight_only"),
    "int8_wo_b8": dict(arch="qwen2", batch=8, prompt=512, steps=4, quant="int8_weight_only"),
    "int4_triton_awq_b1": dict(arch="mistral", batch=1, prompt=512, steps=4, quant="int4_triton_awq"),
    "bnb_nf4_b1": dict(arch="llama", batch=1, prompt=512, steps=4, quant="bnb_nf4"),
    "bnb_nf4_b8": dict(arch="llama", batch=8, prompt=512, steps=4, quant="bnb_nf4"),
    "bnb_int8_b1": dict(arch="qwen2", batch=1, prompt=512, steps=4, quant="bnb_int8"),
    "thread_serve_b4": dict(arch="llama", batch=4, prompt=512, steps=4, kind="thread"),
    "static_generate_b4": dict(arch="llama", batch=4, prompt=512, steps=4, kind="static_generate"),
    "reduce_overhead_b4": dict(arch="llama", batch=4, prompt=512, steps=4, kind="reduce_overhead"),
    "cb_generate_batch": dict(arch="llama", batch=4, prompt=256, steps=4, kind="cb"),
    "cb_generate_batch_allthreads": dict(arch="llama", batch=4, prompt=256, steps=4, kind="cb",
                                         all_threads=True),
}
ORDER = list(CAPTURES)
TIMEOUT_S = {"static_generate_b4": 200, "reduce_overhead_b4": 200, "cb_generate_batch": 150,
             "cb_generate_batch_allthreads": 150}


# ---------------------------------------------------------------- low-bit linears

def q4_groups(w, group: int):
    """Asymmetric 4-bit per (row, group of `group` columns): q in 0..15, scale, min."""
    import torch

    n, k = w.shape
    wg = w.float().reshape(n, k // group, group)
    mn, mx = wg.amin(-1, keepdim=True), wg.amax(-1, keepdim=True)
    scale = (mx - mn).clamp(min=1e-6) / 15
    q = ((wg - mn) / scale).round().clamp(0, 15).to(torch.int32)
    return q.reshape(n, k), scale.reshape(n, k // group), mn.reshape(n, k // group)


def _tensor_row(name, t) -> dict:
    return {"name": name, "shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."),
            "bytes": t.numel() * t.element_size()}


def make_quant_linear(kind: str, lin, group: int = GROUP):
    """A module replacing nn.Linear `lin` (bias kept in bf16) by `kind`'s packed weights."""
    import torch

    w = lin.weight.data
    n, k = w.shape
    dev, dt = w.device, w.dtype
    cuda = dev.type == "cuda"

    class QLinear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.in_features, self.out_features, self.kind, self.group = k, n, kind, group
            self.bias = lin.bias

        def extra_repr(self):
            return f"{self.kind}, in={k}, out={n}, group={self.group}"

        def packed(self) -> list[dict]:
            held = list(self.named_buffers()) + [(nm, t) for nm, t in self.named_parameters()
                                                  if nm != "bias"]
            return [_tensor_row(nm, t) for nm, t in held]

        def forward(self, x):
            shp = x.shape
            y = self.mm(x.reshape(-1, k))
            y = y.reshape(*shp[:-1], n)
            return y + self.bias if self.bias is not None else y

    m = QLinear()
    if kind == "int4_tinygemm":
        q, scale, mn = q4_groups(w, group)
        zero = mn + 8 * scale                        # tinygemm's float zero point
        sz = torch.stack([scale.t(), zero.t()], dim=-1).to(dt).contiguous()   # [k/g, n, 2]
        if cuda:
            u8 = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)                 # [n, k/2]
            packed = torch.ops.aten._convert_weight_to_int4pack(u8, 8)
            op = torch.ops.aten._weight_int4pack_mm
        else:   # the CPU smoke test: the CPU layout of the same op
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 8)
            op = torch.ops.aten._weight_int4pack_mm_for_cpu
        m.register_buffer("weight_int4pack", packed)
        m.register_buffer("scales_and_zeros", sz)
        m.mm = lambda x2: op(x2.contiguous(), m.weight_int4pack, group, m.scales_and_zeros)
        ref = ((q.float().reshape(n, k // group, group) * scale[..., None] + mn[..., None])
               .reshape(n, k)).to(dt)
    elif kind == "int8_weight_only":
        scale = (w.float().abs().amax(1) / 127).clamp(min=1e-8)
        q8 = (w.float() / scale[:, None]).round().clamp(-127, 127).to(torch.int8).contiguous()
        m.register_buffer("weight_int8", q8)
        m.register_buffer("scales", scale.to(dt))
        m.mm = lambda x2: torch.ops.aten._weight_int8pack_mm(x2.contiguous(), m.weight_int8, m.scales)
        ref = (q8.float() * scale[:, None]).to(dt)
        group = None
    elif kind == "int4_triton_awq":
        q, scale, mn = q4_groups(w, group)
        zq = (-mn / scale).round().clamp(0, 15)                  # integer zero: w = (q - z) * s
        qp = (w.float().reshape(n, k // group, group) / scale[..., None] + zq[..., None]
              ).round().clamp(0, 15).to(torch.int32).reshape(n, k)
        del q
        m.register_buffer("qweight", awq_pack(qp.t().contiguous()))          # [k, n/8] int32
        m.register_buffer("qzeros", awq_pack(zq.to(torch.int32).t().contiguous()))   # [k/g, n/8]
        m.register_buffer("scales", scale.t().contiguous().to(dt))           # [k/g, n]
        m.mm = functools.partial(awq_gemm, m=m)
        ref = ((qp.float().reshape(n, k // group, group) - zq[..., None]) * scale[..., None]
               ).reshape(n, k).to(dt)
    elif kind == "bnb_nf4":
        import bitsandbytes as bnb

        # what bnb.nn.Linear4bit holds and runs (HF's default 4-bit: NF4, blocksize 64, no
        # double quant): the packed nibbles [(n*k+1)//2, 1] uint8, an fp32 absmax per block
        qw, state = bnb.functional.quantize_4bit(w, blocksize=64, quant_type="nf4")
        m.register_buffer("weight_nf4", qw)
        m.register_buffer("absmax", state.absmax)
        m.mm = lambda x2: bnb.matmul_4bit(x2, m.weight_nf4.t(), quant_state=state)
        ref = bnb.functional.dequantize_4bit(qw, state).to(dt)
        group = 64
    elif kind == "bnb_int8":
        import bitsandbytes as bnb

        # bnb.nn.Linear8bitLt as HF loads it (LLM.int8(), outlier threshold 6.0): int8 [n, k] and
        # an fp32 row scale (SCB) per output channel, quantized when moved to the device
        lin8 = bnb.nn.Linear8bitLt(k, n, bias=False, has_fp16_weights=False, threshold=6.0)
        lin8.weight = bnb.nn.Int8Params(w.detach().cpu(), requires_grad=False,
                                        has_fp16_weights=False)
        m.lin8 = lin8.to(dev)
        m.mm = m.lin8
        ref = (m.lin8.weight.float() * m.lin8.weight.SCB[:, None].float() / 127).to(dt)
        group = None
    else:
        raise ValueError(kind)
    m.group = group
    # how far the packed GEMM is from x @ dequant(W)^T (the packing checked on the device)
    with torch.no_grad():
        x = torch.randn(16, k, device=dev, dtype=dt)
        y, yr = m.mm(x).float(), (x @ ref.t()).float()
        m.rel_err = float((y - yr).norm() / yr.norm().clamp(min=1e-12))
    return m


AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)   # nibble i of a packed int32 holds column AWQ_ORDER[i] of 8


def awq_pack(q):
    """[r, c] ints in 0..15 -> [r, c/8] int32, 8 nibbles each in AWQ's interleaved order."""
    import torch

    r, c = q.shape
    q = q.to(torch.int32).reshape(r, c // 8, 8)
    out = torch.zeros(r, c // 8, dtype=torch.int32, device=q.device)
    for i, col in enumerate(AWQ_ORDER):
        out |= q[:, :, col] << (4 * i)
    return out


_KERNEL = None


def _awq_kernel():
    global _KERNEL
    if _KERNEL is not None:
        return _KERNEL
    import triton
    import triton.language as tl

    @triton.jit
    def awq_gemm_kernel(x_ptr, qw_ptr, qz_ptr, s_ptr, y_ptr, M, N, K: tl.constexpr,
                        G: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        # column j's nibble: AWQ order (0,2,4,6,1,3,5,7) inverted = (0,4,1,5,2,6,3,7)
        shifts = (((rn % 8) // 2) + (rn % 2) * 4) * 4
        n8 = N // 8
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            kk = k0 + rk
            x = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=rm[:, None] < M, other=0.0)
            qw = tl.load(qw_ptr + kk[:, None] * n8 + (rn[None, :] // 8))
            g = k0 // G
            qz = tl.load(qz_ptr + g * n8 + rn // 8)
            s = tl.load(s_ptr + g * N + rn).to(tl.float32)
            wq = ((qw >> shifts[None, :]) & 0xF) - ((qz >> shifts) & 0xF)[None, :]
            w = (wq.to(tl.float32) * s[None, :]).to(x.dtype)
            acc += tl.dot(x, w)
        tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(y_ptr.dtype.element_ty),
                 mask=rm[:, None] < M)

    _KERNEL = awq_gemm_kernel
    return _KERNEL


def awq_gemm(x2, m):
    """x2 [M, K] @ dequant(qweight)^T: one Triton launch, dequantized tile by tile."""
    import torch
    import triton

    M, K = x2.shape
    N = m.out_features
    x2 = x2.contiguous()
    y = torch.empty(M, N, device=x2.device, dtype=x2.dtype)
    if M <= 16:
        BM, BN, BK, warps = 16, 32, 128, 4
    else:
        BM, BN, BK, warps = 64, 64, 64, 4
    grid = (triton.cdiv(M, BM), N // BN)
    _awq_kernel()[grid](x2, m.qweight, m.qzeros, m.scales, y, M, N, K,
                        G=m.group, BM=BM, BN=BN, BK=BK, num_warps=warps)
    return y


def quantize_model(model, kind: str) -> list[dict]:
    """Replace every decoder nn.Linear (attention and MLP; not lm_head) by `kind`."""
    import torch

    rows = []
    for name, mod in list(model.named_modules()):
        if not isinstance(mod, torch.nn.Linear) or ".layers." not in f".{name}":
            continue
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        q = make_quant_linear(kind, mod)
        setattr(parent, attr, q)
        rows.append({"module": name, "in_features": q.in_features, "out_features": q.out_features,
                     "group_size": q.group, "bf16_weight_bytes": mod.weight.numel() * 2,
                     "bias_bytes": 0 if mod.bias is None else mod.bias.numel() * mod.bias.element_size(),
                     "packed": q.packed(), "packed_bytes": sum(r["bytes"] for r in q.packed()),
                     "rel_err_vs_dequant_matmul": round(q.rel_err, 6)})
        del mod
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return rows


class _WithBuffers:
    """param_bytes over parameters and buffers (the packed low-bit weights are buffers)."""

    def __init__(self, model):
        self.model = model

    def named_parameters(self):
        yield from self.model.named_parameters()
        yield from self.model.named_buffers()


# ---------------------------------------------------------------- models and the window

def model_config(arch: str, tiny: bool, max_len: int):
    from transformers import AutoConfig

    kw = dict(FAMILY[arch], max_position_embeddings=max_len)
    if tiny:
        kw.update(TINY)
    config = AutoConfig.for_model(arch, **kw)
    config._attn_implementation = "sdpa"
    return config


class StepMarker:
    """A logits processor that cuts `generate()` into steps: called after every forward pass."""

    def __init__(self, cap, sync, batch: int, prompt: int, n: int):
        self.cap, self.sync, self.batch, self.prompt, self.n = cap, sync, batch, prompt, n
        self.cur, self.i = None, 0

    def begin(self):
        self.i, self.cur = 0, self.cap.phase("prefill", tokens=self.batch * self.prompt)
        self.cur.__enter__()

    def __call__(self, input_ids, scores):
        self.sync()
        if self.cur is not None:
            self.cur.__exit__(None, None, None)
        self.i += 1
        self.cur = None
        if self.i < self.n:
            self.cur = self.cap.phase("decode", tokens=self.batch)
            self.cur.__enter__()
        return scores


def run_one(name: str, device_name: str, out: Path, tiny: bool) -> int:
    spec = dict(CAPTURES[name])
    kind = spec.get("kind", "plain")
    if kind in ("static_generate", "reduce_overhead"):   # a real compile, not a cache hit
        os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
        os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")
    import torch
    import transformers

    batch, prompt, steps = spec["batch"], spec["prompt"], spec["steps"]
    if tiny:
        batch, prompt, steps = min(batch, 2), min(prompt, 32), min(steps, 3)
    device = torch.device(device_name)
    cuda = device.type == "cuda"
    dtype = torch.bfloat16
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    max_len = prompt + steps + 16
    config = model_config(spec["arch"], tiny, max_len)
    quant = spec.get("quant")
    dt = str(dtype).removeprefix("torch.")
    cfgd = {k: v for k, v in config.to_dict().items()
            if isinstance(v, (int, float, str, bool, list, type(None)))}
    stack = spec.get("stack", True)
    prov = {"model": f"random-init {config.model_type} ({name}): hidden {config.hidden_size}, "
                     f"{config.num_hidden_layers} layers, {config.num_attention_heads} heads x "
                     f"{config.head_dim}, {config.num_key_value_heads} KV heads, FFN "
                     f"{config.intermediate_size}, vocab {config.vocab_size}",
            "quantization": {"int4_tinygemm": "int4 weight-only, tinygemm (_weight_int4pack_mm), "
                             "group 128, bf16 scales+zeros",
                             "int8_weight_only": "int8 weight-only (_weight_int8pack_mm), "
                             "per-channel bf16 scales",
                             "int4_triton_awq": "awq-int4 style, group 128, Triton GEMM "
                             "(awq_gemm_kernel), int4 zeros, bf16 scales",
                             "bnb_nf4": "bitsandbytes nf4, blocksize 64, fp32 absmax "
                             "(bitsandbytes::gemm_4bit)",
                             "bnb_int8": "bitsandbytes LLM.int8(), threshold 6.0, per-channel "
                             "fp32 scales"}.get(quant, "none"),
            "dtype": dt, "context_length": prompt, "batch": batch, "concurrency": 1,
            "kv_cache_dtype": dt, "speculative": "none",
            "runner": f"transformers {transformers.__version__}, examples/lowbit_captures.py {name}",
            "attn_implementation": "sdpa", "capture_name": name, "decode_steps": steps,
            "prompt_tokens": prompt, "model_config": cfgd, "tiny": tiny}
    out.mkdir(parents=True, exist_ok=True)
    info: dict = {"name": name, "config": config.to_dict(), "batch": batch, "prompt": prompt,
                  "decode_steps": steps, "dtype": dt, "device": str(device),
                  "torch": torch.__version__, "transformers": transformers.__version__,
                  "kind": kind, "quant": quant}
    with contextlib.suppress(Exception):
        import triton

        info["triton"] = triton.__version__
    if cuda:
        info["gpu"] = torch.cuda.get_device_name()

    def make_model():
        model = build(config, dtype, device, "sdpa")
        pb = param_bytes(model)
        info["param_bytes_bf16_before_quantization" if quant else "param_bytes"] = pb
        if quant:
            rows = quantize_model(model, quant)
            info["quantized_linears"] = rows
            info["group_size"] = {"int8_weight_only": None, "bnb_int8": None, "bnb_nf4": 64}.get(quant, GROUP)
            info["packed_bytes_total"] = sum(r["packed_bytes"] for r in rows)
            info["param_bytes"] = param_bytes(model)   # parameters left: bf16 embedding, norms, lm_head
            info["max_rel_err_vs_dequant_matmul"] = max(r["rel_err_vs_dequant_matmul"] for r in rows)
        info["weight_bytes"] = param_bytes(_WithBuffers(model))   # parameters + buffers
        prov["param_bytes"] = info["param_bytes"]
        prov["weight_bytes_total"] = info["weight_bytes"]["total_bytes"]
        return model

    t0 = time.perf_counter()
    cache = None
    res = None
    if kind in ("plain", "thread"):
        import inspect

        model = make_model() if kind == "plain" else None

        def generation(cap, model, key):
            ids = torch.randint(0, config.vocab_size, (batch, prompt), device=device)
            return capture_common.greedy_generation(cap, model, ids, steps, sync, key)[0]

        def serve(box):
            """The whole run: model, capture, generations (a server's worker in `thread`)."""
            try:
                m = box["model"] if box.get("model") is not None else make_model()
                key = "cache" if "cache" in inspect.signature(m.forward).parameters else "past_key_values"
                box["tid"] = threading.get_native_id()
                with collectors.capture(out, warmup=1 + steps, steps=1 + steps, provenance=prov,
                                        with_stack=stack, name=name) as cap:
                    for _ in range(2):
                        box["cache"] = generation(cap, m, key)
                box["cap"] = cap
            except BaseException as exc:   # noqa: BLE001 - reported by the caller
                box["error"] = exc

        box: dict = {"model": model}
        if kind == "thread":
            prov["threading"] = "model, capture and steps all on a threading.Thread; main thread joins"
            worker = threading.Thread(target=serve, args=(box,), name="serve-loop")
            worker.start()
            worker.join()
            info["main_tid"], info["worker_tid"] = threading.get_native_id(), box.get("tid")
        else:
            serve(box)
        if "error" in box:
            raise box["error"]
        cache, res = box["cache"], box["cap"].result
    elif kind == "reduce_overhead":
        from transformers import StaticCache
        import inspect

        model = make_model()
        key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

        def decode_fn(ids, cache, pos):
            return model(input_ids=ids, **{key: cache}, cache_position=pos,
                         use_cache=True).logits[:, -1].argmax(-1, keepdim=True)

        step = torch.compile(decode_fn, mode="reduce-overhead")
        cache = StaticCache(config=config, max_cache_len=max_len)
        times: list[list[float]] = []

        def generation(cap):
            ids = torch.randint(0, config.vocab_size, (batch, prompt), device=device)
            t = []
            with torch.inference_mode():
                with cap.phase("prefill", tokens=batch * prompt):
                    cache.reset()
                    pos = torch.arange(prompt, device=device)
                    nxt = model(input_ids=ids, **{key: cache}, cache_position=pos, use_cache=True,
                                logits_to_keep=1).logits[:, -1].argmax(-1, keepdim=True)
                    sync()
                for i in range(steps):
                    t1 = time.perf_counter()
                    with cap.phase("decode", tokens=batch):
                        torch.compiler.cudagraph_mark_step_begin()
                        pos = torch.tensor([prompt + i], device=device)
                        nxt = step(nxt, cache, pos).clone()
                        sync()
                    t.append(time.perf_counter() - t1)
            times.append(t)

        prov["compile_mode"] = "reduce-overhead"
        prov["kv_cache_state"] = "StaticCache, compiled decode (CUDA graph trees), warm"
        # two unrecorded generations: compile, cudagraph warm-up run and recording happen there
        with collectors.capture(out, warmup=2 * (1 + steps), steps=1 + steps, provenance=prov,
                                with_stack=stack, name=name) as cap:
            for _ in range(3):
                generation(cap)
        info["decode_step_s_per_generation"] = times
        res = cap.result
    elif kind == "static_generate":
        from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

        model = make_model()
        gc = GenerationConfig(max_new_tokens=1 + steps, do_sample=False,
                              cache_implementation="static", pad_token_id=0, eos_token_id=-1)
        prov["kv_cache_state"] = ("generate(cache_implementation='static'): HF's auto-compiled "
                                  "decode forward (CompileConfig default), warm")
        times = []
        with collectors.capture(out, warmup=2 * (1 + steps), steps=1 + steps, provenance=prov,
                                with_stack=stack, name=name) as cap:
            marker = type("StepMarkerLP", (StepMarker, LogitsProcessor), {})(
                cap, sync, batch, prompt, 1 + steps)
            for _ in range(3):   # the first two compile and record the graphs; the third is kept
                ids = torch.randint(0, config.vocab_size, (batch, prompt), device=device)
                t1 = time.perf_counter()
                marker.begin()
                o = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                   generation_config=gc,
                                   logits_processor=LogitsProcessorList([marker]))
                if marker.cur is not None:
                    marker.cur.__exit__(None, None, None)
                times.append(time.perf_counter() - t1)
        info["generate_s"] = times
        info["generated_shape"] = list(o.shape)
        cc = getattr(gc, "compile_config", None) or getattr(model.generation_config, "compile_config", None)
        info["compile_config"] = repr(cc)
        info["compiled_call"] = repr(getattr(model, "_compiled_call", None))
        res = cap.result
    elif kind == "cb":
        from transformers import GenerationConfig

        model = make_model()
        n_req = batch
        gc = GenerationConfig(max_new_tokens=1 + steps, do_sample=False, pad_token_id=0,
                              eos_token_id=-1)
        g = torch.Generator().manual_seed(1)
        prompts = [torch.randint(0, config.vocab_size, (prompt,), generator=g).tolist()
                   for _ in range(n_req)]
        orig = torch.profiler.profile
        if spec.get("all_threads"):
            cfg = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
            torch.profiler.profile = functools.partial(orig, experimental_config=cfg)
            prov["profiler_experimental_config"] = "profile_all_threads=True"
        prov["threading"] = ("transformers continuous batching: model runs on the manager's "
                             "generation thread; the main thread waits in get_result")
        prov["concurrency"] = n_req
        times, outs = [], None
        try:
            with collectors.capture(out, warmup=1, steps=1, provenance=prov, with_stack=stack,
                                    name=name) as cap:
                for _ in range(2):   # the first unrecorded (warm-up), the second recorded
                    t1 = time.perf_counter()
                    with cap.phase("generate", tokens=n_req * (1 + steps)):
                        try:
                            outs = model.generate_batch(inputs=prompts, generation_config=gc,
                                                        progress_bar=False)
                        except TypeError:
                            outs = model.generate_batch(inputs=prompts, generation_config=gc)
                        sync()
                    times.append(time.perf_counter() - t1)
        finally:
            torch.profiler.profile = orig
        info["generate_batch_s"] = times
        info["requests"] = n_req
        info["generated_tokens"] = {str(k): len(getattr(v, "generated_tokens", []) or [])
                                    for k, v in (outs or {}).items()}
        info["attn_implementation_after"] = getattr(model.config, "_attn_implementation", None)
        res = cap.result
    info["cache_tensors"] = cache_tensors(cache) if cache is not None else []
    info.update(wall_s=time.perf_counter() - t0, trace=str(res.path) if res.path else None,
                trace_bytes=res.bytes, steps_recorded=len(res.steps), steps=res.steps,
                error=res.error)
    (out / f"{name}.model.json").write_text(json.dumps(info, indent=1, default=str) + "\n")
    print(json.dumps({k: info.get(k) for k in ("name", "trace_bytes", "steps_recorded", "wall_s",
                                               "error", "max_rel_err_vs_dequant_matmul")},
                     default=str), flush=True)
    return 0 if res.path else 1


def main(argv=None) -> int:
    return capture_common.cli(argv, __doc__, __file__, CAPTURES, run_one, ORDER, budget=540,
                              timeouts=TIMEOUT_S, default_timeout=100)


if __name__ == "__main__":
    raise SystemExit(main())
