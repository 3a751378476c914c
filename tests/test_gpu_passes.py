"""Forward passes found from the GPU side when the thread that ran them had no CPU op recorded
(issue 36, item 5), on the H200 captures of transformers' continuous batching
(tests/fixtures/captured/issue36, README there). cb_generate_batch is the default profiler (the
worker's ops unrecorded); cb_generate_batch_allthreads the same job with profile_all_threads=True.
Both runs launch the same kernel sequence. The truth comes from the allthreads capture's raw events:
each pass starts at the first kernel its worker's aten::embedding op launched, holds the tokens of
that op's ids, and its phase follows from them and the .model.json requests."""

from __future__ import annotations

import gzip
import json
import math
import re

import polars as pl
import pytest

import collectors
from attrib.app import analyze
from attrib.pipeline import attribute
from attrib.steps.passes import GPU_PIECE

from conftest import FIXTURES, raw_events

CAP = FIXTURES / "captured" / "issue36"
NONE, ALL = "cb_generate_batch", "cb_generate_batch_allthreads"
CALLS = ("cuda_runtime", "cuda_driver")


def _trace(name):
    return CAP / f"{name}.pt.trace.json.gz"


def _kernels(ev):
    return sorted((e for e in ev if e.get("cat") == "kernel"), key=lambda e: e["ts"])


def _launches(ev):
    """The runtime call of each kernel, kernels by start."""
    call = {e["args"]["correlation"]: e for e in ev if e.get("cat") in CALLS}
    return [call[k["args"]["correlation"]] for k in _kernels(ev)]


def _first_kernels(ev, op):
    """The CPU ops named `op` by start, and the index (kernels by start) of the first kernel each
    launched."""
    launched = _launches(ev)
    ops = sorted((e for e in ev if e.get("cat") == "cpu_op" and e["name"] == op), key=lambda e: e["ts"])
    return ops, [next(i for i, c in enumerate(launched)
                      if c["tid"] == e["tid"] and e["ts"] <= c["ts"] <= e["ts"] + e["dur"]) for e in ops]


def _truth(split=True):
    """Per pass of the allthreads capture: (index of its first kernel in the trace's kernels by
    start, tokens, phase), and the trace's kernels. split: the first pass from the span's first
    kernel (a split span's first piece starts at the span), else from its embedding op's."""
    ev = raw_events(_trace(ALL))
    ks = _kernels(ev)
    emb, starts = _first_kernels(ev, "aten::embedding")
    launched = _launches(ev)
    [span] = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("generate")]
    first = next(i for i, c in enumerate(launched) if c["ts"] >= span["ts"])
    model = json.loads((CAP / f"{ALL}.model.json").read_text())
    tokens = [math.prod(e["args"]["Input Dims"][1]) for e in emb]
    phase = ["prefill" if t == model["requests"] * model["prompt"] else
             "decode" if t == model["requests"] else "mixed" for t in tokens]
    return [first if split else starts[0], *starts[1:]], tokens, phase, len(ks)


def _measured(path):
    """Per step of attrib's attribution: (index of its first kernel by start, kernels, phase,
    tokens, tokens_from, marker)."""
    a = attribute(collectors.load(path))
    k = a.kernels.select("start_ns", "step").sort("start_ns").with_row_index("i")
    per = k.drop_nulls("step").group_by("step").agg(pl.col("i").min().alias("first"), pl.len())
    got = per.join(a.steps.select("step", "phase", "tokens", "tokens_from", "marker"), on="step")
    return got.sort("step").rows(named=True)


def test_the_allthreads_truth_is_one_prefill_then_decodes_of_one_token_per_request():
    starts, tokens, phase, n = _truth()
    assert n == len(_kernels(raw_events(_trace(NONE))))  # the same job, kernel for kernel
    assert tokens == [1024, 4, 4, 4, 4] and phase == ["prefill"] + ["decode"] * 4
    assert len(starts) == 5 and starts == sorted(starts)
    # each pass ends in its worker's argmax (the token pick): one inside each pass's range
    _ops, picks = _first_kernels(raw_events(_trace(ALL)), "aten::argmax")
    assert [sum(a <= p < b for p in picks) for a, b in zip(starts, [*starts[1:], n])] == [1] * 5


def test_passes_without_the_workers_ops_match_the_allthreads_capture_kernel_for_kernel():
    starts, tokens, phase, n = _truth()
    got = _measured(_trace(NONE))
    assert [r["first"] for r in got] == starts  # every boundary at the truth's kernel index
    ends = [*starts[1:], n]
    assert [r["len"] for r in got] == [b - a for a, b in zip(starts, ends)]
    assert [r["phase"] for r in got] == phase
    assert [r["tokens"] for r in got] == tokens
    assert {r["tokens_from"] for r in got} == {"stamp (batch x context_length)",
                                               "stamp (batch, 1 token each)"}
    assert all(r["marker"].endswith(GPU_PIECE) for r in got)
    # the allthreads capture itself splits at its embedding ops: the same steps, from shapes
    ref = _measured(_trace(ALL))
    assert [(r["first"], r["len"], r["phase"], r["tokens"]) for r in ref] == [
        (r["first"], r["len"], r["phase"], r["tokens"]) for r in got]


def test_the_analysis_has_a_prefill_and_four_decodes_and_keeps_naming_the_thread():
    an = analyze(_trace(NONE))
    got = {p.phase: (p.steps + len(p.excluded_steps), p.tokens_per_step) for p in an.phases}
    assert got == {"prefill": (1, 1024), "decode": (4, 4)}
    [note] = [n for n in an.notes if "forward passes found from the kernels" in n]
    assert note.startswith("generate (tokens=20): 5 forward passes") and "from the stamp" in note
    [thread] = [n for n in an.notes if n.startswith("thread ")]
    assert "profile_all_threads=True" in thread and "starting the profiler on that thread" in thread


def _rewritten(tmp_path, events, stamp=None):
    """The default capture with `events` (a function over the event list) applied, and its stamp
    (changed by `stamp`) beside it."""
    doc = json.loads(gzip.decompress(_trace(NONE).read_bytes()))
    doc["traceEvents"] = events(doc["traceEvents"])
    path = tmp_path / f"{NONE}.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    side = json.loads((CAP / f"{NONE}.pt.trace.json.gz.attrib.json").read_text())
    (tmp_path / f"{path.name}.attrib.json").write_text(json.dumps(stamp(side) if stamp else side))
    return path


_ROCM = ((r"^nvjet_\w+|^void cutlass::Kernel2<.*", "Cijk_Alik_Bljk_BBS_BH_MT64x64x64_MI16x16x16x1_SN"),
         (r"^cudnn_generated_fort_native_sdpa\w*", "attn_fwd"),
         (r"_cuda\b", "_hip"))
_HIP_CALLS = {"cudaLaunchKernel": "hipLaunchKernel", "cuLaunchKernel": "hipModuleLaunchKernel",
              "cuLaunchKernelEx": "hipExtModuleLaunchKernel"}


def _as_rocm(events):
    """The kernels named as a ROCm build names them (Tensile GEMMs, a CK attention kernel, hipified
    aten names) and the launches as HIP calls."""
    for e in events:
        if e.get("cat") == "kernel":
            for old, new in _ROCM:
                e["name"] = re.sub(old, new, e["name"])
        elif e.get("cat") in CALLS:
            e["name"] = _HIP_CALLS.get(e["name"], e["name"])
    return events


def test_rocm_kernel_names_give_the_same_passes(tmp_path):
    path = _rewritten(tmp_path, _as_rocm)
    names = {e["name"] for e in raw_events(path) if e.get("cat") == "kernel"}
    assert not [n for n in names if re.search(r"nvjet|cutlass|cudnn", n)]
    rocm = [(r["first"], r["len"], r["phase"], r["tokens"]) for r in _measured(path)]
    cuda = [(r["first"], r["len"], r["phase"], r["tokens"]) for r in _measured(_trace(NONE))]
    assert rocm == cuda and len(rocm) == 5


@pytest.mark.parametrize("batch", [2, 5])
def test_a_stamp_that_does_not_account_for_the_passes_leaves_them_unknown(tmp_path, batch):
    """batch x 5 passes != the span's 20 tokens: no schedule is guessed."""
    path = _rewritten(tmp_path, lambda ev: ev, lambda s: s | {"batch": batch})
    got = _measured(path)
    assert len(got) == 5 and {r["phase"] for r in got} == {"unknown"}
    assert {r["tokens"] for r in got} == {None}
    an = analyze(path)
    [note] = [n for n in an.notes if "forward passes found from the kernels" in n]
    assert "phases and tokens are unknown" in note


def test_a_recorded_thread_is_not_split_from_its_kernels():
    """The allthreads capture splits at its embedding ops alone: no pass found from kernels."""
    got = _measured(_trace(ALL))
    assert len(got) == 5 and not [r for r in got if r["marker"].endswith(GPU_PIECE)]


def test_without_step_annotations_the_passes_are_still_the_steps(tmp_path):
    """The capture without its step annotations (a plain profiler around generate_batch): the
    same passes, their phases and tokens unknown (no span says how many tokens it generated)."""
    def bare(events):
        return [e for e in events if e.get("cat") not in ("user_annotation", "gpu_user_annotation")]

    path = _rewritten(tmp_path, bare)
    got = _measured(path)
    starts, _tokens, _phase, n = _truth(split=False)
    assert [r["first"] for r in got] == starts
    assert {r["phase"] for r in got} == {"unknown"} and {r["tokens"] for r in got} == {None}
    assert sum(r["len"] for r in got) == n - starts[0]  # the setup before the first: no step
    [note] = [n for n in analyze(path).notes if "forward passes found from the kernels" in n]
    assert note.startswith("the trace: 5 forward passes") and "unknown" in note
