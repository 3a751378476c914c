"""Costs and rooflines on the stacks users run (issue #10, cost half): Inductor kernels priced at what
they touch, partly priced rows shown as lower bounds, impossible rows kept out of GB/token, the
prefill ceiling held to its FLOP floor. Real traces; golden figures derived by hand in comments."""

from __future__ import annotations

import polars as pl
import pytest

from attrib.app import analyze_path, resolve_arch
from attrib.pipeline import attribute
from attrib.roofline.arch import load_archs
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
    return analyze_path(VLLM / "graph_execution.json.gz", capture=VLLM / "graph_capture_rank_0.pt.trace.json.gz")


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
    model = vllm_capture.kernels.filter(pl.col("name").str.starts_with("triton_"))["cost_model"].unique().to_list()
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
    base = analyze_path(EXAMPLE_TRACE)
    slow = analyze_path(EXAMPLE_TRACE, arch_file=entry)
    b, s = (next(p for p in d["phases"] if p["phase"] == "decode") for d in (base, slow))
    rows = {c["component"]: c for c in s["components"]}
    assert rows["lm_head"]["inconsistent"] and "lm_head" in s["excluded_components"]
    counted = [c for c in s["components"] if c["bytes"] is not None and not c["inconsistent"]]
    assert s["bytes_per_step"] == pytest.approx(sum(c["bytes"] for c in counted))
    assert s["bytes_per_step"] < b["bytes_per_step"] - 0.9 * rows["lm_head"]["bytes"]
    assert any("lm_head" in n and "left out of GB/token" in n for n in slow["notes"])
    assert not base["phases"][1]["excluded_components"]


def test_prefill_ceiling_is_held_to_the_flop_floor():
    """Dense H200 prefill (hidden 4096, 8 layers, 32 q / 8 KV heads x 128, FFN 14336, batch 8 x 1024
    tokens): its GEMMs alone need 2*T*(4096*6144 + 4096*4096 + 4096*28672 + 14336*4096)*8 = 28.6 TFLOP,
    29 ms at H200's 989.4 bf16 TFLOP/s, so no more than 8192 / 0.0289 = 283k tok/s; the step's bytes
    alone (about 30 GB at 4.8 TB/s) would allow over 1.2M."""
    doc = analyze_path(DENSE)
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
    doc = analyze_path(EXAMPLE_TRACE, arch=resolve_arch("gfx1151")[0], arch_from="override")
    ph = next(p for p in doc["phases"] if p["phase"] == "decode")
    over = sorted(c["component"] for c in ph["components"] if c["inconsistent"])
    assert "lm_head" in over and not ph["excluded_components"]
    assert all("bytes model" not in c["inconsistent"] for c in ph["components"] if c["inconsistent"])
    note = next(n for n in doc["notes"] if n.startswith("what-if: ") and "out of reach" in n)
    assert all(name in note for name in over)
    assert any("projection" in n for n in doc["notes"])
