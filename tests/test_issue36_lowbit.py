"""Issue 36 items 1-3 on real H200 captures (tests/fixtures/captured/issue36/, README section): weight-only
int4 (tinygemm), int8 and Triton AWQ int4 GEMMs priced from the trace's shapes; the prefill run through a
small-M low-bit kernel named with its numbers; fp8 `_scaled_mm` judged against the fp8 peak.

Every expected figure comes from the capture's `.model.json` (what each linear holds, parameter bytes) and
the raw events (annotations, op shapes, kernel durations), never from attrib's output.
"""

from __future__ import annotations

import gzip
import json
import math
import tomllib
from functools import cache

import polars as pl
import pytest

from attrib.app import analyze
from attrib.cost.component_bytes import component_dtypes
from attrib.pipeline import attribute
from attrib.roofline.arch import load_archs
from collectors import load

from conftest import FIXTURES, ROOT, raw_events

CAP = FIXTURES / "captured" / "issue36"
FP8 = FIXTURES / "captured" / "fp8_w8a8_decode.pt.trace.json.gz"
SIZE = {"c10::BFloat16": 2, "float": 4, "signed char": 1}


def _trace(name: str):
    return CAP / f"{name}.pt.trace.json.gz"


@cache
def _doc(name: str) -> dict:
    return analyze(_trace(name)).to_dict()


def _phase(name: str, phase: str) -> dict:
    return next(p for p in _doc(name)["phases"] if p["phase"] == phase)


def _model(name: str) -> dict:
    return json.loads((CAP / f"{name}.model.json").read_text())


def _windows(name: str, phase: str) -> list[tuple[float, float, int]]:
    """(start, end, tid) of each CPU step annotation of `phase`, from the raw events."""
    return sorted((e["ts"], e["ts"] + e["dur"], e["tid"]) for e in raw_events(_trace(name))
                  if e.get("cat") == "user_annotation" and e["name"].split(" ")[0] == phase)


def _ops(name: str, op: str, t0: float, t1: float, tid: int) -> list[dict]:
    return [e for e in raw_events(_trace(name)) if e.get("cat") == "cpu_op" and e["name"] == op
            and e["tid"] == tid and t0 <= e["ts"] < t1]


def _nbytes(dims: list[int], dtype: str) -> int:
    return math.prod(dims) * SIZE[dtype]


def _decode_truth(name: str) -> float:
    """GB per token of a decode step as run, by hand: the weights once (packed low-bit tensors at their
    recorded sizes, the bf16 parameters left: biases, norms, lm_head, one embedding row a token), K/V three
    times (SDPA reads the cache; DynamicCache's cat reads it and writes it again), each linear's input and
    output in bf16, and for int8 the fp32 conversions its op runs (the raw copy_ ops inside it)."""
    m = _model(name)
    parts, batch, hidden = m["param_bytes"]["bytes_by_part"], m["batch"], m["config"]["hidden_size"]
    weights = (m["packed_bytes_total"] + sum(parts.get(p, 0) for p in ("attention", "norms_other", "lm_head"))
               + batch * hidden * 2)
    acts = sum(batch * (q["in_features"] + q["out_features"]) * 2 for q in m["quantized_linears"])
    per_step = []
    for t0, t1, tid in _windows(name, "decode"):
        sdpa = _ops(name, "aten::scaled_dot_product_attention", t0, t1, tid)
        kv = sum(_nbytes(e["args"]["Input Dims"][i], e["args"]["Input type"][i]) for e in sdpa for i in (1, 2))
        casts = 0
        for mm in _ops(name, "aten::_weight_int8pack_mm", t0, t1, tid):
            inner = _ops(name, "aten::copy_", mm["ts"], mm["ts"] + mm["dur"], tid)
            casts += sum(_nbytes(c["args"]["Input Dims"][0], c["args"]["Input type"][0])
                         + _nbytes(c["args"]["Input Dims"][1], c["args"]["Input type"][1]) for c in inner)
        per_step.append(weights + 3 * kv + acts + casts)
    assert len(per_step) == m["decode_steps"]
    return sum(per_step) / len(per_step) / batch / 1e9


def test_formulas_on_recorded_signatures():
    """Signatures copied from the captures' decode steps (q_proj of int4_tinygemm_b1, q_proj of int8_wo_b1).
    int4: x 1 x 2048 x 2 + 2048 x 2048 / 2 packed + 16 groups x 2048 x (scale, zero) x 2 + out 2048 x 2 =
    4,096 + 2,097,152 + 131,072 + 4,096 = 2,236,416 B; 2 x 2048 x 2048 = 8,388,608 FLOPs.
    int8: 8,192 + 1536 x 4096 + 1536 x 2 + 1536 x 2 = 6,305,792 B; 2 x 1536 x 4096 = 12,582,912 FLOPs."""
    from attrib.cost.ops import op_cost

    c = op_cost("aten::_weight_int4pack_mm", [[1, 2048], [256, 16, 32, 4], [], [16, 2048, 2]],
                ["c10::BFloat16", "int", "Scalar", "c10::BFloat16"], ["", "", "128", ""])
    assert (c.bytes, c.flops, c.dtype, c.model) == (2_236_416, 8_388_608, "bf16", "gemm (int4 g128)")
    c = op_cost("aten::_weight_int8pack_mm", [[1, 4096], [1536, 4096], [1536]],
                ["c10::BFloat16", "signed char", "c10::BFloat16"], ["", "", ""])
    assert (c.bytes, c.flops, c.model) == (6_305_792, 12_582_912, "gemm (int8 per-channel)")
    # a packed weight that is not N*K/2 bytes is not priced (named, not 0 MB)
    c = op_cost("aten::_weight_int4pack_mm", [[1, 2048], [128, 16, 32, 4], [], [16, 2048, 2]],
                ["c10::BFloat16", "int", "Scalar", "c10::BFloat16"], ["", "", "128", ""])
    assert c.bytes is None and "N*K/2" in (c.assumption or "")


LOW_BIT = ("int4_tinygemm_b1", "int4_tinygemm_b8", "int8_wo_b1", "int8_wo_b8", "int4_triton_awq_b1")


@pytest.mark.parametrize("name", LOW_BIT)
def test_decode_gb_per_token_from_the_trace_alone(name):
    ph = _phase(name, "decode")
    truth = _decode_truth(name)
    assert ph["tokens_per_step"] == _model(name)["batch"]
    assert ph["bytes_known_share"] >= 0.99
    # the rest is the norms', rotary's and activation's passes over the activations (not in the count)
    assert truth <= ph["gb_per_token"] <= 1.05 * truth, (ph["gb_per_token"], truth)


@pytest.mark.parametrize("name", LOW_BIT)
def test_every_linear_priced_at_its_weight_format(name):
    """Each linear's kernel is priced, its cost model naming the format the trace shows; no
    unpriced-bytes hint (there is no graph to give a capture of)."""
    a = attribute(load(_trace(name)))
    m = _model(name)
    want = {"int4_tinygemm": "gemm (int4 g128)", "int8_weight_only": "gemm (int8 per-channel)",
            "int4_triton_awq": "gemm (int4 AWQ, g128 assumed)"}[m["quant"]]
    k = a.kernels.filter(pl.col("name").cast(pl.String).str.contains(r"tinygemm|int8pack|awq_gemm"))
    linears = len(m["quantized_linears"])
    assert k.height == linears * 5  # warm-up excluded: prefill + 4 decode steps recorded ...
    assert set(k["cost_model"].cast(pl.String).to_list()) == {want}
    assert k["bytes"].null_count() == 0
    assert not any("--capture" in n for n in _doc(name)["notes"])


ROLE = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "o_proj": "o_proj",
        "gate_proj": "mlp_gate_up", "up_proj": "mlp_gate_up", "down_proj": "mlp_down"}


@pytest.mark.parametrize("name", ["int4_tinygemm_b8", "int8_wo_b1", "int4_triton_awq_b1"])
def test_linears_of_one_class_path_split_by_call(name):
    """Every quantized linear of a layer is an instance `QLinear_0` (a class made per linear): one module
    path for q, k, v and o, one for gate, up and down. The module calls tell them apart: per decode step the
    low-bit GEMM kernels of each component carry the packed bytes of that role's linears (.model.json) and
    their inputs and outputs."""
    a = attribute(load(_trace(name)))
    m = _model(name)
    want: dict[str, float] = {}
    for q in m["quantized_linears"]:
        role = ROLE[q["module"].rsplit(".", 1)[1]]
        want[role] = want.get(role, 0) + q["packed_bytes"] + m["batch"] * (q["in_features"] + q["out_features"]) * 2
    k = a.kernels.filter((pl.col("phase") == "decode")
                         & pl.col("name").cast(pl.String).str.contains(r"tinygemm|int8pack|awq_gemm"))
    steps = k["step"].n_unique()
    got = {c: b / steps for c, b in k.group_by(pl.col("component").cast(pl.String)).agg(pl.col("bytes").sum()).iter_rows()}
    assert got.keys() == want.keys()
    for role, b in want.items():
        assert got[role] == pytest.approx(b, rel=1e-9), role


FORMAT = {"int4_tinygemm": "int4 g128", "int8_weight_only": "int8 per-channel",
          "int4_triton_awq": "int4 AWQ, g128 assumed"}


@pytest.mark.parametrize("name", LOW_BIT)
def test_bits_as_run_in_the_component_table(name):
    """Each GEMM component says its weight format as the trace shows it: the quantized linears' (the
    group from the op's qGroupSize, .model.json's group_size), the untouched lm_head bf16; the terminal
    table marks the low-bit rows."""
    from attrib.report.table import render

    m = _model(name)
    an = analyze(_trace(name))
    for ph in an.phases:
        formats = {c.component: c.weight_format for c in ph.component_rows}
        assert all(formats[r] == FORMAT[m["quant"]] for r in set(ROLE.values())), formats
        assert formats["lm_head"] == "bf16" and formats["attention"] is None
    assert FORMAT[m["quant"]].startswith(f"int{4 if 'int4' in m['quant'] else 8}")
    assert m["group_size"] in (128, None) and ("g128" in FORMAT[m["quant"]]) == (m["group_size"] == 128)
    text = render(an, width=120)
    assert "mlp_gate_up [int" in text and "lm_head [" not in text


def test_awq_kernel_priced_from_its_launch():
    """The Triton AWQ kernel has no op: M, N from the output allocation before its launch, K from the
    linear's input. Its decode bytes per call are the packed tensors of the linear it runs for."""
    a = attribute(load(_trace("int4_triton_awq_b1")))
    k = a.kernels.filter((pl.col("name").cast(pl.String) == "awq_gemm_kernel") & (pl.col("phase") == "decode"))
    steps = k["step"].n_unique()
    m = _model("int4_triton_awq_b1")
    packed = m["packed_bytes_total"]
    acts = sum((q["in_features"] + q["out_features"]) * 2 for q in m["quantized_linears"])
    assert k["bytes"].sum() / steps == pytest.approx(packed + acts, rel=1e-9)
    flops = sum(2 * q["in_features"] * q["out_features"] for q in m["quantized_linears"])
    assert k["flops"].sum() / steps == pytest.approx(flops, rel=1e-9)


def _bf16_peak() -> float:
    archs = tomllib.loads((ROOT / "attrib" / "data" / "archs.toml").read_text())
    return float(archs["h200-sxm"]["matrix_tflops"]["bf16"])


def test_prefill_with_tinygemm_is_named_with_its_numbers():
    """int4_tinygemm_b8's prefill (M = 8 x 512 = 4096 rows) runs its 28 linears through tinygemm. By hand,
    from the raw events: the tinygemm kernels launched in the prefill window and their durations; the
    FLOPs 2*M*N*K of its _weight_int4pack_mm ops (M, K from the input, N from the scales); those FLOPs at
    the H200's bf16 peak; the slowdown is their ratio."""
    name = "int4_tinygemm_b8"
    ev = raw_events(_trace(name))
    (t0, t1, tid), = _windows(name, "prefill")
    ops = _ops(name, "aten::_weight_int4pack_mm", t0, t1, tid)
    assert len(ops) == 28
    flops = sum(2 * math.prod(o["args"]["Input Dims"][0]) * o["args"]["Input Dims"][3][1] for o in ops)
    rows = {math.prod(o["args"]["Input Dims"][0][:-1]) for o in ops}
    launches = {e["args"]["correlation"] for e in ev if e.get("cat") == "cuda_runtime"
                and e["tid"] == tid and t0 <= e["ts"] < t1}
    tiny = [e for e in ev if e.get("cat") == "kernel" and "tinygemm" in e["name"]
            and e["args"]["correlation"] in launches]
    assert len(tiny) == 28 and rows == {4096}
    ms = sum(e["dur"] for e in tiny) / 1e3
    floor = flops / (_bf16_peak() * 1e9)
    f = next(f for f in _doc(name)["findings"] if f["rule"] == "low-bit-gemm-large-m")
    ev_ = f["evidence"]
    assert ev_["phase"] == "prefill" and f["severity"] == "high"
    assert ev_["flops_per_step"] == flops and ev_["rows"] == 4096
    assert ev_["kernel_ms"] == pytest.approx(ms, rel=1e-3)
    assert ev_["compute_floor_ms"] == pytest.approx(floor, rel=1e-3)
    assert ev_["slowdown"] == pytest.approx(ms / floor, rel=1e-2) and ev_["slowdown"] > 30
    assert ev_["roof_tflops"] == _bf16_peak() and ev_["roof_basis"] == "peak"
    assert f["ms_per_step"] == pytest.approx(ms - floor, rel=1e-3)
    assert f"{ms / floor:.1f}x" in f["title"] and "int4 g128" in f["title"]
    assert "dequantize" in f["remedy"]
    # the decode steps (M = 8) are memory-bound: no finding about them
    assert not any(x["rule"] == "low-bit-gemm-large-m" and x["evidence"]["phase"] == "decode"
                   for x in _doc(name)["findings"])


def test_the_bf16_twin_confirms_the_slowdown():
    """The finding prices the 16-bit path at the bf16 peak. hf_llama_cuda_b8_p512 is a bf16 twin of that
    prefill on the same H200 (hidden 2048, the same q/k/v/o shapes, M = 8 x 512 = 4096): its linears, timed
    from the raw events (kernels launched inside each aten::linear), run at ~770 TFLOP/s, 78% of the peak.
    The int4 prefill's FLOPs at that measured rate are still > 25x faster than tinygemm ran them."""
    twin = FIXTURES / "captured" / "hf_llama_cuda_b8_p512.pt.trace.json.gz"
    ev = raw_events(twin)
    (pre,) = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("prefill")]
    t0, t1, tid = pre["ts"], pre["ts"] + pre["dur"], pre["tid"]
    lin = [e for e in ev if e.get("cat") == "cpu_op" and e["name"] == "aten::linear" and e["tid"] == tid
           and t0 <= e["ts"] < t1]
    calls = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and e["tid"] == tid and t0 <= e["ts"] < t1 and "correlation" in e.get("args", {})}
    kernels = [(calls[e["args"]["correlation"]], e["dur"]) for e in ev
               if e.get("cat") == "kernel" and e["args"].get("correlation") in calls]
    us = sum(d for at, d in kernels for op in lin if op["ts"] <= at <= op["ts"] + op["dur"])
    flops = sum(2 * math.prod(op["args"]["Input Dims"][0][:-1]) * math.prod(op["args"]["Input Dims"][1])
                for op in lin)
    assert {math.prod(op["args"]["Input Dims"][0][:-1]) for op in lin} == {4096}
    rate = flops / us / 1e6   # TFLOP/s
    assert 0.6 * _bf16_peak() < rate < _bf16_peak()
    f = next(f for f in _doc("int4_tinygemm_b8")["findings"] if f["rule"] == "low-bit-gemm-large-m")
    at_twin = f["evidence"]["flops_per_step"] / (rate * 1e9)   # ms
    assert f["evidence"]["kernel_ms"] / at_twin > 25


@pytest.mark.parametrize("name", ["int8_wo_b8", "int4_triton_awq_b1", "int4_tinygemm_b1"])
def test_prefill_with_other_small_m_kernels_is_named(name):
    f = [f for f in _doc(name)["findings"] if f["rule"] == "low-bit-gemm-large-m"]
    assert [x["evidence"]["phase"] for x in f] == ["prefill"] and f[0]["evidence"]["slowdown"] > 10


def test_fp8_gemms_are_judged_against_the_fp8_peak():
    """W8A8 rowwise _scaled_mm decode: the GEMM components' dtype is fp8 (peak 1978.9 on the H200, not
    fp32's 66.9), no rate above a peak, nothing left out of GB/token (README truth 0.48693, as run the same)."""
    doc = analyze(FP8).to_dict()
    ph = doc["phases"][0]
    h200 = load_archs()["h200-sxm"]
    gemms = [c for c in ph["components"] if c["component"] in ("qkv_proj", "o_proj", "mlp_gate_up", "mlp_down")]
    assert len(gemms) == 4 and {c["dtype"] for c in gemms} == {"fp8_e4m3fn"}
    assert {c["weight_format"] for c in gemms} == {"fp8_e4m3fn"}
    assert h200.peak_tflops("fp8_e4m3fn") == 1978.9
    assert not ph["excluded_components"] and not any("exceeds" in n for n in doc["notes"])
    assert ph["gb_per_token"] == pytest.approx(0.48693, rel=0.05)


def test_a_component_takes_the_dtype_of_its_matrix_flops():
    """The issue's model quantized each linear's input inside the linear (no annotation), so the fp32
    quantize kernels landed in qkv_proj and, taking more of its time than the fp8 GEMM, made it fp32: its
    FLOPs were judged against fp32's 66.9 TFLOP/s. Here the fixture's own per-token quantize kernels are
    counted into qkv_proj as such a trace would: the dtype stays fp8."""
    a = attribute(load(FP8))
    k = a.kernels.with_columns(pl.col("component").cast(pl.String))
    k = k.with_columns(pl.when(pl.col("component") == "quantize").then(pl.lit("qkv_proj"))
                       .otherwise(pl.col("component")).alias("component"))
    qkv = k.filter(pl.col("component") == "qkv_proj")
    by_time = qkv.group_by("dtype").agg(pl.col("dur_ns").sum()).sort("dur_ns", descending=True)
    assert by_time["dtype"][0] != "fp8_e4m3fn"  # the quantize kernels hold most of the time
    dtypes = dict(component_dtypes(k).iter_rows())
    assert dtypes["qkv_proj"] == "fp8_e4m3fn" and dtypes["mlp_down"] == "fp8_e4m3fn"


def test_the_capture_hint_only_where_graphs_replay():
    """The continuous-batching trace records no CPU op of its worker: bytes unknown. The note says to give
    a model config, not a graph-capture trace (nothing was replayed from a graph)."""
    notes = [n for n in _doc("cb_generate_batch")["notes"] if "too little for GB/token" in n]
    assert notes and all("--model CONFIG" in n and "--capture" not in n for n in notes)


def test_an_unpriced_op_is_named_not_zero(tmp_path):
    """An op left without bytes for 5% or more of a phase's kernel time is named in a note with why:
    the ViT capture with its cuDNN convolution renamed to an op no model knows (a custom extension's
    patch conv; derived here from the real trace), its share from the raw kernels under it; and
    none on the low-bit captures, all priced now."""
    raw = json.loads(gzip.decompress((FIXTURES / "captured" / "vit_forward_b8.pt.trace.json.gz")
                                     .read_bytes()))
    ev = raw["traceEvents"]
    convs = [e for e in ev if e.get("cat") == "cpu_op" and e["name"] == "aten::cudnn_convolution"]
    for e in convs:
        e["name"] = "mylib::patch_conv"
    name = tmp_path / "vit_custom_conv.json"
    name.write_text(json.dumps(raw))
    calls = {e["args"]["correlation"]: (e["tid"], e["ts"]) for e in ev
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    under = sum(k["dur"] for k in kernels if (c := calls.get(k["args"].get("correlation"))) is not None
                and any(o["tid"] == c[0] and o["ts"] <= c[1] <= o["ts"] + o["dur"] for o in convs))
    share = under / sum(k["dur"] for k in kernels)
    notes = [n for n in analyze(name).notes if "has no bytes" in n]
    assert len(notes) == 1 and "mylib::patch_conv" in notes[0] and "no cost model" in notes[0]
    assert f"({share:.0%} of kernel time)" in notes[0]
    for low in LOW_BIT:
        assert not any("has no bytes" in n for n in _doc(low)["notes"])


def test_what_if_starts_from_the_traced_format(tmp_path):
    """--what-if re-prices weights from the bits they ran at, read from the trace (int4 g128: 4 bits + a
    bf16 scale and zero per 128 = 4.25), not the model config's 16: to bf16 the quantized linears' weights
    come back to the config's bf16 bytes (.model.json: param_bytes_bf16_before_quantization), and no note
    asks for --weight-bits."""
    m = _model("int4_tinygemm_b1")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(m["config"]))
    wi = analyze(_trace("int4_tinygemm_b1"), model=cfg, what_if="weights=bf16").to_dict()["what_if"]
    assert wi["weight_bits_from"]["mlp"] == 4.25 and wi["weight_bits_from"]["attention"] == 4.25
    rows = {r["component"]: r for r in wi["rows"]}
    before = m["param_bytes_bf16_before_quantization"]["bytes_by_part"]
    bf16 = sum(r["projected_bytes"] - (r["bytes"] - r["repriced_bytes"]) for c, r in rows.items()
               if c in ("qkv_proj", "o_proj", "mlp_gate_up", "mlp_down"))
    assert bf16 == pytest.approx(before["attention"] + before["dense_mlp"], rel=0.005)
    assert not any("--weight-bits" in n for n in wi["notes"])

