"""A capture for issue 36: fp8 MoE experts as `torch._scaled_grouped_mm` (rowwise scales), sm90+.

    python examples/scaled_grouped_capture.py --out $OUT [--align 16]   # on the GPU machine
    python examples/scaled_grouped_capture.py --out /tmp/t --cpu        # CPU smoke: the same steps
                                                                        # with a reference GEMM

A stack of MoE FFN layers (Qwen3-MoE-shaped: hidden 2048, 64 experts of FFN 768, top-8, no
attention), weights quantized to float8_e4m3fn per output channel once, activations per row
each call; each expert's rows padded to `--align` (1: none; 16 as torchao's MoE training
aligns them). Trace `scaled_grouped_moe_a{align}`. One forward per step, under
`record_function("prefill (tokens=T)")` / `"decode (tokens=T)"`, synchronized. Beside the
trace, `<name>.model.json`: the shapes,
the weight bytes, and per step and layer the experts hit and the padded rows (the truth the
trace's `offs` tensor does not record).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

HIDDEN, FFN, EXPERTS, TOP_K, LAYERS = 2048, 768, 64, 8, 4
STEPS = (("prefill", 512), ("decode", 8), ("decode", 8), ("decode", 8), ("decode", 8))
FP8 = torch.float8_e4m3fn


def quantize_rows(x):
    """x [R, C] -> (fp8 [R, C], fp32 scale [R]) with x ~ q * scale."""
    amax = x.abs().amax(-1).float().clamp(min=1e-6)
    scale = amax / torch.finfo(FP8).max
    return (x.float() / scale[:, None]).to(FP8), scale


class Fp8Experts(torch.nn.Module):
    """E experts' gate/up [E, 2F, H] and down [E, H, F] in fp8, a scale per output channel."""

    def __init__(self, dev, align: int):
        super().__init__()
        self.align = align
        gu = torch.randn(EXPERTS, 2 * FFN, HIDDEN, device=dev) / HIDDEN**0.5
        dn = torch.randn(EXPERTS, HIDDEN, FFN, device=dev) / FFN**0.5
        self.gu, self.gu_s = quantize_rows(gu.flatten(0, 1))
        self.dn, self.dn_s = quantize_rows(dn.flatten(0, 1))
        self.gu, self.gu_s = self.gu.view(EXPERTS, 2 * FFN, HIDDEN), self.gu_s.view(EXPERTS, -1)
        self.dn, self.dn_s = self.dn.view(EXPERTS, HIDDEN, FFN), self.dn_s.view(EXPERTS, -1)
        self.router = torch.nn.Linear(HIDDEN, EXPERTS, bias=False, device=dev, dtype=torch.bfloat16)

    def gemm(self, x, w, w_s, offs, cpu):
        """[R, K] bf16 x per-expert [E, N, K] fp8 -> [R, N] bf16."""
        q, s = quantize_rows(x)
        if not cpu:
            return torch._scaled_grouped_mm(q, w.transpose(-2, -1), s, w_s, offs=offs,
                                            out_dtype=torch.bfloat16)
        out, start = [], 0
        for e, end in enumerate(offs.tolist()):
            ref = (q[start:end].float() * s[start:end, None]) @ (w[e].float() * w_s[e][:, None]).T
            out.append(ref.to(torch.bfloat16))
            start = end
        return torch.cat(out)

    def forward(self, x, cpu=False):
        probs = self.router(x).float().softmax(-1)
        weight, expert = probs.topk(TOP_K, -1)
        flat = expert.flatten()
        order = flat.argsort(stable=True)
        counts = torch.bincount(flat, minlength=EXPERTS)
        padded = (counts + self.align - 1) // self.align * self.align
        offs = padded.cumsum(0).to(torch.int32)
        starts = offs - padded
        # each routed row's slot in the padded, expert-sorted buffer
        rank = torch.arange(flat.numel(), device=x.device) - (counts.cumsum(0) - counts)[flat[order]]
        slot = starts[flat[order]] + rank
        rows = torch.zeros(int(offs[-1]), HIDDEN, device=x.device, dtype=x.dtype)
        rows[slot] = x[order // TOP_K]
        h = self.gemm(rows, self.gu, self.gu_s, offs, cpu)
        gate, up = h.chunk(2, -1)
        y = self.gemm(torch.nn.functional.silu(gate) * up, self.dn, self.dn_s, offs, cpu)
        out = torch.zeros_like(x)
        w = weight.flatten()[order].to(x.dtype)[:, None]
        out.index_add_(0, order // TOP_K, y[slot] * w)
        return out, {"experts_hit": int((counts > 0).sum()), "rows_padded": int(offs[-1]),
                     "rows_routed": int(flat.numel())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="traces")
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--align", type=int, default=1)
    a = ap.parse_args(argv)
    name = f"scaled_grouped_moe_a{a.align}"
    dev = "cpu" if a.cpu else "cuda"
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    layers = [Fp8Experts(dev, a.align) for _ in range(LAYERS)]
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)

    def forward(tokens):
        x = torch.randn(tokens, HIDDEN, device=dev, dtype=torch.bfloat16)
        seen = []
        for layer in layers:
            d, info = layer(x, a.cpu)
            x = x + d
            seen.append(info)
        sync()
        return seen

    with torch.no_grad():
        for _, tokens in STEPS:  # warm-up: every shape once
            forward(tokens)
        x = torch.randn(64, HIDDEN, device=dev, dtype=torch.bfloat16)
        if not a.cpu:  # the fp8 op against the reference on one layer
            got, ref = layers[0](x)[0].float(), layers[0](x, True)[0].float()
            print("max |op - reference| / max |reference|:",
                  float((got - ref).abs().max() / ref.abs().max()))
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
        steps = []
        with profile(activities=acts, record_shapes=True, with_stack=True) as prof:
            for phase, tokens in STEPS:
                with record_function(f"{phase} (tokens={tokens})"):
                    steps.append({"phase": phase, "tokens": tokens, "layers": forward(tokens)})
    raw = out / f"{name}.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as f, gzip.open(str(raw) + ".gz", "wb", compresslevel=9) as g:
        shutil.copyfileobj(f, g)
    raw.unlink()
    info = {"hidden": HIDDEN, "ffn": FFN, "experts": EXPERTS, "top_k": TOP_K, "layers": LAYERS,
            "align": a.align, "weight_dtype": "float8_e4m3fn", "scales": "fp32 per output channel",
            "expert_weight_bytes": EXPERTS * 3 * FFN * HIDDEN, "steps": steps,
            "torch": torch.__version__,
            "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu"}
    (out / f"{name}.model.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps({k: info[k] for k in ("torch", "device")} | {"steps": len(steps)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
