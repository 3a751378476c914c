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


# ---- LLM.int8() (bnb_int8_b1): the activations' quantization around each int8 GEMM ----------

def _int8_linears():
    """Per decode step, each MatMul8bitLt call's (M, N, K): A [M, K] and the int8 weight [N, K]
    as the raw events record them (bitsandbytes 0.50.2's Linear8bitLt, threshold 6.0)."""
    ev = raw_events(DIR / "bnb_int8_b1.pt.trace.json.gz")
    windows = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("decode")]
    calls = [e for e in ev if e.get("name") == "MatMul8bitLt"]
    outliers = [e["args"]["Input Dims"][5] for e in ev
                if e.get("name") == "bitsandbytes::int8_mixed_scaled_mm"]
    steps = []
    for w in windows:
        mine = [c for c in calls if w["ts"] <= c["ts"] <= w["ts"] + w["dur"]]
        steps.append([(c["args"]["Input Dims"][0][0], *c["args"]["Input Dims"][1]) for c in mine])
    return steps, outliers


def test_int8_quantization_priced_and_named():
    """Each call, bf16 activations (b = 2), fp16 inside bnb: A cast to fp16 (read 2MK, write 2MK),
    the outlier test abs (4MK), >= 6.0 (2MK read, MK bool written), any (MK read, 1 written),
    kInt8VectorQuant (2MK read, MK int8 and 4M fp32 row stats written); after the GEMM,
    kdequant_mm_int32_fp16 (4MN int32, 4M + 4N stats read, 2MN written) and the cast back to bf16
    (4MN): 15MK + 10MN + 8M + 4N + 1 bytes, all `quantize`. The int8 GEMM (cutlass i16832) reads
    A int8 (MK) and the weight (NK) and writes int32 (4MN). No outliers in decode: outlier_cols
    [0]."""
    steps, outliers = _int8_linears()
    assert {len(s) for s in steps} == {28} and {tuple(o) for o in outliers} >= {(0,)}
    quant = [sum(15 * m * k + 10 * m * n + 8 * m + 4 * n + 1 for m, n, k in s) for s in steps]
    gemm = [sum(m * k + n * k + 4 * m * n for m, n, k in s) for s in steps]
    # 4 layers of q, k, v, o 1536x1536 / 256x1536, gate, up 4096x1536, down 1536x4096, M = 1
    # a layer: sum K = 6*1536 + 4096, sum N = 3*1536 + 2*256 + 2*4096 = 13,312
    sum_k, sum_n = 6 * 1536 + 4096, 3 * 1536 + 2 * 256 + 2 * 4096
    assert quant[0] == 4 * (15 * sum_k + 10 * sum_n + 8 * 7 + 4 * sum_n + 7) == 1_544_444
    # int8 weights 24,379,392 B a layer: 4 layers, the README's packed 97,517,568 B
    weights = 1536 * (2 * 1536 + 2 * 256 + 2 * 4096) + 4096 * 1536
    assert gemm[0] == 4 * (sum_k + weights + 4 * sum_n) == 97_783_808
    dec = analyze(DIR / "bnb_int8_b1.pt.trace.json.gz").phase("decode")
    rows = {c.component: c for c in dec.component_rows}
    assert rows["quantize"].bytes == pytest.approx(sum(quant) / len(quant), rel=1e-6)
    # the bias adds of the QLinear wrapper sit in qkv_proj / o_proj beside the GEMMs
    linears = sum(rows[c].bytes for c in LINEARS)
    assert gemm[0] <= linears <= gemm[0] * 1.01
    assert {c: rows[c].kernels for c in LINEARS} == {"qkv_proj": 20, "o_proj": 8,
                                                      "mlp_gate_up": 8, "mlp_down": 4}
    assert rows["lm_head"].kernels == 1 and dec.bytes_known_share >= 0.99
    # what `other` keeps is the model's own glue: the residual adds and the position arange
    assert rows["other"].kernels == 10 and rows["other"].ms < 0.02
