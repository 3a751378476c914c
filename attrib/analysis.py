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

from attrib.components import classify
from attrib.linking import link
from attrib.phases import assign_steps, tokens_from_shapes
from attrib.trace import Trace

SCHEMA_ID = "attrib.analysis/1"
TOP_KERNELS = 10


@dataclass(frozen=True)
class Attribution:
    """The attributed trace: kernels with step, phase and component; the steps table."""

    trace: Trace
    kernels: pl.DataFrame  # id, name, start_ns, dur_ns, step, phase, component, evidence, op_id, op,
    #                        module_path, launch_id, graph
    steps: pl.DataFrame  # step, phase, tokens, tokens_from, window_start, window_end, ...
    notes: tuple[str, ...]


def attribute(trace: Trace, phase_map: dict[str, str] | None = None) -> Attribution:
    """Run linking, step/phase split and component mapping over a normalized trace."""
    links = link(trace)
    spans, kernel_steps = assign_steps(trace, links, phase_map)
    comp = classify(trace, links, kernel_steps)
    notes: list[str] = []
    steps = _fill_tokens_and_phase(spans, tokens_from_shapes(trace, spans), notes)
    k = (trace.kernels.select("id", "name", "start_ns", "dur_ns")
         .join(comp, on="id", how="left")
         .join(links.select("id", "launch_id", "graph"), on="id", how="left")
         .join(steps.select("step", "phase"), on="step", how="left"))
    steps = _windows(steps, k)
    return Attribution(trace=trace, kernels=k, steps=steps, notes=tuple(notes))


def _fill_tokens_and_phase(spans: pl.DataFrame, shapes: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    s = spans.join(shapes.rename({"tokens": "shape_tokens"}), on="step", how="left")
    s = s.with_columns(
        pl.when(pl.col("tokens").is_null() & pl.col("shape_tokens").is_not_null())
        .then(pl.lit("embedding input shape")).otherwise(pl.col("tokens_from")).alias("tokens_from"),
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


def _busy_ns(k: pl.DataFrame) -> pl.DataFrame:
    """Per step: GPU-busy nanoseconds (union of kernel intervals, so overlap is not counted twice)."""
    end = pl.col("start_ns") + pl.col("dur_ns")
    k = k.sort("step", "start_ns").with_columns(end.alias("_end"))
    k = k.with_columns(pl.col("_end").cum_max().over("step").shift(1).over("step").alias("_prev"))
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
        (1 - pl.col("busy_ns").fill_null(0) / (pl.col("window_end") - pl.col("window_start"))).clip(0, 1).alias("idle_fraction"))


def _q(s: pl.Series, q: float) -> float | None:
    v = s.drop_nulls()
    return None if v.len() == 0 else float(v.quantile(q, interpolation="linear"))


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(float(x), nd)


def _phase_doc(phase: str, steps: pl.DataFrame, k: pl.DataFrame) -> dict[str, Any]:
    n = steps.height
    tokens = steps["tokens"].drop_nulls()
    per = (k.group_by("step", "component").agg(pl.col("dur_ns").sum().alias("ns"), pl.len().alias("n")))
    grid = steps.select("step").join(per.select("component").unique(), how="cross").join(
        per, on=["step", "component"], how="left").fill_null(0)
    comp = grid.group_by("component").agg((pl.col("ns").median() / 1e6).alias("ms"), pl.col("n").median().alias("kernels"))
    ev = (k.group_by("component", "evidence").len().group_by("component")
          .agg(pl.struct("evidence", "len").alias("ev")))
    comp = comp.join(ev, on="component", how="left")
    total = float(comp["ms"].sum()) or 1.0
    comps = [{
        "component": r["component"], "kernels": int(round(r["kernels"])), "ms": _r(r["ms"]),
        "share": _r(r["ms"] / total), "bytes": None, "flops": None, "achieved_gbs": None,
        "roofline_ms": None, "gap_ms": None, "bound": None,
        "evidence": {e["evidence"]: e["len"] for e in (r["ev"] or [])},
    } for r in comp.sort("ms", descending=True).iter_rows(named=True)]
    top = (k.group_by("name", "component").agg(pl.len().alias("calls"), pl.col("dur_ns").sum().alias("ns"))
           .sort("ns", descending=True).head(TOP_KERNELS))
    tops = [{"name": r["name"], "component": r["component"], "calls": int(r["calls"]),
             "ms": _r(r["ns"] / 1e6 / max(n, 1)), "achieved_gbs": None} for r in top.iter_rows(named=True)]
    tps = int(tokens.median()) if tokens.len() else None
    step_med = _q(steps["step_ms"], 0.5)
    return {
        "phase": phase, "steps": n, "tokens_per_step": tps,
        "tokens_from": steps["tokens_from"].drop_nulls().mode().first() if tokens.len() else None,
        "step_ms": {"median": _r(step_med), "p10": _r(_q(steps["step_ms"], 0.1)), "p90": _r(_q(steps["step_ms"], 0.9))},
        "kernel_ms": _r(_q(steps["kernel_ms"], 0.5)), "idle_fraction": _r(_q(steps["idle_fraction"], 0.5)),
        "bytes_per_step": None, "gb_per_token": None,
        "achieved_tok_s": _r(tps / (step_med / 1e3), 2) if (tps and step_med) else None,
        "ceiling_tok_s": None, "components": comps, "top_kernels": tops,
    }


def _device(trace: Trace) -> dict[str, Any]:
    d = trace.meta.devices[0] if trace.meta.devices else {}
    name = d.get("name") or d.get("product_name") or None
    return {"arch": None, "name": name, "detected_from": "unknown", "peak_bw_gbs": None, "sustained_bw_gbs": None,
            "vendor": trace.meta.vendor}


def document(a: Attribution, phase: str | None = None) -> dict[str, Any]:
    """The attrib.analysis/1 document for an attribution (optionally one phase only)."""
    t, k = a.trace, a.kernels
    phases = []
    order = {"prefill": 0, "mixed": 1, "decode": 2}
    for ph in sorted(a.steps["phase"].unique().to_list(), key=lambda p: (order.get(p, 3), p)):
        if phase and ph != phase:
            continue
        phases.append(_phase_doc(ph, a.steps.filter(pl.col("phase") == ph), k.filter(pl.col("phase") == ph)))
    total_ns = int(t.kernels["dur_ns"].sum() or 0)
    in_steps = k.filter(pl.col("step").is_not_null())
    attributed = in_steps.filter(pl.col("component") != "other")["dur_ns"].sum()
    step_ns = in_steps["dur_ns"].sum()
    notes = list(a.notes) + list(t.meta.warnings)
    outside = k.filter(pl.col("step").is_null())
    if outside.height:
        notes.append(f"{outside.height} kernels ({outside['dur_ns'].sum() / 1e6:.3f} ms) fall outside every step")
    unlinked = k.filter(pl.col("launch_id").is_null()).height
    return {
        "schema": SCHEMA_ID,
        "source": {"path": t.meta.path, "format": t.meta.format, "events": t.meta.events, "kernels": t.kernels.height,
                   "kernel_ms": round(total_ns / 1e6, 4), "kernels_without_launch": unlinked,
                   "kernels_outside_steps": outside.height},
        "device": _device(t),
        "provenance": dict(t.meta.provenance),
        "phases": phases,
        "coverage": {"attributed_share": _r(attributed / step_ns) if step_ns else None, "bytes_known_share": None},
        "findings": [],
        "notes": notes,
    }


def analyze_path(path: str | Path, phase: str | None = None, phase_map: dict[str, str] | None = None) -> dict[str, Any]:
    """Load any supported trace and return its analysis document."""
    from collectors import load

    return document(attribute(load(path), phase_map), phase)
