"""The reader registry (collectors.registry): which reader claims each real fixture, and what the
application reads from a reader's properties instead of its format name."""

from __future__ import annotations

import gzip
import re
import shutil

import orjson
import polars as pl
import pytest

import collectors
import rules
from attrib.app import attribution, export_trace
from attrib.components.patterns import LLAMACPP_MMQ
from attrib.errors import TraceError, UsageError
from attrib.pipeline import attribute
from attrib.analysis.build import build
from collectors import READERS, reader
from collectors.registry import FORMATS

from conftest import FIXTURES

LEGACY = FIXTURES / "rocprof" / "gfx1201_llamacpp_legacy_rocprof_v1"


def test_every_format_has_one_reader_and_only_torch_records_cpu_ops_and_exports():
    assert len(set(FORMATS)) == len(READERS) == 7
    assert (
        {r.name for r in READERS if r.cpu_ops}
        == {r.name for r in READERS if r.exportable}
        == {"torch-json"}
    )
    with pytest.raises(KeyError, match="known: rocpd"):
        reader("nvtx")


@pytest.mark.parametrize("rel, fmt", [
    ("rocprof/gfx1201_llamacpp_legacy_rocprof_v1/results.json.gz", "rocprof-v1"),  # a Chrome trace, quoted ts
    ("rocprof/gfx950_rocprofv3_json/908_results.json.gz", "rocprofv3-json"),
    ("torch/h200_dense_prefill_cudagraph_decode.json.gz", "torch-json"),
    ("rocprof/gfx1151_llamacpp_rocprofv3_csv", "rocprofv3-csv"),
])
def test_the_first_reader_that_claims_a_file_reads_it(rel, fmt):
    path = FIXTURES / rel
    head = collectors.head_bytes(path) if path.is_file() else b""
    claimed = [r.name for r in READERS if path.is_file() and r.sniff(path, head)]
    assert collectors.sniff(path) == fmt and (not claimed or claimed[0] == fmt)
    assert collectors.load(path).meta.format == fmt


def test_a_rocprof_trace_without_kernels_is_not_read_as_cpu_only(tmp_path):
    # the real rocprofv3 CSV with its kernel rows removed (its HIP calls kept): the reader records no
    # CPU ops, so this is "no GPU kernels", where a torch trace of ops only is a CPU-only run
    src = FIXTURES / "rocprof" / "gfx1151_llamacpp_rocprofv3_csv"
    (tmp_path / "decode_kernel_trace.csv").write_text(
        (src / "decode_kernel_trace.csv").read_text().splitlines(keepends=True)[0])
    shutil.copy(src / "decode_hip_api_trace.csv", tmp_path)
    with pytest.raises(TraceError, match=r"no GPU kernels to analyze \(read 920 events \(rocprofv3-csv\)"):
        attribution(tmp_path / "decode_kernel_trace.csv")


def test_export_refuses_a_reader_without_a_document():
    with pytest.raises(UsageError, match="this is rocprof-v1"):
        export_trace(LEGACY / "results.csv.gz")


def test_export_aligns_a_kernel_written_twice_by_its_event_index(tmp_path):
    # the real H200 trace with one kernel event written twice: analysed (the copy dropped, with a
    # warning), and exported with every kernel event annotated, the copy left as it was
    src = FIXTURES / "torch" / "h200_dense_prefill_cudagraph_decode.json.gz"
    doc = orjson.loads(gzip.decompress(src.read_bytes()))
    evs = doc["traceEvents"]
    first = next(i for i, e in enumerate(evs) if e.get("cat") == "kernel")
    evs.insert(first + 1, dict(evs[first], args=dict(evs[first]["args"])))
    path = tmp_path / "dup.json"
    path.write_bytes(orjson.dumps(doc))
    t = collectors.load(path)
    assert any("exact copies" in w for w in t.meta.warnings)
    out = export_trace(path)
    kernels = [e for e in out["traceEvents"] if e.get("cat") == "kernel"]
    annotated = [e for e in kernels if "component" in e["args"]]
    assert len(kernels) == t.kernels.height + 1 and len(annotated) == t.kernels.height
    assert "component" in kernels[0]["args"] and "component" not in kernels[1]["args"]


# llama.cpp's MMQ kernel as its mangled symbol: `_Z9mul_mat_qIL9ggml_type12ELi128ELb0EEvPKcPKiS4_S4_PfS5_
# iiiiiiiiiiiiiiiii` is the Q4_K, mmq_x 128, no-bounds-check instance as a public llama.cpp CUDA
# error message prints it; the R9700 rocprof v1 fixture's demangled names are rewritten to that form
_DEMANGLED = r"^void mul_mat_q<\(ggml_type\)(\d+), (\d+), (true|false)>\(.*\)$"


def _mangled(names: pl.Expr) -> pl.Expr:
    t, x, check = (names.str.extract(_DEMANGLED, g) for g in (1, 2, 3))
    form = pl.concat_str(pl.lit("_Z9mul_mat_qIL9ggml_type"), t, pl.lit("ELi"), x, pl.lit("ELb"),
                         pl.when(check == "true").then(pl.lit("1")).otherwise(pl.lit("0")),
                         pl.lit("EEvPKcPKiS4_S4_PfS5_iiiiiiiiiiiiiiiii"))
    return pl.when(names.str.contains(_DEMANGLED)).then(form).otherwise(names)


def test_mmq_pattern_matches_the_mangled_symbol_and_p19_fires_the_same():
    t = collectors.load(LEGACY / "results.csv.gz")
    mangled = t.with_tables(kernels=t.kernels.with_columns(_mangled(pl.col("name")).alias("name")))
    names = mangled.kernels["name"]
    assert names.str.starts_with("_Z9mul_mat_qIL9ggml_type2ELi128ELb0EE").sum() > 400
    assert not names.str.contains(r"^void mul_mat_q<").any()
    assert names.str.contains(LLAMACPP_MMQ).sum() == t.kernels["name"].str.contains(LLAMACPP_MMQ).sum() == 442
    assert not re.search(
        LLAMACPP_MMQ, "_Z24mul_mat_q_stream_k_fixupIL9ggml_type12ELi128ELb0EEvPKiS2_PfS3_iiii"
    )
    assert not re.search(LLAMACPP_MMQ, "_Z13mul_mat_vec_qIL9ggml_type12ELi1EEvPKvS1_Pfiiiii")
    for trace in (t, mangled):
        a = attribute(trace)
        found = {f.rule: f for f in rules.run(a, build(a))}
        assert found["P19-llamacpp-prefill-microbatch"].evidence["mmq_launches"] == 442
