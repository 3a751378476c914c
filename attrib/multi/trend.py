"""Rolling captures over time (`attrib trend DIR`): the `attrib.trend/1` document and its table.

Per file of one phase, in capture order: tokens per step, the mean step's ms per token, tok/s
(tokens over the mean step: compare's statistic, what the ledger sums to), GB/token and
the top cause of the step-time ledger (the profiler's own rows left out: they are the capture's
cost). Each file is compared with the `window` files before it at the same tokens per step (none
across a batch change) the way `attrib compare` compares two sides (attrib.multi.compare.stats:
Mann-Whitney U, bootstrap CI of the change of mean steps, the earlier files as several base runs); a change
of batch, of GB/token (by `min_effect_pct` or more) or of the top cause is flagged too.

A file whose step is host-bound and whose host differs from the files before it (its median
launch gap beyond attrib.multi.host_check.BOUND of theirs, either way; a declared host load;
descheduling) is not compared: its change measures the host (`vs_previous.host` says why, the
label reads "not comparable"), whatever the test says.

Each comparison carries its noise band (`noise_pct`): how far the change could be from its
mean and still be no change (its bootstrap CI's reach towards zero), never under
`min_effect_pct`. The label matches the figures: faster/slower is a change beyond the band
(compare's verdict), "same" one within it, shown with the band ("same +5.0% (±23%)"); a change
beyond the band that the test does not confirm reads "unclear".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attrib.analysis.model import Analysis, Phase

from attrib.multi import host_check
from attrib.multi.compare import ALPHA, CHANGED, MIN_EFFECT_PCT, SAME, _series, stats

SCHEMA_ID = "attrib.trend/1"
WINDOW = 3


def order_key(doc: Analysis) -> tuple[str, int, str]:
    """Capture order: the stamp's time, the sampler's sequence number, then the file name."""
    prov = doc.provenance
    sample = (prov.get("extra") or {}).get("sample") or {}
    seq = sample.get("seq")
    seq = seq if isinstance(seq, int) else -1
    return str(prov.get("created_utc") or ""), seq, str(doc.source.path)


def top_cause(phase: Phase) -> dict[str, Any] | None:
    """The phase's top cause (Phase.top_cause) as the trend document holds it."""
    r = phase.top_cause()
    if r is None:
        return None
    return {"cause": r.cause, "what": r.what, "ms_per_step": round(r.ms_per_step, 4),
            "share": None if r.share is None else round(r.share, 4)}


def host_cost(doc: Analysis, ph: Phase) -> host_check.HostCost | None:
    """The phase's host cost (attrib.multi.host_check) from its ledger and the stamp."""
    return host_check.cost(ph, doc.provenance)


def _row(doc: Analysis, ph: Phase) -> dict[str, Any]:
    tok = ph.tokens_per_step
    steps = [x for x in ph.per_step.step_ms if x is not None]
    med = round(sum(steps) / len(steps), 4) if steps else ph.step_ms.median  # the mean step
    prov = doc.provenance
    return {"path": doc.source.path, "created_utc": prov.get("created_utc"),
            "steps": ph.steps,
            "tokens_per_step": tok, "step_ms": med,
            "ms_per_token": round(med / tok, 4) if med is not None and tok else None,
            # a speculative loop's rate is its generated tokens over its rounds' time (the
            # analysis's), not the verify width over a step
            "achieved_tok_s": (ph.achieved_tok_s if ph.speculative is not None
                               else round(tok / med * 1e3, 1) if med and tok else None),
            "gb_per_token": ph.gb_per_token,
            "top_cause": top_cause(ph), "host": _host(host_cost(doc, ph))}


def _host(c: host_check.HostCost | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"host_share": round(c.host_share, 4),
            "us_per_launch": None if c.us_per_launch is None else round(c.us_per_launch, 2),
            "median_gap_us": c.median_gap_us, "stalls_ms": round(c.stalls_ms, 4),
            "load": c.load}


def _flags(row: dict[str, Any], prev: dict[str, Any], vs: dict[str, Any],
           min_effect: float) -> list[str]:
    out = []
    if vs.get("host"):
        out.append(f"not comparable: {vs['host']}")
    if vs["verdict"] in ("faster", "slower"):
        out.append(f"{vs['verdict']}: step time per token {vs['delta_pct']:+.1f}% "
                   f"(p {vs['p_value']:.2g})")
    if row["tokens_per_step"] != prev["tokens_per_step"]:
        out.append(f"tokens/step {prev['tokens_per_step']} -> {row['tokens_per_step']}")
    g0, g1 = prev["gb_per_token"], row["gb_per_token"]
    if g0 and g1 and abs(g1 / g0 - 1) * 100 >= min_effect:
        out.append(f"GB/token {g0:.4g} -> {g1:.4g} ({(g1 / g0 - 1) * 100:+.0f}%)")
    c0, c1 = prev["top_cause"], row["top_cause"]
    if c0 and c1 and (c0["cause"], c0["what"]) != (c1["cause"], c1["what"]):
        out.append(f"top cause {c0['cause']} {c0['what']} -> {c1['cause']} {c1['what']}")
    return out


def trend(docs: Sequence[Analysis], phase: str = "decode", window: int = WINDOW,
          min_effect_pct: float = MIN_EFFECT_PCT) -> dict[str, Any]:
    """The attrib.trend/1 document of analyses (any order: sorted by order_key)."""
    docs = sorted(docs, key=order_key)
    rows: list[dict[str, Any]] = []
    phases: list[Phase] = []
    costs: list[host_check.HostCost | None] = []
    notes = []
    for doc in docs:
        ph = next((p for p in doc.phases if p.phase == phase), None)
        if ph is None:
            notes.append(f"{doc.source.path}: no {phase} phase (skipped)")
            continue
        row = _row(doc, ph)
        if rows:
            same = [p for p in phases if p.tokens_per_step == ph.tokens_per_step]
            # since the last change
            base = same[-window:] if same and same[-1] is phases[-1] else []
            before = _series(base, "step_ms", per_token=True)
            now = _series([ph], "step_ms", per_token=True)
            vs = stats(before, now, min_effect_pct).to_dict()
            vs["noise_pct"] = noise_pct(vs, min_effect_pct)
            here = host_cost(doc, ph)
            before_costs = [costs[phases.index(p)] for p in base]
            vs["host"] = (host_check.reason(here, host_check.median_of(before_costs))
                          if base else None)
            if not base:
                vs["verdict"] = "not comparable: tokens/step changed"
            elif vs["host"]:
                vs["verdict"] = "not comparable: host"
            keys = ("base_ms", "cand_ms", "delta_pct", "p_value", "ci_low_ms", "ci_high_ms",
                    "noise_pct", "verdict", "host")
            row["vs_previous"] = {"files": len(base), **{k: vs[k] for k in keys}}
            row["vs_previous"]["label"] = label(row["vs_previous"])
            row["changes"] = _flags(row, rows[-1], vs, min_effect_pct)
        else:
            row["vs_previous"], row["changes"] = None, []
        rows.append(row)
        phases.append(ph)
        costs.append(host_cost(doc, ph))
    return {"schema": SCHEMA_ID, "phase": phase, "files": len(docs), "window": window,
            "alpha": ALPHA, "min_effect_pct": min_effect_pct,
            "compared_on": "step ms per token, each file against the window of files "
                           "before it at the same tokens per step",
            "host_bound": host_check.BOUND,
            "rows": rows, "changed": [r["path"] for r in rows if r["changes"]], "notes": notes}


def noise_pct(vs: dict[str, Any], min_effect_pct: float) -> float | None:
    """The noise band of a comparison, percent of the earlier files' mean step: the distance from
    the change to its CI bound nearer zero (so a change beyond the band is one whose CI
    excludes zero), at least `min_effect_pct`; None when not tested."""
    base, delta, lo, hi = vs["base_ms"], vs["delta_ms"], vs["ci_low_ms"], vs["ci_high_ms"]
    if not base or delta is None or lo is None or hi is None:
        return None
    reach = delta - lo if delta >= 0 else hi - delta
    return round(max(reach / base * 100, min_effect_pct), 1)


def label(vs: dict[str, Any] | None) -> str:
    """The row's "vs before" cell: the verdict its figures bear out, with the change and the
    noise band."""
    if vs is None or not vs["files"]:
        return "-"
    delta, band = vs["delta_pct"], vs.get("noise_pct")
    if vs.get("host"):
        return "not comparable: host" + (f" {delta:+.1f}%" if delta is not None else "")
    if delta is None:
        return vs["verdict"] if vs["verdict"] != SAME else "same"
    change = f"{delta:+.1f}%"
    if band is None:
        return f"{vs['verdict']} {change}"
    word = (vs["verdict"] if vs["verdict"] in CHANGED else
            "same" if abs(delta) <= band else "unclear")
    return f"{word} {change} (±{band:.2g}%)"
