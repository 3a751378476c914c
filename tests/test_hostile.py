"""Issue 13: hostile and broken inputs derived from the real fixtures (tests/hostile/corpus.py), each
run as `attrib analyze` in its own process under a time and memory bound; plus the helpers in process."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import polars as pl

from attrib.report.printable import printable
from collectors import load, validate

sys.path.insert(0, str(Path(__file__).resolve().parent / "hostile"))
from corpus import CSV_DIR, VARIANTS  # noqa: E402
from runner import check, run, totals  # noqa: E402


def test_corpus_no_crash_hang_blowup_or_nonsense(tmp_path):
    results = run(tmp_path)
    failures = {r.variant.name: check(r) for r in results if check(r)}
    assert not failures, failures
    t = totals(results)
    # every class of issue 13 has cases, and the corpus is as large as promised
    assert t["variants"] >= 79 and {v.cls for v in VARIANTS} >= {
        "crash",
        "hang",
        "memory",
        "nonsense",
        "message",
    }
    assert t["clean error"] + t["salvaged with a warning"] + t.get("accepted", 0) == t["variants"]


def test_printable_strips_escapes_and_controls():
    name = "\x1b]0;owned\x07\x1b[31mgemm\x1b[0m\rkernel\x00<1>\tx\u202e"
    assert printable(name) == "gemm kernel<1> x"
    assert printable("void at::native::kernel<float, 4>(…)") == "void at::native::kernel<float, 4>(…)"


def test_validate_counts_what_it_drops(fixtures):
    # the real rocprofv3 kernel trace: one kernel given a negative duration, one copied, one moved
    # to timestamp 12 -> each is dropped with one warning that counts it
    k = load(fixtures / CSV_DIR.relative_to(fixtures) / "decode_kernel_trace.csv").kernels
    n = k.height
    bad = pl.concat([
        k.with_columns(pl.when(pl.col("id") == k["id"][3]).then(-5).otherwise(pl.col("dur_ns")).alias("dur_ns"),
                       pl.when(pl.col("id") == k["id"][7]).then(12).otherwise(pl.col("start_ns")).alias("start_ns")),
        k.slice(20, 1)])
    warnings: list[str] = []
    out = validate.table("kernels", bad, warnings)
    assert out.height == n - 2 and out["id"].n_unique() == out.height
    assert any("2 kernels dropped" in w and "1 with a negative duration" in w and "1 timed hours away" in w
               for w in warnings), warnings
    assert any("1 kernels are exact copies" in w for w in warnings), warnings


def test_real_fixtures_pass_validation_unchanged(fixtures):
    # no real trace loses a row or gains a warning at the reader boundary (a 5 KB C++ template
    # kernel name in sampler_b1_v152k is real: names are cut only past 64 KB)
    # (one of each reader and vendor, the small ones: the corpus runs the rest)
    paths = [fixtures / p for p in (
        "captured/sampler_b1_v152k.pt.trace.json.gz", "captured/tp2_decode_rank1.pt.trace.json.gz",
        "torch/h100_hf_qwen1.5-0.5b-chat.json.gz", "torch/mi300_hf_qwen1.5-0.5b-chat.json.gz",
        "torch/h200_dense_prefill_cudagraph_decode.json.gz",
        "rocprof/gfx1201_llamacpp_rocpd_rocm7.2/32432_results.db.gz",
        "rocprof/gfx1201_llamacpp_legacy_rocprof_v1/results.csv.gz")]
    for path in paths:
        t = load(path)
        assert t.kernels.height and not t.meta.warnings, (path.name, t.meta.warnings)
    raw = gzip.decompress((fixtures / "torch/h200_dense_prefill_cudagraph_decode.json.gz").read_bytes())
    # kernels in the raw file (cat "kernel", ph "X") = kernels read
    assert load(fixtures / "torch/h200_dense_prefill_cudagraph_decode.json.gz").kernels.height == \
        raw.count(b'"cat": "kernel"')


def test_invalid_utf8_names_its_event(fixtures, tmp_path):
    # bytes that are not UTF-8 inside one kernel name of a real trace: the trace is read, that name
    # gets U+FFFD and the warning names the event by its index in traceEvents (counted independently)
    raw = gzip.decompress((fixtures / "torch/h200_dense_prefill_cudagraph_decode.json.gz").read_bytes())
    at = raw.index(b'"name": "', raw.index(b'"cat": "kernel"', len(raw) // 2)) + len(b'"name": "')
    bad = tmp_path / "t.json"
    bad.write_bytes(raw[:at] + b"\xff\xfe" + raw[at:])
    import json
    events = json.loads(bad.read_bytes().decode("utf-8", "replace"))["traceEvents"]
    index = next(i for i, e in enumerate(events) if "\ufffd" in e.get("name", ""))
    t = load(bad)
    assert t.kernels.height == raw.count(b'"cat": "kernel"')
    assert any(f"first: event {index})" in w and "invalid UTF-8" in w for w in t.meta.warnings), t.meta.warnings
    assert t.kernels.filter(pl.col("name").str.contains("\ufffd")).height == 1
