"""Before/after: two sides (each one or more analysis documents of the same stack) compared per phase
and per component, with statistics over steps. The result is the `attrib.compare/1` document.

Per row (the whole step, then each component): the medians over the pooled steps of each side,
their difference, the two-sided Mann-Whitney U p-value, and a bootstrap 95% CI of the difference of
medians (fixed seed). With several traces on a side the bootstrap resamples traces first, then steps
within each drawn trace, so run-to-run variance widens the CI; with one trace per side that variance
is unknown and the document says so. Verdict: `faster` / `slower` when p < ALPHA, the CI excludes 0
and the change is at least `min_effect_pct` (and 1 microsecond); else `no significant change`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attrib.report import speculative as spec_report
from attrib.report.provenance_diff import provenance_diff

SCHEMA_ID = "attrib.compare/1"
ALPHA = 0.05
MIN_EFFECT_PCT = 3.0
MIN_EFFECT_MS = 0.001
BOOT = 2000
SEED = 20261130
SAME = "no significant change"


def _median(groups: list[np.ndarray]) -> float:
    return float(np.median(np.concatenate(groups)))


def _boot_medians(groups: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """BOOT bootstrap medians: traces drawn with replacement (when more than one), then steps within
    each drawn trace; vectorised, shorter traces padded with NaN."""
    lens = np.array([len(g) for g in groups])
    nmax, t = int(lens.max()), len(groups)
    padded = np.full((t, nmax), np.nan)
    for i, g in enumerate(groups):
        padded[i, : len(g)] = g
    tr = rng.integers(0, t, (BOOT, t)) if t > 1 else np.zeros((BOOT, 1), dtype=int)
    n = lens[tr]                                                     # (BOOT, t) steps of each drawn trace
    idx = (rng.random((BOOT, t, nmax)) * n[..., None]).astype(int)   # step draws within the trace
    vals = padded[tr[..., None], idx]
    vals[np.arange(nmax)[None, None, :] >= n[..., None]] = np.nan
    return np.nanmedian(vals.reshape(BOOT, -1), axis=1)


def stats(base: list[list[float]], cand: list[list[float]], min_effect_pct: float = MIN_EFFECT_PCT) -> dict[str, Any]:
    """base/cand: per trace, the per-step values (ms). The row's figures and verdict."""
    b = [np.asarray(g, float) for g in base if len(g)]
    c = [np.asarray(g, float) for g in cand if len(g)]
    if not b or not c:
        return {"n_base": sum(len(g) for g in b), "n_cand": sum(len(g) for g in c),
                "base_ms": None, "cand_ms": None, "delta_ms": None, "delta_pct": None, "p_value": None,
                "ci_low_ms": None, "ci_high_ms": None, "verdict": "not comparable"}
    mb, mc = _median(b), _median(c)
    pb, pc = np.concatenate(b), np.concatenate(c)
    from scipy.stats import mannwhitneyu  # scipy.stats takes ~0.5 s to import: only compare pays it

    p = float(mannwhitneyu(pb, pc, alternative="two-sided").pvalue) if (len(pb) > 1 or len(pc) > 1) else None
    if p is not None and np.isnan(p):
        p = 1.0  # every value identical on both sides
    rng = np.random.default_rng(SEED)
    diff = _boot_medians(c, rng) - _boot_medians(b, rng)
    lo, hi = (float(x) for x in np.percentile(diff, [2.5, 97.5]))
    delta = mc - mb
    pct = delta / mb * 100 if mb else None
    big = abs(delta) >= MIN_EFFECT_MS and (pct is None or abs(pct) >= min_effect_pct)
    sig = p is not None and p < ALPHA and (lo > 0 or hi < 0) and big
    return {"n_base": int(len(pb)), "n_cand": int(len(pc)),
            "base_ms": round(mb, 4), "cand_ms": round(mc, 4), "delta_ms": round(delta, 4),
            "delta_pct": None if pct is None else round(pct, 2), "p_value": None if p is None else float(f"{p:.4g}"),
            "ci_low_ms": round(lo, 4), "ci_high_ms": round(hi, 4),
            "verdict": SAME if not sig else ("slower" if delta > 0 else "faster")}


def _phase(docs: list[dict[str, Any]], phase: str) -> list[dict[str, Any]]:
    return [p for d in docs for p in d["phases"] if p["phase"] == phase]


def _series(phs: list[dict[str, Any]], key: str, component: str | None = None, per_token: bool = False) -> list[list[float]]:
    out = []
    for ph in phs:
        s = ph["per_step"]
        vals = s["components"].get(component, [0.0] * len(s["step"])) if component else s[key]
        toks = s["tokens"]
        if per_token:
            vals = [v / t for v, t in zip(vals, toks) if v is not None and t]
        out.append([v for v in vals if v is not None])
    return out


def _row(head: dict[str, Any], b: list[dict[str, Any]], c: list[dict[str, Any]], key: str, comp: str | None,
         min_effect: float) -> dict[str, Any]:
    row = head | stats(_series(b, key, comp), _series(c, key, comp), min_effect)
    tok = stats(_series(b, key, comp, True), _series(c, key, comp, True), min_effect)
    row["per_token"] = {k: tok[k] for k in ("base_ms", "cand_ms", "delta_ms", "delta_pct", "p_value",
                                            "ci_low_ms", "ci_high_ms", "verdict")}
    return row


def _cause(step: dict[str, Any], kernels: dict[str, Any], comps: list[dict[str, Any]]) -> str | None:
    if step["verdict"] == SAME or step["verdict"] == "not comparable":
        return None
    if kernels["verdict"] == SAME:
        return "host-side: the step time changed but the summed kernel time did not (launch, CPU or sync time)"
    moved = [f"{r['component']} {r['verdict']}" for r in comps if r["verdict"] in ("faster", "slower")]
    return "kernels: " + (", ".join(moved) if moved else f"summed kernel time {kernels['verdict']}, no single component")


def _gate(phases: dict[str, list[dict[str, Any]]], pct: float, runs_known: bool) -> dict[str, Any]:
    """Exit 1 when a phase's per-token GPU kernel time, or its per-token step time, is significantly
    slower by more than pct. A step-time change with the kernel time unchanged (host-side) is gated only
    when run-to-run variance is known (several traces per side): host time differs widely between two
    runs of the same stack, so one trace per side cannot tell a host regression from noise."""
    failed, reasons, not_gated = [], {}, {}
    for ph, rows in phases.items():
        step = rows[0]
        tok, ktok = step["per_token"], step["kernel_ms"]["per_token"]
        why = []
        if ktok["verdict"] == "slower" and (ktok["delta_pct"] or 0) > pct:
            why.append(f"GPU kernel time per token {ktok['delta_pct']:+.1f}%")
        if tok["verdict"] == "slower" and (tok["delta_pct"] or 0) > pct:
            if ktok["verdict"] == "slower" or runs_known:
                why.append(f"step time per token {tok['delta_pct']:+.1f}%")
            else:
                not_gated[ph] = (f"step time per token {tok['delta_pct']:+.1f}% with kernel time unchanged (host-side): "
                                 "not gated, run-to-run variance unknown with one trace per side (pass -b/-c runs)")
        if why:
            failed.append(ph)
            reasons[ph] = why
    return {"pct": pct, "failed_phases": failed, "reasons": reasons, "not_gated": not_gated,
            "exit_code": 1 if failed else 0}


def compare(base: list[dict[str, Any]], cand: list[dict[str, Any]], min_effect_pct: float = MIN_EFFECT_PCT,
            gate_pct: float | None = None) -> dict[str, Any]:
    """The attrib.compare/1 document of two sides' analysis documents."""
    names_b = [p["phase"] for d in base for p in d["phases"]]
    names_c = {p["phase"] for d in cand for p in d["phases"]}
    phases = [p for p in dict.fromkeys(names_b) if p in names_c]
    notes = [f"phase {p} only in {side}" for side, a, o in (("base", names_b, names_c), ("cand", names_c, set(names_b)))
             for p in sorted(set(a) - set(o))]
    out_phases, summary = {}, {}
    for ph in phases:
        b, c = _phase(base, ph), _phase(cand, ph)
        comps = list(dict.fromkeys(x["component"] for p in b + c for x in p["components"]))
        step = _row({"phase": ph}, b, c, "step_ms", None, min_effect_pct)
        kern = _row({"phase": ph}, b, c, "kernel_ms", None, min_effect_pct)
        rows = [_row({"component": x}, b, c, "", x, min_effect_pct) for x in comps]
        step["kernel_ms"] = {k: kern[k] for k in ("base_ms", "cand_ms", "delta_ms", "delta_pct", "p_value", "verdict",
                                                  "per_token")}
        step["cause"] = _cause(step, kern, rows)
        out_phases[ph] = [step] + sorted(rows, key=lambda r: -abs(r["delta_ms"] or 0))
        summary[ph] = {"steps": [sum(p["steps"] for p in b), sum(p["steps"] for p in c)],
                       "tokens_per_step": [b[0]["tokens_per_step"], c[0]["tokens_per_step"]], "cause": step["cause"]}
        spec = spec_report.compare_rows(b, c)
        if spec:
            summary[ph]["speculative"] = spec
    diff = provenance_diff(base, cand)
    n_b, n_c = len(base), len(cand)
    variance = ("unknown: one trace per side, so the statistics cover step-to-step variation only"
                if n_b == 1 and n_c == 1 else
                f"included: {n_b} base and {n_c} candidate traces; the bootstrap resamples traces, then steps")
    gate = None if gate_pct is None else _gate(out_phases, gate_pct, n_b > 1 and n_c > 1)
    return {"schema": SCHEMA_ID,
            "base": {"traces": [d["source"]["path"] for d in base]},
            "cand": {"traces": [d["source"]["path"] for d in cand]},
            "matched_baseline": not diff["mismatch"], "provenance_diff": diff,
            "run_to_run_variance": variance, "alpha": ALPHA, "min_effect_pct": min_effect_pct,
            "bootstrap": {"resamples": BOOT, "seed": SEED}, "phases": out_phases, "summary": summary,
            "gate": gate, "notes": notes}
