"""Two sides' speculative loops compared: the generated tok/s of each phase, then each figure of
the loop, the median over a side's traces (the rows compare's speculative block holds)."""

from __future__ import annotations

from collections.abc import Sequence

from attrib.analysis.median import median
from attrib.analysis.model import Phase

Doc = dict[str, object]
# (the row's name, the Speculative field it reads)
COMPARE_KEYS = (("acceptance", "acceptance"), ("tokens_per_round", "tokens_per_round"),
                ("plain_tok_s", "plain_tok_s"), ("draft_pass_ms", "draft_pass_ms"),
                ("verify_pass_ms", "verify_pass_ms"), ("other_round_ms", "other_ms"),
                ("speedup", "speedup"), ("best_k", "best_k"))
GENERATED = "generated_tok_s"  # the phase's tok/s: generated tokens on either kind of side


def _row(metric: str, base: list[object], cand: list[object]) -> Doc:
    vb = median([float(v) for v in base if isinstance(v, (int, float))])
    vc = median([float(v) for v in cand if isinstance(v, (int, float))])
    delta = None if vb is None or vc is None else round(vc - vb, 4)
    return {"metric": metric, "base": vb, "cand": vc, "delta": delta}


def compare_rows(base: Sequence[Phase], cand: Sequence[Phase]) -> list[Doc]:
    """Compare rows of two sides' phases where either holds a speculative loop: first
    the phases' tok/s (generated tokens on both sides: a plain side's decode rate, a speculative
    side's accepted + 1 a round), then per figure of the loop the median over each side's traces
    and the difference (None on a side without one); [] unless a side has one."""
    b = [p.speculative for p in base if p.speculative is not None]
    c = [p.speculative for p in cand if p.speculative is not None]
    if not b and not c:
        return []
    out = [_row(GENERATED, [p.achieved_tok_s for p in base], [p.achieved_tok_s for p in cand])]
    return out + [_row(name, [getattr(x, field) for x in b], [getattr(x, field) for x in c])
                  for name, field in COMPARE_KEYS]
