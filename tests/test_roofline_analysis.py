"""Bytes, GB/token and roofline in the analysis document, against analytic figures derived here
from the model configs in tests/fixtures/README.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attrib.app import analyze
from attrib.roofline.arch import load_archs, override
from attrib.steps.phases import vllm_sums
from attrib.cli import main

from conftest import EXAMPLE_TRACE, FIXTURES

# each (trace, options) analysed once for the module (several tests read the same fixtures)
pytestmark = pytest.mark.usefixtures("module_analysed_once")
ROCPROF = FIXTURES / "rocprof"
ALL = [EXAMPLE_TRACE, *sorted((FIXTURES / "torch").glob("*.json.gz")),
       FIXTURES / "torch" / "mi300_vllm_prefilldecode_piecewise" / "graph_execution.json.gz",
       ROCPROF / "gfx1201_llamacpp_rocpd_rocm7.2" / "32432_results.db.gz",
       ROCPROF / "gfx1151_llamacpp_rocprofv3_csv",
       ROCPROF / "gfx1201_llamacpp_legacy_rocprof_v1" / "results.csv.gz",
       ROCPROF / "gfx950_rocprofv3_json" / "908_results.json.gz"]

# Qwen3-MoE fixture: hidden 2048, 8 layers, 32 heads x 128, 4 KV heads, 32 experts top-8,
# moe_intermediate 768, vocab 151936, bf16, batch 4 (4 tokens per decode step), prompt 512.
H, L, NH, HD, KV, E, K, MI, V, B = 2048, 8, 32, 128, 4, 32, 8, 768, 151936, 4
QKV_W = L * H * (NH + 2 * KV) * HD * 2          # 167,772,160
O_W = L * NH * HD * H * 2                        # 134,217,728
LM_W = V * H * 2                                 # 622,329,856
ACTIVE = E * (1 - (1 - K / E) ** B)              # 21.875 expected distinct experts for 4 tokens
EXPERTS_W = L * ACTIVE * 3 * H * MI * 2          # 1,651,507,200
ROUTER_W = L * H * E * 2
KV_READ = B * L * 2 * KV * HD * 515 * 2          # median decode step reads 515 positions
ANALYTIC_GB_PER_TOKEN = (QKV_W + O_W + LM_W + EXPERTS_W + ROUTER_W + KV_READ) / B / 1e9


@pytest.fixture(scope="module")
def moe():
    return analyze(EXAMPLE_TRACE).to_dict()


def _comps(doc, phase):
    ph = next(p for p in doc["phases"] if p["phase"] == phase)
    return ph, {c["component"]: c for c in ph["components"]}


def test_decode_gb_per_token_and_weights_match_the_analytic_figures(moe):
    ph, c = _comps(moe, "decode")
    assert ph["gb_per_token"] == pytest.approx(ANALYTIC_GB_PER_TOKEN, rel=0.10)
    for comp, weights in (("qkv_proj", QKV_W), ("o_proj", O_W), ("lm_head", LM_W)):
        assert c[comp]["bytes"] == pytest.approx(weights, rel=0.05), comp
    assert c["moe_experts"]["bytes"] == pytest.approx(EXPERTS_W, rel=0.05)
    assert c["lm_head"]["bound"] == "memory" and c["lm_head"]["achieved_gbs"] > 1000
    # at the H200's measured sustained 4272 GB/s (the peak, 4800, beside it)
    assert ph["ceiling_tok_s"] == pytest.approx(B / (ph["bytes_per_step"] / 4272e9), rel=1e-4)
    assert moe["device"]["arch"] == "sm_90" and moe["device"]["detected_from"] == "deviceProperties"
    assert (moe["device"]["roofline_bw_gbs"], moe["device"]["roofline_bw_basis"]) == (4272.0, "sustained")
    assert moe["device"]["peak_bw_gbs"] == 4800.0


def test_what_if_onto_gfx1151_uses_its_sustained_bandwidth(tmp_path):
    out = tmp_path / "w.json"
    assert main(["analyze", str(EXAMPLE_TRACE), "--arch", "gfx1151", "--format", "json", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    ph, c = _comps(doc, "decode")
    assert doc["device"]["arch"] == "gfx1151" and doc["device"]["detected_from"] == "override"
    assert ph["ceiling_tok_s"] == pytest.approx(B / (ph["bytes_per_step"] / 212e9), rel=1e-4)
    # H200 kernel times on a 256 GB/s chip: such achieved figures are nulled and explained
    assert c["lm_head"]["achieved_gbs"] is None and "exceeds" in c["lm_head"]["inconsistent"]
    assert any("what-if" in n for n in doc["notes"])


def test_graph_replayed_decode_has_unknown_bytes_unless_a_model_is_given(tmp_path):
    trace = FIXTURES / "torch" / "h200_dense_prefill_cudagraph_decode.json.gz"
    doc = analyze(trace).to_dict()
    ph, _ = _comps(doc, "decode")
    assert doc["coverage"]["bytes_known_share"] < 1 and (ph["bytes_known_share"] or 0) < 0.05
    # dense config from the fixture README: hidden 4096, 8 layers, 32 heads, 8 KV heads, FFN 14336,
    # vocab 128256, batch 8, static KV cache of 2048 positions (read whole every decode step)
    config = {"hidden_size": 4096, "num_hidden_layers": 8, "num_attention_heads": 32, "num_key_value_heads": 8,
              "intermediate_size": 14336, "vocab_size": 128256, "tie_word_embeddings": False}
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(config))
    out = tmp_path / "d.json"
    assert main(["analyze", str(trace), "--model", str(cfg), "--context", "2048", "--format", "json", "-o", str(out)]) == 0
    ph, c = _comps(json.loads(out.read_text()), "decode")
    h, layers, hd, kvh, ffn, vocab, b = 4096, 8, 128, 8, 14336, 128256, 8
    weights = layers * (h * (32 + 2 * kvh) * hd + 32 * hd * h + 3 * h * ffn) * 2 + vocab * h * 2
    kv_read = b * layers * 2 * kvh * hd * 2048 * 2
    assert c["mlp_gate_up"]["bytes_from"] == "model config config.json"
    assert ph["bytes_per_step"] == pytest.approx(weights + kv_read, rel=0.05)


# the device each fixture was traced on (tests/fixtures/README.md): gfx1151 is a Radeon 8060S (Strix Halo)
TRACED_ON = {"h200_qwen3moe_eager_prefill_decode.json.gz": "h200-sxm", "h100_hf_qwen1.5-0.5b-chat.json.gz": "h100-sxm",
             "h200_dense_prefill_cudagraph_decode.json.gz": "h200-sxm", "mi300_hf_qwen1.5-0.5b-chat.json.gz": "mi300x",
             "graph_execution.json.gz": "mi300x", "32432_results.db.gz": "r9700", "gfx1151_llamacpp_rocprofv3_csv": "radeon-8060s",
             "results.csv.gz": "r9700", "908_results.json.gz": "mi350x",
             "mi300_bert_small.json.gz": "mi300x"}


@pytest.mark.parametrize("path", ALL, ids=lambda p: Path(p).name)
def test_no_achieved_figure_above_the_peak(path):
    """Against the device each trace ran on: detected where the trace says, given where it does not."""
    key = TRACED_ON[Path(path).name]
    doc = analyze(path).to_dict()
    if doc["device"]["arch"] is None:  # the rocprofv3 CSV run carries no agent info
        doc = analyze(path, arch=override(key)).to_dict()
    arch = doc["device"]
    assert arch["key"] == key
    peak = arch["peak_bw_gbs"]
    entry = load_archs()[key]
    if doc["source"]["format"] == "torch-json":  # shapes, so bytes: figures to hold against the peak
        assert any(row.get("achieved_gbs") is not None for ph in doc["phases"] for row in ph["top_kernels"])
    for ph in doc["phases"]:
        for row in ph["components"] + ph["top_kernels"]:
            assert row.get("achieved_gbs") is None or row["achieved_gbs"] <= peak, (ph["phase"], row)
        for row in ph["components"]:
            top = entry.peak_tflops(row.get("dtype")) or max(entry.matrix_tflops.values())
            assert row.get("achieved_tflops") is None or row["achieved_tflops"] <= top, (ph["phase"], row)


@pytest.mark.parametrize("path,arch", [
    (FIXTURES / "torch" / "h200_dense_prefill_cudagraph_decode.json.gz", "sm_90"),
    (FIXTURES / "torch" / "mi300_hf_qwen1.5-0.5b-chat.json.gz", "gfx942"),
    (FIXTURES / "torch" / "mi300_vllm_prefilldecode_piecewise" / "graph_capture_rank_0.pt.trace.json.gz", "gfx942"),
    (ROCPROF / "gfx1201_llamacpp_rocpd_rocm7.2" / "32432_results.db.gz", "gfx1201"),
], ids=lambda p: Path(str(p)).name)
def test_arch_detected_in_the_document(path, arch):
    assert analyze(path).to_dict()["device"]["arch"] == arch


def test_budget_is_refused_without_context(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text("{}")
    assert main(["analyze", str(EXAMPLE_TRACE), "--model", str(cfg)]) == 2


def test_arch_database_has_the_target_chips():
    archs = load_archs()
    by_arch = {a.arch for a in archs.values()}
    assert {"gfx1151", "gfx1201", "gfx1100", "gfx942", "gfx950", "sm_90"} <= by_arch
    assert archs["radeon-8060s"].sustained_bw_gbs == 212 and archs["r9700"].sustained_bw_gbs == pytest.approx(611.8)


def test_llama_cpp_decode_on_r9700_with_a_model_budget(tmp_path):
    """llama-bench decode of llama-2-7b Q4_0 under rocprofv3 on an R9700: one token per step
    (mul_mat_vec_q ncols_dst = 1), bytes from the model config at 4.5 bits per weight (Q4_0)."""
    trace = ROCPROF / "gfx1201_llamacpp_rocpd_rocm7.2" / "32432_results.db.gz"
    config = {"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
              "num_key_value_heads": 32, "vocab_size": 32000, "tie_word_embeddings": False}
    cfg = tmp_path / "llama-2-7b.json"
    cfg.write_text(json.dumps(config))
    out = tmp_path / "r.json"
    assert main(["analyze", str(trace), "--model", str(cfg), "--weight-bits", "4.5", "--context", "8",
                 "--format", "json", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["device"]["arch"] == "gfx1201" and doc["device"]["sustained_bw_gbs"] == pytest.approx(611.8)
    ph, c = _comps(doc, "decode")
    assert ph["steps"] == 8 and ph["tokens_per_step"] == 1 and ph["tokens_from"] == "llama.cpp mul_mat_vec_q ncols"
    weights = (32 * (4 * 4096 * 4096 + 3 * 4096 * 11008) + 32000 * 4096) * 4.5 / 8
    assert ph["gb_per_token"] == pytest.approx(weights / 1e9, rel=0.05)
    assert ph["ceiling_tok_s"] == pytest.approx(611.8e9 / ph["bytes_per_step"], rel=1e-3)
    for comp in ("qkv_proj", "o_proj", "mlp_gate_up", "mlp_down"):
        assert c[comp]["bytes_from"] == "model config llama-2-7b.json"
        assert 100 < c[comp]["achieved_gbs"] <= 640, comp  # measured GB/s below the R9700's 640 GB/s peak


def test_kv_cache_cat_is_priced_from_its_kernel_element_size(moe):
    """HF's DynamicCache grows K/V with aten::cat every step: the whole cache is read and written.
    Decode steps 1..6 cat [4, 4, 512..517, 128] with [4, 4, 1, 128] bf16 for K and V in 8 layers;
    each element read once and written once. The phase figure is the median step (515.5 positions)."""
    _, c = _comps(moe, "decode")
    per_step = [8 * 2 * (2 * 2) * (4 * 4 * 128 * positions) for positions in range(513, 519)]
    median = (per_step[2] + per_step[3]) / 2  # 67,567,616 bytes
    assert c["kv_cache_write"]["bytes"] == pytest.approx(median, rel=1e-6)


def test_arch_file_entry_with_a_measured_bandwidth_is_detected(tmp_path):
    """A user's own measurement of the H200 (same key) replaces the database entry in detection."""
    text = (Path(__file__).resolve().parents[1] / "attrib" / "data" / "archs.toml").read_text()
    section = text[text.index("[h200-sxm]"):]
    assert section.count("sustained_bw_gbs = 4272.0") == 1
    section = section.replace("sustained_bw_gbs = 4272.0", "sustained_bw_gbs = 4000.0")
    mine = tmp_path / "mine.toml"
    mine.write_text(section)
    out = tmp_path / "m.json"
    assert main(["analyze", str(EXAMPLE_TRACE), "--arch-file", str(mine), "--format", "json", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["device"]["sustained_bw_gbs"] == 4000.0 and doc["device"]["detected_from"] == "deviceProperties"
    ph, _ = _comps(doc, "decode")
    assert ph["ceiling_tok_s"] == pytest.approx(B / (ph["bytes_per_step"] / 4000e9), rel=1e-4)


def test_vllm_paged_attention_is_priced_from_the_step_annotation():
    """gpt-oss on MI300X, vLLM piecewise graphs: attention runs eagerly as
    vllm::unified_attention_with_output (q [8192, 64, 64], k [8192, 8, 64], bf16) in 24 layers. The step
    annotation gives Σk = 8430 + 34489 context positions and Σq·k = 7671310 + 34489."""
    marker = "execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)_generation_37(sq37sk34489sqsq37sqsk34489)"
    sums = vllm_sums(marker)
    assert sums == {"sq": 8192, "sk": 42919, "sqsq": 7475822, "sqsk": 7705799}
    doc = analyze(
        FIXTURES / "torch" / "mi300_vllm_prefilldecode_piecewise" / "graph_execution.json.gz"
    ).to_dict()
    _, c = _comps(doc, "mixed")
    per_layer = 42919 * 2 * 8 * 64 * 2 + 2 * 8192 * 64 * 64 * 2  # K/V read at full context + q read, out written
    assert c["attention"]["bytes"] == pytest.approx(24 * per_layer, rel=1e-9)
    assert c["attention"]["flops"] == pytest.approx(24 * 4 * 7705799 * 64 * 64, rel=1e-9)
    assert c["attention"]["achieved_tflops"] < 1307  # MI300X bf16 matrix peak
