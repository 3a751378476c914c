"""Speculative decoding (#21 item 1) on H200 captures of HF assisted generation and prompt lookup
(bench/spec_capture.py). Truth: HF's own per-round proposed/accepted counts, recorded beside each
trace by wrapping its candidate generator (NAME.truth.json); times: sums of the raw events."""

from __future__ import annotations

import json
import statistics
from functools import cache

import pytest

from attrib.analysis.speculative import Speculative, speculative
from attrib.app import analysis
from attrib.options import Options
from attrib.pipeline import Attribution, attribute
from collectors import load
from tests.conftest import FIXTURES, raw_events

CAP = FIXTURES / "captured"
ASSISTED = ("spec_copy", "spec_noised", "spec_random")
ALL = (*ASSISTED, "spec_lookup")


@cache
def attributed(name: str) -> Attribution:
    return attribute(load(CAP / f"{name}.json.gz"))


@cache
def events(name: str) -> tuple[dict, ...]:
    return raw_events(CAP / f"{name}.json.gz")


def truth(name: str) -> list[dict]:
    return json.loads((CAP / f"{name}.truth.json").read_text())["rounds"]


@cache
def plain_ms() -> float:
    """The baseline's plain decode step by hand: its forward passes tile the generate annotation,
    each from its embedding op to the next (the last to the annotation's end); the first is the
    prefill."""
    ev = events("spec_plain")
    gen = next(e for e in ev if e.get("cat") == "user_annotation" and e["name"] == "generate")
    emb = sorted(e["ts"] for e in ev if e.get("cat") == "cpu_op" and e["name"] == "aten::embedding")
    ends = [*emb[1:], gen["ts"] + gen["dur"]]
    return statistics.median((b - a) / 1e3 for a, b in zip(emb[1:], ends[1:]))


@cache
def spec(name: str, plain: float | None = None) -> Speculative:
    a = attributed(name)
    got = speculative(a.steps, a.trace, a.kernels, plain)
    assert got is not None
    return got


def _roots(name: str) -> dict[str, list[dict]]:
    """The outermost module frames of each model instance, in time order."""
    out: dict[str, list[dict]] = {}
    for e in events(name):
        if e.get("cat") == "python_function" and e["name"].startswith("nn.Module: LlamaForCausalLM_"):
            out.setdefault(e["name"], []).append(e)
    return {k: sorted(v, key=lambda e: e["ts"]) for k, v in out.items()}


@pytest.mark.parametrize("name", ALL)
def test_rounds_are_hf_rounds(name: str) -> None:
    """Every round, its tokens proposed and accepted, exactly as HF counted them."""
    s, t = spec(name), truth(name)
    assert [(r.proposed, r.accepted) for r in s.rounds] == [(r["proposed"], r["accepted"]) for r in t]
    assert s.rounds[0].prefill and not any(r.prefill for r in s.rounds[1:])
    prop, acc = sum(r["proposed"] for r in t), sum(r["accepted"] for r in t)
    assert s.acceptance == pytest.approx(acc / prop, abs=0.02)


@pytest.mark.parametrize("name", ALL)
def test_acceptance_by_position_from_hf_counts(name: str) -> None:
    """Position i: of HF's rounds that proposed i and accepted 1..i-1, the share accepting i."""
    t = truth(name)
    depth = max(r["proposed"] for r in t)
    want = []
    for i in range(1, depth + 1):
        reach = [r for r in t if r["proposed"] >= i and r["accepted"] >= i - 1]
        want.append(sum(r["accepted"] >= i for r in reach) / len(reach) if reach else None)
    got = spec(name).acceptance_by_position
    assert [g is None for g in got] == [w is None for w in want]
    assert [g or 0 for g in got] == pytest.approx([w or 0 for w in want], abs=0.02)


def test_acceptance_levels() -> None:
    """The three drafts span the range: a copy of the target ~100%, a noised copy in between, an
    independent random model ~0."""
    acc = {n: spec(n).acceptance for n in ASSISTED}
    assert acc["spec_copy"] == 1.0 and acc["spec_random"] == 0.0
    assert 0.3 < (acc["spec_noised"] or 0) < 0.9


@pytest.mark.parametrize("name", ASSISTED)
def test_draft_and_verify_ms_are_the_model_frames(name: str) -> None:
    """Summed over the rounds after the prefill: draft ms = the draft model's outermost frames (the
    model with more passes: K a round), verify ms = the target's frames after its first, within 10%."""
    roots = _roots(name)
    assert len(roots) == 2
    draft, target = sorted(roots.values(), key=len, reverse=True)
    start = target[0]["ts"] + target[0]["dur"]
    want_draft = sum(e["dur"] for e in draft if e["ts"] >= start) / 1e3
    want_verify = sum(e["dur"] for e in target[1:]) / 1e3
    rs = spec(name).rounds[1:]
    assert sum(r.draft_ms for r in rs) == pytest.approx(want_draft, rel=0.10)
    assert sum(r.verify_ms for r in rs) == pytest.approx(want_verify, rel=0.10)
    assert sum(r.drafts for r in rs) == sum(1 for e in draft if e["ts"] >= start)


def test_prompt_lookup_has_no_draft_cost() -> None:
    """Prompt lookup: one model, no draft passes; every target pass after the first is a round, its
    forward the target's frame (within 10%); draft cost 0; plain decode measured in the trace
    itself (the rounds that proposed nothing)."""
    s = spec("spec_lookup")
    (frames,) = _roots("spec_lookup").values()
    assert len(s.rounds) == len(frames) == len(truth("spec_lookup"))
    assert s.proposer.startswith("no draft model") and s.draft_pass_ms == 0
    assert all(r.drafts == 0 and r.draft_ms == 0 for r in s.rounds)
    want = sum(e["dur"] for e in frames[1:]) / 1e3
    assert sum(r.verify_ms for r in s.rounds[1:]) == pytest.approx(want, rel=0.10)
    assert s.plain_from is not None and s.plain_from.startswith("this trace")


def _best(s: Speculative) -> tuple[int, list[float]]:
    """Best K recomputed from the reported figures: tokens(K) = 1 + sum of cumulative acceptance,
    time(K) = K draft + verify + other, speedup = tokens / time x plain."""
    assert s.plain_step_ms is not None
    sp, tokens, cum = [1.0], 1.0, 1.0
    for k, a in enumerate(s.acceptance_by_position, start=1):
        cum *= a or 0.0
        tokens += cum
        ms = k * (s.draft_pass_ms or 0) + (s.verify_pass_ms or 0) + (s.other_ms or 0)
        sp.append(tokens / ms * s.plain_step_ms)
    return max(range(len(sp)), key=lambda k: (sp[k], -k)), sp


@pytest.mark.parametrize("name", ALL)
def test_best_k_follows_from_the_numbers(name: str) -> None:
    """Against the baseline's plain decode step (by hand from its raw events) and, for prompt
    lookup, the trace's own plain rounds: best K and the net-loss verdict follow from the figures."""
    for s in (spec(name, plain_ms()), spec(name)):
        if s.plain_step_ms is None:
            assert s.best_k is None and "--baseline" in s.verdict
            continue
        best, sp = _best(s)
        assert s.best_k == best
        assert [d.speedup for d in s.expected] == pytest.approx(sp, rel=1e-3)
        assert ("net loss" in s.verdict) == (best == 0)
    assert spec(name, plain_ms()).plain_step_ms == pytest.approx(plain_ms(), rel=0.10)


def test_random_draft_is_a_net_loss() -> None:
    """Nothing accepted: every depth costs draft passes for no token."""
    s = spec("spec_random", plain_ms())
    assert s.best_k == 0 and s.verdict.startswith("speculation is a net loss here")
    assert s.speedup is not None and s.speedup < 1


def test_document_and_report() -> None:
    """--baseline through the analysis options: phases[].speculative in the document; the report
    section; a trace without a speculative loop (the baseline) gets none."""
    base = CAP / "spec_plain.json.gz"
    an = analysis(attributed("spec_noised"), Options(baseline=base))
    dec = an.phase("decode")
    assert dec is not None and dec.speculative is not None
    doc = an.to_dict()
    got = next(p for p in doc["phases"] if p["phase"] == "decode")["speculative"]
    assert len(got["rounds"]) == len(got["draft_ms"]) == len(got["verify_ms"]) == 6
    assert got["best_k"] == dec.speculative.best_k and got["plain_from"] == "baseline trace"
    from attrib.report import renderers
    from attrib.report.renderers import View
    for fmt in ("table", "md", "html"):
        text = renderers.by_name(fmt).render(an, View())
        assert "peculative" in text and dec.speculative.verdict.split(":")[0] in text
    a = attribute(load(base))
    assert speculative(a.steps, a.trace, a.kernels) is None


def test_bad_baseline_is_one_line_exit_2(capsys, tmp_path) -> None:
    """--baseline that is no trace: one line naming the file, exit 2 (a file derived from a real
    truth file: its first 40 bytes, cut)."""
    from attrib.cli import main

    cut = tmp_path / "cut.json"
    cut.write_bytes((CAP / "spec_plain.truth.json").read_bytes()[:40])
    for bad in (tmp_path / "missing.json.gz", cut):
        code = main(["analyze", str(CAP / "spec_copy.json.gz"), "--baseline", str(bad)])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and str(bad) in err[0], err
