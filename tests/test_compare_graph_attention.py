"""Issue 37, "components survive a kernel change": the same graph-replayed decoder with fused SDPA
and with attention written out (tests/fixtures/captured/issue37/graph_attn_*, README there). A
replay has no per-kernel ops, so only a kernel's place in the layer says it is attention: the
truth here is every kernel after a layer's KV-cache write (`index_copy`) up to its output
projection, read from the raw events."""

from __future__ import annotations

import gzip
import json
import statistics

import pytest

from attrib.app import analyze
from attrib.multi.compare import compare

from conftest import FIXTURES

CAP = FIXTURES / "captured" / "issue37"
LAYERS = 4


def _steps(name: str) -> list[list[dict]]:
    """Each replay's kernels (cat `kernel`: no copies or memsets) in time order."""
    ev = json.loads(gzip.decompress((CAP / f"graph_attn_{name}.json.gz").read_bytes()))["traceEvents"]
    kernels = sorted((e for e in ev if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    windows = [e for e in ev if e.get("cat") == "gpu_user_annotation"]
    return [[k for k in kernels if w["ts"] <= k["ts"] < w["ts"] + w["dur"]] for w in windows]


def _attention(step: list[dict], gemms: int) -> list[dict]:
    """Per layer, the kernels after the second KV write up to (not with) the output projection:
    the `gemms + 1`-th GEMM after it (eager: Q.K^T, P.V, then o_proj; SDPA: o_proj first)."""
    out = []
    writes = [i for i, k in enumerate(step) if "index_copy" in k["name"]][1::2]
    for w in writes:
        seen = 0
        for k in step[w + 1:]:
            seen += k["name"].startswith("nvjet")
            if seen > gemms:
                break
            out.append(k)
    return out


@pytest.fixture(scope="module")
def raw():
    out = {}
    for name, gemms in (("sdpa", 0), ("eager", 2)):
        steps = _steps(name)
        att = [_attention(s, gemms) for s in steps]
        out[name] = {"n": {len(a) for a in att},
                     "ms": statistics.mean(sum(k["dur"] for k in a) / 1e3 for a in att)}
    return out


@pytest.fixture(scope="module")
def diff():
    docs = [analyze(CAP / f"graph_attn_{n}.json.gz") for n in ("sdpa", "eager")]
    return compare(docs[:1], docs[1:], gate_pct=5).to_dict()


def test_the_raw_attention_region(raw):
    # SDPA: cuDNN's kernels of one fused attention per layer; eager: 10 a layer (two K/V repeats, a
    # transpose, Q.K^T, scale, mask, softmax input copy, softmax, cast, P.V)
    assert raw["sdpa"]["n"] == {LAYERS * 5} and raw["eager"]["n"] == {LAYERS * 10}
    assert raw["eager"]["ms"] > 10 * raw["sdpa"]["ms"]


def test_the_written_out_attention_stays_attention(diff, raw):
    rows = {r["component"]: r for r in diff["phases"]["decode"][1:]}
    att = rows["attention"]
    assert att["base_ms"] == pytest.approx(raw["sdpa"]["ms"], rel=0.02)
    assert att["cand_ms"] == pytest.approx(raw["eager"]["ms"], rel=0.02)
    # nothing else took the swapped kernels: no "attention -100%, other +1.3 ms", no Q.K^T GEMM
    # called a projection
    for comp in ("other", "qkv_proj", "o_proj"):
        assert abs(rows[comp]["delta_ms"]) < 0.01, comp


def test_compare_names_attention_as_the_cause(diff, raw):
    ledger = diff["summary"]["decode"]["ledger_diff"]["rows"]
    top = max(ledger, key=lambda r: abs(r["delta_ms"]))
    assert (top["cause"], top["what"]) == ("kernels", "attention")
    assert top["delta_ms"] == pytest.approx(raw["eager"]["ms"] - raw["sdpa"]["ms"], rel=0.02)
    step = diff["phases"]["decode"][0]
    assert step["verdict"] == "slower" and "attention +1.4" in step["cause"]
