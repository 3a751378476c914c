"""The Kineto reader on the real torch-profiler fixtures."""

from __future__ import annotations

import gzip

import orjson
import polars as pl
import pytest

from collectors import load
from collectors.kineto import read, repair_names

from conftest import EXAMPLE_TRACE, FIXTURES

TORCH = "torch"


def _events(path):
    return orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def test_example_trace_counts_match_the_trace(fixtures):
    events = _events(EXAMPLE_TRACE)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    t = load(EXAMPLE_TRACE)
    assert t.meta.format == "torch-json"
    assert t.meta.events == len(events)
    assert t.kernels.height == len(kernels) == 4977
    assert t.kernels["dur_ns"].sum() == pytest.approx(sum(e["dur"] for e in kernels) * 1000, rel=1e-3)
    assert t.ops.height == sum(1 for e in events if e.get("cat") == "cpu_op")
    assert t.frames.height == sum(1 for e in events if e.get("cat") == "python_function")
    assert t.markers.filter(pl.col("side") == "gpu").height == 7
    assert t.meta.vendor == "nvidia"
    assert t.meta.devices[0]["name"] == "NVIDIA H200"
    assert t.meta.top["traceName"] == "qwen3moe_prefill_decode.json"  # key after traceEvents
    # integer nanoseconds from float microseconds
    first = min(kernels, key=lambda e: e["ts"])
    assert t.kernels["start_ns"].min() == round(first["ts"] * 1000)
    # shapes kept as raw JSON text, grid/block as integer lists
    mm = t.ops.filter(pl.col("name") == "aten::mm").row(0, named=True)
    assert orjson.loads(mm["input_dims"])[0] == [2048, 2048]
    assert t.kernels["grid"].list.len().max() == 3


def test_rocm_trace_vendor_and_launch_fields(fixtures):
    t = load(fixtures / TORCH / "mi300_hf_qwen1.5-0.5b-chat.json.gz")
    assert t.meta.vendor == "amd"
    assert t.meta.devices[0]["warpSize"] == 64
    names = set(t.launches["name"].unique())
    assert {"hipLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel"} <= names
    ext = t.launches.filter(pl.col("name") == "hipExtModuleLaunchKernel")
    assert ext["kernel_name"].str.starts_with("Cijk_").all()  # kernel name recorded on the launch


def test_graph_replay_dispatch_task_and_empty_device_name(fixtures):
    d = fixtures / TORCH / "mi300_vllm_prefilldecode_piecewise"
    replay = load(d / "graph_execution.json.gz")
    assert replay.kernels["graph"].sum() == 361  # kind "Dispatch Task"
    capture = load(d / "graph_capture_rank_0.pt.trace.json.gz")
    assert capture.meta.devices[0]["name"] == ""
    assert capture.launches["kernel_name"].drop_nulls().len() > 400  # captured launches, no executed kernel


def test_truncated_json_is_salvaged_with_a_warning(tmp_path):
    text = gzip.decompress(EXAMPLE_TRACE.read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[: len(text) * 6 // 10])
    t = read(cut)
    assert [w.kind for w in t.meta.warnings if "truncated" in w] == ["truncated"]  # the kind, not only the text
    assert 0 < t.kernels.height < 4977


def test_truncated_gzip_is_salvaged_with_a_warning(tmp_path):
    raw = EXAMPLE_TRACE.read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(raw[: len(raw) // 2])
    t = read(cut)
    assert any("gzip" in w for w in t.meta.warnings)
    # Kineto writes CPU events first: the first half of the gzip holds every op and not all kernels
    events = _events(EXAMPLE_TRACE)
    assert t.ops.height == sum(e.get("cat") == "cpu_op" for e in events)
    assert t.kernels.height < sum(e.get("cat") == "kernel" for e in events)


def test_flows_fill_a_missing_correlation(tmp_path):
    """A kernel whose args lost the correlation takes it from the ac2g flow arrow ending on it."""
    doc = orjson.loads(gzip.decompress(EXAMPLE_TRACE.read_bytes()))
    k = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    want = k["args"].pop("correlation")
    p = tmp_path / "noc.json"
    p.write_bytes(orjson.dumps(doc))
    t = read(p)
    row = t.kernels.filter(pl.col("start_ns") == round(k["ts"] * 1000))
    assert row["correlation"].to_list() == [want]


def test_control_character_in_a_name_is_read_leniently(tmp_path):
    """Kineto has written raw control characters inside names (pytorch#130622): strict parsers
    reject the whole file; attrib reads it with a warning."""
    text = gzip.decompress(EXAMPLE_TRACE.read_bytes())
    bad = text.replace(b'"name": "aten::embedding"', b'"name": "aten::embedding\x01"', 1)
    assert bad != text
    p = tmp_path / "ctrl.json"
    p.write_bytes(bad)
    t = read(p)
    assert any("lenient" in w for w in t.meta.warnings)
    assert t.kernels.height == 4977 and t.ops.filter(pl.col("name") == "aten::embedding\x01").height == 1


def test_copies_have_kind_bytes_and_direction():
    t = load(EXAMPLE_TRACE)
    events = _events(EXAMPLE_TRACE)
    memcpy = [e for e in events if e.get("cat") == "gpu_memcpy"]
    got = t.copies.filter(pl.col("kind") == "memcpy")
    assert got.height == len(memcpy) and got["bytes"].sum() == sum(e["args"]["bytes"] for e in memcpy)
    want = {n.split()[1] for n in (e["name"] for e in memcpy)}
    assert set(got["direction"].unique()) == want
    assert t.copies.filter(pl.col("kind") == "memset").height == sum(1 for e in events if e.get("cat") == "gpu_memset")


def test_unescaped_quotes_in_a_name_are_repaired(tmp_path):
    """torch's exporter has written `"name": "torch/profiler/_cupti_monitor.py(0): "warmup"",` (seen
    in this project's own CPU captures with torch 2.13): the whole file is invalid JSON. The same
    defect, put into a real trace, is repaired with a warning."""
    text = gzip.decompress(EXAMPLE_TRACE.read_bytes())
    doc = orjson.loads(text)
    frame = next(e for e in doc["traceEvents"] if e.get("cat") == "python_function")
    pretty = orjson.dumps(doc, option=orjson.OPT_INDENT_2)  # one field per line, as Kineto writes
    needle = b'"name": ' + orjson.dumps(frame["name"]) + b","
    assert needle in pretty
    bad = pretty.replace(needle, b'"name": "' + frame["name"].encode() + b': "warmup"",', 1)
    with pytest.raises(ValueError):
        orjson.loads(bad)
    p = tmp_path / "quotes.json"
    p.write_bytes(bad)
    t = read(p)
    assert any("unescaped quotes" in w for w in t.meta.warnings)
    assert t.kernels.height == 4977
    assert t.frames.filter(pl.col("name") == frame["name"] + ': "warmup"').height == 1


def test_repair_changes_only_the_name_that_failed_to_parse():
    """Kineto writes `"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",` on one line
    (valid JSON): the quote repair must leave it, and fix a kernel name given raw quotes in the
    real trace's own layout (`"ph": "X", "cat": "kernel", "name": "...", "pid": 0, "tid": 7,`)."""
    src = FIXTURES / "torch" / "h200_dense_prefill_cudagraph_decode.json.gz"
    text = gzip.decompress(src.read_bytes())
    assert text.count(b'"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",') == 1
    at = text.index(b'"cat": "kernel", "name": "') + len(b'"cat": "kernel", "name": "')
    bad = text[:at] + b'warmup "a" ' + text[at:]
    fixed, n = repair_names(bad)
    assert n == 1 and fixed.replace(b'warmup \\"a\\" ', b"") == text
    names = [e["name"] for e in orjson.loads(fixed)["traceEvents"]]
    assert names.count("Iteration Start: PyTorch Profiler") == 1
    assert sum(x.startswith('warmup "a" void') for x in names) == 1
