"""bitsandbytes NF4 decoders on an H200 (tests/fixtures/captured/issue36/bnb_nf4_b{1,8}, README
there): each 4-bit linear priced by the kernel it launched. bitsandbytes runs its own kernel
(`gemm_4bit_simt`) or dequantizes the weight and calls F.linear (`kDequantizeBlockwise`, then an
aten::mm): at batch 8 on sm_90 its heuristic sends q, o and down there. Truth from the raw events:
each call's recorded arguments and the kernels launched inside it."""

from __future__ import annotations

import json

import pytest

from attrib.app import analyze

from conftest import FIXTURES, raw_events

DIR = FIXTURES / "captured" / "issue36"
LINEARS = ("qkv_proj", "o_proj", "mlp_gate_up", "mlp_down")


def _calls(name):
    """Per decode step, each gemm_4bit call: (M, N, K, absmax bytes, dequantized?)."""
    ev = raw_events(DIR / f"{name}.pt.trace.json.gz")
    runtime = [e for e in ev if e.get("cat") == "cuda_runtime" and "correlation" in e["args"]]
    kernels = {e["args"]["correlation"]: e["name"] for e in ev if e.get("cat") == "kernel"}
    ops = [e for e in ev if e.get("name") == "bitsandbytes::gemm_4bit"]
    windows = [e for e in ev if e.get("cat") == "user_annotation"
               and e["name"].startswith("decode")]
    steps = []
    for w in windows:
        calls = []
        for op in (o for o in ops if w["ts"] <= o["ts"] <= w["ts"] + w["dur"]):
            inside = [kernels.get(r["args"]["correlation"], "") for r in runtime
                      if r["tid"] == op["tid"] and op["ts"] <= r["ts"] <= op["ts"] + op["dur"]]
            dims, conc = op["args"]["Input Dims"], op["args"]["Concrete Inputs"]
            n, k = json.loads(conc[2])
            calls.append((dims[0][0], n, k, 4 * dims[3][0],
                          any(x.startswith("void kDequantize") for x in inside)))
        steps.append(calls)
    return steps


def _truth_mb(steps):
    """bf16 activations; the fused kernel reads x, the packed weight and absmax and writes the
    output; the dequantize path writes the weight in bf16 and its aten::mm reads it back."""
    per = []
    for calls in steps:
        total = 0
        for m, n, k, absmax, dequant in calls:
            gemm = 2 * m * k + 2 * m * n
            total += n * k // 2 + absmax + (2 * n * k + 2 * n * k + gemm if dequant else gemm)
        per.append(total / 1e6)
    return sum(per) / len(per)


@pytest.mark.parametrize("name, dequantized", [("bnb_nf4_b1", 0), ("bnb_nf4_b8", 12)])
def test_four_bit_linears_priced_as_run(name, dequantized):
    steps = _calls(name)
    # 7 linears x 4 layers a step; at batch 8, q, o and down of every layer dequantize
    assert {len(c) for c in steps} == {28}
    assert {sum(d for *_, d in c) for c in steps} == {dequantized}
    dec = analyze(DIR / f"{name}.pt.trace.json.gz").phase("decode")
    rows = {c.component: c for c in dec.component_rows}
    measured = sum(rows[c].bytes for c in LINEARS) / 1e6
    assert measured == pytest.approx(_truth_mb(steps), rel=0.02)
    assert {rows[c].weight_format for c in LINEARS} == {"bnb4 absmax, g64"}
