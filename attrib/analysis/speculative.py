"""Speculative decoding: what each draft position costs and earns (issue #21).

From the rounds of a speculative loop (`attrib.steps.rounds`): per round the draft passes and
their ms, the verify pass and its ms, the rest (acceptance, cache crop, the proposer's own host
work), tokens proposed and accepted; in aggregate the acceptance, the acceptance by draft
position (of the rounds that proposed position i and accepted every position before it, the
share that accepted position i too), effective tok/s against plain decode, and for each depth K
the expected speedup, with cumulative(i) = the product of acceptance_by_position[1..i]:

    tokens(K) = 1 + sum_{i<=K} cumulative(i),   time(K) = K*draft + verify + other
    speedup(K) = tokens(K) / time(K) * plain_step_ms

with draft the median draft pass, verify and other the medians of the rounds at full depth.
Timing figures leave out each span's first round (it holds the prefill). Tokens are generated
ones (accepted + 1 a round), per sequence (HF's assisted loop runs one). Plain decode: the
baseline trace's plain step when given, else estimated from this trace: its median verify pass
(a pass over 1 + K tokens that is memory- or launch-bound costs about what a one-token step
costs).
"""

from __future__ import annotations

import msgspec
import polars as pl

from attrib.analysis.median import median
from attrib.steps.excluded import counted
from attrib.steps.rounds import rounds as find_rounds
from attrib.trace import Trace

NET_EFFECT = "speculative-net-effect"  # the rule that says it (rules.speculative)
DRAFT = "draft model"
NO_DRAFT = "no draft model (prompt lookup / n-gram)"


class Round(msgspec.Struct, frozen=True):
    """One round: draft passes, one verify pass of `verified` tokens; ms of each part."""

    round: int
    proposed: int
    accepted: int | None
    verified: int
    drafts: int
    draft_ms: float
    verify_ms: float
    other_ms: float
    round_ms: float
    prefill: bool


class Depth(msgspec.Struct, frozen=True):
    """The expected outcome of speculating K tokens a round (K = 0: plain decode)."""

    k: int
    tokens_per_round: float
    round_ms: float | None  # K = 0 without a plain decode step: unknown
    speedup: float | None


class Speculative(msgspec.Struct, frozen=True, kw_only=True):
    """A phase's speculative loop, measured (module docstring)."""

    proposer: str  # "draft model" | "no draft model (prompt lookup / n-gram)"
    rounds: tuple[Round, ...]
    proposed: int
    accepted: int
    acceptance: float | None
    acceptance_by_position: tuple[float | None, ...]
    rounds_by_position: tuple[int, ...]  # the rounds each position's share is of
    draft_pass_ms: float | None  # median draft pass (0 without a draft model)
    verify_pass_ms: float | None  # median verify pass at full depth
    # median rest of a full-depth round
    other_ms: float | None = msgspec.field(name="other_round_ms")
    tokens_per_round: float | None
    effective_tok_s: float | None
    plain_step_ms: float | None
    plain_from: str | None
    speedup: float | None  # effective tok/s over plain decode
    expected: tuple[Depth, ...]
    best_k: int | None
    verdict: str
    proposed_from: str
    accepted_from: str
    forward_from: str
    batch: int | None = None  # sequences, from the verify pass's attention query
    generated_tokens: int = 0  # accepted + 1 a round, over the timed rounds
    decode_ms: float = 0.0  # the timed rounds' wall time
    plain_tok_s: float | None = None  # plain decode, 1000 / plain_step_ms
    verified_tok_s: float | None = None  # the decode steps' tokens (1 + K a pass) over their time
    verify_ceiling_tok_s: float | None = None  # the verify pass's bandwidth ceiling in those


def _ms(ns: object) -> float:
    return round(float(ns or 0) / 1e6, 4)  # type: ignore[arg-type]


def _med(xs: list[float]) -> float | None:
    m = median(xs)
    return None if m is None else round(m, 4)


def plain_step_ms(steps: pl.DataFrame) -> float | None:
    """The median plain decode step: decode steps of one new token that are no speculative pass."""
    if steps.height == 0 or "phase" not in steps.columns:
        return None
    plain = steps.filter((pl.col("phase") == "decode") & pl.col("role").is_null()
                         & pl.col("step_ms").is_not_null(), *counted(steps))
    return _med([float(x) for x in plain["step_ms"]])


def _records(t: pl.DataFrame) -> tuple[Round, ...]:
    out = []
    for r in t.iter_rows(named=True):
        total = _ms(r["end_ns"] - r["start_ns"])
        out.append(Round(round=r["round"], proposed=r["proposed"], accepted=r["accepted"],
                         verified=r["verified"], drafts=r["drafts"], draft_ms=_ms(r["draft_ns"]),
                         verify_ms=_ms(r["verify_ns"]), other_ms=_ms(r["other_ns"]),
                         round_ms=total, prefill=bool(r["prefill"])))
    return tuple(out)


def _reached(rs: tuple[Round, ...], i: int) -> list[Round]:
    """Rounds (accepted known) that proposed position i and accepted every position before it."""
    return [r for r in rs if r.accepted is not None and r.proposed >= i and r.accepted >= i - 1]


def _depth(rs: tuple[Round, ...]) -> int:
    return max((r.proposed for r in rs if r.accepted is not None), default=0)


def by_position(rs: tuple[Round, ...]) -> tuple[float | None, ...]:
    """Per draft position i (1-based, index i-1): of the rounds that proposed i and accepted
    positions 1..i-1 (accepted known), the share that accepted i."""
    out: list[float | None] = []
    for i in range(1, _depth(rs) + 1):
        got = _reached(rs, i)
        ok = sum(1 for r in got if (r.accepted or 0) >= i)
        out.append(round(ok / len(got), 4) if got else None)
    return tuple(out)


def expected(acc: tuple[float | None, ...], draft: float, verify: float, other: float,
             plain: float | None) -> tuple[Depth, ...]:
    """Depth 0 (plain decode) and 1..len(acc): tokens a round, ms a round, speedup."""
    rows = [Depth(0, 1.0, plain, 1.0 if plain else None)]
    tokens, cum = 1.0, 1.0
    for k, a in enumerate(acc, start=1):
        cum *= a or 0.0
        tokens += cum
        ms = k * draft + verify + other
        sp = round(tokens / ms * plain, 4) if (plain and ms) else None
        rows.append(Depth(k, round(tokens, 4), round(ms, 4), sp))
    return tuple(rows)


FEW_ROUNDS = 3  # a position's acceptance from fewer rounds than this is a guess
BASELINE = "baseline trace"
PLAIN_VERIFY = ("estimate: this trace's verify pass (a memory- or launch-bound pass over 1 + K"
                " tokens costs about a plain one-token step)")
ESTIMATED = ("; plain decode estimated from this trace's verify pass (--baseline TRACE to"
             " measure it)")


def _verdict(best: Depth | None, measured: float | None, depth: int, seen: tuple[int, ...],
             plain_from: str | None) -> str:
    if best is None:
        return ("no plain decode step to compare with: pass --baseline TRACE"
                " (a plain decode of the target)")
    run = f" (as run, K={depth}: {measured:.2f}x plain decode)" if measured is not None else ""
    here = ESTIMATED if plain_from == PLAIN_VERIFY else ""
    if best.k == 0:
        return (f"speculation is a net loss here: no depth K=1..{depth} beats plain decode"
                f"{run}{here}")
    few = next((i for i, n in enumerate(seen[: best.k], 1) if n < FEW_ROUNDS), None)
    guess = f"; acceptance from position {few} on rests on < {FEW_ROUNDS} rounds" if few else ""
    return f"best K = {best.k}: expected {best.speedup:.2f}x plain decode{run}{guess}{here}"


def speculative(steps: pl.DataFrame, trace: Trace, kernels: pl.DataFrame,
                plain_ms: float | None = None) -> Speculative | None:
    """The speculative loop of a trace's steps, None without one. plain_ms: the target's plain
    decode step from a baseline trace (else measured here, when the trace has plain steps)."""
    t = find_rounds(steps, trace.ops, kernels, trace.launches)
    if t.height == 0:
        return None
    rs = _records(t)
    known = [r for r in rs if r.accepted is not None]
    proposed = sum(r.proposed for r in known)
    accepted = sum(r.accepted or 0 for r in known)
    acc = by_position(rs)
    depth = len(acc)
    timed = [r for r in rs if not r.prefill]
    full = [r for r in timed if r.proposed == depth] or timed
    per_draft = [r.draft_ms / r.drafts for r in full if r.drafts]
    draft = _med(per_draft) or 0.0
    verify = _med([r.verify_ms for r in full]) or 0.0
    other = _med([r.other_ms for r in full]) or 0.0
    plain_from = None
    if plain_ms is not None:
        plain_from = BASELINE
    elif verify:
        plain_ms, plain_from = verify, PLAIN_VERIFY
    tok = sum((r.accepted or 0) + 1 for r in timed)
    span_ms = sum(r.round_ms for r in timed)
    eff = round(tok / span_ms * 1e3, 3) if span_ms else None
    measured = round(eff * plain_ms / 1e3, 4) if (eff and plain_ms) else None
    exp = expected(acc, draft, verify, other, plain_ms)
    best = max(exp, key=lambda d: (d.speedup or 0.0, -d.k)) if plain_ms else None
    seen = tuple(len(_reached(rs, i)) for i in range(1, depth + 1))
    return Speculative(
        proposer=DRAFT if any(r.drafts for r in rs) else NO_DRAFT,
        rounds=rs, proposed=proposed, accepted=accepted,
        acceptance=round(accepted / proposed, 4) if proposed else None,
        acceptance_by_position=acc,
        rounds_by_position=seen,
        draft_pass_ms=draft, verify_pass_ms=verify, other_ms=other,
        tokens_per_round=round(tok / len(timed), 4) if timed else None, effective_tok_s=eff,
        plain_step_ms=plain_ms, plain_from=plain_from, speedup=measured, expected=exp,
        best_k=best.k if best else None, verdict=_verdict(best, measured, depth, seen, plain_from),
        proposed_from=_mode(t["proposed_from"]), accepted_from=_mode(t["accepted_from"]),
        forward_from=_mode(t["forward_from"]),
        batch=_batch(t["batch"]), generated_tokens=tok, decode_ms=round(span_ms, 4),
        plain_tok_s=round(1e3 / plain_ms, 3) if plain_ms else None)


def _batch(s: pl.Series) -> int | None:
    """The rounds' median sequences (None where no verify pass showed its query)."""
    m = median(s.drop_nulls().to_list())
    return None if m is None else int(m)


def _mode(s: pl.Series) -> str:
    vals = s.drop_nulls().unique(maintain_order=True).to_list()
    return ", ".join(str(v) for v in vals)
