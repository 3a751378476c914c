"""Trace -> the analysis document (schema attrib.analysis/1), composed of pure steps.

link (kernel <-> launch <-> op <-> module) -> steps and phases -> components -> per-phase tables.
Per-step figures are medians over a phase's steps; a figure that cannot be known is null and, where
useful, `notes` says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from attrib.arch import Arch, detect
from attrib.components import classify
from attrib.costing import kernel_costs
from attrib.linking import link
from attrib.phases import assign_steps, tokens_from_kernel_names, tokens_from_shapes
from attrib.roofline import kernel_roofline
from attrib.roofline_doc import MIN_KNOWN, Budget, component_table, phase_figures, roofline_rows
from attrib.trace import Trace

SCHEMA_ID = "attrib.analysis/1"
TOP_KERNELS = 10


@dataclass(frozen=True)
class Attribution:
    """The attributed trace: kernels with step, phase and component; the steps table."""

    trace: Trace
    kernels: pl.DataFrame  # id, name, start_ns, dur_ns, step, phase, component, evidence, op_id, op,
    #                        module_path, launch_id, graph, bytes, flops, dtype, cost_model
    steps: pl.DataFrame  # step, phase, tokens, tokens_from, window_start, window_end, ...
    notes: tuple[str, ...]


def attribute(trace: Trace, phase_map: dict[str, str] | None = None, capture: Trace | None = None,
              capture_batch: int | None = None) -> Attribution:
    """Run linking, step/phase split and component mapping over a normalized trace.

    capture: the graph-capture trace of a replay trace; replayed kernels then get the op, shapes and
    module of the launch that captured them (attrib.graph_capture)."""
    links = link(trace)
    notes: list[str] = []
    if capture is not None:
        from attrib.graph_capture import merge

        trace, links, rep = merge(trace, links, capture, batch_size=capture_batch)
        notes.append(f"graph capture: {rep['matched']} of {rep['replayed']} replayed kernels matched to "
                     f"{rep['segments']} captured graphs ({rep['groups_exact']} of {rep['groups']} groups exact"
                     + (f", {rep['groups_ambiguous']} ambiguous: pass --capture-batch" if rep.get("groups_ambiguous") else "")
                     + ")")
    spans, kernel_steps = assign_steps(trace, links, phase_map)
    comp = classify(trace, links, kernel_steps)
    steps = _fill_tokens_and_phase(spans, tokens_from_shapes(trace, spans), notes)
    k = (trace.kernels.select("id", "name", "start_ns", "dur_ns")
         .join(comp, on="id", how="left")
         .join(links.select("id", "launch_id", "graph"), on="id", how="left"))
    steps = _tokens_from_names(steps, tokens_from_kernel_names(k))
    k = k.join(steps.select("step", "phase"), on="step", how="left")
    steps = _windows(steps, k)
    return Attribution(trace=trace, kernels=kernel_costs(trace, k, steps), steps=steps, notes=tuple(notes))


def _fill_tokens_and_phase(spans: pl.DataFrame, shapes: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    s = spans.join(shapes.rename({"tokens": "shape_tokens"}), on="step", how="left")
    s = s.with_columns(
        pl.when(pl.col("tokens").is_null() & pl.col("shape_tokens").is_not_null())
        .then(pl.when(pl.col("per_seq").is_not_null()).then(pl.lit("embedding input shape"))
              .otherwise(pl.lit("projection GEMM input shape"))).otherwise(pl.col("tokens_from")).alias("tokens_from"),
        pl.coalesce("tokens", "shape_tokens").alias("tokens"))
    guessed = (pl.col("phase") == "unknown") & pl.col("per_seq").is_not_null()
    if s.filter(guessed).height:
        notes.append("phase of steps without a phase annotation decided from shapes (1 new token per sequence = decode)")
    s = s.with_columns(
        pl.when(guessed).then(pl.when(pl.col("per_seq") == 1).then(pl.lit("decode")).otherwise(pl.lit("prefill")))
        .otherwise(pl.col("phase")).alias("phase"))
    # decode steps replayed from a graph have no embedding op: one token per sequence of the prefill batch
    batch = s.filter((pl.col("phase") == "prefill") & pl.col("per_seq").is_not_null() & (pl.col("per_seq") > 0)).select(
        (pl.col("shape_tokens") // pl.col("per_seq")).alias("b"))
    if batch.height and s.filter((pl.col("phase") == "decode") & pl.col("tokens").is_null()).height:
        b = int(batch["b"][0])
        notes.append(f"decode tokens per step taken as the prefill batch ({b} sequences x 1 token): no shapes in decode")
        s = s.with_columns(
            pl.when((pl.col("phase") == "decode") & pl.col("tokens").is_null()).then(pl.lit("prefill batch"))
            .otherwise(pl.col("tokens_from")).alias("tokens_from"),
            pl.when((pl.col("phase") == "decode") & pl.col("tokens").is_null()).then(pl.lit(b))
            .otherwise(pl.col("tokens")).alias("tokens"))
    return s.drop("shape_tokens", "per_seq")


def _tokens_from_names(steps: pl.DataFrame, named: pl.DataFrame) -> pl.DataFrame:
    """Steps still without a token count take it from llama.cpp GEMV kernel names."""
    s = steps.join(named, on="step", how="left")
    use = pl.col("tokens").is_null() & pl.col("name_tokens").is_not_null()
    return s.with_columns(
        pl.when(use).then(pl.lit("llama.cpp mul_mat_vec_q ncols")).otherwise(pl.col("tokens_from")).alias("tokens_from"),
        pl.when(use).then(pl.col("name_tokens")).otherwise(pl.col("tokens")).alias("tokens")).drop("name_tokens")


def _busy_ns(k: pl.DataFrame) -> pl.DataFrame:
    """Per step: GPU-busy nanoseconds (union of kernel intervals, so overlap is not counted twice)."""
    end = pl.col("start_ns") + pl.col("dur_ns")
    k = k.sort("step", "start_ns").with_columns(end.alias("_end"))
    k = k.with_columns(pl.col("_end").cum_max().shift(1).over("step").alias("_prev"))
    k = k.with_columns((pl.col("_prev").is_null() | (pl.col("start_ns") > pl.col("_prev"))).cum_sum().over("step").alias("_seg"))
    seg = k.group_by("step", "_seg").agg((pl.col("_end").max() - pl.col("start_ns").min()).alias("busy"))
    return seg.group_by("step").agg(pl.col("busy").sum().alias("busy_ns"))


def _windows(steps: pl.DataFrame, k: pl.DataFrame) -> pl.DataFrame:
    ks = k.filter(pl.col("step").is_not_null())
    agg = ks.group_by("step").agg(pl.col("start_ns").min().alias("k0"), (pl.col("start_ns") + pl.col("dur_ns")).max().alias("k1"),
                                  pl.col("dur_ns").sum().alias("kernel_ns"), pl.len().alias("n_kernels"))
    s = steps.join(agg, on="step", how="left").join(_busy_ns(ks), on="step", how="left")
    s = s.with_columns(pl.min_horizontal("cpu_start", "gpu_start", "k0").alias("window_start"),
                       pl.max_horizontal("cpu_end", "gpu_end", "k1").alias("window_end"))
    return s.with_columns(
        ((pl.col("window_end") - pl.col("window_start")) / 1e6).alias("step_ms"),
        (pl.col("kernel_ns").fill_null(0) / 1e6).alias("kernel_ms"),
        pl.when(pl.col("busy_ns").is_not_null()).then(
            ((pl.col("window_end") - pl.col("window_start") - pl.col("busy_ns")) / 1e6).clip(0)).alias("idle_ms"),
        # a step without kernels (a CPU-only trace) has no GPU to be idle: null, not 100 %
        pl.when(pl.col("busy_ns").is_not_null()).then(
            (1 - pl.col("busy_ns") / (pl.col("window_end") - pl.col("window_start"))).clip(0, 1)).alias("idle_fraction"))


def _q(s: pl.Series, q: float) -> float | None:
    v = s.drop_nulls()
    return None if v.len() == 0 else float(v.quantile(q, interpolation="linear"))


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(float(x), nd)


def _f(x: Any) -> float | None:
    return None if x is None else float(x)


def _phase_doc(phase: str, steps: pl.DataFrame, k: pl.DataFrame, arch: Arch | None,
               budget: Budget | None) -> dict[str, Any]:
    n = steps.height
    tokens = steps["tokens"].drop_nulls()
    comp = roofline_rows(component_table(k, steps, budget, phase), arch)
    ev = (k.group_by("component", "evidence").len().group_by("component")
          .agg(pl.struct("evidence", "len").alias("ev")))
    comp = comp.join(ev, on="component", how="left")
    total = float(comp["ms"].sum()) or 1.0
    comps = [{
        "component": r["component"], "kernels": int(round(r["kernels"])), "ms": _r(r["ms"]),
        "share": _r(r["ms"] / total), "bytes": _f(r["bytes"]), "flops": _f(r["flops"]),
        "achieved_gbs": _r(r["achieved_gbs"], 1), "achieved_tflops": _r(r["achieved_tflops"], 3),
        "roofline_ms": _r(r["roofline_ms"]), "gap_ms": _r(r["gap_ms"]),
        "bound": r["bound"], "dtype": r["dtype"], "bytes_from": r["bytes_from"],
        "bytes_known_share": _r(r["known_ms"] / r["ms"]) if (r["bytes"] is not None and r["ms"]) else None,
        "inconsistent": r["inconsistent"],
        "evidence": {e["evidence"]: e["len"] for e in (r["ev"] or [])},
    } for r in comp.sort("ms", descending=True).iter_rows(named=True)]
    known = pl.col("bytes").is_not_null()
    top = (k.group_by("name", "component").agg(
        pl.len().alias("calls"), pl.col("dur_ns").sum().alias("ns"),
        pl.when(known.any()).then(pl.col("bytes").sum()).alias("bytes"), pl.col("flops").sum().alias("flops"),
        pl.col("dtype").drop_nulls().first().alias("dtype"), pl.col("dur_ns").filter(known).sum().alias("known_ns"))
        .sort("ns", descending=True).head(TOP_KERNELS)
        .with_columns((pl.col("known_ns") / 1e6).alias("ms")))
    top = kernel_roofline(top, arch) if top.height else top.with_columns(pl.lit(None, pl.Float64).alias("achieved_gbs"))
    tops = [{"name": r["name"], "component": r["component"], "calls": int(r["calls"]),
             "ms": _r(r["ns"] / 1e6 / max(n, 1)), "achieved_gbs": _r(r["achieved_gbs"], 1)} for r in top.iter_rows(named=True)]
    tps = int(tokens.median()) if tokens.len() else None
    step_med = _q(steps["step_ms"], 0.5)
    fig = phase_figures(steps, k, comp, arch)
    return {
        "phase": phase, "steps": n, "tokens_per_step": tps,
        "tokens_from": steps["tokens_from"].drop_nulls().mode().first() if tokens.len() else None,
        "step_ms": {"median": _r(step_med), "p10": _r(_q(steps["step_ms"], 0.1)), "p90": _r(_q(steps["step_ms"], 0.9))},
        "kernel_ms": _r(_q(steps["kernel_ms"], 0.5)), "idle_fraction": _r(_q(steps["idle_fraction"], 0.5)),
        "idle_ms": _r(_q(steps["idle_ms"], 0.5)),
        "bytes_per_step": fig["bytes_per_step"], "gb_per_token": _r(fig["gb_per_token"], 6),
        "bytes_known_share": _r(fig["bytes_known_share"]),
        "achieved_tok_s": _r(tps / (step_med / 1e3), 2) if (tps and step_med) else None,
        "ceiling_tok_s": _r(fig["ceiling_tok_s"], 2), "components": comps, "top_kernels": tops,
    }


def _device(trace: Trace, arch: Arch | None, detected_from: str) -> dict[str, Any]:
    if arch is not None:
        return arch.device_json(detected_from) | {"vendor": trace.meta.vendor}
    d = trace.meta.devices[0] if trace.meta.devices else {}
    name = d.get("product_name") or d.get("name") or None
    return {"arch": None, "name": name, "detected_from": "unknown", "peak_bw_gbs": None, "sustained_bw_gbs": None,
            "vendor": trace.meta.vendor}


def document(a: Attribution, phase: str | None = None, arch: Arch | None = None, arch_from: str | None = None,
             budget: Budget | None = None, arch_file: Path | None = None) -> dict[str, Any]:
    """The attrib.analysis/1 document for an attribution (optionally one phase only).

    arch: the device to measure against (detected from the trace when None); arch_from says where a
    given arch came from ("override" for a what-if projection onto another chip)."""
    t, k = a.trace, a.kernels
    notes = list(a.notes) + list(t.meta.warnings)
    if arch is None:
        names = t.kernels["name"].unique().head(20000).to_list()
        arch, arch_from = detect(t.meta.devices, t.meta.vendor, names, extra=arch_file)
    elif arch_from == "override":
        notes.append(f"what-if: measured kernel times projected onto {arch.name} ({arch.arch}), not the traced device")
    if arch is not None and arch.bandwidth()[1] == "peak":
        notes.append(f"no sustained bandwidth known for {arch.name}: rooflines use the {arch.peak_bw_gbs:g} GB/s peak")
    phases = []
    order = {"prefill": 0, "mixed": 1, "decode": 2}
    for ph in sorted(a.steps["phase"].unique().to_list(), key=lambda p: (order.get(p, 3), p)):
        if phase and ph != phase:
            continue
        phases.append(_phase_doc(ph, a.steps.filter(pl.col("phase") == ph), k.filter(pl.col("phase") == ph), arch, budget))
    total_ns = int(t.kernels["dur_ns"].sum() or 0)
    in_steps = k.filter(pl.col("step").is_not_null())
    attributed = in_steps.filter(pl.col("component") != "other")["dur_ns"].sum()
    step_ns = in_steps["dur_ns"].sum()
    priced_ns = in_steps.filter(pl.col("bytes").is_not_null())["dur_ns"].sum()
    for ph in phases:
        share = ph.get("bytes_known_share")
        if ph["gb_per_token"] is not None and share is not None and share < 0.95:
            notes.append(f"{ph['phase']}: bytes known for {share:.0%} of kernel time; gb_per_token is a lower bound")
        elif ph["gb_per_token"] is None and share is not None and share < MIN_KNOWN:
            notes.append(f"{ph['phase']}: bytes known for {share:.0%} of kernel time, too little for GB/token "
                         "(give --capture with the graph-capture trace, or --model CONFIG)")
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
        "phases": phases,
        "coverage": {"attributed_share": _r(attributed / step_ns) if step_ns else None,
                     "bytes_known_share": _r(priced_ns / step_ns) if step_ns else None},
        "findings": [],
        "notes": notes,
    }


def analyze_path(path: str | Path, phase: str | None = None, phase_map: dict[str, str] | None = None,
                 arch: Arch | None = None, arch_from: str | None = None, budget: Budget | None = None,
                 capture: str | Path | None = None, capture_batch: int | None = None,
                 arch_file: Path | None = None) -> dict[str, Any]:
    """Load any supported trace (and its graph-capture trace), attribute it, run the rules, and
    return the analysis document."""
    from collectors import load

    import rules  # the next stage of the flow (collectors -> attrib -> rules -> report)

    cap = load(capture) if capture is not None else None
    a = attribute(load(path), phase_map, cap, capture_batch)
    doc = document(a, phase, arch, arch_from, budget, arch_file)
    doc["findings"] = [f.to_json() for f in rules.run(a, doc)]
    return doc
