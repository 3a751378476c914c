"""A Kineto trace read from disk a chunk of steps at a time (collectors.kineto.spill,
attrib.app.bounded) gives each chunk the tables the trace in memory gives it, and `analyze` the
same document; what it cannot read that way it reads whole."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import polars as pl
import pytest

from attrib.app import analysis, attribution, bounded
from attrib.steps.chunks import plan, window
from attrib.steps.phases import annotated_spans
from collectors import load
from collectors.kineto.spill import Spill

ROOT = Path(__file__).resolve().parents[1]
CAPTURED = ROOT / "tests" / "fixtures" / "captured"
DEMO = ROOT / "examples" / "traces" / "h200_qwen3moe_eager_prefill_decode.json.gz"
TABLES = ("kernels", "ops", "frames", "launches", "markers", "copies")


@pytest.mark.parametrize("path", [DEMO, CAPTURED / "tp2_decode_rank0.pt.trace.json.gz"],
                         ids=lambda p: p.name)
def test_windows_from_disk_equal_windows_in_memory(path: Path, tmp_path: Path) -> None:
    """Small files (2,000 rows of a table, 1 MB pieces of JSON): a chunk's rows come from
    several files, and ids, order, dtypes and values are the whole trace's."""
    trace = load(path)
    with Spill.read(path, folder=tmp_path, block=1 << 20, rows=2000) as spill:
        assert max(len(p) for p in spill.parts.values()) > 2
        assert spill.meta == trace.meta
        assert spill.markers().markers.equals(trace.markers)
        for c in plan(annotated_spans(trace), 2):
            disk, memory = spill.window(c.host, c.gpu), window(trace, c)
            for t in TABLES:
                assert getattr(disk, t).equals(getattr(memory, t)), t
    assert list(tmp_path.iterdir()) == []  # the folder is removed


@pytest.mark.parametrize("path", [DEMO, CAPTURED / "compile_decode.pt.trace.json.gz",
                                  CAPTURED / "ledger_graph_ahead.json.gz"],
                         ids=lambda p: p.name)
def test_bounded_analysis_equals_whole(path: Path) -> None:
    whole = attribution(path, steps=0)
    part = attribution(path, steps=2)
    # read from disk: the trace it holds is what the analysis reads, not every event
    assert part.trace.frames.height == 0 and part.trace.kernels.height == whole.trace.kernels.height
    assert part.trace.ops.height < whole.trace.ops.height or whole.trace.ops.height == 0
    for t in TABLES:  # the contract's columns, those only the attribution reads null
        assert getattr(part.trace, t).schema == getattr(whole.trace, t).schema, t
    assert part.trace.kernels["grid"].null_count() == part.trace.kernels.height
    doc = orjson.dumps(analysis(part).to_dict(), option=orjson.OPT_SORT_KEYS)
    assert doc == orjson.dumps(analysis(whole).to_dict(), option=orjson.OPT_SORT_KEYS)


def test_read_whole_where_it_cannot_be_chunked(tmp_path: Path) -> None:
    # no step annotations (HF generate: steps from the embeddings)
    assert bounded(CAPTURED / "ledger_generate.json.gz", steps=2) is None
    # a file cut short: the whole reader's salvage and warning
    cut = tmp_path / "cut.json.gz"
    text = gzip.decompress(DEMO.read_bytes())
    cut.write_bytes(gzip.compress(text[: len(text) * 3 // 4]))
    assert bounded(cut, steps=2) is None
    a = attribution(cut, steps=2)
    assert any(w.kind == "truncated" for w in a.trace.meta.warnings)
    # no GPU kernels, the runtime calls kept: the whole reader's verdict, not a chunk's view
    doc = orjson.loads(text)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "kernel"]
    bare = tmp_path / "no_kernels.json"
    bare.write_bytes(orjson.dumps(doc))
    assert bounded(bare, steps=2) is None


def test_cli_chunk_steps(capsys: pytest.CaptureFixture[str]) -> None:
    """`attrib analyze --chunk-steps N` reads from disk N steps at a time, 0 reads whole: the
    same document."""
    from attrib.cli import main

    docs = []
    for n in ("2", "0"):
        assert main(["analyze", str(DEMO), "--format", "json", "--chunk-steps", n]) == 0
        docs.append(orjson.loads(capsys.readouterr().out))
    assert docs[0] == docs[1]
    assert main(["analyze", str(DEMO), "--chunk-steps", "-1"]) == 2
    assert "--chunk-steps" in capsys.readouterr().err


def test_the_chunked_read_keeps_what_the_rules_declare() -> None:
    """The pipeline knows no rule (issue 40): the ops, runtime calls and frames a chunked read
    keeps beyond the kernels' own ops are what the stages and the rules declare (attrib.reads).
    An op no one declares is not kept; declared, every one of them in the trace is."""
    from attrib.chunked import attribute_chunks
    from attrib.reads import Reads

    def read(reads: Reads) -> set[int]:
        with Spill.read(DEMO) as spill:
            marks = spill.markers()
            chunks = plan(annotated_spans(marks), 2)
            a = attribute_chunks(chunks, lambda c: spill.window(c.host, c.gpu), marks,
                                 gather=True, reads=reads)
        return set(a.trace.ops.filter(a.trace.ops["name"] == "aten::empty")["id"].to_list())

    every = set(load(DEMO).ops.filter(pl.col("name") == "aten::empty")["id"].to_list())
    undeclared, declared = read(Reads()), read(Reads(ops=(r"^aten::empty$",)))
    assert len(every) > 100 and undeclared < every  # aten::empty launches no kernel: not kept
    assert declared == every
