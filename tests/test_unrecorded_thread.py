"""A serving loop on a worker thread whose CPU ops torch.profiler did not record (issue 36, item
5), on the H200 captures of transformers' continuous batching (tests/fixtures/captured/issue36,
README there): the trace says which thread it was and how to record it. Truth from the raw events:
the thread with runtime calls and no CPU op or Python frame."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest

from attrib.app import analyze

from conftest import FIXTURES

CAP = FIXTURES / "captured" / "issue36"
HOST = ("cpu_op", "python_function", "user_annotation")
CALLS = ("cuda_runtime", "cuda_driver")


def _raw_unrecorded(name):
    """{tid: runtime and driver calls} of the threads with calls and no CPU event."""
    ev = json.loads(gzip.decompress((CAP / f"{name}.pt.trace.json.gz").read_bytes()))["traceEvents"]
    host = {e["tid"] for e in ev if e.get("cat") in HOST}
    calls = Counter(e["tid"] for e in ev if e.get("cat") in CALLS)
    return {tid: n for tid, n in calls.items() if tid not in host}


def test_the_worker_thread_without_ops_is_named_with_how_to_record_it():
    [(tid, calls)] = _raw_unrecorded("cb_generate_batch").items()
    an = analyze(CAP / "cb_generate_batch.pt.trace.json.gz")
    [note] = [n for n in an.notes if n.startswith("thread ")]
    assert note.startswith(f"thread {tid} ({calls} runtime and driver calls)")
    assert "profile_all_threads=True" in note
    rows = {r.what: r for p in an.phases for r in p.ledger_rows}
    row = rows[f"unrecorded thread {tid}"]
    assert row.cause == "host" and "untraced host time" not in rows
    # the decode passes (found from the worker's kernels) are its host time; the prefill's
    # largest host row is the manager's cudaMalloc on the main thread
    [top] = [f for f in an.findings if f.rule == "ledger-host" and f.phase == "decode"]
    assert f"unrecorded thread {tid}" in top.title and "profile_all_threads" in top.remedy


@pytest.mark.parametrize("name", ["cb_generate_batch_allthreads", "thread_serve_b4"])
def test_a_thread_with_its_ops_recorded_is_not_flagged(name):
    assert _raw_unrecorded(name) == {}
    an = analyze(CAP / f"{name}.pt.trace.json.gz")
    assert not [n for n in an.notes if n.startswith("thread ")]
    assert not [r for p in an.phases for r in p.ledger_rows if r.what.startswith("unrecorded")]
