"""Costs and rooflines on the stacks users run (issue #10, cost half): Inductor kernels priced at what
they touch, partly priced rows shown as lower bounds, impossible rows kept out of GB/token, the
prefill ceiling held to its FLOP floor. Real traces; golden figures derived by hand in comments."""

from __future__ import annotations

import orjson
import polars as pl
import pytest

from attrib.trace import as_text
from attrib.app import analyze, model_budget, resolve_arch
from attrib.cli import main
from attrib.cost.ops import op_cost
from attrib.cost.weights import bits_for
from attrib.pipeline import attribute
from attrib.analysis.build import build
from attrib.roofline.arch import load_archs
from attrib.roofline.template import template
from collectors import load

from conftest import EXAMPLE_TRACE, FIXTURES

VLLM = FIXTURES / "torch" / "mi300_vllm_prefilldecode_piecewise"
DENSE = FIXTURES / "torch" / "h200_dense_prefill_cudagraph_decode.json.gz"


@pytest.fixture(scope="module")
def vllm_capture():
    """The MI300X vLLM replay with its capture: replayed kernels get their launch ops and shapes."""
    return attribute(load(VLLM / "graph_execution.json.gz"), capture=load(VLLM / "graph_capture_rank_0.pt.trace.json.gz"))


@pytest.fixture(scope="module")
def vllm_doc():
    return analyze(
        VLLM / "graph_execution.json.gz", capture=VLLM / "graph_capture_rank_0.pt.trace.json.gz"
    ).to_dict()


def _op_bytes(a, op: str) -> float:
    """Bytes of one launch of `op`, summed over its kernels (all launches have the same shapes)."""
    ops = a.trace.ops.filter(pl.col("name") == op).select(pl.col("id").alias("op_id"))
    k = a.kernels.join(ops, on="op_id")
    assert k.height and k["bytes"].null_count() == 0
    return float(k["bytes"].sum()) / ops.filter(pl.col("op_id").is_in(k["op_id"].implode())).height


def test_inductor_gather_is_priced_at_the_rows_it_reads(vllm_capture):
    # triton_poi_fused_0(ids[8192] int32, embed[201088, 2880] bf16, cos_sin[131072, 64] fp32,
    #                    out[8192, 2880] bf16, out2[131072, 64] bf16): no sizes recorded. The table is
    # gathered: 8192 rows x 2880 x 2 B, not its 1158 MB; the cos/sin cache is converted whole.
    want = 8192 * 4 + 8192 * 2880 * 2 + 131072 * 64 * 4 + 8192 * 2880 * 2 + 131072 * 64 * 2   # 144.7 MB
    assert _op_bytes(vllm_capture, "triton_poi_fused_0") == pytest.approx(want)
    naive = 8192 * 4 + 201088 * 2880 * 2 + 131072 * 64 * (4 + 2) + 8192 * 2880 * 2          # every argument whole
    assert want < naive / 8


def test_inductor_kernel_with_sizes_uses_its_xnumel(vllm_capture):
    # triton_poi_fused_constant_pad_nd_moe_forward_0(x[8192, 2880], out[8192, 3072], xnumel=25165824):
    # the padded copy reads the input once and writes the padded output once.
    assert _op_bytes(vllm_capture, "triton_poi_fused_constant_pad_nd_moe_forward_0") == pytest.approx(
        8192 * 2880 * 2 + 8192 * 3072 * 2)
    model = as_text(vllm_capture.kernels).filter(pl.col("name").str.starts_with("triton_"))["cost_model"].unique().to_list()
    assert model == ["inductor"]


def test_partly_priced_row_shows_no_rate_and_coverage_agrees(vllm_doc):
    """moe_experts: the MXFP4 matmul_ogs kernels (vllm::moe_forward, no weights in its args) are not
    priced, only the small pad kernel is: a lower bound with no GB/s or gap."""
    ph = vllm_doc["phases"][0]
    rows = {c["component"]: c for c in ph["components"]}
    moe = rows["moe_experts"]
    assert moe["partial"] and moe["bytes_known_share"] < 0.05
    assert moe["achieved_gbs"] is None and moe["gap_ms"] is None and moe["achieved_tflops"] is None
    assert not rows["qkv_proj"]["partial"] and rows["qkv_proj"]["achieved_gbs"] > 0
    for c in ph["components"]:
        assert c["partial"] == (c["bytes"] is not None and c["bytes_known_share"] < 0.5), c["component"]
    assert vllm_doc["coverage"]["bytes_known_share"] == pytest.approx(ph["bytes_known_share"], abs=1e-4)


def test_a_component_above_the_peak_is_left_out_of_gb_per_token(tmp_path):
    """A variant derived from the real H200 Qwen3-MoE trace: the same device entry with a 2000 GB/s
    peak (an --arch-file replacing h200-sxm), so lm_head (~4.2 TB/s measured) is above it. Its bytes
    leave GB/token and the ceiling, and the notes name it."""
    src = load_archs()["h200-sxm"]
    entry = tmp_path / "slow.toml"
    entry.write_text(
        "[h200-sxm]\n" + "\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in {
            "arch": src.arch, "name": src.name, "vendor": src.vendor, "wave_size": src.wave_size,
            "compute_units": src.compute_units, "num_sms_reported": src.num_sms_reported,
            "compute_major": src.compute_major, "compute_minor": src.compute_minor,
            "peak_bw_gbs": 2000.0, "memory_gb": 141}.items())
        + '\nmatch_names = ["H200"]\n[h200-sxm.matrix_tflops]\nbf16 = 989.4\n')
    base = analyze(EXAMPLE_TRACE).to_dict()
    slow = analyze(EXAMPLE_TRACE, arch_file=entry).to_dict()
    b, s = (next(p for p in d["phases"] if p["phase"] == "decode") for d in (base, slow))
    rows = {c["component"]: c for c in s["components"]}
    # its one kernel per step is priced above the 2000 GB/s peak: it adds no bytes, and the row and a
    # note name it (issue 20: never summed silently)
    head = {c["component"]: c for c in b["components"]}["lm_head"]
    assert rows["lm_head"]["over_peak"] and rows["lm_head"]["bytes"] is None and head["bytes"]
    counted = [c for c in s["components"] if c["bytes"] is not None and not c["inconsistent"]]
    assert s["bytes_per_step"] == pytest.approx(sum(c["bytes"] for c in counted))
    assert s["bytes_per_step"] < b["bytes_per_step"] - 0.9 * head["bytes"]
    assert any("lm_head" in n and "above the device's peak" in n for n in slow["notes"])
    assert not base["phases"][1]["excluded_components"]


def test_prefill_ceiling_is_held_to_the_flop_floor():
    """Dense H200 prefill (hidden 4096, 8 layers, 32 q / 8 KV heads x 128, FFN 14336, batch 8 x 1024
    tokens): its GEMMs alone need 2*T*(4096*6144 + 4096*4096 + 4096*28672 + 14336*4096)*8 = 28.6 TFLOP,
    29 ms at H200's 989.4 bf16 TFLOP/s, so no more than 8192 / 0.0289 = 283k tok/s; the step's bytes
    alone (about 30 GB at 4.8 TB/s) would allow over 1.2M."""
    doc = analyze(DENSE).to_dict()
    ph = next(p for p in doc["phases"] if p["phase"] == "prefill")
    t = 8192
    gemm_flops = 2 * t * (4096 * 6144 + 4096 * 4096 + 4096 * 28672 + 14336 * 4096) * 8
    floor = t / (gemm_flops / 989.4e12)
    assert ph["ceiling_tok_s"] <= floor
    assert ph["ceiling_tok_s"] >= 0.8 * floor
    assert ph["ceiling_tok_s"] >= ph["achieved_tok_s"]
    assert ph["ceiling_tok_s"] < t / (ph["bytes_per_step"] / 4800e9) / 3


def test_what_if_names_the_components_above_the_new_peak():
    """H200 decode times set against gfx1151 (256 GB/s): rows faster than that are a projection out
    of reach, named in the notes, not blamed on the bytes model; their bytes still count."""
    doc = analyze(EXAMPLE_TRACE, arch=resolve_arch("gfx1151")[0]).to_dict()
    ph = next(p for p in doc["phases"] if p["phase"] == "decode")
    over = sorted(c["component"] for c in ph["components"] if c["inconsistent"])
    assert "lm_head" in over and not ph["excluded_components"]
    assert all("bytes model" not in c["inconsistent"] for c in ph["components"] if c["inconsistent"])
    note = next(n for n in doc["notes"] if n.startswith("what-if: ") and "out of reach" in n)
    assert all(name in note for name in over)
    assert any("projection" in n for n in doc["notes"])


# ------------------------------------------------------------------ serving-engine custom ops
# Argument lists follow the registered schemas in /work/shared/knowledge/serving-ops.md; only the
# MI300 vLLM fixture holds real calls (TopK, SortTokens, rotary), the others are marked synthetic.

BF, I64, I32 = "c10::BFloat16", "long int", "int"


def test_router_ops_of_the_mxfp4_moe_are_priced(vllm_capture):
    # TopK(router_logits[8192, 32] bf16, k=4) on the real fixture: logits read 8192*32*2 = 524,288,
    # k values (bf16) + int16 indices written 8192*4*4 = 131,072, bit matrix 8192*32/8 = 32,768
    assert _op_bytes(vllm_capture, "TopK") == 524_288 + 131_072 + 32_768


def test_sglang_store_cache_counts_the_rows_written():
    # synthetic, schema store_cache(k[T, Hk*D], v, k_cache[slots, Hk*D], v_cache, indices[T]): T=32,
    # row 1024 bf16 = 2048 B: k, v read and written = 4*32*2048 = 262,144, indices 8*32 = 256; caches not counted
    c = op_cost("sglang::store_cache", [[32, 1024], [32, 1024], [500000, 1024], [500000, 1024], [32], [], []],
                [BF, BF, BF, BF, I64, "Scalar", "Scalar"], ["", "", "", "", "", "2048", "0"])
    assert c.bytes == 262_144 + 256 and c.model == "kv_write"


def test_aiter_batch_prefill_from_page_indices():
    # synthetic, one sequence of 512 new tokens, no prefix: q[512, 32, 128], k/v caches [100000, 8, 128],
    # cu_seqlens_q[2], kv_indptr[2], kv_page_indices[512] (page size 1), is_causal (arg 12) True.
    # bytes = q + o: 2*512*32*128*2 = 8,388,608; K + V of 512 tokens: 2*512*8*128*2 = 2,097,152;
    # indices 512*4 + 2*4 = 2,056. FLOPs = 4*Hq*D*P, P = 512*513/2 = 131,328 -> 2,151,677,952
    dims = [[512, 32, 128], [100000, 8, 128], [100000, 8, 128], [2], [2], [512], [], [], [], [], [], [], []]
    types = [BF, BF, BF, I32, I32, I32] + ["Scalar"] * 7
    conc = [""] * 6 + ["512", "512", "0.0", "0.088", "0.0", "False", "True"]
    c = op_cost("aiter::mha_batch_prefill", dims, types, conc)
    assert c.bytes == 8_388_608 + 2_097_152 + 2_056
    assert c.flops == 4 * 32 * 128 * 131_328


def test_rotary_counts_only_the_rotated_columns():
    # real shapes (MI300 vLLM): positions[8192] i64, q[8192, 4096], k[8192, 512], head 64, cache [131072, 64]:
    # full rotary: 8192*8 + 2*(8192*4096 + 8192*512)*2 + 8192*64*2 = 65,536 + 150,994,944 + 1,048,576
    full = op_cost("_C::rotary_embedding", [[8192], [8192, 4096], [8192, 512], [], [131072, 64], []],
                   [I64, BF, BF, "Scalar", BF, "Scalar"], ["", "", "", "64", "", "True"])
    assert full.bytes == 65_536 + 150_994_944 + 1_048_576
    # synthetic partial rotary: head 128 with a 64-wide cache: half of each head is read and written
    half = op_cost("sgl_kernel::rotary_embedding", [[8192], [8192, 4096], [8192, 512], [], [131072, 64], []],
                   [I64, BF, BF, "Scalar", BF, "Scalar"], ["", "", "", "128", "", "True"])
    assert half.bytes == 65_536 + 150_994_944 / 2 + 1_048_576


def test_flashmla_decode_reads_the_latent_cache():
    # synthetic DeepSeek-V3 decode: q[4, 1, 128, 576], latent cache [1000, 64, 1, 576] bf16, head_dim_v 512,
    # cache_seqlens[4], block_table[4, 8] (8 blocks of 64 per sequence: at most 2048 tokens read).
    # bytes = 2048*576*2 + 4*1*128*(576+512)*2 + 4*8*4 = 2,359,296 + 1,114,112 + 128
    # FLOPs = 2*Hq*(2*512+64)*tokens = 2*128*1088*2048
    c = op_cost("_flashmla_C::fwd_kvcache_mla", [[4, 1, 128, 576], [1000, 64, 1, 576], [], [4], [4, 8]],
                [BF, BF, "Scalar", I32, I32], ["", "", "512", "", ""])
    assert c.bytes == 2_359_296 + 1_114_112 + 128 and c.flops == 2 * 128 * 1088 * 2048


# ------------------------------------------------------------------ model configs: opaque MoE, bits per class
# The MI300 vLLM fixture runs GPT-OSS-20B (TraceLens study: hidden 2880, vocab 201,088, MXFP4 MoE; the
# trace's TopK/SortTokens give k=4 of E=32). The rest is gpt-oss-20b's public config.json.
GPT_OSS = {"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 24,
           "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 201088,
           "num_local_experts": 32, "experts_per_token": 4, "sliding_window": 128,
           "layer_types": ["sliding_attention", "full_attention"] * 12, "tie_word_embeddings": False,
           "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
               "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}}


def test_vllm_moe_forward_is_priced_from_the_model_config_with_capture(tmp_path):
    """--model applies with --capture: the MXFP4 experts (80% of the step) hide their weights from
    the trace; the config prices them at 4.25 bits (its quantization_config), so the row is whole."""
    cfg = tmp_path / "config.json"
    cfg.write_text(orjson.dumps(GPT_OSS).decode())
    doc = analyze(VLLM / "graph_execution.json.gz", capture=VLLM / "graph_capture_rank_0.pt.trace.json.gz",
                       model=cfg).to_dict()
    ph = doc["phases"][0]
    moe = {c["component"]: c for c in ph["components"]}["moe_experts"]
    assert not moe["partial"] and moe["bytes_known_share"] == 1.0 and moe["achieved_gbs"] is not None
    assert moe["estimated_share"] == 1.0          # from the model config, said so
    # one call, T = 8192 tokens: all 32 experts hit (1-(1-4/32)^8192 = 1), weights 32*3*2880*2880*4.25/8
    # = 423,014,400; activations at the traced, padded hidden 3072: in and out 2*T*3072*2 = 100,663,296,
    # routed through both GEMMs and the combine T*4*(3*3072 + 2*2880)*2 = 981,467,136
    a = attribute(load(VLLM / "graph_execution.json.gz"), capture=load(VLLM / "graph_capture_rank_0.pt.trace.json.gz"),
                  budget=model_budget(cfg))
    assert _op_bytes(a, "vllm::moe_forward") == pytest.approx(32 * 3 * 2880 * 2880 * 4.25 / 8 + 100_663_296 + 981_467_136)
    flops = a.kernels.join(a.trace.ops.filter(pl.col("name") == "vllm::moe_forward").select(pl.col("id").alias("op_id")),
                           on="op_id")["flops"].sum()
    assert flops == pytest.approx(24 * 6 * 8192 * 4 * 2880 * 2880)   # gated: 6*T*k*H*I per layer
    assert ph["bytes_known_share"] > 0.99 and ph["gb_per_token"] is not None
    assert any("without --context" in n for n in doc["notes"])


def test_weight_bits_per_class_and_from_quantization_config(tmp_path):
    cfg = tmp_path / "gpt-oss.json"
    cfg.write_text(orjson.dumps(GPT_OSS).decode())
    from_config = model_budget(cfg, context=4096)
    assert bits_for(from_config.weight_bits, "experts") == 4.25 and bits_for(from_config.weight_bits, "attention") == 16
    given = model_budget(cfg, context=4096, weight_bits="experts=4.25,attention=16,default=16")
    b1, b2 = (_rows(b.table(8)) for b in (from_config, given))
    assert b1["moe_experts"]["weight_bytes"] == b2["moe_experts"]["weight_bytes"]
    # experts at 8 bits instead: only the experts' weights change, by 8 / 4.25
    fp8 = _rows(model_budget(cfg, context=4096, weight_bits="experts=8").table(8))
    assert fp8["moe_experts"]["weight_bytes"] == pytest.approx(b1["moe_experts"]["weight_bytes"] * 8 / 4.25)
    assert fp8["qkv_proj"]["weight_bytes"] == b1["qkv_proj"]["weight_bytes"]
    # attention weights at 16 bits: 24 layers x 2880 x (64 + 2*8) x 64 x 2 bytes
    assert b1["qkv_proj"]["weight_bytes"] == 24 * 2880 * (64 + 16) * 64 * 2
    assert model_budget(cfg, context=4096, weight_bits=4.5).weight_bits == 4.5


@pytest.mark.parametrize("bits", ["experts=abc", "feet=4", "experts=-1", "0"])
def test_bad_weight_bits_is_one_line(tmp_path, capsys, bits):
    cfg = tmp_path / "config.json"
    cfg.write_text(orjson.dumps(GPT_OSS).decode())
    assert main(["analyze", str(EXAMPLE_TRACE), "--model", str(cfg), "--weight-bits", bits]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bits" in err[0]


def _rows(table: pl.DataFrame) -> dict:
    return {r["component"]: r for r in table.iter_rows(named=True)}


# ------------------------------------------------------------------ devices


def test_new_devices_are_in_the_database_with_sources():
    db = load_archs()
    for key, bw, bf16 in (("b200", 8000, 2250), ("gb200", 8000, 2500), ("mi325x", 6000, 1307.0),
                          ("mi355x", 8000, 2516.0), ("rx-9070-xt", 640, 194.6)):
        a = db[key]
        assert a.peak_bw_gbs == bw and a.peak_tflops("bf16") == bf16 and a.sources, key
    # fp4x2 weights (MXFP4) read against the fp4 tensor rate on Blackwell
    assert db["b200"].peak_tflops("fp4x2") == 9000 and db["gb200"].peak_tflops("fp8_e4m3fn") == 5000


def test_unknown_device_says_so_and_its_template_makes_it_known(tmp_path, capsys):
    """A variant of the real H100 trace whose device record names a GPU the database lacks: the
    analysis says so and how to add it; the template, prefilled from the trace and completed, does."""
    real = load(FIXTURES / "torch" / "h100_hf_qwen1.5-0.5b-chat.json.gz")
    dev = {**real.meta.devices[0], "name": "NVIDIA RTX PRO 6000 Blackwell", "computeMajor": 12, "numSms": 188}
    trace = real.with_meta(devices=(dev,))
    doc = build(attribute(trace)).to_dict()
    assert doc["device"]["arch"] is None
    note = next(n for n in doc["notes"] if "not in the database" in n)
    assert "RTX PRO 6000" in note and "attrib archs --template" in note and "--arch-file" in note
    text = template(dev)
    assert 'arch = "sm_120"' in text and "num_sms_reported = 188" in text and 'vendor = "nvidia"' in text
    filled = (text
              .replace("<peak DRAM GB/s: transfer rate x bus bytes>", "4000")
              .replace('"<datasheet URL>"', '"test"').replace("<dense matrix TFLOP/s>", "300").replace("<TFLOP/s>", "40"))
    entry = tmp_path / "rtx.toml"
    entry.write_text(filled)
    known = build(attribute(trace), arch_file=entry).to_dict()
    assert known["device"]["name"] == "NVIDIA RTX PRO 6000 Blackwell" and known["device"]["peak_bw_gbs"] == 4000
    assert main(["archs", "--template", "--trace", str(FIXTURES / "torch" / "mi300_hf_qwen1.5-0.5b-chat.json.gz")]) == 0
    assert "num_sms_reported = 304" in capsys.readouterr().out


# ------------------------------------------------------------------ our H200 captures (tests/fixtures/captured)
CAPTURED = FIXTURES / "captured"


@pytest.fixture(scope="module")
def compiled():
    return analyze(CAPTURED / "compile_decode.pt.trace.json.gz", phase="decode").to_dict()


def test_compiled_decode_gb_per_token_matches_the_hand_count(compiled):
    """torch.compile'd L4 decode (README of captured/: hidden 2048, 4 layers, 16 q / 8 KV heads x 128,
    FFN 5632, vocab 32000, batch 8, StaticCache of 526 slots). Per step, by hand:
      weights 100,663,296 (attention) + 276,824,064 (MLP) + 36,864 (norms) + 131,072,000 (lm_head)
              + 8 x 2048 x 2 (embedding rows gathered) = 508,628,992
      K and V of the static cache: 4 layers x 2 x [8, 8, 526, 128] x 2 B = 68,943,872 (one layer's K or
      V: 8,617,984). The copies the compiled graph makes, counted from the trace's kernels below: one
      GQA expansion kernel per layer for K and one for V ([8,8,526,128] in, [8,16,526,128] out: reads
      it once, writes it twice over), then cuDNN SDPA reads the expanded K and V ([8,16,526,128] each).
      68,943,872 x (1 read + 2 written + 2 read by SDPA) = 344,719,360
    = 853,348,352 B / 8 tokens = 0.10667 GB/token as run (0.0722 by the README's K/V-read-once minimal
    figure). Before Inductor kernels were priced at what they touch, each embedding-fused norm was
    charged the whole 131 MB table: 0.18 GB/token."""
    a = attribute(load(CAPTURED / "compile_decode.pt.trace.json.gz"))
    k = as_text(a.kernels).filter((pl.col("phase") == "decode") & (pl.col("evidence") != "compile"))
    k = k.join(a.trace.ops.select(pl.col("id").alias("op_id"), "input_dims"), on="op_id")
    steps = k["step"].n_unique()
    expand = k.filter(pl.col("op").str.starts_with("triton_")
                      & pl.col("input_dims").str.starts_with("[[8, 8, 526, 128], [8, 16, 526, 128]"))
    sdpa = k.filter(pl.col("op") == "aten::_cudnn_attention_forward")
    assert expand.height == 2 * 4 * steps and sdpa.height == 4 * steps
    assert sdpa["input_dims"].str.contains(r"^\[\[8, 16, 1, 128\], \[8, 16, 526, 128\], \[8, 16, 526, 128\]").all()
    kv = 4 * 2 * 8 * 8 * 526 * 128 * 2
    passes = expand.height / steps / 8 * (1 + 2) + 2    # per layer K and V: read + write x2; SDPA reads x2
    assert kv == 68_943_872 and passes == 5
    ph = compiled["phases"][0]
    hand = (508_628_992 + kv * passes) / 8 / 1e9
    assert ph["gb_per_token"] == pytest.approx(hand, rel=0.10)
    assert ph["excluded_steps"] and ph["steps"] == 5          # the compiling call is not a decode step
    rows = {c["component"]: c for c in ph["components"]}
    assert rows["attention"]["bytes"] == pytest.approx(kv * passes, rel=0.01)
    assert rows["norm"]["bytes"] < 2e6                        # rows gathered, not the 131 MB table
    assert rows["norm"]["estimated_share"] == 1.0 and rows["mlp_gate_up"]["estimated_share"] == 0.0   # Inductor vs aten::mm


def test_no_component_above_the_peak_counts_in_gb_per_token(compiled):
    ph = compiled["phases"][0]
    peak = compiled["device"]["peak_bw_gbs"]
    assert not ph["excluded_components"]
    counted = [c for c in ph["components"] if c["bytes"] is not None and not c["inconsistent"]]
    assert ph["bytes_per_step"] == pytest.approx(sum(c["bytes"] for c in counted))
    for c in counted:
        assert c["achieved_gbs"] is None or c["achieved_gbs"] <= peak, c


def test_tensor_parallel_decode_prices_its_all_reduces():
    """TP=2 L4 decode, rank 0 (README of captured/): 8 NCCL all-reduces of [8, 1, 2048] bf16 per step
    were unpriced (61% of kernel time: no GB/token). Bus bytes (nccl-tests): 32,768 B x 2(n-1)/n = 32,768
    each. GB/token then follows the rank's weights and KV, as run (HF DynamicCache re-copies K/V):
    (319,885,312 + 3 x 65,536 x 515.5) / 8 = 0.052655 GB/token."""
    doc = analyze(CAPTURED / "tp2_decode_rank0.pt.trace.json.gz", phase="decode").to_dict()
    ph = doc["phases"][0]
    comm = {c["component"]: c for c in ph["components"]}["communication"]
    assert comm["bytes"] == 8 * 8 * 2048 * 2 * (2 * (2 - 1) / 2)
    assert ph["gb_per_token"] == pytest.approx((319_885_312 + 3 * 65_536 * 515.5) / 8 / 1e9, rel=0.10)
    assert ph["bytes_known_share"] > 0.95 and doc["coverage"]["bytes_known_share"] == ph["bytes_known_share"]
