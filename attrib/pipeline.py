"""The attribution pipeline: Trace -> Attribution, its stages in order.

link (kernel <-> launch <-> op <-> module) -> steps and phases -> components -> tokens -> windows ->
costs. Each stage is a pure function over polars tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from attrib.components.classify import classify
from attrib.cost.budget import Budget, for_world
from attrib.cost.kernels import kernel_costs, world_size
from attrib.link.graph_capture import merge
from attrib.link.launches import link
from attrib.steps.phases import assign_steps, tokens_from_kernel_names, tokens_from_shapes
from attrib.steps.tokens import fill_tokens_and_phase, tokens_from_names, with_units
from attrib.steps.excluded import mark_excluded
from attrib.steps.ledger import Ledger, ledger
from attrib.steps.salvage import drop_empty_steps
from attrib.steps.speculative import apply_roles
from attrib.steps.windows import windows
from attrib.trace import Trace


@dataclass(frozen=True)
class Attribution:
    """The attributed trace: kernels with step, phase and component; the steps table."""

    trace: Trace
    kernels: pl.DataFrame  # id, name, start_ns, dur_ns, step, phase, component, evidence, op_id, op,
    #                        module_path, launch_id, graph, bytes, flops, dtype, cost_model
    steps: pl.DataFrame  # step, phase, tokens, tokens_from, window_start, window_end, ...
    notes: tuple[str, ...]
    ledger: Ledger | None = None  # per step: disjoint (cause, what, ns) rows summing to its window


def attribute(trace: Trace, phase_map: dict[str, str] | None = None, capture: Trace | None = None,
              capture_batch: int | None = None, budget: Budget | None = None) -> Attribution:
    """Run linking, step/phase split and component mapping over a normalized trace.

    capture: the graph-capture trace of a replay trace; replayed kernels then get the op, shapes and
    module of the launch that captured them (attrib.link.graph_capture). budget: a model config
    (`--model`) pricing ops whose weights are not in their arguments (vLLM's moe_forward)."""
    links = link(trace)
    notes: list[str] = []
    if capture is not None:
        trace, links, report = merge(trace, links, capture, batch_size=capture_batch)
        notes.append(report.note())
    spans, kernel_steps = assign_steps(trace, links, phase_map)
    comp = classify(trace, links, kernel_steps)
    steps = apply_roles(fill_tokens_and_phase(spans, tokens_from_shapes(trace, spans), notes), trace.ops)
    k = (trace.kernels.select("id", "name", "start_ns", "dur_ns")
         .join(comp, on="id", how="left")
         .join(links.select("id", "launch_id", "graph"), on="id", how="left"))
    steps = tokens_from_names(steps, tokens_from_kernel_names(k.join(trace.kernels.select("id", "grid"), on="id", how="left")))
    k = k.join(steps.select("step", "phase"), on="step", how="left")
    steps = mark_excluded(windows(steps, k, trace.copies, trace.launches), trace)
    steps, trace = drop_empty_steps(steps, trace)  # a salvaged trace: steps cut before their kernels
    steps = with_units(steps, trace.ops)
    budget = for_world(budget, world_size(trace))   # a tensor-parallel rank reads its shard
    led = ledger(steps, k, trace.copies, trace.launches, trace.ops, trace.frames)
    return Attribution(
        trace=trace,
        kernels=kernel_costs(trace, k, steps, budget),
        steps=steps,
        notes=tuple(notes),
        ledger=led,
    )
