"""Bottlenecks of each phase, ranked by the milliseconds per step a fix could recover.

Three sources, never added to each other (one row per place the time goes):
- a component's gap to its roofline (`gap_ms`: its time above max(bytes / BW, FLOPs / peak));
- the GPU idle time of a step (launch and CPU time between kernels: `idle_ms`);
- a rule's finding with its own estimate (`ms_per_step`) that no component or idle row already holds.
A finding that names a component (or idle time) is attached to that row (a finding that names
no phase, to the token-generating phases); the row's recoverable time
is the larger of the two estimates. Components with no bytes or FLOPs have no roofline: they are
listed after the ranked rows with their time and "recoverable unknown". A finding that states the
whole step's distance from its floor (SUMMARY_RULES) is the phase's total, not a row. Pure function of the
analysis document (its phases and findings); renderers only print what this returns.
"""

from __future__ import annotations

from typing import Any

MIN_UNPRICED_SHARE = 0.05
# findings whose estimate is the whole step's distance from its floor: the phase's total, not one more row
SUMMARY_RULES = ("decode-below-bandwidth-ceiling",)
TOKEN_PHASES = ("decode", "mixed")  # an unpriced component below this share of the phase is not listed


def finding_phase(f: dict[str, Any]) -> str | None:
    ev = f.get("evidence") if isinstance(f.get("evidence"), dict) else {}
    return f.get("phase") or ev.get("phase")


def finding_components(f: dict[str, Any]) -> list[str]:
    """The components a finding names: its own `component`, its evidence's, or its evidence's list."""
    ev = f.get("evidence") if isinstance(f.get("evidence"), dict) else {}
    c = f.get("component") or ev.get("component")
    if isinstance(c, str):
        return [c]
    comps = ev.get("components")
    if isinstance(comps, list):
        return [x["component"] for x in comps if isinstance(x, dict) and isinstance(x.get("component"), str)]
    return []


def finding_ms(f: dict[str, Any]) -> float | None:
    ms = f.get("ms_per_step")
    return float(ms) if isinstance(ms, (int, float)) and not isinstance(ms, bool) else None


def _about_idle(f: dict[str, Any]) -> bool:
    """Findings that explain the idle time cite it per step (P06 launch-bound: idle_ms_per_step; idle by
    cause: kernel_idle_ms_per_step, gpu_idle_ms_per_step)."""
    ev = f.get("evidence") if isinstance(f.get("evidence"), dict) else {}
    return any("idle_ms_per_step" in k for k in ev)


def _row(kind: str, component: str | None, ms: float | None, step_ms: float | None, what: str,
         evidence: dict[str, Any]) -> dict[str, Any]:
    return {"kind": kind, "component": component, "ms_per_step": None if ms is None else round(ms, 4),
            "share_of_step": round(ms / step_ms, 4) if (ms is not None and step_ms) else None,
            "what": what, "evidence": evidence, "findings": []}


def _component_rows(ph: dict[str, Any], step_ms: float | None) -> list[dict[str, Any]]:
    rows = []
    for c in ph["components"]:
        gap = c.get("gap_ms")
        if gap is None or gap <= 0:
            continue
        bound = c.get("bound") or "?"
        what = (f"{c['component']}: {c['ms']:.3f} ms/step, roofline {c['roofline_ms']:.3f} ms ({bound}-bound)"
                if c.get("roofline_ms") is not None else f"{c['component']}: {c['ms']:.3f} ms/step")
        rows.append(_row("roofline gap", c["component"], gap, step_ms, what, {
            "ms": c["ms"], "roofline_ms": c.get("roofline_ms"), "bound": c.get("bound"),
            "achieved_gbs": c.get("achieved_gbs"), "achieved_tflops": c.get("achieved_tflops"),
            "bytes_known_share": c.get("bytes_known_share"), "kernels_per_step": c.get("kernels")}))
    return rows


def phase_bottlenecks(ph: dict[str, Any], findings: list[dict[str, Any]]) -> dict[str, Any]:
    """{"ranked": rows by recoverable ms/step, "unpriced": components without a roofline, "total": the
    finding that states the whole step's distance from its floor, if any}."""
    step_ms = (ph.get("step_ms") or {}).get("median")
    rows = _component_rows(ph, step_ms)
    idle = ph.get("idle_ms")
    if idle:
        rows.append(_row("GPU idle", None, idle, step_ms,
                         f"GPU idle {idle:.3f} ms/step between kernels (launch, CPU and sync time)",
                         {"idle_ms": idle, "idle_fraction": ph.get("idle_fraction"), "kernel_ms": ph.get("kernel_ms")}))
    by_comp = {r["component"]: r for r in rows if r["component"]}
    idle_row = next((r for r in rows if r["kind"] == "GPU idle"), None)
    comps = {c["component"] for c in ph["components"]}
    total = None
    for i, f in enumerate(findings):
        if f.get("rule") in SUMMARY_RULES and finding_phase(f) == ph["phase"]:
            total = {"finding": i, "ms_per_step": finding_ms(f), "title": f.get("title")}
            continue
        if finding_phase(f) not in (None, ph["phase"]) or (finding_phase(f) is None and ph["phase"] not in TOKEN_PHASES):
            continue  # a finding that names no phase is about token generation (what every rule reads)
        named, ms = finding_components(f), finding_ms(f)
        if finding_phase(f) is None and not comps.intersection(named):
            continue  # a finding about the whole trace: the report lists it with all findings
        targets = [by_comp[c] for c in named if c in by_comp] or ([idle_row] if idle_row and _about_idle(f) else [])
        if not targets and ms is not None:
            comp = named[0] if len(named) == 1 else None
            targets = [_row("finding", comp, ms, step_ms, f.get("title") or f.get("rule", "?"), {})]
            rows.append(targets[0])
        for target in targets:
            target["findings"].append(i)
        if ms is not None and len(targets) == 1 and (targets[0]["ms_per_step"] is None or ms > targets[0]["ms_per_step"]):
            targets[0]["ms_per_step"] = round(ms, 4)
            targets[0]["share_of_step"] = round(ms / step_ms, 4) if step_ms else None
    rows.sort(key=lambda r: -(r["ms_per_step"] or 0))
    for n, r in enumerate(rows, 1):
        r["rank"] = n
    unpriced = [{"component": c["component"], "ms_per_step": c["ms"], "share": c["share"],
                 "why": "no bytes or FLOPs known: no roofline, recoverable time unknown"}
                for c in ph["components"] if c.get("roofline_ms") is None and (c.get("share") or 0) >= MIN_UNPRICED_SHARE]
    return {"ranked": rows, "unpriced": unpriced, "total": total}


def add_bottlenecks(doc: dict[str, Any]) -> dict[str, Any]:
    """Set each phase's `bottlenecks` from its figures and the document's findings; returns doc."""
    for ph in doc["phases"]:
        ph["bottlenecks"] = phase_bottlenecks(ph, doc.get("findings") or [])
    return doc
