"""A speculative run in generated tokens (issue 37 item 3), on the H200 captures of HF assisted
generation and prompt lookup (tests/fixtures/captured/spec_*). Truth, never attrib's output: HF's
own per-round counts (NAME.truth.json: accepted + 1 tokens a round) over the raw events' wall time
of the rounds after the prefill (the first round's first model frame to the `generate`
annotation's end, whose length is the truth file's generate_s within 1%); plain decode by hand
from the baseline trace captured with the same target (tests/test_speculative.plain_ms) or, for the
trace's own estimate, the median target frame of the full-depth rounds after the prefill."""

from __future__ import annotations

import json
import re
import statistics
from functools import cache

import jsonschema
import pytest

from attrib.analysis.model import Analysis
from attrib.analysis.speculative import NET_EFFECT
from attrib.app import analysis
from attrib.options import Options
from attrib.pipeline import attribute
from attrib.report import renderers
from attrib.report.renderers import View
from attrib.multi.sweep import rows as sweep_rows
from collectors import load
from tests.conftest import ROOT, raw_events as events_of
from tests.test_speculative import (ALL, CAP, _generate, attributed, base, events, hand_rounds,
                                    plain_ms, truth)

LOSS = ("spec_copy", "spec_noised", "spec_random", "spec_big_random", "spec_lookup")
WIN = ("spec_big_draft",)


@cache
def analysed(name: str, baseline: bool = False) -> Analysis:
    opts = Options(baseline=CAP / f"{base(name)}.json.gz") if baseline else Options()
    return analysis(attributed(name), opts)


def generated(name: str) -> tuple[int, float]:
    """HF's tokens of the rounds after the prefill and their raw wall time (ms)."""
    tokens = sum(r["accepted"] + 1 for r in truth(name)[1:])
    return tokens, sum(h["ms"] for h in hand_rounds(name)[1:])


def true_tok_s(name: str) -> float:
    tokens, ms = generated(name)
    return tokens / ms * 1e3


def verify_by_hand(name: str) -> float:
    """The median target frame (ms) of the full-depth rounds after the prefill."""
    t, hand = truth(name), hand_rounds(name)
    depth = max(r["proposed"] for r in t)
    return statistics.median(h["verify"] for r, h in list(zip(t, hand))[1:] if r["proposed"] == depth)


def finding(an: Analysis):
    return next(f for f in an.findings if f.rule == NET_EFFECT)


@pytest.mark.parametrize("name", ALL)
def test_raw_wall_clock_is_the_truth_files(name: str) -> None:
    """The raw `generate` annotation lasts the truth file's generate_s (the two clocks agree)."""
    gen = _generate(events(name))
    want = json.loads((CAP / f"{name}.truth.json").read_text())["generate_s"]
    assert gen["dur"] / 1e6 == pytest.approx(want, rel=0.01)


@pytest.mark.parametrize("name", ALL)
def test_tok_s_counts_generated_tokens(name: str) -> None:
    """Headline, phase, summary, speculative block and sweep row: generated tokens over wall time
    within 5% of the truth (the verify width's rate of the assisted runs was above 1.5x that); the
    draft phase has no
    rate; the note and every renderer's headline say what tok/s counts."""
    an, want = analysed(name), true_tok_s(name)
    dec = an.phase("decode")
    assert dec is not None and dec.speculative is not None
    s = dec.speculative
    assert dec.achieved_tok_s == pytest.approx(want, rel=0.05)
    assert s.effective_tok_s == dec.achieved_tok_s
    assert s.generated_tokens == generated(name)[0]
    assert s.decode_ms == pytest.approx(generated(name)[1], rel=0.05)
    ps = next(p for p in an.summary.phases if p.phase == "decode")
    assert ps.achieved == dec.achieved_tok_s
    assert s.verified_tok_s is not None
    if name != "spec_lookup":  # the verify width's rate (its median pass: 1 + 3 tokens) was higher
        assert s.verified_tok_s > 1.5 * dec.achieved_tok_s
    row = next(r for r in sweep_rows(an, name) if r["phase"] == "decode")
    assert row["achieved_tok_s"] == dec.achieved_tok_s
    draft = an.phase("draft")
    assert draft is None or (draft.achieved_tok_s is None and draft.ceiling_tok_s is None)
    assert any(n.startswith("decode is a speculative loop: its tok/s") for n in an.notes)
    schema = json.loads((ROOT / "attrib" / "data" / "attrib.analysis-1.schema.json").read_text())
    jsonschema.validate(an.to_dict(), schema)
    for fmt in ("table", "md", "html"):
        text = renderers.by_name(fmt).render(an, View())
        assert f"decode, {dec.steps} steps: {dec.achieved_tok_s:.1f} tok/s" in text
        assert "tok/s counts generated tokens" in text


@pytest.mark.parametrize("name", ALL)
def test_ceiling_and_gb_per_token_count_generated_tokens(name: str) -> None:
    """The ceiling: a round's generated tokens over its memory floor (the verify pass's and the
    mean draft passes'); GB/token: a round's bytes over them; both from the phases' own figures."""
    an = analysed(name)
    dec, draft = an.phase("decode"), an.phase("draft")
    s = dec.speculative
    timed = [r for r in s.rounds if not r.prefill]
    drafts = sum(r.drafts for r in timed) / len(timed)
    draft_bytes = 0.0 if draft is None else draft.bytes_per_step
    draft_floor = 0.0 if draft is None else draft.bytes_per_step / an.device.roofline_bw / 1e6
    floor = dec.bytes_per_step / an.device.roofline_bw / 1e6 + drafts * draft_floor
    assert dec.ceiling_tok_s == pytest.approx(s.tokens_per_round / floor * 1e3, rel=0.05)
    want_gb = (dec.bytes_per_step + drafts * draft_bytes) / s.tokens_per_round / 1e9
    assert dec.gb_per_token == pytest.approx(want_gb, rel=1e-3)


@pytest.mark.parametrize("name", ALL)
def test_batch_is_the_sequences(name: str) -> None:
    """The batch fact is the sequences (the embedding input [B, q] of every pass, raw), not the
    verify pass's 1 + K tokens (tokens/step)."""
    dims = {e["args"]["Input Dims"][1][0] for e in events(name)
            if e.get("cat") == "cpu_op" and e["name"] == "aten::embedding"}
    (want,) = dims
    an = analysed(name)
    batch = next(f for f in an.summary.facts if f.name == "batch")
    assert batch.value == str(want) == "1" and "verify" in batch.source
    if name != "spec_lookup":  # its median verify pass proposes nothing (1 token)
        assert an.phase("decode").tokens_per_step == 4


@pytest.mark.parametrize("name", ALL)
def test_net_effect_against_the_trace_itself(name: str) -> None:
    """Without --baseline: plain decode ~ the verify pass (the median target frame of the
    full-depth rounds, by hand, within 5%); the finding says loss or win as the truth does (HF's
    generated tok/s against the baseline's plain step by hand); its title's figures, acceptance at
    position 1 (HF's counts) and the time it costs a round (round ms less the round's tokens at the
    plain step, by hand within 5%); ranked among the decode actions by that time."""
    an = analysed(name)
    s, f = an.phase("decode").speculative, finding(an)
    verify = verify_by_hand(name)
    assert s.plain_step_ms == pytest.approx(verify, rel=0.05)
    assert s.plain_from.startswith("estimate: this trace's verify pass")
    truth_loss = true_tok_s(name) < 1e3 / plain_ms(base(name))
    assert truth_loss == (name in LOSS)
    t = truth(name)
    reach = [r for r in t if r["proposed"] >= 1]
    first = sum(r["accepted"] >= 1 for r in reach) / len(reach)
    plain = 1e3 / verify
    tokens, ms = generated(name)
    cost = ms / (len(t) - 1) - tokens / (len(t) - 1) * verify
    assert f"acceptance {first:.0%} at position 1" in f.title
    assert "estimated from this trace" in f.phrase() and "verify pass" in f.phrase()
    assert f.evidence["effective_tok_s"] == pytest.approx(true_tok_s(name), rel=0.05)
    assert f.evidence["plain_tok_s"] == pytest.approx(plain, rel=0.05)
    vs = f"{s.effective_tok_s:.1f} tok/s vs ~{s.plain_tok_s:.3g} without it"
    if truth_loss:
        assert f.title == f"speculation is a net loss: {vs}; acceptance {first:.0%} at position 1"
        assert f.ms_per_step == pytest.approx(cost, rel=0.05) and cost > 0
        ps = next(p for p in an.summary.phases if p.phase == "decode")
        act = next(a for a in ps.actions if a.rule == NET_EFFECT)
        assert act.ms_per_step == pytest.approx(f.ms_per_step, abs=1e-3)
        assert all(a.ms_per_step >= act.ms_per_step for a in ps.actions[: act.rank - 1])
    else:  # a net win is said, not ranked as a problem
        assert f.title.startswith(f"speculation pays: {vs} (") and f.severity == "info"
        assert f.ms_per_step is None and cost < 0
        assert "net loss" not in renderers.by_name("table").render(an, View())


@pytest.mark.parametrize("name", ALL)
def test_net_effect_against_the_baseline(name: str) -> None:
    """With --baseline: plain decode is the baseline's plain step (by hand), said without '~'; the
    same loss or win."""
    an = analysed(name, baseline=True)
    s, f = an.phase("decode").speculative, finding(an)
    assert s.plain_step_ms == pytest.approx(plain_ms(base(name)), rel=0.02)
    assert s.plain_from == "baseline trace" and "~" not in f.title
    assert f.title.startswith("speculation is a net loss" if name in LOSS else "speculation pays")
    assert f.evidence["plain_tok_s"] == pytest.approx(1e3 / plain_ms(base(name)), rel=0.02)


def test_remedies_follow_the_figures() -> None:
    """0% acceptance: off, and a draft that predicts the target; a copy of the target accepted
    100%: off, and a cheaper draft (its pass costs ~ the verify pass, by hand); prompt lookup: its
    n-grams; the small derived draft that pays: keep it."""
    random, copy = finding(analysed("spec_random")), finding(analysed("spec_copy"))
    assert random.remedy.startswith("off: no depth K=1..3 beats plain decode")
    assert "position 1 is accepted 0% of the time" in random.remedy
    drafts = [d for h in hand_rounds("spec_copy")[1:] for d in h["draft"]]
    share = statistics.median(drafts) / verify_by_hand("spec_copy")
    assert share > 0.8 and copy.remedy.startswith("off:")
    said = re.search(r"a draft pass costs [\d.]+ ms, (\d+)% of the", copy.remedy)
    assert said and int(said[1]) == pytest.approx(100 * share, abs=5)
    assert "smaller or faster draft" in copy.remedy
    assert "prompt's n-grams" in finding(analysed("spec_lookup")).remedy
    assert finding(analysed("spec_big_draft")).remedy == "keep it"


def test_compare_counts_generated_tokens(capsys, analysed_once) -> None:
    """compare of the plain decode (base) and the speculative run of the same target (cand): the
    speculative rows open with each side's tok/s in generated tokens: the plain step's and the
    loop's, each within 5% of its truth by hand. Each trace analysed once for JSON and table."""
    from attrib.cli import main

    args = [str(CAP / f"{n}.json.gz") for n in ("spec_big_plain", "spec_big_draft")]
    assert main(["compare", *args, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["metric"]: r for r in doc["summary"]["decode"]["speculative"]}
    got = rows["generated_tok_s"]
    assert got["base"] == pytest.approx(1e3 / plain_ms("spec_big_plain"), rel=0.05)
    assert got["cand"] == pytest.approx(true_tok_s("spec_big_draft"), rel=0.05)
    assert rows["acceptance"]["base"] is None and rows["acceptance"]["cand"] > 0.8
    assert main(["compare", *args]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"generated tok/s {got['base']:.4g} -> {got['cand']:.4g}" in out


def test_compare_verdict_is_per_generated_token(capsys, analysed_once) -> None:
    """compare's decode verdict on a speculative side is the ms per generated token (a round's
    time over its accepted + 1 tokens; its verify steps are not the unit): 0% -> 89% acceptance
    with the same target is faster, a 0%-acceptance loop against its plain decode slower; each
    side's figure is 1000 / its generated tok/s from the truth files, within 5%. Each trace
    analysed once for JSON and table."""
    from attrib.cli import main

    for base, cand, verdict in (("spec_big_random", "spec_big_draft", "faster"),
                                ("spec_plain", "spec_random", "slower")):
        args = [str(CAP / f"{n}.json.gz") for n in (base, cand)]
        main(["compare", *args, "--format", "json"])
        doc = json.loads(capsys.readouterr().out)
        tok = doc["phases"]["decode"][0]["per_token"]
        assert tok["verdict"] == verdict, (base, cand, tok)
        want = 1e3 / true_tok_s(cand)
        assert tok["cand_ms"] == pytest.approx(want, rel=0.05)
        main(["compare", *args])
        out = " ".join(capsys.readouterr().out.split())
        assert f"verdict decode: {verdict}, ms per generated token" in out


def test_batched_and_continuous_generate_are_no_speculative_loop() -> None:
    """A plain generate() of 4 sequences (`ledger_generate`: every decode pass's embedding input is
    [4, 1], raw) and a continuous-batching generate_batch of packed requests
    (`issue36/cb_generate_batch_allthreads`: 4 tokens a step over a growing cache, the shapes of a
    lookup verify pass, but no ids cat growing from it) get no speculative block, no net-effect
    finding, and keep their tok/s in the tokens each step processes."""
    gen = CAP / "ledger_generate.json.gz"
    dims = [e["args"]["Input Dims"][1] for e in events_of(gen)
            if e.get("cat") == "cpu_op" and e["name"] == "aten::embedding"]
    assert dims[1:] == [[4, 1]] * 7
    for path in (gen, CAP / "issue36" / "cb_generate_batch_allthreads.pt.trace.json.gz"):
        an = analysis(attribute(load(path)))
        dec = an.phase("decode")
        assert dec.speculative is None and not any(f.rule == NET_EFFECT for f in an.findings)
        assert dec.achieved_tok_s == pytest.approx(dec.tokens_per_step / dec.step_ms.mean * 1e3,
                                                   rel=1e-3)
