"""The struct is the document: `Analysis` encodes to the attrib.analysis/1 JSON, `Analysis.load`
decodes one back equal to what `analyze` wrote, and the stored schema is the one generated from
the structs."""

from __future__ import annotations

import gzip
import json

import jsonschema
import pytest

import attrib
from attrib.analysis import schema
from attrib.analysis.model import Analysis
from attrib.cli import main
from attrib.errors import TraceError

from conftest import EXAMPLE_TRACE, FIXTURES

CAP = FIXTURES / "captured"
# one of each kind of document: eager MoE, a graph replay, a speculative loop, a vision forward
# (samples), a rocprofv3 CSV (no CPU side), a what-if projection (below)
TRACES = [EXAMPLE_TRACE, FIXTURES / "torch" / "h200_dense_prefill_cudagraph_decode.json.gz",
          CAP / "spec_noised.json.gz", CAP / "vit_forward_b8.pt.trace.json.gz",
          FIXTURES / "rocprof" / "gfx1151_llamacpp_rocprofv3_csv"]


def test_stored_schema_is_the_generated_one() -> None:
    """attrib/data's schema equals the structs' (run `python -m attrib.analysis.schema` after
    changing them)."""
    assert schema.STORED.read_text() == schema.text()


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.name)
def test_analyze_json_loads_back_equal(trace, tmp_path, capsys) -> None:
    """What `analyze --format json` printed decodes to the analysis the API builds, and encodes
    to the same text again; the text is valid against the stored schema."""
    assert main(["analyze", str(trace), "--format", "json"]) == 0
    text = capsys.readouterr().out
    out = tmp_path / "doc.json"
    out.write_text(text)
    loaded = Analysis.load(out)
    assert loaded == attrib.analyze(trace)
    assert loaded.to_json() == text
    jsonschema.validate(json.loads(text), json.loads(schema.STORED.read_text()))


def test_what_if_and_save(tmp_path) -> None:
    """A what-if projection survives save and load; save writes what to_json says."""
    from test_budget import QWEN3_MOE  # the demo's config (fixture README)

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(QWEN3_MOE))
    an = attrib.analyze(EXAMPLE_TRACE, model=cfg, what_if="weights=int4,kv=fp8")
    assert an.what_if is not None
    an.save(tmp_path / "a.json")
    assert Analysis.load(tmp_path / "a.json") == an
    assert (tmp_path / "a.json").read_text() == an.to_json()


def test_document_names_what_each_finding_is_about() -> None:
    """A finding in the document says its phase and the rows it accounts for (the fields the
    ranking reads), and its summary sentence."""
    doc = json.loads(attrib.analyze(EXAMPLE_TRACE).to_json())
    by_rule = {f["rule"]: f for f in doc["findings"]}
    assert all(f["summary"] for f in doc["findings"])
    assert any(f["phase"] == "decode" for f in doc["findings"])
    launch = by_rule.get("ledger-launch")
    assert launch is None or launch["explains"] in (None, "idle", "step")


def test_not_a_document_is_one_line(tmp_path) -> None:
    """A trace, a capture stamp or cut JSON given to load: a TraceError naming the file."""
    stamp = CAP / "sdpa_attn_a.pt.trace.json.gz.attrib.json"
    with pytest.raises(TraceError, match="sdpa_attn_a.pt.trace.json.gz.attrib.json: not an "
                                         "attrib.analysis/1 document"):
        Analysis.load(stamp)
    trace = tmp_path / "trace.json"
    trace.write_bytes(gzip.decompress(EXAMPLE_TRACE.read_bytes())[:5000])
    with pytest.raises(TraceError, match="trace.json: not JSON"):
        Analysis.load(trace)
