"""The attribution pipeline: Trace -> Attribution, its stages in order.

link (kernel <-> launch <-> op <-> module) -> steps and phases -> components -> tokens -> windows ->
ledger and costs. Each stage is a pure function over polars tables. Beside the components' stage
run those that read no component: the steps' tokens, windows and units, the ledger's idle side. A
huge trace is attributed a chunk of steps at a time by the same stages: attrib.chunked.
"""

from __future__ import annotations


import msgspec
import polars as pl

from attrib.components.classify import classify
from attrib.cost.budget import Budget, for_world
from attrib.cost.kernels import kernel_costs, world_size
from attrib.link.launches import link
from attrib.steps.passes import fill_from_stamp
from attrib.steps.phases import (assign_steps, step_spans, tokens_from_kernel_names,
                                 tokens_from_shapes)
from attrib.steps.tokens import fill_tokens_and_phase, tokens_from_names, with_units
from attrib.steps.excluded import compile_spans, mark_excluded
from attrib.steps.ledger import Facts, Idle, Ledger, idle_side, ledger
from attrib.steps.salvage import drop_empty_steps
from attrib.steps.speculative import apply_roles
from attrib.steps.windows import windows
from attrib.threads import both, spare
from attrib.trace import Trace, coded


class Attribution(msgspec.Struct, frozen=True):
    """The attributed trace: kernels with step, phase and component; the steps table."""

    trace: Trace
    # id, name, start_ns, dur_ns, step, phase, component, evidence, op_id, op, module_path,
    # launch_id, graph, bytes, flops, dtype, cost_model; the text columns as categories (4 bytes
    # a row: attrib.trace.coded), text again through attrib.trace.as_text
    kernels: pl.DataFrame
    steps: pl.DataFrame  # step, phase, tokens, tokens_from, window_start, window_end, ...
    notes: tuple[str, ...]
    ledger: Ledger | None = None  # per step: disjoint (cause, what, ns) rows summing to its window

    def largest(self) -> int:
        """Rows of its largest table (a chunked read's trace keeps a part of its tables)."""
        return max(self.trace.largest(), self.kernels.height)


def attribute(trace: Trace, phase_map: dict[str, str] | None = None, capture: Trace | None = None,
              capture_batch: int | None = None, budget: Budget | None = None,
              whole: Facts | None = None) -> Attribution:
    """Run linking, step/phase split and component mapping over a normalized trace.

    capture: the graph-capture trace of a replay trace; replayed kernels then get the op, shapes and
    module of the launch that captured them (attrib.link.graph_capture). budget: a model config
    (`--model`) pricing ops whose weights are not in their arguments (vLLM's moe_forward).
    whole: the ledger's Facts of the whole trace, when `trace` is a part of it."""
    notes: list[str] = []
    if capture is None:
        compiling = compile_spans(trace)  # the three stages that read them find them once
        # the links and the steps' spans share no result: on two threads
        links, spans = both(lambda: link(trace),
                            lambda: step_spans(trace, phase_map, compiling),
                            rows=trace.largest())
    else:  # the replayed kernels' ops come from the capture: the spans read the merged trace
        from attrib.link.graph_capture import merge  # a capture's reader only (a fast start)

        trace, links, report = merge(trace, link(trace), capture, batch_size=capture_batch)
        notes.append(report.note())
        compiling = compile_spans(trace)
        spans = step_spans(trace, phase_map, compiling)
    spans, kernel_steps = assign_steps(trace, links, phase_map, compiling, spans)

    def stepped() -> tuple[pl.DataFrame, Trace, Idle | None]:
        """The steps with their tokens (from shapes, then from kernel names), windows, exclusions
        and units; the trace (a salvaged one's warning names the steps it dropped); the idle side
        of the steps' ledger where the two stages run at once (else the ledger finds it, after
        classify, as before: the stages in turn gain nothing from it, and a chunk of the 1 M-kernel
        trace peaked higher). What they read of the kernels is their steps and launches, not
        their components. Its notes are the only ones added while it runs beside classify (which
        adds none)."""
        shaped = fill_tokens_and_phase(spans, tokens_from_shapes(trace, spans), notes)
        shaped = fill_from_stamp(shaped, trace.meta.provenance, notes)
        named = (trace.kernels.select("id", "name", "grid")
                 .join(kernel_steps, on="id", how="left"))
        steps = tokens_from_names(apply_roles(shaped, trace.ops), tokens_from_kernel_names(named))
        own = (trace.kernels.select("id", "start_ns", "dur_ns")
               .join(kernel_steps, on="id", how="left")
               .join(links.select("id", "launch_id", "graph"), on="id", how="left"))
        steps = mark_excluded(windows(steps, own, trace.copies, trace.launches), trace, compiling)
        # a salvaged trace: steps cut before their kernels
        steps, salvaged = drop_empty_steps(steps, trace)
        steps = with_units(steps, trace.ops)
        if not spare(trace.largest()):
            return steps, salvaged, None
        t = salvaged
        return steps, t, idle_side(steps, own, t.copies, t.launches, t.ops, t.frames, whole)

    # the components and the steps share no result: on two threads
    comp, (steps, trace, idle) = both(lambda: classify(trace, links, kernel_steps, compiling),
                                      stepped, rows=trace.largest())
    k = (trace.kernels.select("id", "name", "start_ns", "dur_ns")
         .join(comp, on="id", how="left")
         .join(links.select("id", "launch_id", "graph"), on="id", how="left"))
    k = k.join(steps.select("step", "phase"), on="step", how="left")
    budget = for_world(budget, world_size(trace))   # a tensor-parallel rank reads its shard
    led, costed = both(
        lambda: ledger(steps, k, trace.copies, trace.launches, trace.ops, trace.frames, whole,
                       idle),
        lambda: kernel_costs(trace, k, steps, budget), rows=trace.largest())
    return Attribution(
        trace=trace,
        kernels=coded(costed),
        steps=steps,
        notes=tuple(notes),
        ledger=led,
    )
