"""The analysis document (schema attrib.analysis/1) of an Attribution.

Per-step figures are medians over a phase's steps; a figure that cannot be known is null and, where
useful, `notes` says why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from attrib.cost.budget import Budget
from attrib.cost.component_bytes import component_table
from attrib.pipeline import Attribution
from attrib.roofline.arch import Arch, detect
from attrib.roofline.model import kernel_roofline
from attrib.report.series import step_series
from attrib.roofline.template import unknown_device_note
from attrib.roofline.tables import MIN_KNOWN, phase_figures, roofline_rows
from attrib.steps.context import step_context
from attrib.trace import Trace

SCHEMA_ID = "attrib.analysis/1"
TOP_KERNELS = 10


def _q(s: pl.Series, q: float) -> float | None:
    v = s.drop_nulls()
    return None if v.len() == 0 else float(v.quantile(q, interpolation="linear"))


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(float(x), nd)


def _f(x: Any) -> float | None:
    return None if x is None else float(x)


def _phase_doc(phase: str, steps: pl.DataFrame, k: pl.DataFrame, arch: Arch | None,
               budget: Budget | None, what_if: bool, context: pl.DataFrame, t0_ns: int,
               top_n: int) -> dict[str, Any]:
    n = steps.height
    tokens = steps["tokens"].drop_nulls()
    comp = roofline_rows(component_table(k, steps, budget, phase), arch, what_if)
    ev = (k.group_by("component", "evidence").len().group_by("component")
          .agg(pl.struct("evidence", "len").alias("ev")))
    comp = comp.join(ev, on="component", how="left")
    total = float(comp["ms"].sum()) or 1.0
    comps = [{
        "component": r["component"], "kernels": int(round(r["kernels"])), "ms": _r(r["ms"]),
        "share": _r(r["ms"] / total), "bytes": _f(r["bytes"]), "flops": _f(r["flops"]),
        "achieved_gbs": _r(r["achieved_gbs"], 1), "achieved_tflops": _r(r["achieved_tflops"], 3),
        "roofline_ms": _r(r["roofline_ms"]), "gap_ms": _r(r["gap_ms"]), "intensity": _r(r["intensity"], 3),
        "bound": r["bound"], "dtype": r["dtype"], "bytes_from": r["bytes_from"],
        "bytes_known_share": _r(r["known_ms"] / r["ms"]) if (r["bytes"] is not None and r["ms"]) else None,
        "inconsistent": r["inconsistent"], "partial": bool(r["partial"]),
        "estimated_share": _r(r["estimated_ms"] / r["ms"]) if (r["bytes"] is not None and r["ms"]) else None,
        "evidence": {e["evidence"]: e["len"] for e in (r["ev"] or [])},
        "evidence_per_step": {e["evidence"]: _r(e["len"] / max(n, 1), 2) for e in (r["ev"] or [])},
    } for r in comp.sort(["ms", "component"], descending=[True, False]).iter_rows(named=True)]
    known = pl.col("bytes").is_not_null()
    top = (k.group_by("name", "component").agg(
        pl.len().alias("calls"), pl.col("dur_ns").sum().alias("ns"),
        pl.when(known.any()).then(pl.col("bytes").sum()).alias("bytes"), pl.col("flops").sum().alias("flops"),
        pl.col("dtype").drop_nulls().first().alias("dtype"), pl.col("dur_ns").filter(known).sum().alias("known_ns"))
        .sort("ns", descending=True).head(top_n)
        .with_columns((pl.col("known_ns") / 1e6).alias("ms")))
    top = kernel_roofline(top, arch, what_if) if top.height else top.with_columns(pl.lit(None, pl.Float64).alias("achieved_gbs"))
    if "intensity" not in top.columns:
        top = top.with_columns(*[pl.lit(None, pl.Float64).alias(c) for c in ("achieved_tflops", "intensity")],
                               pl.lit(None, pl.Utf8).alias("bound"))
    tops = [{"name": r["name"], "component": r["component"], "calls": int(r["calls"]),
             "calls_per_step": _r(r["calls"] / max(n, 1), 2), "ms": _r(r["ns"] / 1e6 / max(n, 1)),
             "bytes": _f(r["bytes"] / max(n, 1)) if r["bytes"] is not None else None,
             "flops": _f(r["flops"] / max(n, 1)) if r["flops"] is not None else None,
             "achieved_gbs": _r(r["achieved_gbs"], 1), "achieved_tflops": _r(r["achieved_tflops"], 3),
             "intensity": _r(r["intensity"], 3), "bound": r["bound"],
             "bytes_known_share": _r(r["known_ns"] / r["ns"]) if r["ns"] else None} for r in top.iter_rows(named=True)]
    tps = int(tokens.median()) if tokens.len() else None
    ctx_from = steps.select("step").join(context, on="step")["context_from"].drop_nulls()
    step_med = _q(steps["step_ms"], 0.5)
    fig = phase_figures(steps, k, comp, arch, what_if)
    return {
        "phase": phase, "steps": n, "tokens_per_step": tps,
        "tokens_from": steps["tokens_from"].drop_nulls().mode().first() if tokens.len() else None,
        "step_ms": {"median": _r(step_med), "p10": _r(_q(steps["step_ms"], 0.1)), "p90": _r(_q(steps["step_ms"], 0.9))},
        "kernel_ms": _r(_q(steps["kernel_ms"], 0.5)), "idle_fraction": _r(_q(steps["idle_fraction"], 0.5)),
        "idle_ms": _r(_q(steps["idle_ms"], 0.5)),
        "bytes_per_step": fig["bytes_per_step"], "gb_per_token": _r(fig["gb_per_token"], 6),
        "bytes_known_share": _r(fig["bytes_known_share"]),
        "achieved_tok_s": _r(tps / (step_med / 1e3), 2) if (tps and step_med) else None,
        "ceiling_tok_s": _r(fig["ceiling_tok_s"], 2), "excluded_components": fig["excluded"],
        "communication_share": _r(sum(c["ms"] or 0 for c in comps if c["component"] == "communication") / total),
        "components": comps, "top_kernels": tops,
        "_known_ms": fig["known_ms"] * n, "_total_ms": fig["total_ms"] * n,
        "context_from": ctx_from.mode().first() if ctx_from.len() else None,
        "per_step": step_series(steps, k, context, t0_ns, [c["component"] for c in comps]),
    }


def excluded_steps(out: pl.DataFrame) -> list[dict[str, Any]]:
    """The steps left out of a phase's figures: step, why (compile | warm-up), step_ms, kernels, kernel_ms."""
    return [{"step": int(r["step"]), "reason": r["excluded"], "step_ms": _r(r["step_ms"]),
             "kernels": int(r["n_kernels"] or 0), "kernel_ms": _r(r["kernel_ms"])}
            for r in out.sort("step").iter_rows(named=True)]


def distributed(trace: Trace) -> dict[str, Any] | None:
    """The process group of the traced rank (Kineto `distributedInfo`): backend, rank, world size."""
    info = trace.meta.top.get("distributedInfo") if trace.meta.top else None
    if not isinstance(info, dict):
        return None
    size = info.get("world_size")
    return {"backend": info.get("backend"), "rank": info.get("rank"),
            "world_size": int(size) if isinstance(size, int) else None}


def _device(trace: Trace, arch: Arch | None, detected_from: str) -> dict[str, Any]:
    if arch is not None:
        return arch.device_json(detected_from) | {"vendor": trace.meta.vendor}
    d = trace.meta.devices[0] if trace.meta.devices else {}
    name = d.get("product_name") or d.get("name") or None
    return {"arch": None, "name": name, "detected_from": "unknown", "peak_bw_gbs": None, "sustained_bw_gbs": None,
            "vendor": trace.meta.vendor}


def document(a: Attribution, phase: str | None = None, arch: Arch | None = None, arch_from: str | None = None,
             budget: Budget | None = None, arch_file: Path | None = None, top: int = TOP_KERNELS) -> dict[str, Any]:
    """The attrib.analysis/1 document for an attribution (optionally one phase only; `top` kernels per phase).

    arch: the device to measure against (detected from the trace when None); arch_from says where a
    given arch came from ("override" for a what-if projection onto another chip)."""
    t, k = a.trace, a.kernels
    notes = list(a.notes) + list(t.meta.warnings)
    if arch is None:
        names = t.kernels["name"].unique().head(20000).to_list()
        arch, arch_from = detect(t.meta.devices, t.meta.vendor, names, extra=arch_file)
        if arch is None:
            notes.append(unknown_device_note(t.meta.devices))
    elif arch_from == "override":
        notes.append(f"what-if: kernel times measured on the traced device, bytes and FLOPs set against {arch.name} "
                     f"({arch.arch}): rooflines and the ceiling are a projection")
    if arch is not None and arch.bandwidth()[1] == "peak":
        notes.append(f"no sustained bandwidth known for {arch.name}: rooflines use the {arch.peak_bw_gbs:g} GB/s peak")
    what_if = arch_from == "override"
    if budget is not None and budget.context is None:
        notes.append(f"{budget.source} without --context: decode components are not budgeted from it (K/V reads need "
                     "the context); it prices only ops whose weights the trace does not show")
    phases = []
    context = step_context(a.steps, t.ops, dict(t.meta.provenance))
    t0_ns = int(a.steps["window_start"].min() or 0) if a.steps.height else 0
    order = {"prefill": 0, "mixed": 1, "decode": 2}
    for ph in sorted(a.steps["phase"].unique().to_list(), key=lambda p: (order.get(p, 3), p)):
        if phase and ph != phase:
            continue
        st = a.steps.filter(pl.col("phase") == ph)
        out = st.filter(pl.col("excluded").is_not_null()) if "excluded" in st.columns else st.clear()
        keep = st.join(out.select("step"), on="step", how="anti") if out.height < st.height else st
        doc_ph = _phase_doc(ph, keep, k.filter((pl.col("phase") == ph) & pl.col("step").is_in(keep["step"].implode())),
                            arch, budget, what_if, context, t0_ns, top)
        phases.append(doc_ph | {"excluded_steps": excluded_steps(out if keep is not st else out.clear())})
        if out.height and keep is st:
            notes.append(f"{ph}: every step is {out['excluded'][0]}; none left out of the figures")
    total_ns = int(t.kernels["dur_ns"].sum() or 0)
    in_steps = k.filter(pl.col("step").is_not_null())
    attributed = in_steps.filter(pl.col("component") != "other")["dur_ns"].sum()
    step_ns = in_steps["dur_ns"].sum()
    # the same figure as the phase lines: priced time whose bytes count, over the phases' time
    known_ms, phase_ms = sum(p.pop("_known_ms") for p in phases), sum(p.pop("_total_ms") for p in phases)
    for ph in phases:
        share = ph.get("bytes_known_share")
        if ph["gb_per_token"] is not None and share is not None and share < 0.95:
            notes.append(f"{ph['phase']}: bytes known for {share:.0%} of kernel time; gb_per_token is a lower bound")
        elif ph["gb_per_token"] is None and share is not None and share < MIN_KNOWN:
            notes.append(f"{ph['phase']}: bytes known for {share:.0%} of kernel time, too little for GB/token "
                         "(give --capture with the graph-capture trace, or --model CONFIG)")
    for ph in phases:
        if ph["excluded_components"]:
            notes.append(f"{ph['phase']}: {', '.join(ph['excluded_components'])} left out of GB/token and the ceiling: "
                         "achieved rate above the device's peak (their bytes model is wrong or the data cache-resident)")
        partial = [c["component"] for c in ph["components"] if c["partial"]]
        if partial:
            notes.append(f"{ph['phase']}: {', '.join(partial)} priced for under {MIN_KNOWN:.0%} of their time: "
                         "their bytes are a lower bound, no GB/s or gap shown")
    if what_if:
        over = sorted({c["component"] for ph in phases for c in ph["components"] if c.get("inconsistent")})
        if over:
            notes.append(f"what-if: {', '.join(over)} ran faster on the traced device than {arch.name}'s peak allows: "
                         "the projection is out of reach for them")
    else:
        for inc in {c["inconsistent"] for ph in phases for c in ph["components"] if c.get("inconsistent")}:
            notes.append(inc)
    outside = k.filter(pl.col("step").is_null())
    if outside.height:
        notes.append(f"{outside.height} kernels ({outside['dur_ns'].sum() / 1e6:.3f} ms) fall outside every step")
    unlinked = k.filter(pl.col("launch_id").is_null()).height
    return {
        "schema": SCHEMA_ID,
        "source": {"path": t.meta.path, "format": t.meta.format, "events": t.meta.events, "kernels": t.kernels.height,
                   "kernel_ms": round(total_ns / 1e6, 4), "kernels_without_launch": unlinked,
                   "kernels_outside_steps": outside.height},
        "device": _device(t, arch, arch_from or "unknown"),
        "provenance": dict(t.meta.provenance),
        "distributed": distributed(t),
        "phases": phases,
        "coverage": {"attributed_share": _r(attributed / step_ns) if step_ns else None,
                     "bytes_known_share": _r(known_ms / phase_ms) if phase_ms else None},
        "findings": [],
        "notes": notes,
    }
