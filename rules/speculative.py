"""Speculative decoding's net effect: generated tok/s against plain decode (issue 37 item 3).

Plain decode is the baseline trace's plain step (--baseline), else estimated from the trace
itself: a plain step ~ its median verify pass (attrib.analysis.speculative). A net loss is a
finding ranked by the time it costs a round (one round a decode step): the round's ms less what
plain decode takes for the round's generated tokens; its remedy names depth, draft or off from
the figures. A net win is said as such (info, no time to recover).
"""

from __future__ import annotations

from attrib.analysis.model import Analysis, Phase
from attrib.analysis.speculative import BASELINE, NET_EFFECT, NO_DRAFT, Speculative
from attrib.pipeline import Attribution
from rules.finding import Finding, r
from rules.thresholds import Thresholds

RULE = NET_EFFECT
LOW_ACCEPTANCE = 0.5  # position 1 accepted less often: the draft does not predict the target
COSTLY_DRAFT = 0.25  # a draft pass above this share of the verify pass: a smaller draft pays


def _how(s: Speculative) -> str:
    """How plain decode was known."""
    if s.plain_from == BASELINE:
        return f"plain decode: the baseline trace's {s.plain_step_ms:.2f} ms step"
    return (f"plain decode estimated from this trace: a plain step ~ its {s.plain_step_ms:.2f} ms"
            f" verify pass (a memory- or launch-bound pass over 1 + K tokens costs about a"
            f" one-token step; --baseline TRACE measures it)")


def _vs(s: Speculative) -> str:
    tilde = "" if s.plain_from == BASELINE else "~"
    return f"{s.effective_tok_s:.1f} tok/s vs {tilde}{s.plain_tok_s:.3g} without it"


def _acceptance(s: Speculative) -> str:
    first = s.acceptance_by_position[0] if s.acceptance_by_position else None
    return "acceptance unknown" if first is None else f"acceptance {first:.0%} at position 1"


def _depth(s: Speculative) -> str | None:
    """A better depth than the one run, when the figures expect one to beat plain decode."""
    depth = len(s.acceptance_by_position)
    best = next((d for d in s.expected if d.k == s.best_k), None)
    if best is None or not best.k or best.k == depth or best.speedup is None:
        return None
    return (f"depth: K={best.k} is expected at {best.speedup:.2f}x plain decode against K={depth}"
            f" as run (num_assistant_tokens / prompt_lookup_num_tokens)")


def _remedy(s: Speculative, loss: bool) -> str:
    first = s.acceptance_by_position[0] if s.acceptance_by_position else None
    draft, verify = s.draft_pass_ms or 0.0, s.verify_pass_ms or 0.0
    parts = []
    if loss and s.best_k == 0:
        parts.append(f"off: no depth K=1..{len(s.acceptance_by_position)} beats plain decode at"
                     f" this acceptance and these costs; generate without it (no assistant_model"
                     f" / prompt_lookup_num_tokens)")
    if (d := _depth(s)) is not None:
        parts.append(d)
    if first is not None and first < LOW_ACCEPTANCE and s.proposer == NO_DRAFT:
        parts.append(f"proposer: the prompt's n-grams predict position 1 {first:.0%} of the time;"
                     f" prompt lookup pays where the output copies the input (edits, summaries,"
                     f" code)")
    elif first is not None and first < LOW_ACCEPTANCE:
        parts.append(f"draft: position 1 is accepted {first:.0%} of the time, so this draft does"
                     f" not predict the target; a draft distilled from it or of its family agrees"
                     f" more")
    if verify and draft > COSTLY_DRAFT * verify:
        parts.append(f"draft: a draft pass costs {draft:.2f} ms, {draft / verify:.0%} of the"
                     f" {verify:.2f} ms verify pass; a smaller or faster draft")
    if verify and (s.other_ms or 0.0) > verify:
        parts.append(f"loop: {s.other_ms:.2f} ms a round outside the passes (acceptance, cache"
                     f" crop, host work), more than the verify pass")
    if not parts:
        parts.append("keep it" if not loss else "off, or a cheaper draft")
    return "; ".join(parts)


def _finding(ph: Phase, s: Speculative) -> Finding | None:
    gen, plain, step = s.effective_tok_s, s.plain_tok_s, s.plain_step_ms
    timed = [x for x in s.rounds if not x.prefill]
    tokens = s.tokens_per_round
    if not (gen and plain and step and timed and tokens):
        return None
    round_ms = s.decode_ms / len(timed)
    cost = round_ms - tokens * step  # a round's ms beyond plain decode's for its tokens
    loss = gen < plain
    evidence = {"phase": ph.phase, "effective_tok_s": gen, "plain_tok_s": plain,
                "plain_step_ms": step, "plain_from": s.plain_from, "speedup": r(gen / plain, 4),
                "rounds": len(timed), "generated_tokens": s.generated_tokens,
                "decode_ms": s.decode_ms, "round_ms": r(round_ms, 4), "tokens_per_round": tokens,
                "acceptance": s.acceptance,
                "acceptance_position_1": (s.acceptance_by_position or (None,))[0],
                "draft_pass_ms": s.draft_pass_ms, "verify_pass_ms": s.verify_pass_ms,
                "other_round_ms": s.other_ms, "best_k": s.best_k,
                "depth": len(s.acceptance_by_position)}
    said = (f"{len(timed)} rounds of {round_ms:.2f} ms make {tokens:.2f} tokens each, which plain"
            f" decode makes in {tokens * step:.2f} ms; {_how(s)}")
    if loss:
        return Finding(rule=RULE, severity="high", phase=ph.phase, ms_per_step=cost,
                       title=f"speculation is a net loss: {_vs(s)}; {_acceptance(s)}",
                       summary=f"{cost:.2f} ms a round lost: {said}", evidence=evidence,
                       remedy=_remedy(s, loss))
    return Finding(rule=RULE, severity="info", phase=ph.phase,
                   title=(f"speculation pays: {_vs(s)} ({gen / plain:.2f}x); {_acceptance(s)}"),
                   summary=f"{-cost:.2f} ms a round saved: {said}", evidence=evidence,
                   remedy=_remedy(s, loss))


def net_effect(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """Per phase with a speculative loop: its generated tok/s against plain decode."""
    out = []
    for ph in an.phases:
        if ph.speculative is not None and (f := _finding(ph, ph.speculative)) is not None:
            out.append(f)
    return out
