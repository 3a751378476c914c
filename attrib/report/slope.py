"""Context slope: traces of one stack at different context lengths -> per component, decode time per
step against context, t = a + b*L (scipy linregress over every step of every trace, L the step's
context), b in microseconds per 1k context tokens with its 95% CI; and the context at which attention
overtakes the weight-bound components (where the two fitted lines cross). The attrib.slope/1 document.
"""

from __future__ import annotations

from typing import Any


from attrib.report.provenance_diff import provenance_diff

SCHEMA_ID = "attrib.slope/1"
WEIGHT_BOUND = ("qkv_proj", "o_proj", "mlp_gate_up", "mlp_down", "moe_router", "moe_experts",
                "moe_shared_expert", "lm_head")
MIN_CONTEXTS = 2
# stamp fields that follow the context by construction (a cache sized to the prompt): not a different stack
CONTEXT_KEYS = ("context_length", "tokens_per_step", "model_config.max_position_embeddings")
SAME_BYTES = 0.01    # bytes per step this close in every trace: the same work
DRIFT_SHARE = 0.10   # the same work whose fitted time moves by more than this share of it: drift


def _points(phs: list[dict[str, Any]], get) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for ph in phs:
        s = ph["per_step"]
        for i, ctx in enumerate(s["context"]):
            y = get(s, i)
            if ctx is not None and y is not None:
                xs.append(float(ctx))
                ys.append(float(y))
    return xs, ys


def fit(xs: list[float], ys: list[float]) -> dict[str, Any] | None:
    """slope (us per 1k context), its 95% CI, intercept (us), r2, n; None below 3 points or 2 contexts."""
    if len(xs) < 3 or len(set(xs)) < MIN_CONTEXTS:
        return None
    from scipy.stats import linregress, t as student_t  # ~0.5 s to import: only slope pays it

    r = linregress(xs, ys)
    half = student_t.ppf(0.975, len(xs) - 2) * r.stderr
    k = 1e3 * 1e3  # ms per token -> us per 1k tokens
    def num(x: float, nd: int) -> float:   # plain floats: numpy's are not JSON
        return round(float(x), nd)
    return {"slope_us_per_1k": num(r.slope * k, 3), "ci_low": num((r.slope - half) * k, 3),
            "ci_high": num((r.slope + half) * k, 3), "intercept_us": num(r.intercept * 1e3, 3),
            "r2": num(r.rvalue ** 2, 4), "n": len(xs)}


def _same_work(rows: list[dict[str, Any] | None]) -> bool:
    """The component ran the same kernels moving the same bytes in every trace."""
    if any(r is None or r.get("bytes") is None for r in rows) or not rows:
        return False
    b = [float(r["bytes"]) for r in rows if r is not None]
    kernels = {r["kernels"] for r in rows if r is not None}
    return len(kernels) == 1 and max(b) <= (1 + SAME_BYTES) * min(b)


def drift(phs: list[dict[str, Any]], fits: dict[str, dict[str, Any]], lo: float,
          hi: float) -> list[dict[str, Any]]:
    """Components whose work is the same in every trace (kernels and bytes per step) but whose time
    moved with the context by more than DRIFT_SHARE of it, significantly: clock or process drift
    between the traces, not context."""
    out = []
    for c, f in fits.items():
        rows = [next((r for r in p["components"] if r["component"] == c), None) for p in phs]
        if not _same_work(rows) or f["ci_low"] <= 0 <= f["ci_high"]:
            continue
        mean_us = 1e3 * sum(r["ms"] for r in rows if r is not None) / len(rows)
        moved = f["slope_us_per_1k"] * (hi - lo) / 1e3
        if mean_us and abs(moved) > DRIFT_SHARE * mean_us:
            out.append({"component": c, "moved_us": round(moved, 3), "mean_us": round(mean_us, 3),
                        "kernels": rows[0]["kernels"] if rows[0] else None})
    return out


def _crossover(att: dict[str, Any] | None, weights: dict[str, Any] | None, lo: float, hi: float) -> dict[str, Any]:
    if att is None or weights is None:
        return {"context": None, "why": "no attention or no weight-bound component in the traces"}
    if att["ci_low"] <= 0:
        return {"context": None, "why": "the attention slope is not significantly above 0: no crossover claimed"}
    da = att["slope_us_per_1k"] - weights["slope_us_per_1k"]
    gap = weights["intercept_us"] - att["intercept_us"]  # at L = 0
    if gap <= 0:
        return {"context": 0, "why": "attention already takes longer than the weight-bound components at any context"}
    if da <= 0:
        return {"context": None, "why": "attention grows no faster than the weight-bound components: no crossover"}
    ctx = round(gap / da * 1e3)
    where = "within" if lo <= ctx <= hi else "extrapolated beyond"
    return {"context": ctx, "why": f"{where} the measured contexts ({lo:g}..{hi:g})"}


def slope(docs: list[dict[str, Any]], phase: str = "decode") -> dict[str, Any]:
    """The attrib.slope/1 document of analysis documents of one stack at several contexts."""
    phs = [p for d in docs for p in d["phases"] if p["phase"] == phase]
    traces = []
    for d in docs:
        ph = next((p for p in d["phases"] if p["phase"] == phase), None)
        ctx = [c for c in (ph["per_step"]["context"] if ph else []) if c is not None]
        traces.append({"path": d["source"]["path"], "steps": ph["steps"] if ph else 0,
                       "context_min": min(ctx) if ctx else None, "context_max": max(ctx) if ctx else None,
                       "context_from": ph.get("context_from") if ph else None})
    comps = list(dict.fromkeys(c["component"] for p in phs for c in p["components"]))
    distinct = {tr["context_min"] for tr in traces if tr["context_min"] is not None}
    if len(distinct) < MIN_CONTEXTS:
        return _no_slope(phase, traces, f"no slope: the traces share one context ({sorted(distinct)}); "
                         "a slope needs traces at two or more contexts")
    rows = []
    step_fit = fit(*_points(phs, lambda s, i: s["step_ms"][i]))
    if step_fit:
        rows.append({"component": "step"} | step_fit)
    kern_fit = fit(*_points(phs, lambda s, i: s["kernel_ms"][i]))
    if kern_fit:
        rows.append({"component": "kernels"} | kern_fit)
    fits = {}
    for c in comps:
        f = fit(*_points(phs, lambda s, i, c=c: (s["components"].get(c) or [0.0] * len(s["step"]))[i]))
        if f:
            fits[c] = f
            rows.append({"component": c} | f)
    present = [c for c in WEIGHT_BOUND if c in comps]
    weights = fit(*_points(phs, lambda s, i: sum((s["components"].get(c) or [0.0] * len(s["step"]))[i]
                                                 for c in present))) if present else None
    contexts = [x for tr in traces for x in (tr["context_min"], tr["context_max"]) if x is not None]
    notes = []
    lo, hi = min(contexts, default=0), max(contexts, default=0)
    drifted = drift(phs, fits, lo, hi)
    for d in drifted:
        notes.append(f"drift: {d['component']} ran the same {d['kernels']} kernels and bytes per step in "
                     f"every trace, yet its time moved {d['moved_us']:+.1f} us over the contexts "
                     f"({d['mean_us']:.1f} us): clock or process drift between traces, not context")
    batches = sorted({p["tokens_per_step"] for p in phs if p.get("tokens_per_step") is not None})
    if len(batches) > 1:
        notes.append(f"not one batch: the traces run {batches} tokens per {phase} step; "
                     "slopes mix batch and context")
    wb = [sum(float(r["bytes"] or 0) for r in p["components"] if r["component"] in present) for p in phs]
    if present and min(wb) > 0 and max(wb) > (1 + SAME_BYTES) * min(wb):
        notes.append("not one model? the weight-bound components move "
                     + ", ".join(f"{b / 1e6:.1f}" for b in wb) + " MB per step across the traces")
    if len(distinct) < 3:
        notes.append(f"{len(distinct)} distinct contexts: a slope from fewer than 3 is weakly supported")
    missing = [tr["path"] for tr in traces if tr["context_min"] is None]
    if missing:
        notes.append("no context known (no attention shapes, vLLM annotation or provenance context_length): "
                     + ", ".join(missing))
    for w in provenance_diff(docs, docs)["within_side"]:
        if w["side"] == "base" and w["key"] not in CONTEXT_KEYS:
            notes.append(f"not one stack? the traces differ in {w['key']}: {w['values']}")
    notes.append("steps of one trace are not independent samples: the CIs assume they are")
    crossover = _crossover(fits.get("attention"), weights, lo, hi)
    if any(d["component"] in present for d in drifted):
        crossover = {"context": None, "why": "the weight-bound components drifted between traces (same "
                                             "kernels, time moved): no crossover claimed"}
    return {"schema": SCHEMA_ID, "phase": phase, "traces": traces, "rows": rows,
            "weight_bound": {"components": present} | (weights or {}),
            "drift": drifted, "crossover": crossover, "notes": notes}


def _no_slope(phase: str, traces: list[dict[str, Any]], why: str) -> dict[str, Any]:
    return {"schema": SCHEMA_ID, "phase": phase, "traces": traces, "rows": [],
            "weight_bound": {"components": []}, "drift": [],
            "crossover": {"context": None, "why": why}, "notes": [why]}


def render(doc: dict[str, Any]) -> str:
    lines = [f"{tr['path']}: {tr['steps']} {doc['phase']} steps, context {tr['context_min']}..{tr['context_max']}"
             f" ({tr['context_from'] or 'unknown'})" for tr in doc["traces"]]
    head = ("component", "us/1k ctx", "95% CI", "intercept us", "r2", "n")
    body = [(r["component"], f"{r['slope_us_per_1k']:.3f}", f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]",
             f"{r['intercept_us']:.1f}", f"{r['r2']:.3f}", str(r["n"])) for r in doc["rows"]]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines += ["", f"== {doc['phase']} time per step against context: t = a + b*L"]
    lines += ["   " + "  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r))
              for r in [head, *body]]
    w, x = doc["weight_bound"], doc["crossover"]
    if w.get("components"):
        lines.append(f"weight-bound ({', '.join(w['components'])}): {w.get('slope_us_per_1k', '-')} "
                     f"us/1k ctx, intercept {w.get('intercept_us', '-')} us")
    lines.append(f"attention overtakes them at context: {x['context'] if x['context'] is not None else '-'} ({x['why']})")
    lines += [f"note: {n}" for n in doc["notes"]]
    return "\n".join(lines) + "\n"
