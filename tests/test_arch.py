"""Arch database and detection, on the deviceProperties / agent records / kernel names of real traces."""

from __future__ import annotations

import gzip
import sqlite3
from pathlib import Path

import orjson
import pytest

from attrib.roofline.arch import Arch, arch_table, detect, load_archs, override
from attrib.errors import TraceError

H200_MOE = "torch/h200_qwen3moe_eager_prefill_decode.json.gz"
H200_DENSE = "torch/h200_dense_prefill_cudagraph_decode.json.gz"
H100_HF = "torch/h100_hf_qwen1.5-0.5b-chat.json.gz"
MI300_HF = "torch/mi300_hf_qwen1.5-0.5b-chat.json.gz"
MI300_CAPTURE = "torch/mi300_vllm_prefilldecode_piecewise/graph_capture_rank_0.pt.trace.json.gz"


def _doc(fixtures: Path, rel: str) -> dict:
    with gzip.open(fixtures / rel) as f:
        return orjson.loads(f.read())


def _props(fixtures: Path, rel: str) -> tuple[dict, ...]:
    return tuple(_doc(fixtures, rel)["deviceProperties"])


# ------------------------------------------------------------------ database


def test_every_entry_loads_with_consistent_fields():
    archs = load_archs()
    assert set(archs) == {"radeon-8060s", "r9700", "rx-9070-xt", "rx-7900-xtx", "mi300x", "mi325x",
                          "mi355x", "mi350x", "h100-sxm", "h200-sxm", "b200", "gb200"}
    fields = set(Arch.__struct_fields__)
    for a in archs.values():
        assert a.peak_bw_gbs > 0 and a.sources, a.key
        assert a.sustained_bw_gbs is not None or "peak" in (a.sustained_source or ""), a.key
        for f in a.derived + a.unverified:       # "matrix_tflops.bf16" names a field and a dtype in it
            head, _, sub = f.partition(".")
            assert head in fields, (a.key, f)
            if sub:
                assert sub in getattr(a, head), (a.key, f)
    # one default entry per arch
    for gfx in {a.arch for a in archs.values()}:
        assert sum(a.default for a in archs.values() if a.arch == gfx) == 1, gfx


def test_bandwidth_basis_and_peaks():
    archs = load_archs()
    assert archs["radeon-8060s"].bandwidth() == (212.0, "sustained")
    assert archs["r9700"].bandwidth() == (611.8, "sustained")
    assert archs["h200-sxm"].bandwidth() == (4272.0, "sustained")   # copy, measured (tests/fixtures/calibrate)
    assert archs["h100-sxm"].bandwidth() == (3350.0, "peak")        # no sustained figure known
    assert archs["radeon-8060s"].peak_tflops("fp8") is None         # no FP8 WMMA on gfx11
    assert archs["r9700"].peak_tflops("fp8_e4m3fn") == 382.7        # cost-model dtype names map to table keys
    assert archs["h100-sxm"].peak_tflops("fp32") == 66.9            # matrix table lacks fp32: vector fallback
    assert archs["mi350x"].peak_tflops("bf16") == pytest.approx(2516.0 * 2200 / 2400, abs=0.1)
    assert archs["mi300x"].sustained_bw_gbs == 4300.0


def test_arch_file_overrides_and_adds(tmp_path):
    extra = tmp_path / "mine.toml"
    extra.write_text(
        '[h200-sxm]\narch = "sm_90"\nname = "H200 measured"\nvendor = "nvidia"\nwave_size = 32\n'
        'compute_units = 132\nnum_sms_reported = 132\ncompute_major = 9\ncompute_minor = 0\n'
        'peak_bw_gbs = 4800.0\nsustained_bw_gbs = 4100.0\nsustained_source = "our stream run"\n'
        'match_names = ["H200"]\n'
        '[radeon-8050s]\narch = "gfx1151"\nname = "AMD Radeon 8050S"\nvendor = "amd"\nwave_size = 32\n'
        'compute_units = 32\nnum_sms_reported = 16\ncompute_major = 11\ncompute_minor = 5\npeak_bw_gbs = 256.0\n')
    archs = load_archs(extra)
    assert archs["h200-sxm"].bandwidth() == (4100.0, "sustained")
    assert archs["radeon-8050s"].compute_units == 32 and len(archs) == 13
    got, how = detect(({"name": "", "computeMajor": 11, "computeMinor": 5, "warpSize": 32, "numSms": 16},),
                      "amd", extra=extra)
    assert (got.key, how) == ("radeon-8050s", "deviceProperties")


def test_bad_arch_file_is_one_line_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[x]\narch = "gfx1151"\n')
    with pytest.raises(TraceError, match=r"bad\.toml: arch entry \[x\] lacks name"):
        load_archs(bad)
    bad.write_text("[x\n")
    with pytest.raises(TraceError, match="not valid TOML"):
        load_archs(bad)


def test_override_and_table():
    assert override("gfx942").key == "mi300x"
    assert override("gfx950").key == "mi355x"
    assert override("MI350X").key == "mi350x"
    assert override("R9700").arch == "gfx1201"
    assert override("h200-sxm").peak_bw_gbs == 4800.0
    with pytest.raises(KeyError, match="unknown arch 'gfx9999'"):
        override("gfx9999")
    table = arch_table()
    assert table.height == 12
    assert table.filter(table["key"] == "mi300x")["bf16_tflops"].item() == 1307.0


# ------------------------------------------------------------------ detection on real traces


@pytest.mark.parametrize("rel", [H200_MOE, H200_DENSE])
def test_h200_fixtures(fixtures, rel):
    props = _props(fixtures, rel)
    assert props[0]["name"] == "NVIDIA H200"
    got, how = detect(props, "nvidia")
    assert (got.key, how) == ("h200-sxm", "deviceProperties")


def test_h200_without_name_uses_memory(fixtures):
    # name dropped: 9.0 / warp 32 / 132 SMs fit H100 and H200; 150,109,880,320 B = 139.8 GiB -> 141 GB part
    props = tuple({**p, "name": ""} for p in _props(fixtures, H200_MOE))
    assert detect(props, None)[0].key == "h200-sxm"
    # and the H100 trace's 85,018,279,936 B = 79.2 GiB -> the 80 GB part
    props = tuple({**p, "name": ""} for p in _props(fixtures, H100_HF))
    assert detect(props, "nvidia")[0].key == "h100-sxm"


def test_h100_fixture(fixtures):
    got, how = detect(_props(fixtures, H100_HF), "nvidia")
    assert (got.key, how) == ("h100-sxm", "deviceProperties")


def test_mi300_named(fixtures):
    props = _props(fixtures, MI300_HF)
    assert props[0]["name"] == "AMD Instinct MI300X VF"
    got, how = detect(props, "amd")
    assert (got.key, got.arch, how) == ("mi300x", "gfx942", "deviceProperties")


def test_mi300_empty_name_capture_trace(fixtures):
    props = _props(fixtures, MI300_CAPTURE)
    assert len(props) == 8 and all(p["name"] == "" for p in props)
    assert (props[0]["computeMajor"], props[0]["computeMinor"], props[0]["numSms"], props[0]["warpSize"]) == (9, 4, 304, 64)
    got, how = detect(props, "amd")
    assert (got.key, how) == ("mi300x", "deviceProperties")


def test_vendor_mismatch_finds_nothing(fixtures):
    assert detect(_props(fixtures, MI300_HF), "nvidia") == (None, "unknown")


def test_kernel_names_tensile_isa(fixtures):
    doc = _doc(fixtures, MI300_HF)
    names = [e["name"] for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    tensile = [n for n in names if n.startswith("Cijk_")]
    assert tensile and all("_ISA942_" in n for n in tensile)
    got, how = detect((), "amd", names)
    assert (got.key, how) == ("mi300x", "kernel_names")


def test_kernel_names_rdna_isa():
    # name shapes from rocprofv3 / Tensile dumps on RDNA (knowledge file 1.2 [S26])
    got, how = detect((), None, ["Cijk_Ailk_Bljk_HHS_BH_MT128x128x16_MI16x16x16x1_SN_ISA1151_WS32_WG32_4_1"])
    assert (got.arch, how) == ("gfx1151", "kernel_names")
    got, _ = detect((), None, ["Cijk_Ailk_Bljk_F8F8S_BH_UserArgs_MT16x16x32_ISA1201_WS32_WG16_16_1"])
    assert got.key == "r9700"
    assert detect((), None, ["void vectorized_elementwise_kernel<4>"]) == (None, "unknown")


def test_agent_info_mi350x(fixtures):
    doc = _doc(fixtures, "rocprof/gfx950_rocprofv3_json/908_results.json.gz")
    agents = tuple(doc["rocprofiler-sdk-tool"][0]["agents"])
    assert agents[0]["name"].startswith("AMD EPYC")                # CPU agents come first and are skipped
    got, how = detect(agents, "amd")
    assert (got.key, got.arch, how) == ("mi350x", "gfx950", "agent_info")
    gpu = next(a for a in agents if a["name"] == "gfx950")
    assert gpu["max_engine_clk_fcompute"] == got.boost_mhz == 2200 and gpu["lds_size_in_kb"] == got.lds_kib


def test_agent_info_r9700_rocpd(fixtures, tmp_path):
    db = tmp_path / "r.db"
    with gzip.open(fixtures / "rocprof/gfx1201_llamacpp_rocpd_rocm7.2/32432_results.db.gz") as f:
        db.write_bytes(f.read())
    con = sqlite3.connect(db)
    try:
        agents = tuple(orjson.loads(x) for (x,) in con.execute("SELECT extdata FROM rocpd_info_agent"))
    finally:
        con.close()
    got, how = detect(agents, "amd")
    assert (got.key, how) == ("r9700", "agent_info")
    gpu = next(a for a in agents if a["name"] == "gfx1201")
    assert (gpu["cu_count"], gpu["wave_front_size"]) == (got.compute_units, got.wave_size) == (64, 32)


def test_rdna_device_properties_documented_values():
    # What ROCm torch is documented to report (WGP count as numSms); unconfirmed by a real trace.
    strix = {"name": "AMD Radeon Graphics", "computeMajor": 11, "computeMinor": 5, "warpSize": 32, "numSms": 20,
             "totalGlobalMem": 68_719_476_736}
    assert detect((strix,), "amd")[0].key == "radeon-8060s"
    r9700 = {"name": "", "computeMajor": 12, "computeMinor": 0, "warpSize": 32, "numSms": 32,
             "totalGlobalMem": 32_061_259_776}
    assert detect((r9700,), "amd")[0].key == "r9700"
    xt = {**r9700, "totalGlobalMem": 17_095_983_104}
    assert detect((xt,), "amd")[0].key == "rx-9070-xt"
    named = {**xt, "name": "AMD Radeon AI PRO R9700"}                 # a name match wins over memory
    assert detect((named,), "amd")[0].key == "r9700"


def test_bad_field_values_are_named(tmp_path):
    base = ('[x]\narch = "gfx1151"\nname = "x"\nvendor = "amd"\nwave_size = 32\ncompute_units = 40\n'
            'num_sms_reported = 20\ncompute_major = 11\ncompute_minor = 5\n')
    bad = tmp_path / "bad.toml"
    bad.write_text(base + 'peak_bw_gbs = "fast"\n')
    with pytest.raises(TraceError, match="peak_bw_gbs must be a positive number"):
        load_archs(bad)
    bad.write_text(base + 'peak_bw_gbs = 1.0\nmatch_names = ["(unclosed"]\n')
    with pytest.raises(TraceError, match="match_names"):
        load_archs(bad)
    bad.write_text(base + 'peak_bw_gbs = 1.0\n[x.matrix_tflops]\nbf16 = "many"\n')
    with pytest.raises(TraceError, match="matrix_tflops must be a table of numbers"):
        load_archs(bad)
    assert len({a for a in load_archs().values()}) == 12         # entries hash by key
