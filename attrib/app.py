"""The application: load a trace (collectors), attribute it (pipeline), document it, run the rules.

With attrib.cli, the only modules that import `collectors` and `rules`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec.structs import replace
import orjson
import polars as pl

import rules
from attrib import bounds
from attrib.bounds import OutOfDomain
from attrib.cost.budget import Budget, for_world, model_shape
from attrib.cost.kernels import world_size
from attrib.cost.dtypes import KV_BYTES
from attrib.cost.weights import (CLASSES, Bits, Formats, from_quantization_config, parse_bits,
                                 parse_formats)
from attrib.errors import TraceError, UsageError
from attrib.analysis.build import build, finish
from attrib.analysis.reprice import project
from attrib.analysis.finding import Finding
from attrib.analysis.speculative import plain_step_ms
from attrib.analysis.model import Analysis
from attrib.options import TOP_KERNELS, Options
from attrib.pipeline import Attribution, attribute
from attrib.steps.phases import annotated_spans
from attrib.threads import pooled
from attrib.roofline.arch import Arch, detect, find, load_archs, override, unknown_arch
from attrib.report.printable import plain_tree
from attrib.trace import SMALL_ROWS, TRUNCATED, Trace
from collectors import TORCH, limits, load, reader, resolve
from collectors.provenance import SUFFIX as STAMP_SUFFIX
from collectors.kineto import Fallback

if TYPE_CHECKING:
    from attrib.steps.chunks import Chunk

Warn = Callable[[object, str], None]


def resolve_arch(arch: str | Arch | None,
                 arch_file: Path | None = None) -> tuple[Arch | None, str | None]:
    """(Arch, "override") for a device given by name or entry (the analysis measures on it when
    it is the trace's own device, else projects onto it: attrib.roofline.arch.same_device);
    (None, None) to detect it.

    An arch file is read here, before any trace, so a bad one fails at once; an unknown name is
    one line (the closest names, every key)."""
    if arch_file is not None:
        limits.read_bytes(Path(arch_file))  # a regular file (a FIFO would block the TOML reader)
        load_archs(arch_file)
    if arch is None or isinstance(arch, Arch):
        return arch, ("override" if arch is not None else None)
    try:
        return override(arch, arch_file), "override"
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None


def _given_bits(weight_bits: float | Mapping[str, float] | None) -> Bits | None:
    """The API's weight_bits (a figure or a mapping of classes), each value checked."""
    if weight_bits is None:
        return None
    if isinstance(weight_bits, Mapping):
        unknown = sorted(str(k) for k in weight_bits if k not in CLASSES)
        if unknown:
            raise ValueError(f"weight_bits class {unknown[0]!r}: expected one of "
                             f"{', '.join(CLASSES)}")
        return {str(k): bounds.bits(v, f"weight bits of {k}") for k, v in weight_bits.items()}
    return bounds.bits(weight_bits)


def _bits(weight_bits: float | str | Mapping[str, float] | None, config: Mapping[str, Any],
          origin: object) -> Bits:
    """--weight-bits (a figure, CLASS=BITS pairs or a mapping) over the config's
    quantization_config."""
    try:
        given = parse_bits(weight_bits) if isinstance(weight_bits, str) else \
            _given_bits(weight_bits)
    except ValueError as exc:
        raise UsageError(f"--weight-bits: {exc}" if isinstance(weight_bits, str)
                         else str(exc)) from None
    try:
        from_config = from_quantization_config(config)
    except (TypeError, ValueError) as exc:
        raise TraceError(origin, str(exc)) from None
    if given is None:
        return from_config or 16.0
    if isinstance(given, Mapping):
        return {**(from_config or {}), **given}
    return float(given)


def model_budget(model: str | Path | Mapping[str, Any] | None, *,
                 weight_bits: float | str | Mapping[str, float] | None = None,
                 kv_dtype: str = "bf16", context: int | None = None) -> Budget | None:
    """A model budget from a HF config (a path or the parsed dict); None without a model.

    weight_bits: one figure, per-class values (`experts=4.25,attention=16,default=16` or a
    mapping), else what the config's quantization_config says, else 16. Without `context` the
    decode budget is not applied (its K/V reads need it); ops whose weights the trace hides are
    still priced. Each figure is checked for its domain (attrib.bounds): a bad argument is a
    UsageError, a bad config a TraceError naming it, the field and the value."""
    if not isinstance(weight_bits, str):
        try:
            _given_bits(weight_bits)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if context is not None:
        bounds.count(context, "context", 1, bounds.MAX_CONTEXT, strict=True)
    if kv_dtype not in KV_BYTES:
        raise UsageError(f"unknown KV-cache dtype {kv_dtype!r}; "
                         f"known: {', '.join(sorted(KV_BYTES))}")
    if model is None and context is not None:
        raise UsageError("--context sets the K/V positions of a --model budget: give --model "
                         "CONFIG with it (without --model the context is read from the trace)")
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
    except OutOfDomain as exc:
        raise TraceError(origin, str(exc)) from None
    except (TypeError, ValueError) as exc:
        raise TraceError(origin, f"model config not usable: {exc}") from None
    quantization = config.get("quantization_config", text.get("quantization_config"))
    bits = _bits(weight_bits, {**text, "quantization_config": quantization}, origin)
    return Budget(config=text, source=source, context=context, weight_bits=bits,
                  kv_bytes=KV_BYTES[kv_dtype])


def rule_target(name: str, arch_file: Path | None = None) -> str:
    """The gfx/sm target of `--arch NAME` for the rule catalog: a name `attrib archs` lists (with
    --arch-file's entries), or a target some rule names (gfx1103, gfx11); else a UsageError."""
    db = load_archs(arch_file)
    dev = find(name, db)
    if dev is not None:
        return dev.arch
    named = {a for r in rules.CATALOG for a in r.archs}
    if name.strip().lower() in named:
        return name.strip().lower()
    raise UsageError(unknown_arch(name, db, sorted(named)))


def catalog(arch: str | None = None, arch_file: Path | None = None) -> list[dict[str, Any]]:
    """The rule catalog (id, archs, needs, references), only the rules for `arch` (a name
    `attrib archs` lists, with arch_file's entries, or a target a rule names) when given."""
    if arch_file is not None:
        resolve_arch(None, arch_file)   # a bad arch file fails, given a name or not
    if arch is not None:
        arch = rule_target(arch, arch_file)
    return [{"id": r.id, "archs": ", ".join(r.archs) or "any", "needs": r.needs,
             "references": list(r.references)}
            for r in rules.CATALOG if arch is None or r.applies(arch)]


def check_phase(a: Attribution, phase: str | None, path: object) -> None:
    """An unknown phase is an error that lists the phases the trace has."""
    found = sorted(a.steps["phase"].unique().drop_nulls().to_list())
    if phase is not None and phase not in found:
        raise UsageError(f"{path}: no {phase!r} phase; phases found: {', '.join(found) or 'none'}")


def analyzable(trace: Trace, path: object) -> Trace:
    """The trace if it holds GPU kernels, or is a CPU-only torch trace with ops (steps and phases
    only); else a TraceError saying plainly what was read."""
    m = trace.meta
    if trace.kernels.height:
        if trace.kernels["dur_ns"].max() == 0:
            raise TraceError(path, "every kernel has a duration of 0 "
                                   f"({trace.kernels.height:,} kernels): no GPU time to attribute")
        return trace
    cut = next((w for w in m.warnings if w.kind == TRUNCATED), None)
    gpu_run = not reader(m.format).cpu_ops or trace.launches.height or m.devices or m.vendor or cut
    if not gpu_run and trace.ops.height:
        return trace
    read = f"read {m.events:,} events ({m.format})"
    if cut:
        read += (f"; {cut}: no GPU kernel before the cut "
                 "(a torch trace lists GPU events after the CPU ones)")
    elif m.warnings:  # what removed the kernels, if a check did; else the last warning
        dropped = [w for w in m.warnings if re.match(r"\d+ kernels dropped", w)]
        read += f"; {(dropped or m.warnings)[-1]}"
    raise TraceError(path, f"no GPU kernels to analyze ({read})")


def options(*, phase: str | None = None, phase_map: Mapping[str, str] | None = None,
            arch: str | Arch | None = None, arch_file: str | Path | None = None,
            model: str | Path | Mapping[str, Any] | None = None,
            weight_bits: float | str | Mapping[str, float] | None = None, kv_dtype: str = "bf16",
            context: int | None = None, capture: str | Path | None = None,
            capture_batch: int | None = None, top: int = TOP_KERNELS,
            what_if: str | None = None, baseline: str | Path | None = None) -> Options:
    """The Options of `analyze`'s arguments: an arch name or entry resolved, a model config read.

    Bad arguments raise UsageError (or TraceError for a bad file) before any trace is read."""
    bounds.count(top, "top", 1, strict=True)
    if capture_batch is not None:
        bounds.count(capture_batch, "capture_batch", 1, bounds.MAX_BATCH, strict=True)
    arch_path = Path(arch_file) if arch_file is not None else None
    dev, dev_from = resolve_arch(arch, arch_path)
    budget = model_budget(model, weight_bits=weight_bits, kv_dtype=kv_dtype, context=context)
    return Options(phase=phase, phase_map=dict(phase_map or {}), arch=dev, arch_from=dev_from,
                   arch_file=arch_path, budget=budget,
                   capture=Path(capture) if capture is not None else None,
                   capture_batch=capture_batch, top=top, what_if=parse_what_if(what_if, budget),
                   baseline=Path(baseline) if baseline is not None else None)


def analyze(path: str | Path, *, phase: str | None = None,
            phase_map: Mapping[str, str] | None = None,
            arch: str | Arch | None = None, arch_file: str | Path | None = None,
            model: str | Path | Mapping[str, Any] | None = None,
            weight_bits: float | str | Mapping[str, float] | None = None, kv_dtype: str = "bf16",
            context: int | None = None, capture: str | Path | None = None,
            capture_batch: int | None = None, top: int = TOP_KERNELS,
            what_if: str | None = None, baseline: str | Path | None = None) -> Analysis:
    """Load a trace (any supported format), attribute it, run the rules: its Analysis.

    phase: only this phase ("prefill", "decode", ...); phase_map: annotation name -> phase;
    arch: measure against this device instead of the detected one (a what-if: "gfx1201",
    "h200", ...); arch_file: TOML of extra device entries; model, weight_bits, kv_dtype, context:
    a HF config to budget decode bytes the trace has no shapes for; capture (+ capture_batch):
    the graph-capture trace of a replay trace; top: top kernels per phase; what_if: formats to
    project decode at (`weights=int4,kv=fp8`, needs model); baseline: a plain decode trace of
    the target (a speculative loop's speedup is measured against its decode step).
    `.to_dict()` is the attrib.analysis/1 document.
    Bad input raises attrib.errors.TraceError (the file) or UsageError (an argument), both
    ValueErrors.

    >>> an = attrib.analyze("trace.json.gz", model="config.json", context=2048)  # doctest: +SKIP
    >>> an.phase("decode").gb_per_token                                           # doctest: +SKIP
    """
    opts = options(phase=phase, phase_map=phase_map, arch=arch, arch_file=arch_file, model=model,
                   weight_bits=weight_bits, kv_dtype=kv_dtype, context=context, capture=capture,
                   capture_batch=capture_batch, top=top, what_if=what_if,
                   baseline=Path(baseline) if baseline is not None else None)
    return analyze_path(path, opts)


# a Kineto trace from this much JSON text on is read from disk a chunk of steps at a time
BOUNDED_BYTES = 1 << 30
CHUNK_STEPS = 64  # annotated steps per chunk


def _big(path: Path) -> bool:
    """Whether the file's JSON text is likely BOUNDED_BYTES or more, judged from its size."""
    text = limits.text_bytes(path)
    return text is not None and text >= BOUNDED_BYTES


def bounded(path: str | Path, opts: Options = Options(),
            steps: int = CHUNK_STEPS) -> Attribution | None:
    """The attribution of a Kineto trace read from disk `steps` annotated steps at a time
    (collectors.kineto.spill, attrib.chunked.attribute_chunks): what it holds is bounded by a
    chunk. None where the trace must be read whole: not Kineto, a graph-capture trace given, no
    step annotations, no GPU kernels (the whole reader says what it read), a document the
    streaming reader cannot cut, or anything the whole-trace reader would warn about."""
    path = Path(path)
    if opts.capture is not None or resolve(path)[0] != TORCH:
        return None
    # only a trace read in chunks needs these (a fast start for the rest)
    from attrib.chunked import NotOneRun, attribute_chunks
    from attrib.steps.chunks import plan
    from collectors.kineto.spill import Spill, Unbounded
    try:
        with Spill.read(path) as spill:
            marks = spill.markers()
            chunks = plan(annotated_spans(marks, dict(opts.phase_map)), steps)
            kernels = sum(p.rows for p in spill.parts["kernels"])
            if marks.meta.warnings or len(chunks) == 1 or not kernels:
                return None
            def window(c: Chunk) -> Trace:
                return spill.window(c.host, c.gpu)
            a = attribute_chunks(chunks, window, marks, dict(opts.phase_map), opts.budget,
                                 gather=True, reads=rules.reads())
    except (Fallback, Unbounded, TraceError, NotOneRun):  # read whole: that reader says why
        return None
    analyzable(a.trace, path)
    return a


def attribution(path: str | Path, opts: Options = Options(), warn: Warn | None = None,
                steps: int | None = None) -> Attribution:
    """Load and attribute one trace (with its graph-capture trace when given); warn(path, message)
    gets each warning of the readers. steps (by default opts.chunk_steps): attribute a Kineto
    trace `steps` annotated steps at a time, read from disk (`bounded`); None: CHUNK_STEPS where
    the file holds BOUNDED_BYTES of JSON or more; 0: never."""
    capture = opts.capture
    steps = opts.chunk_steps if steps is None else steps
    if steps is None:
        steps = CHUNK_STEPS if _big(Path(path)) else 0
    got = bounded(path, opts, steps) if steps else None
    if got is not None:
        return got

    def read() -> tuple[Trace | None, Trace]:
        return (load(capture) if capture is not None else None), analyzable(load(path), path)
    try:
        cap, trace = pooled(read, small=_bounded_read(capture, path))
    except MemoryError:
        raise TraceError(path, "reading it needs more memory than this process may use") from None
    rows = max(trace.largest(), cap.largest() if cap is not None else 0)
    a = pooled(lambda: attribute(trace, dict(opts.phase_map), cap, opts.capture_batch,
                                 opts.budget), small=rows <= SMALL_ROWS)
    # the attributed trace's warnings: the steps stage adds to a truncation warning what it dropped
    for p, t in ((capture, cap), (path, a.trace)):
        for w in (t.meta.warnings if t is not None and warn is not None else ()):
            warn(p, w)
    return a


def _bounded_read(*paths: str | Path | None) -> bool:
    """Whether reading `paths` may run on polars' pool (attrib.threads.pooled): each a small Kineto
    JSON file, whose reader's work its text bounds. Not a database: its reader stops a query that
    runs on when a signal's handler runs, and that is in the main thread only."""
    try:
        return limits.small_text(*paths) and all(
            resolve(p)[0] == TORCH for p in paths if p is not None)
    except TraceError:  # the reader says it
        return False


def analyze_path(path: str | Path, opts: Options = Options(), warn: Warn | None = None) -> Analysis:
    """`analyze` with resolved Options (what the CLI builds from its flags).

    warn(path, message) is called with each warning of the readers (what they salvaged or
    dropped)."""
    plain = baseline_step_ms(opts)  # a bad baseline fails before the work
    a = attribution(path, opts, warn)
    check_phase(a, opts.phase, path)
    return analysis(a, opts, plain)


def baseline_step_ms(opts: Options) -> float | None:
    """The plain decode step of opts.baseline (a plain decode trace of the target), None without."""
    return plain_step_ms(attribution(opts.baseline).steps) if opts.baseline else None


def analysis(a: Attribution, opts: Options = Options(),
             plain_ms: float | None = None) -> Analysis:
    """The Analysis of an attribution: its figures, the rules' findings, the ranked bottlenecks.
    plain_ms: opts.baseline's plain decode step when already known."""
    budget = for_world(opts.budget, world_size(a.trace))  # the rank's tensor-parallel shard
    plain = plain_ms if plain_ms is not None else baseline_step_ms(opts)

    def analyzed() -> Analysis:
        an = build(a, opts.phase, opts.arch, opts.arch_from, budget, opts.arch_file, opts.top,
                   capture=opts.capture, plain_ms=plain)
        an = with_what_if(an, budget, opts.what_if)
        # a trace's text (device, kernel and op names, stamp values) is untrusted: no escape or
        # control character of it reaches any output format, plot or warning (~2 ms)
        return plain_tree(finish(an, tuple(rules.run(a, an))))
    return pooled(analyzed, small=a.largest() <= SMALL_ROWS)


def with_what_if(an: Analysis, budget: Budget | None, formats: Formats | None) -> Analysis:
    """The analysis with its decode phase projected at `formats` (a note says why not)."""
    if formats is None or budget is None:
        return an
    dec = an.phase("decode")
    wi = project(dec, budget, formats, an.device) if dec is not None else None
    if wi is not None:
        return replace(an, what_if=wi)
    why = ("no decode phase" if dec is None
           else "the decode phase has no tokens, bytes or context")
    return replace(an, notes=(*an.notes, f"--what-if {formats.label()}: not projected ({why})"))


def parse_what_if(text: str | None, budget: Budget | None) -> Formats | None:
    """--what-if's formats; a UsageError when malformed or without a model config."""
    if text is None:
        return None
    try:
        formats = parse_formats(text)
    except ValueError as exc:
        raise UsageError(f"--what-if: {exc}") from None
    if budget is None:
        raise UsageError("--what-if needs --model: each component's weight and K/V bytes come from "
                         "the model config")
    return formats


def baseline_findings(base: Analysis, cand: Analysis) -> list[Finding]:
    """The findings that need a baseline (P22) of a candidate against it."""
    return rules.run_pair(base, cand)


def export_trace(path: str | Path, opts: Options = Options()) -> dict[str, Any]:
    """The Kineto trace at `path` with attrib's attribution added (attrib.report.export); each
    kernel is found by its index in traceEvents, which the reader kept (`event`). opts: the phase
    map, and the capture trace or model budget that price a replay's kernels."""
    fmt, _ = resolve(path)
    r = reader(fmt)
    if r.document is None:
        raise UsageError(f"{path}: export rewrites a torch-profiler (Kineto) trace; this is {fmt}")
    from attrib.report.export import annotate  # export's own: analyze does not load it

    a = attribution(path, opts)
    raw = r.document(Path(path))
    kernels = a.kernels.join(a.trace.kernels.select("id", "event"), on="id", how="left")
    try:
        return annotate(raw, kernels, a.steps)
    except ValueError as exc:
        raise TraceError(path, f"{exc}: cannot align") from None


CLOCK = ("Kineto baseTimeNanoseconds + ts: each rank's host wall clock "
         "(one node: the same clock; across nodes only as close as their clock sync)")


def _offset(trace: Trace) -> int:
    base = (trace.meta.top or {}).get("baseTimeNanoseconds")
    return int(base) if isinstance(base, int) else 0


def _rank_of(a: Attribution, path: Path) -> tuple[int, int | None]:
    info = (a.trace.meta.top or {}).get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    if not isinstance(rank, int):
        raise TraceError(path, "no distributedInfo.rank: not a rank of a distributed run")
    return rank, world_size(a.trace)


def _link(a: Attribution, opts: Options, link_gbs: float | None) -> dict[str, Any]:
    if link_gbs is not None:
        return {"gbs": link_gbs, "from": "--link-gbs", "source": None}
    dev = opts.arch
    if dev is None:
        names = a.trace.kernels["name"].unique().head(20000).to_list()
        dev, _ = detect(a.trace.meta.devices, a.trace.meta.vendor, names, extra=opts.arch_file)
    if dev is None or not dev.link_gbs:
        return {"gbs": None, "from": dev.key if dev else None, "source": None}
    return {"gbs": dev.link_gbs, "from": f"{dev.name} ({dev.key})", "source": dev.link_source}


def merge_ranks(paths: list[Path], opts: Options = Options(), link_gbs: float | None = None,
                warn: Warn | None = None) -> dict[str, Any]:
    """The attrib.ranks/1 document of the per-rank traces of one run (attrib.steps.ranks):
    per-rank step times side by side, the slowest rank, collectives split into wait, transfer
    (bus bytes at the device's link bandwidth, or link_gbs) and latency, step-start skew."""
    # the ranks command's own (analyze does not load them)
    from attrib.report import ranks as ranks_report
    from attrib.steps import ranks as rk

    if link_gbs is not None:
        bounds.figure(link_gbs, "link_gbs", 0, bounds.MAX_LINK_GBS, lo_open=True)
    runs: dict[int, tuple[Path, Attribution, int | None]] = {}
    for path in paths:
        a = attribution(path, opts, warn)
        rank, world = _rank_of(a, path)
        if rank in runs:
            raise TraceError(path, f"rank {rank} given twice (also {runs[rank][0]})")
        runs[rank] = (path, a, world)
    if len(runs) < 2:
        raise UsageError(f"ranks needs the traces of two or more ranks, got {len(runs)}")
    worlds = {w for _, _, w in runs.values()}
    notes = [] if worlds == {len(runs)} else [
        f"world size {sorted(w for w in worlds if w)} in the traces, {len(runs)} ranks given: "
        "the figures are over the ranks given"]
    steps: list[pl.DataFrame] = []
    colls: list[pl.DataFrame] = []
    info: list[dict[str, Any]] = []
    for rank in sorted(runs):
        path, a, _ = runs[rank]
        off = _offset(a.trace)
        st, co = rk.step_times(a.steps, rank, off), rk.collectives(a.kernels, rank, off)
        steps.append(st)
        colls.append(co)
        info.append({"rank": rank, "path": str(path), "steps": st.height, "collectives": co.height})
    counts = {int(r["collectives"]) for r in info}
    if len(counts) > 1:
        notes.append(f"ranks issued {sorted(counts)} collectives: only the first "
                     f"{min(counts)} of each are matched")
    link = _link(runs[min(runs)][1], opts, link_gbs)
    split = rk.split(pl.concat(colls), link["gbs"])
    table = rk.by_step(pl.concat(steps), split)
    return ranks_report.document(info, table, rk.by_phase(table), split, link, CLOCK, notes)


def trace_files(directory: str | Path,
                skipped: list[tuple[Path, str]] | None = None) -> list[Path]:
    """The files directly inside `directory` that a reader claims, by name (capture stamps and
    model configs are not traces). Each other file is appended to `skipped` with the reason."""
    found = []
    for p in sorted(Path(directory).iterdir()):
        if p.name.endswith(STAMP_SUFFIX) or p.name.endswith(".model.json"):
            continue
        if not p.is_file():
            if skipped is not None:
                skipped.append((p, "not a file"))
            continue
        try:
            resolve(p)
        except TraceError as exc:
            if skipped is not None:
                skipped.append((p, exc.problem))
            continue
        found.append(p)
    return found
