"""The application: load a trace (collectors), attribute it (pipeline), document it, run the rules.

With attrib.cli, the only modules that import `collectors` and `rules`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

import rules
from attrib.cost.budget import Budget, model_shape
from attrib.cost.dtypes import KV_BYTES
from attrib.cost.weights import Bits, from_quantization_config, parse_bits
from attrib.errors import TraceError, UsageError
from attrib.pipeline import Attribution, attribute
from attrib.report.bottlenecks import add_bottlenecks
from attrib.report.document import TOP_KERNELS, document
from attrib.roofline.arch import Arch, load_archs, override
from attrib.report.export import annotate
from attrib.trace import TRUNCATED, Trace
from collectors import kineto, limits, load, sniff


def resolve_arch(arch: str | Arch | None, arch_file: Path | None = None) -> tuple[Arch | None, str | None]:
    """(Arch, "override") for a what-if device given by name or entry; (None, None) to detect it.

    An arch file is read here, before any trace, so a bad one fails at once."""
    if arch_file is not None:
        limits.read_bytes(Path(arch_file))  # a regular file (a FIFO would block the TOML reader)
        load_archs(arch_file)
    if arch is None or isinstance(arch, Arch):
        return arch, ("override" if arch is not None else None)
    try:
        return override(arch, arch_file), "override"
    except KeyError:
        raise UsageError(f"unknown arch {arch!r}; known: {', '.join(sorted(load_archs(arch_file)))} "
                         "(`attrib archs` lists them; `attrib archs --template` prints an entry to add yours with --arch-file)") from None


def _bits(weight_bits: float | str | Mapping[str, float] | None, config: Mapping[str, Any], origin: object) -> Bits:
    """--weight-bits (a figure, CLASS=BITS pairs or a mapping) over the config's quantization_config."""
    try:
        given = parse_bits(weight_bits) if isinstance(weight_bits, str) else weight_bits
        from_config = from_quantization_config(config)
    except ValueError as exc:
        raise UsageError(f"--weight-bits: {exc}" if isinstance(weight_bits, str) else f"{origin}: {exc}") from None
    for v in ([given] if not isinstance(given, Mapping) else given.values()) if given is not None else ():
        if not v > 0:
            raise UsageError(f"weight bits must be > 0, got {v:g}")
    if given is None:
        return from_config or 16.0
    if isinstance(given, Mapping):
        return {**(from_config or {}), **given}
    return float(given)


def model_budget(model: str | Path | Mapping[str, Any] | None, *,
                 weight_bits: float | str | Mapping[str, float] | None = None,
                 kv_dtype: str = "bf16", context: int | None = None) -> Budget | None:
    """A model budget from a HF config (a path or the parsed dict); None without a model.

    weight_bits: one figure, per-class values (`experts=4.25,attention=16,default=16` or a mapping),
    else what the config's quantization_config says, else 16. Without `context` the decode budget is
    not applied (its K/V reads need it); ops whose weights the trace hides are still priced."""
    if isinstance(weight_bits, (int, float)) and not weight_bits > 0:
        raise UsageError(f"weight bits must be > 0, got {weight_bits:g}")
    if context is not None and context <= 0:
        raise UsageError(f"context must be a positive number of K/V positions, got {context}")
    if kv_dtype not in KV_BYTES:
        raise UsageError(f"unknown KV-cache dtype {kv_dtype!r}; known: {', '.join(sorted(KV_BYTES))}")
    if model is None:
        if weight_bits is not None and isinstance(weight_bits, str):
            _bits(weight_bits, {}, "--weight-bits")
        return None
    if isinstance(model, Mapping):
        config, source, origin = model, "model config", "model config"
    else:
        path = Path(model)
        try:
            config = orjson.loads(limits.read_bytes(path)[0])
        except orjson.JSONDecodeError as exc:
            raise TraceError(path, f"not valid JSON ({exc})") from None
        if not isinstance(config, dict):
            raise TraceError(path, "not a model config (expected a JSON object)")
        source, origin = f"model config {path.name}", path
    text = config.get("text_config", config)
    if not isinstance(text, dict):
        raise TraceError(origin, "not a model config (text_config is not an object)")
    try:
        model_shape(text)
    except KeyError as exc:
        raise TraceError(origin, f"not a model config: no {exc.args[0]}") from None
    except (TypeError, ValueError) as exc:
        raise TraceError(origin, f"model config not usable: {exc}") from None
    bits = _bits(weight_bits, {**text, "quantization_config": config.get("quantization_config",
                                                                          text.get("quantization_config"))}, origin)
    return Budget(config=text, source=source, context=context, weight_bits=bits, kv_bytes=KV_BYTES[kv_dtype])


def catalog(arch: str | None = None) -> list[dict[str, Any]]:
    """The rule catalog (id, archs, needs, references), only the rules for `arch` (a name `attrib archs` lists,
    or a gfx target) when given."""
    if arch is not None and not arch.startswith("gfx"):
        dev, _ = resolve_arch(arch)
        arch = dev.arch if dev is not None else arch
    return [{"id": r.id, "archs": ", ".join(r.archs) or "any", "needs": r.needs, "references": list(r.references)}
            for r in rules.CATALOG if arch is None or r.applies(arch)]


def check_phase(a: Attribution, phase: str | None, path: object) -> None:
    """An unknown phase is an error that lists the phases the trace has."""
    found = sorted(a.steps["phase"].unique().drop_nulls().to_list())
    if phase is not None and phase not in found:
        raise UsageError(f"{path}: no {phase!r} phase; phases found: {', '.join(found) or 'none'}")


def analyze(path: str | Path, *, phase: str | None = None, phase_map: Mapping[str, str] | None = None,
            arch: str | Arch | None = None, arch_file: str | Path | None = None,
            model: str | Path | Mapping[str, Any] | None = None,
            weight_bits: float | str | Mapping[str, float] | None = None,
            kv_dtype: str = "bf16", context: int | None = None, capture: str | Path | None = None,
            capture_batch: int | None = None) -> dict[str, Any]:
    """Load a trace (any supported format), attribute it, run the rules: the attrib.analysis/1 document.

    phase: only this phase ("prefill", "decode", ...); phase_map: annotation name -> phase;
    arch: measure against this device instead of the detected one (a what-if: "gfx1201", "h200", ...);
    arch_file: TOML of extra device entries; model, weight_bits, kv_dtype, context: a HF config to
    budget decode bytes the trace has no shapes for; capture (+ capture_batch): the graph-capture trace
    of a replay trace. Bad input raises attrib.errors.TraceError (the file) or UsageError (an argument).
    """
    arch_path = Path(arch_file) if arch_file is not None else None
    dev, dev_from = resolve_arch(arch, arch_path)
    budget = model_budget(model, weight_bits=weight_bits, kv_dtype=kv_dtype, context=context)
    return analyze_path(path, phase, dict(phase_map or {}), dev, dev_from, budget, capture, capture_batch,
                        arch_path)


def analyzable(trace: Trace, path: object) -> Trace:
    """The trace if it holds GPU kernels, or is a CPU-only torch trace with ops (steps and phases
    only); else a TraceError saying plainly what was read."""
    if trace.kernels.height:
        return trace
    m = trace.meta
    cut = next((w for w in m.warnings if w.kind == TRUNCATED), None)
    gpu_run = m.format != "torch-json" or trace.launches.height or m.devices or m.vendor or cut
    if not gpu_run and trace.ops.height:
        return trace
    read = f"read {m.events:,} events ({m.format})"
    if cut:
        read += f"; {cut}: no GPU kernel before the cut (a torch trace lists GPU events after the CPU ones)"
    elif m.warnings:
        read += f"; {m.warnings[-1]}"
    raise TraceError(path, f"no GPU kernels to analyze ({read})")


def attribution(path: str | Path, phase_map: dict[str, str] | None = None, capture: str | Path | None = None,
                capture_batch: int | None = None, warn: Callable[[object, str], None] | None = None,
                budget: Budget | None = None) -> Attribution:
    """Load and attribute one trace (with its graph-capture trace when given); warn(path, message) gets
    each warning of the readers."""
    cap = load(capture) if capture is not None else None
    try:
        trace = analyzable(load(path), path)
    except MemoryError:
        raise TraceError(path, "reading it needs more memory than this process may use") from None
    a = attribute(trace, phase_map, cap, capture_batch, budget)
    # the attributed trace's warnings: the steps stage adds to a truncation warning what it dropped
    for p, t in ((capture, cap), (path, a.trace)):
        for w in (t.meta.warnings if t is not None and warn is not None else ()):
            warn(p, w)
    return a


def analyze_path(path: str | Path, phase: str | None = None, phase_map: dict[str, str] | None = None,
                 arch: Arch | None = None, arch_from: str | None = None, budget: Budget | None = None,
                 capture: str | Path | None = None, capture_batch: int | None = None,
                 arch_file: Path | None = None, warn: Callable[[object, str], None] | None = None,
                 top: int = TOP_KERNELS) -> dict[str, Any]:
    """`analyze` with a resolved Arch and Budget (what the CLI builds from its options).

    warn(path, message) is called with each warning of the readers (what they salvaged or dropped)."""
    a = attribution(path, phase_map, capture, capture_batch, warn, budget)
    check_phase(a, phase, path)
    doc = document(a, phase, arch, arch_from, budget, arch_file, top)
    if not a.trace.kernels.height:
        doc["notes"].append("no GPU kernels: a CPU-only trace (steps and phases only)")
    doc["findings"] = [f.to_json() for f in rules.run(a, doc)]
    return add_bottlenecks(doc)


def export_trace(path: str | Path, phase_map: dict[str, str] | None = None) -> dict[str, Any]:
    """The Kineto trace at `path` with attrib's attribution added (attrib.report.export)."""
    if sniff(path) != "torch-json":
        raise UsageError(f"{path}: export rewrites a torch-profiler (Kineto) trace; this is {sniff(path)}")
    a = attribution(path, phase_map)
    raw = kineto.read_document(path)
    order = kineto.kernel_event_indices(raw["traceEvents"])
    if len(order) != a.trace.kernels.height:
        raise TraceError(path, f"{len(order)} kernel events in the document, {a.trace.kernels.height} read: cannot align")
    return annotate(raw, order, a.kernels, a.steps)
