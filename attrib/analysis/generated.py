"""The phases of a speculative loop in generated tokens (issue 37 item 3).

The decode phase's steps are the verify passes, each over 1 + K tokens; what the loop emits is
accepted + 1 a round. Its tok/s is the speculative block's generated tokens over the rounds' wall
time (draft passes and the loop's own work included); its ceiling is the generated tokens of a
round over the round's memory floor (the verify pass's floor and the mean draft passes' floors);
its GB/token the round's bytes over those tokens. The figures in verified tokens stay in the
speculative block. The draft phase emits no token: no rate, ceiling or GB/token of its own.
"""

from __future__ import annotations

from msgspec.structs import replace

from attrib.analysis.model import Phase
from attrib.analysis.speculative import Speculative

VERIFY_TOKENS = "verify pass of 1 + K tokens"
DRAFT_TOKENS = "draft pass: proposals, no output (the decode phase counts generated tokens)"


def _floor_ms(ph: Phase | None) -> float | None:
    """A step's memory floor: its tokens over its bandwidth ceiling."""
    if ph is None or not ph.tokens_per_step or not ph.ceiling_tok_s:
        return None
    return 1e3 * ph.tokens_per_step / ph.ceiling_tok_s


def _r(x: float | None, nd: int) -> float | None:
    return None if x is None else round(x, nd)


def _per_round(verify: float | None, draft: float | None, drafts: float) -> float | None:
    """A round's figure: the verify pass's plus `drafts` draft passes' (None where one is
    unknown)."""
    if not verify or (drafts and draft is None):
        return None
    return verify + drafts * (draft or 0.0)


def decode_in_generated(ph: Phase, draft: Phase | None, s: Speculative) -> Phase:
    """The decode phase of loop `s` with its rate, ceiling and GB/token in generated tokens."""
    timed = [r for r in s.rounds if not r.prefill]
    drafts = sum(r.drafts for r in timed) / len(timed) if timed else 0.0
    tokens = s.tokens_per_round
    floor = _per_round(_floor_ms(ph), _floor_ms(draft), drafts)
    both = _per_round(ph.bytes_per_step, draft.bytes_per_step if draft else None, drafts)
    spec = replace(s, verified_tok_s=ph.achieved_tok_s, verify_ceiling_tok_s=ph.ceiling_tok_s)
    src = f"{VERIFY_TOKENS}, {ph.tokens_from}" if ph.tokens_from else VERIFY_TOKENS
    return replace(ph, achieved_tok_s=s.effective_tok_s,
                   ceiling_tok_s=_r(tokens / floor * 1e3, 2) if (tokens and floor) else None,
                   gb_per_token=_r(both / tokens / 1e9, 6) if (both and tokens) else None,
                   tokens_from=src, speculative=spec)


def draft_without_rate(ph: Phase) -> Phase:
    """The draft phase: its passes propose tokens the decode phase counts when accepted."""
    return replace(ph, achieved_tok_s=None, ceiling_tok_s=None, gb_per_token=None,
                   tokens_from=DRAFT_TOKENS)
