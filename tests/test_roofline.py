"""Roofline over per-kernel / per-component rows and per-phase ceilings, with hand-computed figures.

Bytes/FLOPs are those the cost model gives for real fixture shapes (see test_cost.py); arch figures
come from attrib/data/archs.toml (H200: sustained 4272 of 4800 GB/s, measured, bf16 989.4 TFLOP/s;
H100: peak 3350 GB/s, no sustained figure; Radeon 8060S: sustained 212 of 256 GB/s, no FP8 matrix
unit).
"""

from __future__ import annotations

import polars as pl
import pytest

from attrib.roofline.arch import override
from attrib.roofline.model import ADDED, achieved_gbs, kernel_roofline, phase_ceiling

H200, H100, STRIX = override("h200-sxm"), override("h100-sxm"), override("gfx1151")
Q_PROJ = {"bytes": 16_826_368.0, "flops": 67_108_864.0, "dtype": "bf16"}     # decode q_proj, x[4,1,2048]
QKV_PREFILL = {"bytes": 218_103_808.0, "flops": 412_316_860_416.0, "dtype": "bf16"}  # [8192,4096]x[4096,6144]


def _one(arch, ms, **row) -> dict:
    out = kernel_roofline(pl.DataFrame([{"ms": ms, **row}]), arch)
    assert set(ADDED) <= set(out.columns)
    return out.row(0, named=True)


def test_memory_bound_decode_gemv_on_h200_uses_its_sustained_bandwidth():
    r = _one(H200, 0.01, **Q_PROJ)
    assert r["achieved_gbs"] == pytest.approx(1682.6368)          # 16,826,368 B / 10 us
    assert r["achieved_tflops"] == pytest.approx(6.7108864)
    assert r["intensity"] == pytest.approx(67_108_864 / 16_826_368)
    # memory term 16,826,368 / 4272e9 s = 0.0039387566 ms >> compute 67,108,864 / 989.4e12 s = 6.8e-5 ms
    assert r["bound"] == "memory" and r["bw_basis"] == "sustained"
    assert r["roofline_ms"] == pytest.approx(0.0039387566)
    assert r["gap_ms"] == pytest.approx(0.01 - 0.0039387566)
    assert r["inconsistent"] is None


def test_a_device_without_a_sustained_figure_uses_its_peak():
    r = _one(H100, 0.01, **Q_PROJ)
    # 16,826,368 / 3350e9 s = 0.0050227964 ms
    assert r["bw_basis"] == "peak" and r["roofline_ms"] == pytest.approx(0.0050227964)
    assert phase_ceiling(2_620_519_456, 4, H100)[1] == pytest.approx(4 / (2_620_519_456 / 3.35e12))


def test_above_sustained_below_peak_is_a_result():
    """An lm_head GEMV at 4389.7 GB/s (the H200 sampler capture's decode row): above the 4272 GB/s
    sustained roof, under the 4800 peak: kept, a negative gap (no time to recover), not nulled."""
    r = _one(H200, 622_637_824 / 4389.7e6, bytes=622_637_824.0, flops=622_329_856.0, dtype="bf16")
    assert r["achieved_gbs"] == pytest.approx(4389.7) and r["inconsistent"] is None
    assert r["gap_ms"] < 0 and r["roofline_ms"] == pytest.approx(622_637_824 / 4272e6)


def test_sustained_bandwidth_on_strix_halo():
    r = _one(STRIX, 0.1, **Q_PROJ)
    assert r["achieved_gbs"] == pytest.approx(168.26368)
    # 16,826,368 / 212e9 s = 0.0793696604 ms
    assert r["roofline_ms"] == pytest.approx(0.0793696604) and r["bw_basis"] == "sustained"
    assert r["gap_ms"] == pytest.approx(0.1 - 0.0793696604)


def test_above_peak_is_nulled_with_a_reason():
    # the same GEMV in 10 us on a 256 GB/s APU would be 1682.6 GB/s: impossible from DRAM
    r = _one(STRIX, 0.01, **Q_PROJ)
    assert r["achieved_gbs"] is None and r["achieved_tflops"] is None and r["gap_ms"] is None
    assert "1682.6 GB/s exceeds the 256.0 GB/s peak" in r["inconsistent"]
    assert r["roofline_ms"] == pytest.approx(0.0793696604)          # the model's ideal stays


def test_compute_bound_prefill_gemm():
    # 412,316,860,416 FLOP / 989.4e12 = 0.416734 ms vs 218,103,808 B / 4800e9 = 0.045438 ms
    r = _one(H200, 0.5, **QKV_PREFILL)
    assert r["bound"] == "compute"
    assert r["roofline_ms"] == pytest.approx(412_316_860_416 / 989.4e9)
    assert r["achieved_tflops"] == pytest.approx(824.633720832)
    # faster than the bf16 peak -> FLOP model flagged
    fast = _one(H200, 0.4, **QKV_PREFILL)
    assert fast["achieved_tflops"] is None and "TFLOP/s exceeds the 989.4 peak of bf16" in fast["inconsistent"]


def test_missing_peak_missing_bytes_missing_time():
    # FP8 GEMM on gfx1151 (no FP8 WMMA): compute term left out, roofline from bytes only
    r = _one(STRIX, 1.0, bytes=212e6, flops=1e12, dtype="fp8_e4m3fn")
    assert (r["roofline_ms"], r["bound"]) == (pytest.approx(1.0), "memory")
    # unknown bytes -> no roofline, no gap, no bound
    r = _one(H200, 1.0, bytes=None, flops=1e9, dtype="bf16")
    assert (r["roofline_ms"], r["gap_ms"], r["bound"], r["achieved_gbs"]) == (None, None, None, None)
    # no time -> no achieved figure, no gap
    r = _one(H200, 0.0, **Q_PROJ)
    assert (r["achieved_gbs"], r["gap_ms"]) == (None, None)


def test_vector_unit_column_and_no_arch():
    # fp32 elementwise on the vector unit of the 8060S (29.7 TFLOP/s): 29.7e9 FLOP -> 1 ms compute, 2.12e6 B -> 0.01 ms
    r = _one(STRIX, 2.0, bytes=2.12e6, flops=29.7e9, dtype="fp32", unit="vector")
    assert (r["bound"], r["roofline_ms"]) == ("compute", pytest.approx(1.0))
    bare = _one(None, 0.01, **Q_PROJ)
    assert bare["achieved_gbs"] == pytest.approx(1682.6368)
    assert (bare["roofline_ms"], bare["bound"], bare["bw_basis"], bare["inconsistent"]) == (None, None, None, None)


def test_per_component_rows_keep_their_columns():
    df = pl.DataFrame({"component": ["qkv_proj", "moe_experts"], "ms": [0.2, 0.5],
                       "bytes": [168_493_056.0, 1_654_784_000.0], "flops": [671_088_640.0, 2_415_919_104.0],
                       "dtype": ["bf16", "bf16"]})
    out = kernel_roofline(df, H200)
    assert out["component"].to_list() == ["qkv_proj", "moe_experts"]
    assert out["roofline_ms"].to_list() == pytest.approx([168_493_056 / 4.272e9, 1_654_784_000 / 4.272e9])
    assert out["achieved_gbs"].to_list() == pytest.approx([842.46528, 3309.568])


def test_phase_ceiling():
    # Qwen3-MoE fixture budget: 2,620,519,456 B per decode step, 4 tokens -> 0.655129864 GB/token
    gb, ceil = phase_ceiling(2_620_519_456, 4, H200)
    assert gb == pytest.approx(0.655129864)
    assert ceil == pytest.approx(4 / (2_620_519_456 / 4.272e12))    # 6520.84 tok/s at the sustained 4272 GB/s
    assert phase_ceiling(2_620_519_456, 4, STRIX)[1] == pytest.approx(323.59996, rel=1e-6)   # at 212 GB/s
    # dense fixture: 5,097,812,032 B for 8 tokens
    assert phase_ceiling(5_097_812_032, 8, STRIX)[1] == pytest.approx(8 * 212e9 / 5_097_812_032)
    assert phase_ceiling(1e9, 4, None) == (0.25, None)
    assert phase_ceiling(None, 4, H200) == (None, None)
    assert phase_ceiling(1e9, 0, H200) == (None, None)


def test_rows_without_dtype_get_memory_roofline_only():
    out = kernel_roofline(pl.DataFrame({"ms": [1.0], "bytes": [4.272e9], "flops": [1e12]}), H200)
    assert out.row(0, named=True)["roofline_ms"] == pytest.approx(1.0)        # 4.272 GB at 4272 GB/s
    assert out.row(0, named=True)["bound"] == "memory"


def test_achieved_gbs_of_a_kernel_set_counts_only_priced_time():
    """What the GEMM rules read: bytes over the time of the kernels whose bytes are known."""
    k = pl.DataFrame({"dur_ns": [10_000, 30_000, 5_000], "bytes": [Q_PROJ["bytes"], 3 * Q_PROJ["bytes"], None],
                      "flops": [Q_PROJ["flops"], 3 * Q_PROJ["flops"], None]})
    # 4 x 16,826,368 B over 40 us (the unpriced 5 us kernel left out) = 1682.6368 GB/s
    assert achieved_gbs(k) == pytest.approx(1682.6368)
    assert achieved_gbs(k, peak_bw_gbs=4800.0) == pytest.approx(1682.6368)
    assert achieved_gbs(k, peak_bw_gbs=1000.0) is None       # above the device's peak: not a result
    assert achieved_gbs(k.filter(pl.col("bytes").is_null())) is None
    assert achieved_gbs(k.clear()) is None


def test_the_stored_parsed_database_is_the_toml_parsed():
    """attrib/data/archs.json is archs.toml parsed (read at every start in place of the TOML
    parser): after a change of the TOML, `python -m attrib.roofline.arch` writes it again."""
    from attrib.roofline.arch import PARSED, SOURCE, _parse, load_archs, parsed_text

    assert PARSED.read_text(encoding="utf-8") == parsed_text(), \
        "attrib/data/archs.json is stale: run python -m attrib.roofline.arch"
    from_toml = _parse(SOURCE.read_text(encoding="utf-8"), "attrib/data/archs.toml")
    assert load_archs() == from_toml and "h200-sxm" in from_toml
