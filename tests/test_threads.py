"""Independent stages on two threads (attrib.threads): the same results as one thread, in the
same order, on real traces; errors raised; ATTRIB_THREADS=1 and one CPU run them serially."""

from __future__ import annotations

import contextlib
import io
import threading
from pathlib import Path

import pytest

from attrib import threads
from attrib.cli import main
from attrib.trace import SMALL_ROWS

FIXTURES = Path(__file__).parent / "fixtures"
VLLM = FIXTURES / "torch" / "mi300_vllm_prefilldecode_piecewise"


def _name() -> str:
    return threading.current_thread().name


def test_both_and_each_keep_order_and_use_a_second_thread(monkeypatch):
    monkeypatch.delenv(threads.ENV, raising=False)
    monkeypatch.setattr(threads, "_cpus", lambda: 2)
    here = _name()
    a, b = threads.both(_name, _name, rows=10)
    assert a == here and b != here and b.startswith("attrib")
    got = threads.each(lambda x: (x, _name()), range(6), rows=10)
    assert [x for x, _ in got] == list(range(6))
    assert {n for _, n in got} != {here}


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
