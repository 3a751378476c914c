"""Stages on polars' pool (attrib.threads): the same results as one thread, in the same order,
on real traces; errors raised in the caller; ATTRIB_THREADS=1 and one CPU run them serially; a
pool of one thread runs them one after the other; no Python thread is left behind."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from attrib import threads
from attrib.cli import main
from attrib.cli.common import NO_PARTITION, small_groups
from attrib.trace import SMALL_ROWS
from collectors import limits

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
VLLM = FIXTURES / "torch" / "mi300_vllm_prefilldecode_piecewise"
SMALL_TRACE = FIXTURES / "torch" / "h200_dense_prefill_cudagraph_decode.json.gz"


def _name() -> int:
    """The calling thread (its identity: `current_thread()` would register a pool thread with
    `threading` for good)."""
    return threading.get_ident()


def test_both_and_each_keep_order_and_use_a_second_thread(monkeypatch):
    monkeypatch.delenv(threads.ENV, raising=False)
    monkeypatch.setattr(threads, "_cpus", lambda: 2)
    here, python_threads = _name(), threading.active_count()
    a, b = threads.both(_name, _name, rows=10)
    assert here not in (a, b)  # both on polars' pool
    got = threads.each(lambda x: (x, _name()), range(6), rows=10)
    assert [x for x, _ in got] == list(range(6))
    assert here not in {n for _, n in got}
    assert threading.active_count() == python_threads  # polars' threads are not Python's


def test_pooled_runs_on_the_pool_for_small_input_only():
    here = _name()
    assert threads.pooled(_name, small=True) != here
    assert threads.pooled(_name, small=False) == here
    # nested: stages of stages, each on the pool, in order
    got = threads.pooled(lambda: threads.both(lambda: threads.each(lambda x: x * 2, [1, 2], rows=1),
                                              lambda: threads.pooled(lambda: "g", small=True),
                                              rows=1), small=True)
    assert got == ([2, 4], "g")


@pytest.mark.parametrize("why", ["env", "one cpu", "big tables"])
def test_serial_when_turned_off_one_cpu_or_big_tables(monkeypatch, why):
    monkeypatch.delenv(threads.ENV, raising=False)
    monkeypatch.setattr(threads, "_cpus", lambda: 1 if why == "one cpu" else 2)
    if why == "env":
        monkeypatch.setenv(threads.ENV, "1")
    rows = SMALL_ROWS + 1 if why == "big tables" else SMALL_ROWS
    here = _name()
    assert threads.both(_name, _name, rows=rows) == (here, here)
    assert threads.each(lambda _x: _name(), range(3), rows=rows) == [here] * 3


def test_an_error_of_either_side_is_raised(monkeypatch):
    monkeypatch.setattr(threads, "_cpus", lambda: 2)
    monkeypatch.delenv(threads.ENV, raising=False)

    def bad() -> int:
        raise ValueError("from the second thread")

    with pytest.raises(ValueError, match="second thread"):
        threads.both(lambda: 1, bad, rows=10)
    with pytest.raises(ZeroDivisionError):
        threads.each(lambda x: 1 // x, [1, 0, 2], rows=10)
    with pytest.raises(ValueError, match="second thread"):
        threads.pooled(bad, small=True)

    def first() -> int:
        raise KeyError("first")

    with pytest.raises(KeyError):  # of two, the first stage's
        threads.both(first, bad, rows=10)


def test_a_pool_of_one_thread_runs_the_stages_one_after_the_other():
    """POLARS_MAX_THREADS=1: one pool thread takes the stages in turn (no stage waits on
    another, so none waits for ever); the results are those of the serial calls."""
    code = ("from attrib import threads; threads._cpus = lambda: 2; "
            "print(threads.pooled(lambda: threads.both(lambda: threads.each("
            "lambda x: x + 1, [1, 2, 3], rows=1), lambda: 'g', rows=1), small=True))")
    env = {**os.environ, "POLARS_MAX_THREADS": "1", "PYTHONPATH": str(ROOT)}
    env.pop(threads.ENV, None)
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    assert got.stdout.strip() == "([2, 3, 4], 'g')"


def _analyze_json(args: list[str]) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["analyze", *args, "--format", "json"])
    assert rc == 0, err.getvalue()
    return out.getvalue()


@pytest.mark.parametrize("args", [
    # prefill and decode (two phases built at once), MoE components, the rules
    [str(FIXTURES / "torch" / "h200_qwen3moe_eager_prefill_decode.json.gz")],
    # a graph replay merged with its capture (the links and spans found one after the other)
    [str(VLLM / "graph_execution.json.gz"), "--capture",
     str(VLLM / "graph_capture_rank_0.pt.trace.json.gz")],
    # read in chunks of 2 steps: each chunk attributed with the whole trace's facts
    [str(FIXTURES / "captured" / "hf_llama_cuda_b8_p512.pt.trace.json.gz"), "--chunk-steps", "2"],
], ids=["moe-prefill-decode", "graph-capture", "chunked"])
def test_real_traces_give_the_same_analysis_on_one_thread_and_two(monkeypatch, args):
    monkeypatch.setattr(threads, "_cpus", lambda: 2)
    monkeypatch.delenv(threads.ENV, raising=False)
    two = _analyze_json(args)
    monkeypatch.setenv(threads.ENV, "1")
    one = _analyze_json(args)
    assert '"phases"' in one and two == one


def test_a_small_input_is_a_small_file_of_text(tmp_path):
    """small_text: the fixture (0.1 MB of gzip, 2.9 MB of JSON) is small; a folder, a missing
    path, and a file past SMALL_TEXT (sparse: its size is what is judged) are not."""
    assert limits.small_text(SMALL_TRACE, None)
    assert limits.text_bytes(SMALL_TRACE) == 8 * SMALL_TRACE.stat().st_size
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(limits.SMALL_TEXT + 1)
    for other in (big, tmp_path, tmp_path / "missing.json"):
        assert not limits.small_text(SMALL_TRACE, other)


def test_small_groups_only_while_the_command_reads_small_files(monkeypatch, tmp_path):
    monkeypatch.delenv(NO_PARTITION, raising=False)
    with small_groups(SMALL_TRACE, None):
        assert os.environ[NO_PARTITION] == "1"
    assert NO_PARTITION not in os.environ
    with small_groups(SMALL_TRACE, tmp_path):  # a folder: not known small
        assert NO_PARTITION not in os.environ
    monkeypatch.setenv(NO_PARTITION, "0")  # the user's own value is kept
    with small_groups(SMALL_TRACE):
        assert os.environ[NO_PARTITION] == "0"
    assert os.environ[NO_PARTITION] == "0"


@pytest.mark.parametrize("trace", [
    SMALL_TRACE,  # Kineto JSON
    FIXTURES / "rocprof" / "gfx1201_llamacpp_rocpd_rocm7.2" / "32432_results.db.gz",  # SQLite
], ids=["kineto", "rocpd"])
def test_a_small_trace_analyzed_on_the_pool_leaves_no_python_thread(trace):
    """Attributed and analyzed on polars' pool (the Kineto file read there too; the database in
    the main thread, where its reader hears signals: tests/test_rocprof_bounds.py): the process
    keeps its Python threads, so `attrib` ends at once (cli._leave)."""
    before = threading.active_count()
    assert '"phases"' in _analyze_json([str(trace)])
    assert threading.active_count() == before
