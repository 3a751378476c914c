"""The struct is the document: `Analysis` encodes to the attrib.analysis/1 JSON, `Analysis.load`
decodes one back equal to what `analyze` wrote, and the stored schema is the one generated from
the structs."""

from __future__ import annotations

import gzip
import json
import os

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


def test_compare_and_trend_take_saved_documents(tmp_path) -> None:
    """A saved analysis stands for its trace in the multi-trace commands: compare of a saved
    baseline against a trace gives the comparison of the two traces, less the paths; trend over
    saved documents is the trend over their traces."""
    a = FIXTURES / "captured" / "sdpa_attn_a.pt.trace.json.gz"
    b = FIXTURES / "captured" / "sdpa_attn_b.pt.trace.json.gz"
    saved = tmp_path / "a.analysis.json"
    assert main(["analyze", str(a), "--format", "json", "-o", str(saved)]) == 0
    assert Analysis.is_document(saved) and not Analysis.is_document(a)
    out1, out2 = tmp_path / "c1.json", tmp_path / "c2.json"
    assert main(["compare", str(a), str(b), "--format", "json", "-o", str(out1)]) == 0
    assert main(["compare", str(saved), str(b), "--format", "json", "-o", str(out2)]) == 0
    c1, c2 = json.loads(out1.read_text()), json.loads(out2.read_text())
    assert c1["base"]["traces"] == c2["base"]["traces"] == [str(a)]  # the document names its trace
    assert c1 == c2
    traces, docs = tmp_path / "traces", tmp_path / "docs"
    traces.mkdir(), docs.mkdir()
    for t in (a, b):
        for f in (t, t.parent / (t.name + ".attrib.json")):  # the trace and its stamp
            (traces / f.name).write_bytes(f.read_bytes())
        out = docs / (t.name.split(".")[0] + ".analysis.json")
        assert main(["analyze", str(traces / t.name), "--format", "json", "-o", str(out)]) == 0
    t1, t2 = tmp_path / "t1.json", tmp_path / "t2.json"
    assert main(["trend", str(traces), "--format", "json", "-o", str(t1)]) == 0
    assert main(["trend", str(docs), "--format", "json", "-o", str(t2)]) == 0
    r1, r2 = json.loads(t1.read_text()), json.loads(t2.read_text())
    assert len(r1["rows"]) == 2 and r1 == r2


def test_a_hostile_document_is_one_line(tmp_path) -> None:
    """A real document whose stamp nests 100,000 deep, and a sparse file over the size bound
    that starts like a document: each a TraceError naming the file, never a RecursionError or a
    read of the whole file."""
    from attrib.analysis.model import DOCUMENT_MAX_BYTES

    text = attrib.analyze(FIXTURES / "torch" / "h200_dense_prefill_cudagraph_decode.json.gz").to_json()
    assert '"provenance": {}' in text
    deep = tmp_path / "deep.json"
    deep.write_text(text.replace('"provenance": {}',
                                 '"provenance": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}"))
    assert Analysis.is_document(deep)
    with pytest.raises(TraceError, match="deep.json: values nested too deep"):
        Analysis.load(deep)
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.write(text.encode()[:200])
        f.truncate(DOCUMENT_MAX_BYTES + 1)  # sparse: no disk used
    assert Analysis.is_document(big)
    with pytest.raises(TraceError, match="big.json: an analysis document of 512 MiB"):
        Analysis.load(big)
    assert main(["compare", str(big), str(big)]) == 2
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(TraceError, match="fifo.json: not a regular file"):
        Analysis.load(fifo)  # never opened: a FIFO would block the read
