"""A component keeps its kernels when a change swaps them for ones the name patterns do not know,
also in a CUDA-graph replay without per-kernel ops, where only their place in the layer tells
(issue 37): between the KV-cache write and the output projection is attention. The trace is the
H200 reduce-overhead capture `ladder/s3_graphs_r1` (tests/fixtures/captured/README.md); the test
renames its cuDNN attention kernels to a name no pattern knows, as another backend would."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest

from attrib.app import analyze, attribution
from attrib.multi.compare import compare

from conftest import FIXTURES

SRC = FIXTURES / "captured" / "ladder" / "s3_graphs_r1.pt.trace.json.gz"
CUDNN = "cudnn_generated_fort_native_sdpa"
NEW = "void xk_fprop_kernel<64, 128, 4>(Params)"


@pytest.fixture(scope="module")
def renamed(tmp_path_factory):
    doc = json.loads(gzip.decompress(SRC.read_bytes()))
    n = 0
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e["name"].startswith(CUDNN):
            e["name"], n = NEW, n + 1
    assert n == 52  # 4 layers x 13 forwards (the prefill and 12 graph-replayed decode steps)
    path = tmp_path_factory.mktemp("pos") / "renamed.json"
    path.write_text(json.dumps(doc))
    return path


def _components(path):
    k = attribution(path).kernels.select("name", "component")
    return k.with_columns(pl.col("name").cast(pl.Utf8), pl.col("component").cast(pl.Utf8))


def test_an_unknown_attention_kernel_keeps_its_component(renamed):
    before = _components(SRC).filter(pl.col("name").str.starts_with(CUDNN))
    after = _components(renamed).filter(pl.col("name") == NEW)
    assert set(before["component"]) == {"attention"} and before.height == 52
    assert set(after["component"]) == {"attention"} and after.height == 52


def test_compare_reads_no_attention_faster_other_slower(renamed):
    """The same run with the kernels renamed: compare reads no component change at all."""
    doc = compare([analyze(SRC)], [analyze(renamed)]).to_dict()
    rows = {r.get("component"): r for r in doc["phases"]["decode"][1:]}
    assert rows["attention"]["delta_ms"] == pytest.approx(0, abs=1e-4)
    assert "other" not in rows or rows["other"]["delta_ms"] == pytest.approx(0, abs=1e-4)
