"""The speculative-decoding section of a phase (attrib.analysis.speculative), for every renderer:
summary lines, a per-round table and an expected-speedup-per-depth table. Each renderer passes
its own table function and escape."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from attrib.analysis.model import Analysis, Phase
from attrib.analysis.speculative import NET_EFFECT, Speculative
from attrib.multi.speculative import GENERATED

ROUND_HEAD = ("round", "proposed", "accepted", "verified", "draft ms", "verify ms", "other ms",
              "round ms")
DEPTH_HEAD = ("K", "tokens/round", "ms/round", "speedup")
Rows = Sequence[tuple[str, ...]]


def _n(x: float | None, nd: int = 2) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def headline(an: Analysis, phase: str) -> str | None:
    """The verdict's line under a speculative phase: what its tok/s counts, and the net effect
    the rules found (None for any other phase)."""
    ph = next((p for p in an.phases if p.phase == phase), None)
    s = ph.speculative if ph is not None else None
    if ph is None or s is None:
        return None
    timed = sum(1 for r in s.rounds if not r.prefill)
    net = next((f.title for f in an.findings if f.rule == NET_EFFECT and f.phase == phase), None)
    return (f"speculative decoding: tok/s counts generated tokens ({s.generated_tokens} in"
            f" {timed} rounds after the prefill, {_n(s.tokens_per_round)} a round), not the"
            f" 1 + K each verify pass checks" + (f"; {net}" if net else ""))


def summary(s: Speculative) -> list[str]:
    """What the loop costs and earns, in a few lines."""
    by = zip(s.acceptance_by_position, s.rounds_by_position)
    pos = ", ".join(f"{i}: {_pct(a)} of {n}" for i, (a, n) in enumerate(by, 1))
    plain = (f"plain decode {_n(s.plain_step_ms)} ms/token ({s.plain_from})"
             if s.plain_step_ms else "no plain decode step known (--baseline TRACE)")
    return [
        f"speculative, {s.proposer}: {len(s.rounds)} rounds, {s.accepted}/{s.proposed} accepted"
        f" ({_pct(s.acceptance)}); by position {pos or '-'}",
        f"per round: draft pass {_n(s.draft_pass_ms)} ms each, verify {_n(s.verify_pass_ms)} ms,"
        f" other {_n(s.other_ms)} ms; {_n(s.tokens_per_round)} tokens a round,"
        f" {_n(s.effective_tok_s, 1)} tok/s generated; {plain}"
        + (f"; speedup {_n(s.speedup)}x" if s.speedup is not None else ""),
        s.verdict,
    ]


def round_rows(s: Speculative) -> list[tuple[str, ...]]:
    return [(f"{r.round}{' (prefill)' if r.prefill else ''}", str(r.proposed),
             "-" if r.accepted is None else str(r.accepted), str(r.verified), _n(r.draft_ms),
             _n(r.verify_ms), _n(r.other_ms), _n(r.round_ms)) for r in s.rounds]


def depth_rows(s: Speculative) -> list[tuple[str, ...]]:
    best = s.best_k
    return [(f"{d.k}{' (plain)' if d.k == 0 else ''}{' best' if d.k == best else ''}",
             _n(d.tokens_per_round), _n(d.round_ms), _n(d.speedup)) for d in s.expected]


Grid = Callable[[tuple[str, ...], list[tuple[str, ...]], str], list[str]]


def text(ph: Phase, grid: Grid) -> list[str]:
    """The terminal table's section (none without a speculative loop)."""
    s = ph.speculative
    if s is None:
        return []
    out = ["   " + x for x in summary(s)]
    out += ["   rounds:"] + grid(ROUND_HEAD, round_rows(s), "     ")
    out += ["   expected by depth K:"] + grid(DEPTH_HEAD, depth_rows(s), "     ")
    return out


def markdown(ph: Phase, table: Callable[[tuple[str, ...], Rows], list[str]],
             esc: Callable[[str], str]) -> list[str]:
    """The markdown report's section."""
    s = ph.speculative
    if s is None:
        return []
    out = ["", "**Speculative decoding**", ""] + [f"- {esc(x)}" for x in summary(s)]
    out += ["", "Rounds:", ""] + table(ROUND_HEAD, round_rows(s))
    out += ["", "Expected by depth K:", ""] + table(DEPTH_HEAD, depth_rows(s))
    return out


def html(ph: Phase, table: Callable[[tuple[str, ...], Rows], str],
         esc: Callable[[str], str]) -> str:
    """The HTML report's section."""
    s = ph.speculative
    if s is None:
        return ""
    return ("<h3>Speculative decoding</h3>" + "".join(f"<p>{esc(x)}</p>" for x in summary(s))
            + "<h4>Rounds</h4>" + table(ROUND_HEAD, round_rows(s))
            + "<h4>Expected by depth K</h4>" + table(DEPTH_HEAD, depth_rows(s)))


LABELS = {GENERATED: "generated tok/s", "plain_tok_s": "plain tok/s (the loop's estimate)"}


def compare_line(rows: list[dict[str, object]]) -> str | None:
    """The compare renderers' one line: generated tok/s and the loop's figures base -> cand."""
    if not rows:
        return None

    def v(x: object) -> str:
        return "-" if not isinstance(x, (int, float)) else f"{x:.4g}"

    def ratio(r: dict[str, object]) -> str:
        b, c = r["base"], r["cand"]
        ok = isinstance(b, (int, float)) and isinstance(c, (int, float)) and b
        return f" ({c / b:.2f}x)" if ok else ""  # type: ignore[operator]

    shown = [r for r in rows if r["base"] is not None or r["cand"] is not None]
    parts = [f"{LABELS.get(str(r['metric']), r['metric'])} {v(r['base'])} -> {v(r['cand'])}"
             + (ratio(r) if r["metric"] == GENERATED else "") for r in shown]
    return "speculative, tok/s in generated tokens: " + ", ".join(parts)
