"""The speculative-decoding section of a phase (attrib.analysis.speculative), for every renderer:
summary lines, a per-round table and an expected-speedup-per-depth table. Each renderer passes
its own table function and escape."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from attrib.analysis.model import Phase
from attrib.analysis.speculative import Speculative

ROUND_HEAD = ("round", "proposed", "accepted", "verified", "draft ms", "verify ms", "other ms",
              "round ms")
DEPTH_HEAD = ("K", "tokens/round", "ms/round", "speedup")
Rows = Sequence[tuple[str, ...]]


def _n(x: float | None, nd: int = 2) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


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
        f" {_n(s.effective_tok_s, 1)} tok/s; {plain}"
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


COMPARE_KEYS = ("acceptance", "tokens_per_round", "effective_tok_s", "draft_pass_ms",
                "verify_pass_ms", "other_round_ms", "speedup", "best_k")


def _median(xs: list[float]) -> float | None:
    xs = sorted(xs)
    n = len(xs)
    if not n:
        return None
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


Doc = dict[str, object]


def compare_rows(base: list[Doc], cand: list[Doc]) -> list[Doc]:
    """Compare rows of two sides' phase documents that both hold a speculative loop: per figure the
    median over each side's traces and the difference; [] unless both sides have one."""
    b = [x for p in base if isinstance(x := p.get("speculative"), dict)]
    c = [x for p in cand if isinstance(x := p.get("speculative"), dict)]
    if not b or not c:
        return []
    out: list[Doc] = []
    for key in COMPARE_KEYS:
        vb = _median([float(v) for x in b if isinstance(v := x.get(key), (int, float))])
        vc = _median([float(v) for x in c if isinstance(v := x.get(key), (int, float))])
        delta = None if vb is None or vc is None else round(vc - vb, 4)
        out.append({"metric": key, "base": vb, "cand": vc, "delta": delta})
    return out


def compare_line(rows: list[dict[str, object]]) -> str | None:
    """The compare renderers' one line: speculative figures base -> cand."""
    if not rows:
        return None

    def v(x: object) -> str:
        return "-" if not isinstance(x, (int, float)) else f"{x:.4g}"

    parts = [f"{r['metric']} {v(r['base'])} -> {v(r['cand'])}" for r in rows]
    return "speculative: " + ", ".join(parts)
