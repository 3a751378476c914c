"""Build the Analysis of an Attribution: per phase its figures, components and top kernels.

A phase's step time (and tok/s, kernel and idle time) is the mean over its counted steps, what its
ledger sums to; a component's figures are medians over them. A figure that cannot be known is
None and, where useful, a note says why. Findings and bottlenecks are added after the rules ran
(`attrib.analysis.bottlenecks.rank`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import msgspec
from msgspec.structs import replace
import polars as pl

from attrib.analysis.model import (Analysis, Bottlenecks, Component, Coverage, Device,
                                   Distributed, ExcludedStep,
                                   LedgerRow, Phase, Source, StepMs, TopKernel)
from attrib.analysis.bottlenecks import rank
from attrib.analysis.finding import Finding
from attrib.analysis.generated import decode_in_generated, draft_without_rate
from attrib.analysis.notes import Given, phase_notes, unpriced_ops, unrecorded_note
from attrib.analysis.summary import phase_summary, summary
from attrib.analysis.series import step_series
from attrib.analysis.speculative import speculative
from attrib.cost.budget import Budget
from attrib.cost.component_bytes import component_table
from attrib.options import TOP_KERNELS
from attrib.pipeline import Attribution
from attrib.roofline.arch import ARCH_GIVEN, Arch, detect, load_archs, same_device
from attrib.roofline.model import kernel_roofline
from attrib.roofline.tables import phase_figures, roofline_rows
from attrib.roofline.template import unknown_device_note
from attrib.steps.context import step_context
from attrib.steps.excluded import counted
from attrib.steps.ledger import Ledger, phase_ledger
from attrib.steps.idle import recorded_threads, unrecorded_threads
from attrib.steps.phases import PHASE_ORDER
from attrib.threads import each
from attrib.trace import SMALL_ROWS, Trace, engine, grouped, grouped_plan



def _num(x: object) -> float:
    """A polars scalar (typed as any of its dtypes' values) as the number it is here."""
    return float(cast(float, x or 0))


def _text(x: object) -> str | None:
    return None if x is None else str(x)


def _known(s: pl.Series) -> pl.Series:
    """`s` without its nulls (a query only where it has some)."""
    return s.drop_nulls() if s.null_count() else s


def _q(s: pl.Series, q: float) -> float | None:
    v = _known(s)
    return None if v.len() == 0 else _num(v.quantile(q, interpolation="linear"))


def _mean(s: pl.Series) -> float | None:
    v = _known(s)
    return None if v.len() == 0 else _num(v.mean())


def _mode(column: str) -> pl.Expr:
    """The most common of a column's values (null where all are null)."""
    return pl.col(column).drop_nulls().mode().first()


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(float(x), nd)


def _f(x: float | None) -> float | None:
    return None if x is None else float(x)


def _share(part: float | None, whole: float | None, known: object) -> float | None:
    return _r(part / whole) if (known is not None and whole and part is not None) else None


def _component(r: dict[str, Any], total: float, n: int) -> Component:
    ev = sorted(r["ev"] or [], key=lambda e: (-e["len"], e["evidence"]))  # a stable order
    return Component(
        component=r["component"], kernels=int(round(r["kernels"])), ms=_r(r["ms"]),
        share=_r(r["ms"] / total), bytes=_f(r["bytes"]), flops=_f(r["flops"]),
        achieved_gbs=_r(r["achieved_gbs"], 1), achieved_tflops=_r(r["achieved_tflops"], 3),
        roofline_ms=_r(r["roofline_ms"]), gap_ms=_r(r["gap_ms"]), intensity=_r(r["intensity"], 3),
        bound=r["bound"], dtype=r["dtype"], bytes_from=r["bytes_from"],
        bytes_known_share=_share(r["known_ms"], r["ms"], r["bytes"]),
        inconsistent=r["inconsistent"], over_peak=r["over_peak"], partial=bool(r["partial"]),
        estimated_share=_share(r["estimated_ms"], r["ms"], r["bytes"]),
        evidence={e["evidence"]: e["len"] for e in ev},
        evidence_per_step={e["evidence"]: _r(e["len"] / max(n, 1), 2) for e in ev},
        weight_format=r.get("weight_format"))


def _components(k: pl.DataFrame, steps: pl.DataFrame, budget: Budget | None, phase: str,
                arch: Arch | None, what_if: bool) -> tuple[pl.DataFrame, tuple[Component, ...]]:
    # a kernel above the traced device's peak adds no bytes
    # (under a what-if the times are another chip's)
    peak = arch.peak_bw_gbs if (arch is not None and not what_if) else None
    comp = roofline_rows(component_table(k, steps, budget, phase, peak_gbs=peak), arch, what_if)
    ev = (grouped_plan(k, ["component", "evidence"], pl.len(), any_order=True)
          .group_by("component").agg(pl.struct("evidence", "len").alias("ev")))
    comp = comp.lazy().join(ev, on="component", how="left").collect(engine="in-memory")
    total = float(comp["ms"].sum()) or 1.0
    ordered = comp.sort(["ms", "component"], descending=[True, False])
    rows = tuple(_component(r, total, steps.height) for r in ordered.iter_rows(named=True))
    return comp, rows


def _top_rows(k: pl.DataFrame, top_n: int) -> pl.DataFrame:
    """The kernels of the (name, component) groups whose summed time is among the `top_n`
    largest, ties included: what the top table's float sums read (a group-by of every kernel
    in a fixed order holds ~45 bytes a row; the times sum in any order)."""
    if k.height < SMALL_ROWS:
        return k
    ns = grouped(k, ["name", "component"], pl.col("dur_ns").sum(), any_order=True)
    if top_n <= 0 or ns.height <= top_n:
        return k
    cut = ns["dur_ns"].sort(descending=True)[top_n - 1]
    top = ns.filter(pl.col("dur_ns") >= cut)
    return k.filter(pl.col("name").is_in(top["name"].implode()))


def _top_table(k: pl.DataFrame, arch: Arch | None, what_if: bool, top_n: int) -> pl.DataFrame:
    known = pl.col("bytes").is_not_null()
    k = _top_rows(k, top_n)
    groups = grouped_plan(
        k, ["name", "component"],
        pl.len().alias("calls"), pl.col("dur_ns").sum().alias("ns"),
        pl.when(known.any()).then(pl.col("bytes").sum()).alias("bytes"),
        pl.col("flops").sum().alias("flops"),
        pl.col("dtype").drop_nulls().first().cast(pl.String).alias("dtype"),
        pl.when(known).then(pl.col("dur_ns")).otherwise(0).sum().alias("known_ns"))
    top = (groups
           # equal times by name: group_by's order is arbitrary, and one input gives one document
           .sort(["ns", "name", "component"], descending=[True, False, False], nulls_last=True)
           .head(top_n).with_columns((pl.col("known_ns") / 1e6).alias("ms"))
           .collect(engine="in-memory"))  # (the kernels' group-by too, below SMALL_ROWS)
    if not top.height:
        return top.with_columns(pl.lit(None, pl.Float64).alias("achieved_gbs"),
                                pl.lit(None, pl.Float64).alias("achieved_tflops"),
                                pl.lit(None, pl.Float64).alias("intensity"),
                                pl.lit(None, pl.Utf8).alias("bound"))
    return kernel_roofline(top, arch, what_if)


def _top_kernels(k: pl.DataFrame, arch: Arch | None, what_if: bool, top_n: int,
                 n: int) -> tuple[TopKernel, ...]:
    per = max(n, 1)
    rows = []
    for r in _top_table(k, arch, what_if, top_n).iter_rows(named=True):
        rows.append(TopKernel(
            name=r["name"], component=r["component"], calls=int(r["calls"]),
            calls_per_step=_r(r["calls"] / per, 2), ms=_r(r["ns"] / 1e6 / per),
            bytes=_f(r["bytes"] / per) if r["bytes"] is not None else None,
            flops=_f(r["flops"] / per) if r["flops"] is not None else None,
            achieved_gbs=_r(r["achieved_gbs"], 1), achieved_tflops=_r(r["achieved_tflops"], 3),
            intensity=_r(r["intensity"], 3), bound=r["bound"],
            bytes_known_share=_r(r["known_ns"] / r["ns"]) if r["ns"] else None))
    return tuple(rows)


def _ledger_rows(led: Ledger | None, all_steps: pl.DataFrame, phase: str) -> tuple[LedgerRow, ...]:
    """The phase's ledger of its mean counted step, largest row first."""
    if led is None:
        return ()
    rows = phase_ledger(led, all_steps, phase)
    return tuple(LedgerRow(cause=r["cause"], what=r["what"], ms_per_step=r["ms_per_step"],
                           share=r["share"], n_per_step=r["n_per_step"],
                           median_us=r["median_us"])
                 for r in rows.iter_rows(named=True))


def _step_ledgers(led: Ledger | None, steps: pl.DataFrame,
                  order: tuple[int, ...]) -> tuple[tuple[LedgerRow, ...], ...]:
    """Per step of `steps` in `order` (window order, the per-step series'): its rows, largest
    first."""
    if led is None:
        return ()
    widths = steps.lazy().select("step", (pl.col("window_end") - pl.col("window_start")).alias("w"))
    rows = (led.steps.lazy().join(widths, on="step")
            # equal times by cause, what: a stable order
            .sort("step", "ns", "cause", "what", descending=[False, True, False, False])
            .collect(engine="in-memory"))
    by_step: dict[int, list[LedgerRow]] = {}
    for r in rows.iter_rows(named=True):
        share = r["ns"] / r["w"] if r["w"] else None
        by_step.setdefault(r["step"], []).append(
            LedgerRow(cause=r["cause"], what=r["what"], ms_per_step=r["ns"] / 1e6, share=share,
                      n_per_step=r["n"])
        )
    return tuple(tuple(by_step.get(s, ())) for s in order)


def _phase(phase: str, steps: pl.DataFrame, k: pl.DataFrame, arch: Arch | None,
           budget: Budget | None, what_if: bool, context: pl.DataFrame, t0_ns: int, top_n: int,
           excluded: tuple[ExcludedStep, ...], led: Ledger | None = None,
           all_steps: pl.DataFrame | None = None) -> Phase:
    n = steps.height
    tokens = _known(steps["tokens"])
    comp, rows = _components(k, steps, budget, phase, arch, what_if)
    total = float(comp["ms"].sum()) or 1.0
    tps = int(_num(tokens.median())) if tokens.len() else None
    step_med = _q(steps["step_ms"], 0.5)
    step_mean = _mean(steps["step_ms"])
    fig = phase_figures(steps, k, comp, arch, what_if)
    comm = sum(c.ms or 0 for c in rows if c.component == "communication")
    rate = _r(tps / (step_mean / 1e3), 2) if (tps and step_mean) else None
    # where the steps' tokens and contexts were read from (the most common source), one query
    ctx = steps.lazy().select("step").join(context.lazy(), on="step")
    sources = pl.concat([steps.lazy().select(_mode("tokens_from")),
                         ctx.select(_mode("context_from"))], how="horizontal")
    tokens_from, ctx_from = sources.collect(engine="in-memory").row(0)
    series = step_series(steps, k, context, t0_ns, [c.component for c in rows])
    ph = Phase(
        phase=phase, steps=n, tokens_per_step=tps,
        tokens_from=_text(tokens_from) if tokens.len() else None,
        step_ms=StepMs(_r(step_med), _r(_q(steps["step_ms"], 0.1)), _r(_q(steps["step_ms"], 0.9)),
                       _r(step_mean)),
        kernel_ms=_r(_mean(steps["kernel_ms"])),
        idle_fraction=_r(_mean(steps["idle_fraction"])),
        idle_ms=_r(_mean(steps["idle_ms"])),
        bytes_per_step=fig["bytes_per_step"], gb_per_token=_r(fig["gb_per_token"], 6),
        bytes_known_share=_r(fig["bytes_known_share"]),
        achieved_tok_s=rate, ceiling_tok_s=_r(fig["ceiling_tok_s"], 2),
        excluded_components=tuple(fig["excluded"]), communication_share=_r(comm / total),
        component_rows=rows, kernel_rows=_top_kernels(k, arch, what_if, top_n, n),
        context_from=_text(ctx_from),
        per_step=replace(series, ledger=_step_ledgers(led, steps, series.step)),
        excluded_steps=excluded, known_ms=round(fig["known_ms"] * n, 6),
        total_ms=round(fig["total_ms"] * n, 6),
        ledger_rows=_ledger_rows(led, all_steps if all_steps is not None else steps, phase),
        bottlenecks=Bottlenecks(), unit="tokens", samples_per_step=None, achieved_samples_s=None,
        gb_per_sample=None)
    return _per_sample(ph, steps)


def _per_sample(ph: Phase, steps: pl.DataFrame) -> Phase:
    """A phase of vision/diffusion forwards (every step's unit "samples"): its figures per sample,
    no token figure (its GEMMs' "tokens" are patches or pixels)."""
    if "unit" not in steps.columns or not steps.height or (steps["unit"] != "samples").any():
        return ph
    samples = int(_num(steps["samples"].median()))
    step_ms, gb = ph.step_ms.mean, ph.bytes_per_step
    return replace(ph, tokens_per_step=None, tokens_from=None, gb_per_token=None,
                   ceiling_tok_s=None, achieved_tok_s=None, unit="samples",
                   samples_per_step=samples,
                   achieved_samples_s=_r(samples / (step_ms / 1e3), 2) if step_ms else None,
                   gb_per_sample=_r(gb / samples / 1e9, 6) if gb else None)


def _excluded(out: pl.DataFrame) -> tuple[ExcludedStep, ...]:
    """The steps left out of a phase's figures: step, why (compile | warm-up), ms, kernels."""
    if not out.height:
        return ()
    return tuple(ExcludedStep(step=int(r["step"]), reason=r["excluded"], step_ms=_r(r["step_ms"]),
                              kernels=int(r["n_kernels"] or 0), kernel_ms=_r(r["kernel_ms"]))
                 for r in out.sort("step").iter_rows(named=True))


def distributed(trace: Trace) -> Distributed | None:
    """The process group of the traced rank (Kineto `distributedInfo`): backend, rank,
    world size."""
    info = trace.meta.top.get("distributedInfo") if trace.meta.top else None
    if not isinstance(info, dict):
        return None
    size = info.get("world_size")
    return Distributed(backend=info.get("backend"), rank=info.get("rank"),
                       world_size=int(size) if isinstance(size, int) else None)


def device(trace: Trace, arch: Arch | None, detected_from: str) -> Device:
    """The device record: a database entry, or what the trace says of its GPU."""
    vendor = trace.meta.vendor
    if arch is not None:
        bw, basis = arch.bandwidth()
        return Device(arch=arch.arch, name=arch.name, key=arch.key, detected_from=detected_from,
                      peak_bw_gbs=arch.peak_bw_gbs, sustained_bw_gbs=arch.sustained_bw_gbs,
                      roofline_bw_gbs=bw, roofline_bw_basis=basis,
                      sustained_source=arch.sustained_source, derived=tuple(arch.derived),
                      matrix_tflops=dict(arch.matrix_tflops), vendor=vendor, known=True,
                      calibrated=calibration(arch),
                      measured_tflops=dict(arch.measured_tflops))
    d = trace.meta.devices[0] if trace.meta.devices else {}
    name = d.get("product_name") or d.get("name") or None
    return Device(arch=None, name=name, detected_from="unknown", peak_bw_gbs=None,
                  sustained_bw_gbs=None, vendor=vendor)


def calibration(arch: Arch) -> dict[str, object] | None:
    """The device block's `calibrated` record: attrib calibrate's fields and measured figures."""
    if not arch.calibrated:
        return None
    return {**arch.calibrated, "measured_bw_gbs": dict(arch.measured_bw_gbs),
            "measured_tflops": dict(arch.measured_tflops)}


def _resolve_device(a: Attribution, arch: Arch | None, arch_from: str | None,
                    arch_file: Path | None, notes: list[str]) -> tuple[Arch | None, str | None]:
    t = a.trace
    if arch is None or arch_from == "override":
        names = t.kernels["name"].unique().head(20000).to_list()
        traced, how = detect(t.meta.devices, t.meta.vendor, names, extra=arch_file)
    if arch is None:
        arch, arch_from = traced, how
        if arch is None:
            targets = tuple(dict.fromkeys(x.arch for x in load_archs(arch_file).values()))
            notes.append(unknown_device_note(t.meta.devices, t.meta.path, t.meta.vendor, targets))
    elif arch_from == "override" and same_device(arch, traced, how, t.meta.vendor):
        # --arch names the device the trace ran on (or the trace does not say): measured on it
        arch_from = how if traced is not None and traced.key == arch.key else ARCH_GIVEN
    elif arch_from == "override":
        notes.append(f"what-if: kernel times measured on the traced device, "
                     f"bytes and FLOPs set against "
                     f"{arch.name} ({arch.arch}): rooflines and the ceiling are a projection")
    if arch is not None and arch.calibrated:
        c = arch.calibrated
        notes.append(f"rooflines use {arch.sustained_bw_gbs:g} GB/s as the sustained roof, "
                     f"measured by "
                     f"attrib calibrate on {c.get('device')} ({c.get('date_utc', '?')[:10]}; "
                     f"datasheet peak {arch.peak_bw_gbs:g} GB/s)")
        if arch.measured_tflops:
            figs = ", ".join(f"{k} {v:g}" for k, v in sorted(arch.measured_tflops.items()))
            notes.append(f"FLOPs are priced at the measured matrix TFLOP/s ({figs}), "
                         f"not the datasheet peaks")
    if arch is not None and arch.bandwidth()[1] == "peak":
        notes.append(f"no sustained bandwidth known for {arch.name}: rooflines use the "
                     f"{arch.peak_bw_gbs:g} GB/s peak")
    return arch, arch_from


# the kernel columns a phase's figures read (a phase's kernels are copied without the others)
_PHASE_COLUMNS = ("step", "name", "component", "evidence", "start_ns", "dur_ns", "bytes", "flops",
                  "dtype", "cost_model")


def _phase_columns(k: pl.DataFrame) -> list[pl.Expr]:
    """The `_PHASE_COLUMNS` of the kernels, their text as categories: a phase's copy of its
    kernels holds 4 bytes a text value, not a 16-byte view (its figures group and compare
    them; what they return is text again, attrib.trace.grouped)."""
    return [pl.col(c).cast(pl.Categorical) if k.schema[c] == pl.String else pl.col(c)
            for c in _PHASE_COLUMNS if c in k.columns]


def _phases(a: Attribution, phase: str | None, arch: Arch | None, budget: Budget | None,
            what_if: bool, top: int, notes: list[str], context: pl.DataFrame) -> tuple[Phase, ...]:
    t0_ns = int(_num(a.steps["window_start"].min())) if a.steps.height else 0
    found = a.steps["phase"].unique().to_list()
    wanted = [p for p in sorted(found, key=lambda p: (PHASE_ORDER.get(p, 3), p))
              if not phase or p == phase]

    def one(ph: str) -> tuple[Phase, str | None]:
        st = a.steps.filter(pl.col("phase") == ph)
        kept = counted(st)
        left = st.filter(pl.col("excluded").is_not_null()) if kept else st.clear()
        keep = st.filter(*kept) if 0 < left.height < st.height else st
        in_phase = (pl.col("phase") == ph) & pl.col("step").is_in(pl.lit(keep["step"]).implode())
        kk = (a.kernels.lazy().filter(in_phase).select(_phase_columns(a.kernels))
              .collect(engine=engine(a.kernels.height)))
        excluded = _excluded(left if keep is not st else left.clear())
        note = (f"{ph}: every step is {left['excluded'][0]}; none left out of the figures"
                if left.height and keep is st else None)
        return (_phase(ph, keep, kk, arch, budget, what_if, context, t0_ns, top, excluded,
                       a.ledger, a.steps), note)

    out = each(one, wanted, rows=a.largest())  # the phases share no result
    notes += [n for _, n in out if n is not None]
    return tuple(p for p, _ in out)


def _with_speculative(phases: tuple[Phase, ...], a: Attribution,
                      plain_ms: float | None) -> tuple[Phase, ...]:
    """The decode phase of a speculative loop gets its rounds (attrib.analysis.speculative) and
    its figures in generated tokens, the draft phase none (attrib.analysis.generated)."""
    if not any(p.phase == "decode" for p in phases):
        return phases
    spec = speculative(a.steps, a.trace, a.kernels, plain_ms)
    if spec is None:
        return phases
    draft = next((p for p in phases if p.phase == "draft"), None)
    return tuple(decode_in_generated(p, draft, spec) if p.phase == "decode"
                 else draft_without_rate(p) if p.phase == "draft" else p for p in phases)


def _source(a: Attribution) -> Source:
    t, k = a.trace, a.kernels
    total_ns = int(t.kernels["dur_ns"].sum() or 0)
    outside = k["step"].null_count()
    unlinked = k["launch_id"].null_count()
    return Source(path=t.meta.path, format=t.meta.format, events=t.meta.events,
                  kernels=t.kernels.height, kernel_ms=round(total_ns / 1e6, 4),
                  kernels_without_launch=unlinked, kernels_outside_steps=outside)


def _coverage(a: Attribution, phases: tuple[Phase, ...]) -> Coverage:
    # the counted steps' kernels
    # (a compile or warm-up step left out of the figures is left out here)
    kept, st = counted(a.steps), a.steps.lazy()
    steps = st.filter(*kept) if kept else st
    sums = (a.kernels.lazy().join(steps.select("step"), on="step", how="semi")
            .select(pl.col("dur_ns").filter(pl.col("component") != "other").sum().alias("attr"),
                    pl.col("dur_ns").sum().alias("all"))
            .collect(engine="in-memory"))
    attributed, step_ns = _num(sums["attr"].item()), _num(sums["all"].item())
    # the same figure as the phase lines: priced time whose bytes count, over the phases' time
    known_ms = sum(p.known_ms for p in phases)
    phase_ms = sum(p.total_ms for p in phases)
    return Coverage(attributed_share=_r(attributed / step_ns) if step_ns else None,
                    bytes_known_share=_r(known_ms / phase_ms) if phase_ms else None)


def build(a: Attribution, phase: str | None = None, arch: Arch | None = None,
          arch_from: str | None = None, budget: Budget | None = None,
          arch_file: Path | None = None, top: int = TOP_KERNELS,
          capture: Path | None = None, plain_ms: float | None = None) -> Analysis:
    """The Analysis of an attribution (optionally one phase only; `top` kernels per phase), without
    findings: `attrib.app` runs the rules over it and ranks the bottlenecks.

    arch: the device to measure against (detected from the trace when None); arch_from says where a
    given arch came from ("override" for a what-if projection onto another chip); capture: the
    graph-capture trace the attribution used (said under what was assumed); plain_ms: the plain
    decode step of a baseline trace, for a speculative loop's speedup."""
    t, k = a.trace, a.kernels
    notes = list(a.notes) + [str(w) for w in t.meta.warnings]
    arch, arch_from = _resolve_device(a, arch, arch_from, arch_file, notes)
    what_if = arch_from == "override"
    context = step_context(a.steps, t.ops, dict(t.meta.provenance))
    budget = _with_context(budget, a.steps, context, notes)
    phases = _phases(a, phase, arch, budget, what_if, top, notes, context)
    phases = _with_speculative(phases, a, plain_ms)
    for sp in (p.speculative for p in phases if p.speculative is not None):
        notes.append(f"decode is a speculative loop: its tok/s, ceiling and GB/token count "
                     f"generated tokens ({sp.generated_tokens} in {sp.decode_ms:.1f} ms of "
                     f"rounds after the prefill: accepted + 1 a round); its steps are the verify "
                     f"passes and tokens/step their width of 1 + K, not the batch "
                     f"(verified: {sp.verified_tok_s} tok/s)")
    graphs = "graph" in k.columns and bool(k["graph"].any())
    given = Given(model=budget is not None, capture=capture is not None, graphs=graphs)
    notes += phase_notes(phases, arch.name if arch is not None else None, what_if, given)
    notes += unpriced_ops(k)
    if k["step"].null_count():
        outside = k.filter(pl.col("step").is_null())
        outside_ms = _num(outside['dur_ns'].sum()) / 1e6
        notes.append(f"{outside.height} kernels ({outside_ms:.3f} ms) fall outside "
                     "every step")
    if not t.kernels.height:
        notes.append("no GPU kernels: a CPU-only trace (steps and phases only)")
    recorded = a.ledger.recorded if a.ledger is not None else recorded_threads(t.ops, t.frames)
    unrecorded = unrecorded_note(unrecorded_threads(recorded, t.launches))
    notes += [unrecorded] if unrecorded else []
    an = Analysis(source=_source(a), device=device(t, arch, arch_from or "unknown"),
                  provenance=dict(t.meta.provenance), distributed=distributed(t), phases=phases,
                  coverage=_coverage(a, phases), findings=(), notes=tuple(notes),
                  summary=None)
    model = budget.source.removeprefix("model config ") if budget is not None else None
    cap = capture.name if capture is not None else None
    return replace(an, summary=summary(an, model, cap, budget.context if budget else None))


def _with_context(budget: Budget | None, steps: pl.DataFrame, context: pl.DataFrame,
                  notes: list[str]) -> Budget | None:
    """A --model budget without --context gets the decode steps' median context read from the
    trace (attention shapes, the vLLM annotation, the stamp); a note says which."""
    if budget is None or budget.context is not None:
        return budget
    decode = steps.filter(pl.col("phase") == "decode").select("step")
    known = decode.join(context, on="step").drop_nulls("context")
    if not known.height:
        notes.append(f"{budget.source} without --context and no context in the trace: decode "
                     "components are not budgeted from it (K/V reads need the context); it prices "
                     "only ops whose weights the trace does not show")
        return budget
    ctx = int(_num(known["context"].median()))
    src = _text(known.select(_mode("context_from")).item()) or "the trace"
    notes.append(f"{budget.source}: decode K/V priced at context {ctx}, the decode steps' median "
                 f"from {src} (give --context to set it)")
    return replace(budget, context=ctx)


def finish(an: Analysis, findings: tuple[Finding, ...]) -> Analysis:
    """The analysis with the rules' findings: bottlenecks ranked, the summary's verdict
    per phase."""
    done = replace(an, findings=findings, phases=rank(an.phases, findings))
    if done.summary is None:
        return done
    phases = tuple(phase_summary(p, findings) for p in done.phases)
    return replace(done, summary=replace(done.summary, phases=phases))
