"""rocprof readers on the real fixtures, and bad variants derived from them in tmp_path."""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import shutil
import sqlite3

import polars as pl
import pytest

import collectors
from attrib.errors import TraceError

ROCPD = "rocprof/gfx1201_llamacpp_rocpd_rocm7.2/32432_results.db.gz"
CSV_DIR = "rocprof/gfx1151_llamacpp_rocprofv3_csv"
LEGACY = "rocprof/gfx1201_llamacpp_legacy_rocprof_v1"
JSON = "rocprof/gfx950_rocprofv3_json/908_results.json.gz"


def _one_line_error(path, match: str) -> str:
    with pytest.raises(TraceError) as info:
        collectors.load(path)
    msg = str(info.value)
    assert "\n" not in msg and match in msg, msg
    return msg


@pytest.mark.parametrize("rel, fmt", [
    (ROCPD, "rocpd"), ("rocprof/gfx1201_llamacpp_rocpd_rocm7.2", "rocpd"),
    (f"{CSV_DIR}/decode_kernel_trace.csv", "rocprofv3-csv"),
    (f"{CSV_DIR}/decode_hip_api_trace.csv", "rocprofv3-csv"), (CSV_DIR, "rocprofv3-csv"),
    (JSON, "rocprofv3-json"), (f"{LEGACY}/results.csv.gz", "rocprof-v1"),
    (f"{LEGACY}/results.json.gz", "rocprof-v1"), (f"{LEGACY}/results.db.gz", "rocprof-v1"),
    (LEGACY, "rocprof-v1"), ("torch/mi300_hf_qwen1.5-0.5b-chat.json.gz", "torch-json"),
    ("torch/h200_qwen3moe_eager_prefill_decode.json.gz", "torch-json"),
])
def test_sniff(fixtures, rel, fmt):
    assert collectors.sniff(fixtures / rel) == fmt


def test_rocpd_gfx1201(fixtures, tmp_path):
    t = collectors.load(fixtures / ROCPD)
    k = t.kernels
    assert t.meta.format == "rocpd" and t.meta.vendor == "amd"
    assert k.height == 5687 and t.meta.events == 5687
    db = tmp_path / "copy.db"
    db.write_bytes(gzip.decompress((fixtures / ROCPD).read_bytes()))
    con = sqlite3.connect(db)
    total, ids = con.execute("SELECT SUM(\"end\" - start), COUNT(DISTINCT dispatch_id) "
                             "FROM rocpd_kernel_dispatch").fetchone()
    first = con.execute("SELECT grid_size_x, workgroup_size_x FROM rocpd_kernel_dispatch "
                        "WHERE dispatch_id = 1").fetchone()
    con.close()
    assert k["dur_ns"].sum() == total == 82_887_453
    assert k["id"].n_unique() == ids == 5687
    gpu = [d for d in t.meta.devices if d["name"] == "gfx1201"]
    assert gpu and gpu[0]["product_name"] == "AMD Radeon AI PRO R9700"
    assert gpu[0]["cu_count"] == 64 and gpu[0]["wave_front_size"] == 32
    assert gpu[0]["simd_per_cu"] == 2 and gpu[0]["max_engine_clk_fcompute"] == 2350
    assert gpu[0]["gfx_target_version"] == 120001
    row = k.filter(pl.col("id") == 1).row(0, named=True)
    assert row["grid"] == [math.ceil(first[0] / first[1]), 1, 1] and row["block"] == [first[1], 1, 1]
    assert set(k["device"].unique()) == {1}  # the agent that ran everything (logical index 1)
    assert k["correlation"].n_unique() == 5687 and not k["graph"].any()
    assert t.meta.top["command"].startswith("./build_rocm72/bin/llama-bench")


def _csv_rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_csv_gfx1151_quoted_graph_shared_correlation(fixtures):
    t = collectors.load(fixtures / CSV_DIR / "decode_kernel_trace.csv")
    rows = _csv_rows(fixtures / CSV_DIR / "decode_kernel_trace.csv")
    k = t.kernels
    assert k.height == len(rows) == 144
    assert sorted(k["id"].to_list()) == sorted(int(r["Dispatch_Id"]) for r in rows)
    assert k["id"].n_unique() == 144 and k["correlation"].n_unique() == 52
    assert k["dur_ns"].sum() == sum(int(r["End_Timestamp"]) - int(r["Start_Timestamp"]) for r in rows)
    shared = k.filter(pl.len().over("correlation") > 1)
    assert k["graph"].sum() == shared.height == 96
    first = rows[0]
    row = k.filter(pl.col("id") == int(first["Dispatch_Id"])).row(0, named=True)
    assert row["grid"][0] == math.ceil(int(first["Grid_Size_X"]) / int(first["Workgroup_Size_X"]))
    assert row["device"] == 1 and row["stream"] == 2
    # the sibling hip_api_trace (same prefix) gives the launches
    assert t.launches.height == len(_csv_rows(fixtures / CSV_DIR / "decode_hip_api_trace.csv"))
    assert "hipLaunchKernel" in set(t.launches["name"])
    linked = k.filter(pl.col("launch_id").is_not_null())
    assert linked.height > 0
    joined = linked.join(t.launches.select(pl.col("id").alias("launch_id"), "correlation"),
                         on="launch_id", suffix="_l")
    assert (joined["correlation"] == joined["correlation_l"]).all()


def test_csv_directory_reads_one_run_and_says_what_it_ignored(fixtures):
    t = collectors.load(fixtures / CSV_DIR)
    assert t.kernels.height == 144 and t.meta.devices == ()
    notes = " ".join(t.meta.warnings)
    assert "prefill_hip_api_trace.csv" in notes and "agent_info" in notes


@pytest.mark.parametrize("name", ["results.csv.gz", "results.db.gz", "results.json.gz"])
def test_legacy_v1(fixtures, name):
    t = collectors.load(fixtures / LEGACY / name)
    k = t.kernels
    stats = pl.read_csv(fixtures / LEGACY / "results.stats.csv")  # rocprof's own per-kernel summary
    calls = dict(zip(stats["Name"].str.replace(r" \[clone \.kd\]$|\.kd$", ""), stats["Calls"]))
    assert t.meta.format == "rocprof-v1" and k.height == stats["Calls"].sum()
    assert k["dur_ns"].sum() == stats["TotalDurationNs"].sum()
    assert k["id"].n_unique() == k.height
    assert not k["name"].str.contains(r"\.kd").any()
    mmq = [n for n in calls if n.startswith("void mul_mat_q<")]
    assert k.filter(pl.col("name").str.starts_with("void mul_mat_q<")).height == sum(calls[n] for n in mmq) > 0
    gpu = t.meta.devices[0]
    assert (gpu["name"], gpu["product_name"], gpu["cu_count"]) == ("gfx1201", "AMD Radeon AI PRO R9700", 64)
    assert gpu["wave_front_size"] == 32


def test_legacy_json_alone_takes_devices_from_other_data(fixtures, tmp_path):
    p = tmp_path / "results.json.gz"
    shutil.copy(fixtures / LEGACY / "results.json.gz", p)
    t = collectors.load(p)
    assert t.kernels.height == 1963
    assert t.meta.devices[0]["name"] == "gfx1201" and t.meta.devices[0]["cu_count"] == 64


def test_json_gfx950(fixtures):
    doc = json.loads(gzip.decompress((fixtures / JSON).read_bytes()))
    proc = doc["rocprofiler-sdk-tool"][0]
    recs = proc["buffer_records"]["kernel_dispatch"]
    t = collectors.load(fixtures / JSON)
    k = t.kernels
    assert k.height == len(recs) == 43915
    assert k["dur_ns"].sum() == sum(r["end_timestamp"] - r["start_timestamp"] for r in recs)
    assert k["id"].n_unique() == 43915
    r = recs[100]
    row = k.filter(pl.col("id") == r["dispatch_info"]["dispatch_id"]).row(0, named=True)
    wg, grid = r["dispatch_info"]["workgroup_size"], r["dispatch_info"]["grid_size"]
    assert row["grid"] == [math.ceil(grid[a] / wg[a]) for a in "xyz"]
    assert row["block"] == [wg[a] for a in "xyz"]
    sym = proc["kernel_symbols"][r["dispatch_info"]["kernel_id"]]
    assert row["name"] == sym["formatted_kernel_name"]
    gpus = t.meta.devices
    assert len(gpus) == 8 and {d["name"] for d in gpus} == {"gfx950"}
    assert gpus[0]["product_name"] == "AMD Instinct MI350X" and gpus[0]["wave_front_size"] == 64
    assert set(k["device"].unique()) <= {d["id"] for d in gpus}


# ---- bad input, derived from the real files --------------------------------------------------


def test_csv_missing_required_column(fixtures, tmp_path):
    rows = _csv_rows(fixtures / CSV_DIR / "decode_kernel_trace.csv")
    out = tmp_path / "run_kernel_trace.csv"
    with open(out, "w", newline="") as fh:
        fields = [f for f in rows[0] if f != "End_Timestamp"]
        w = csv.DictWriter(fh, fields, quoting=csv.QUOTE_ALL, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    _one_line_error(out, "End_Timestamp")


def test_csv_truncated_mid_row_is_salvaged_with_a_warning(fixtures, tmp_path):
    data = (fixtures / CSV_DIR / "decode_kernel_trace.csv").read_bytes()
    cut = data.index(b"\n", len(data) // 2) + 40  # 40 bytes into a row
    out = tmp_path / "cut_kernel_trace.csv"
    out.write_bytes(data[:cut])
    complete = data[:cut].count(b"\n") - 1
    t = collectors.load(out)
    assert t.kernels.height == complete
    assert [w.kind for w in t.meta.warnings if "mid-row" in w] == ["truncated"]


def test_empty_rocpd_database(tmp_path):
    db = tmp_path / "1_results.db"
    con = sqlite3.connect(db)
    con.execute("PRAGMA user_version = 1")  # a valid SQLite file with no tables
    con.commit()
    con.close()
    _one_line_error(db, "no tables")


def test_truncated_gzip(fixtures, tmp_path):
    for rel, name in ((ROCPD, "1_results.db.gz"), (JSON, "2_results.json.gz")):
        data = (fixtures / rel).read_bytes()
        out = tmp_path / name
        out.write_bytes(data[: len(data) // 2])
        _one_line_error(out, "gzip data is truncated")


def test_pftrace_that_is_not_protobuf(fixtures, tmp_path):
    # No real rocprofv3 pftrace exists among the fixtures: feed the reader real bytes that are
    # not Perfetto protobuf (a rocprofv3 kernel-trace CSV; SQLite or JSON content is sniffed as such).
    out = tmp_path / "1_results.pftrace"
    out.write_bytes((fixtures / CSV_DIR / "decode_kernel_trace.csv").read_bytes()[:5000])
    _one_line_error(out, "not a Perfetto protobuf trace")


def test_pftrace_empty_gzip_member_cut(fixtures, tmp_path):
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb") as gz:
        gz.write((fixtures / CSV_DIR / "decode_kernel_trace.csv").read_bytes())
    out = tmp_path / "1_results.pftrace.gz"
    out.write_bytes(buf.getvalue()[:-12])
    _one_line_error(out, "gzip data is truncated")
