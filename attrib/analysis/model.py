"""The typed, frozen analysis of one trace: what rules, renderers and the Python API read.

Records are dataclasses; tabular rows (components, top kernels, per-step series) are tuples of
records, each also given as a polars DataFrame. `Analysis.to_dict()` is the only place the
`attrib.analysis/1` document is built.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import msgspec
from msgspec import field
from msgspec.structs import fields, force_setattr, replace
import orjson
import polars as pl

from attrib.analysis.records import as_dict
from attrib.analysis.finding import JSON, Evidence, Finding
from attrib.cost.dtypes import PEAK_KEY
from attrib.analysis.whatif import WhatIf

from attrib.analysis.speculative import Speculative
from attrib.errors import TraceError, UsageError
from attrib.steps.ledger import OWN_COST

if TYPE_CHECKING:
    from attrib.analysis.summary import Summary

SCHEMA_ID = "attrib.analysis/1"
# the largest document Analysis.load reads: the analysis of a trace of 1 M kernels is 7 MB of JSON
DOCUMENT_MAX_BYTES = 512 << 20
# the phases any trace may hold: Analysis.phase of another name absent here is a typo
STANDARD_PHASES = ("prefill", "decode", "mixed", "draft", "verify", "unknown")


def _ms(v: float | None) -> str:
    return "? ms" if v is None else f"{v:.3f} ms"


def _steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _record(obj: object) -> dict[str, object]:
    out: dict[str, object] = as_dict(obj)
    return out


def _row(obj: object) -> dict[str, object]:
    """A record as a table row: a mapping field becomes a list of {key, value} (one column type)."""
    out = _record(obj)
    for k, v in out.items():
        if isinstance(v, dict):
            out[k] = [{"key": str(x), "value": y} for x, y in v.items()]
    return out


def _ledger_row(r: LedgerRow) -> dict[str, object]:
    return {"cause": r.cause, "what": r.what, "ms_per_step": round(r.ms_per_step, 4),
            "share": None if r.share is None else round(r.share, 4),
            "n_per_step": None if r.n_per_step is None else round(r.n_per_step, 2),
            "median_us": None if r.median_us is None else round(r.median_us, 2)}


def _frame(rows: tuple[object, ...], cls: type) -> pl.DataFrame:
    if rows:
        return pl.DataFrame([_row(r) for r in rows], infer_schema_length=None)
    return pl.DataFrame({f.name: [] for f in fields(cls)})


class Source(msgspec.Struct, frozen=True):
    """The trace read: its path, format, event and kernel counts, kernels outside any step."""

    path: str | None
    format: str
    events: int
    kernels: int
    kernel_ms: float
    kernels_without_launch: int
    kernels_outside_steps: int


class Device(msgspec.Struct, frozen=True, kw_only=True):
    """The device the rooflines are drawn for (None fields where unknown). known: an entry of
    the device database (else only what the trace said); calibrated: attrib calibrate's record,
    when its entry; measured_tflops: the calibrated matrix TFLOP/s; roofline_tflops_basis:
    "measured" where calibrated, else "peak" (set from measured_tflops)."""

    arch: str | None
    name: str | None
    key: str | None = None
    detected_from: str
    peak_bw_gbs: float | None
    sustained_bw_gbs: float | None
    roofline_bw_gbs: float | None = None
    roofline_bw_basis: str | None = None
    roofline_tflops_basis: str = "peak"
    sustained_source: str | None = None
    derived: tuple[str, ...] = ()
    matrix_tflops: Mapping[str, float] = field(default_factory=dict)
    calibrated: Mapping[str, Any] | None = None
    vendor: str | None
    known: bool = False
    measured_tflops: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        basis = "measured" if self.measured_tflops else "peak"
        force_setattr(self, "roofline_tflops_basis", basis)

    @property
    def roofline_bw(self) -> float | None:
        """GB/s the rooflines use: sustained where known, else peak."""
        bw = self.roofline_bw_gbs or self.sustained_bw_gbs or self.peak_bw_gbs
        return float(bw) if bw else None

    def matrix_peak(self, dtype: str) -> float | None:
        """Peak matrix TFLOP/s of a dtype ("bf16", "fp8", ...), None where unknown."""
        v = self.matrix_tflops.get(PEAK_KEY.get(dtype, dtype))
        return float(v) if v else None

    def matrix_roof(self, dtype: str) -> tuple[float | None, str]:
        """(TFLOP/s a dtype's FLOPs are priced at, "measured" | "peak"): the calibrated figure
        where `attrib calibrate` measured the dtype, else the matrix peak."""
        v = self.measured_tflops.get(PEAK_KEY.get(dtype, dtype))
        return (float(v), "measured") if v else (self.matrix_peak(dtype), "peak")

    @property
    def what_if(self) -> bool:
        return self.detected_from == "override"


class StepMs(msgspec.Struct, frozen=True):
    """A phase's step time over its counted steps (ms): the mean, the phase's step time in
    every figure (tok/s, the ledger it sums to, the findings, compare), then the median, 10th and
    90th percentile for the spread."""

    median: float | None
    p10: float | None
    p90: float | None
    mean: float | None = None


class Component(msgspec.Struct, frozen=True):
    """One component's row of a phase (per step)."""

    component: str
    kernels: int
    ms: float | None
    share: float | None
    bytes: float | None
    flops: float | None
    achieved_gbs: float | None
    achieved_tflops: float | None
    roofline_ms: float | None
    gap_ms: float | None
    intensity: float | None
    bound: str | None
    dtype: str | None
    bytes_from: str | None
    bytes_known_share: float | None
    inconsistent: str | None
    over_peak: str | None  # kernels above the device's peak: their bytes not counted
    partial: bool
    estimated_share: float | None
    evidence: dict[str, int]
    evidence_per_step: dict[str, float | None]
    # its weight GEMMs' format as run (bf16, fp8_e4m3fn, int4 g128: attrib.cost.component_bytes)
    weight_format: str | None = None


class TopKernel(msgspec.Struct, frozen=True):
    """A kernel name's totals in a phase (figures per step)."""

    name: str
    component: str | None
    calls: int
    calls_per_step: float | None
    ms: float | None
    bytes: float | None
    flops: float | None
    achieved_gbs: float | None
    achieved_tflops: float | None
    intensity: float | None
    bound: str | None
    bytes_known_share: float | None


class ExcludedStep(msgspec.Struct, frozen=True):
    """A step left out of its phase's medians ("compile", "warm-up"), with its figures."""

    step: int
    reason: str
    step_ms: float | None
    kernels: int
    kernel_ms: float | None


class LedgerRow(msgspec.Struct, frozen=True):
    """Where a step's time goes: one cause (kernels, copy, outside, sync, host, launch, profiler),
    what holds it (a component, an op or frame, a call), ms per step and its share of the step;
    n_per_step: intervals (or kernels) behind it; median_us: the median interval (idle rows)."""

    cause: str
    what: str
    ms_per_step: float
    share: float | None
    n_per_step: int | float | None = None  # a count (one step), or a mean count
    median_us: float | None = None


class StepSeries(msgspec.Struct, frozen=True):
    """Per-step figures of a phase in time order (columnar)."""

    step: tuple[int, ...]
    start_ms: tuple[float | None, ...]
    step_ms: tuple[float | None, ...]
    kernel_ms: tuple[float | None, ...]
    idle_ms: tuple[float | None, ...]
    kernels: tuple[int | None, ...]
    tokens: tuple[int | None, ...]
    context: tuple[int | None, ...]
    components: Mapping[str, tuple[float, ...]]
    ledger: tuple[tuple[LedgerRow, ...], ...] = ()  # per step, its window's rows
    # per step, when its GPU ran: the union of its kernels' intervals (start, end ms from the
    # trace's first step, gaps under BUSY_GAP_MS closed): the timeline plot's
    busy_ms: tuple[tuple[tuple[float, float], ...], ...] = ()

    def frame(self) -> pl.DataFrame:
        """One row per step; a column per component (ms)."""
        base = {f.name: list(getattr(self, f.name)) for f in fields(self)
                if f.name not in ("components", "ledger", "busy_ms")}
        comps = {c: list(v) for c, v in self.components.items()}
        return pl.DataFrame(base | comps, strict=False)


class Bottleneck(msgspec.Struct, frozen=True):
    """A ranked place the step's time goes: a roofline gap, GPU idle, or a finding's estimate."""

    kind: str
    component: str | None
    ms_per_step: float | None
    share_of_step: float | None
    what: str
    evidence: Evidence
    findings: tuple[int, ...]
    rank: int = 0


class Unpriced(msgspec.Struct, frozen=True):
    """A component's time that no roofline prices (no bytes or FLOPs known), with why."""

    component: str
    ms_per_step: float | None
    share: float | None
    why: str


class Total(msgspec.Struct, frozen=True):
    """The finding that states the whole step's distance from its floor."""

    finding: int
    ms_per_step: float | None
    title: str


class Bottlenecks(msgspec.Struct, frozen=True):
    """A phase's bottlenecks: ranked, the time left unpriced, the whole step's distance from its
    floor."""

    ranked: tuple[Bottleneck, ...] = ()
    unpriced: tuple[Unpriced, ...] = ()
    total: Total | None = None


class Phase(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One phase's figures (per mean counted step unless named a total or a median), in the
    document's order. A vision/diffusion phase has unit "samples" and its per-sample figures (no
    token figures); a speculative loop adds its rounds. known_ms: priced kernel time
    whose bytes count, total_ms: kernel time, each summed over the steps."""

    phase: str
    steps: int
    tokens_per_step: int | None
    tokens_from: str | None
    step_ms: StepMs
    kernel_ms: float | None
    idle_fraction: float | None
    idle_ms: float | None
    bytes_per_step: float | None
    gb_per_token: float | None
    bytes_known_share: float | None
    achieved_tok_s: float | None
    ceiling_tok_s: float | None
    excluded_components: tuple[str, ...]
    communication_share: float | None
    component_rows: tuple[Component, ...] = field(name="components")
    kernel_rows: tuple[TopKernel, ...] = field(name="top_kernels")
    context_from: str | None
    # the mean counted step, by cause; sums to its time
    ledger_rows: tuple[LedgerRow, ...] = field(name="ledger")
    unit: str  # "tokens", or "samples" (images): a vision/diffusion forward's figures per sample
    samples_per_step: int | None
    achieved_samples_s: float | None
    gb_per_sample: float | None
    per_step: StepSeries
    excluded_steps: tuple[ExcludedStep, ...]
    bottlenecks: Bottlenecks
    speculative: Speculative | None = None  # a speculative loop's rounds (decode phase)
    known_ms: float
    total_ms: float

    @property
    def components(self) -> pl.DataFrame:
        """The component table, one row per component."""
        return _frame(self.component_rows, Component)

    @property
    def ledger(self) -> pl.DataFrame:
        """The step-time ledger of the mean step: cause, what, ms_per_step, share, ..."""
        return _frame(self.ledger_rows, LedgerRow)

    @property
    def top_kernels(self) -> pl.DataFrame:
        return _frame(self.kernel_rows, TopKernel)

    def component(self, name: str) -> Component | None:
        return next((c for c in self.component_rows if c.component == name), None)

    def top_cause(self) -> LedgerRow | None:
        """The ledger row holding the most of the mean step, the profiler's own cost left out
        (a caveat about the measurement, not a cause); None without a ledger."""
        rows = [r for r in self.ledger_rows if r.cause != OWN_COST]
        return max(rows, key=lambda r: r.ms_per_step, default=None)

    def __repr__(self) -> str:
        """One line: the phase, its steps, mean step, tokens per step, tok/s."""
        rate = f", {self.achieved_tok_s:.1f} tok/s" if self.achieved_tok_s is not None else ""
        return (f"<Phase {self.phase}: {_steps(self.steps)}, mean {_ms(self.step_ms.mean)}, "
                f"{self.tokens_per_step} tokens/step{rate}>")

class Coverage(msgspec.Struct, frozen=True):
    """How much of the kernel time was attributed to a component, and how much has known bytes."""

    attributed_share: float | None
    bytes_known_share: float | None


class Distributed(msgspec.Struct, frozen=True):
    """The trace's rank in a distributed run (backend, rank, world size)."""

    backend: str | None
    rank: int | None
    world_size: int | None


class Analysis(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True,
               tag_field="schema", tag=SCHEMA_ID):
    """The analysis of one trace: its source, device, capture stamp, phases, findings and notes.
    The struct is the `attrib.analysis/1` document: `to_json` encodes it, `load` decodes one.

    >>> an = attrib.analyze("trace.json.gz")          # doctest: +SKIP
    >>> an.phase("decode").achieved_tok_s, an.findings[0].title   # doctest: +SKIP
    >>> an.save("trace.attrib.json"); Analysis.load("trace.attrib.json") == an  # doctest: +SKIP
    """

    summary: Summary | None  # the verdict: attrib.analysis.summary
    source: Source
    device: Device
    provenance: Mapping[str, Any]
    distributed: Distributed | None
    phases: tuple[Phase, ...]
    coverage: Coverage
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]
    what_if: WhatIf | None = None  # --what-if: the decode phase at other formats (a projection)

    def phase(self, name: str) -> Phase | None:
        """The phase called `name`; None for a standard phase this trace does not hold. Any other
        name is a UsageError that lists the choices.

        >>> an.phase("decode").step_ms.mean  # doctest: +SKIP
        """
        got = next((p for p in self.phases if p.phase == name), None)
        if got is None and name not in STANDARD_PHASES:
            here = ", ".join(p.phase for p in self.phases) or "none"
            raise UsageError(f"no phase {name!r}: this analysis has {here} (standard phases: "
                             f"{', '.join(STANDARD_PHASES)})")
        return got

    def __repr__(self) -> str:
        """One line: the source, the device, each phase's steps and mean step, the top finding."""
        phases = ", ".join(f"{p.phase} {_steps(p.steps)} {_ms(p.step_ms.mean)}"
                           for p in self.phases)
        top = self.findings[0].title if self.findings else "no finding"
        dev = self.device.name or self.device.arch or "unknown device"
        name = (self.source.path or "?").rsplit("/", 1)[-1]
        return f"<Analysis {name} on {dev}: {phases or 'no phase'}; top: {_cut(top, 80)}>"

    @property
    def arch(self) -> str | None:
        return self.device.arch

    @property
    def env(self) -> dict[str, str]:
        """The capture stamp's environment variables (strings); {} without a stamp."""
        e = self.provenance.get("env")
        return {str(k): str(v) for k, v in e.items()} if isinstance(e, dict) else {}

    def env_var(self, name: str) -> str | None:
        """One environment variable of the capture stamp, or None."""
        return self.env.get(name)

    def stamp(self, *keys: str) -> JSON:
        """A value of the capture stamp by its path (`stamp("host", "memory_bytes")`), or None."""
        v: JSON = dict(self.provenance)
        for key in keys:
            v = v.get(key) if isinstance(v, dict) else None
        return v

    def with_findings(self, findings: tuple[Finding, ...],
                      bottlenecks: Mapping[str, Bottlenecks]) -> Analysis:
        phases = tuple(replace(p, bottlenecks=bottlenecks[p.phase]) for p in self.phases)
        return replace(self, findings=findings, phases=phases)

    def to_dict(self) -> dict[str, object]:
        """The attrib.analysis/1 document as plain values."""
        out: dict[str, object] = msgspec.json.decode(msgspec.json.encode(self))
        return out

    def to_json(self) -> str:
        """The document as indented JSON text (what `attrib analyze --format json` prints)."""
        return orjson.dumps(msgspec.to_builtins(self), option=orjson.OPT_INDENT_2).decode() + "\n"

    def save(self, path: str | Path) -> None:
        """Write the document to `path` (replacing it)."""
        Path(path).write_text(self.to_json())

    @staticmethod
    def is_document(path: str | Path) -> bool:
        """Whether `path` is a plain file that opens as this document (its tag the first key, as
        `to_json` and msgspec write it): what multi-trace commands load instead of analyzing."""
        p = Path(path)
        if not p.is_file():
            return False
        with p.open("rb") as f:
            head = f.read(64)
        return re.match(rb'\s*\{\s*"schema"\s*:\s*"attrib\.analysis/1"', head) is not None

    @classmethod
    def load(cls, path: str | Path) -> Analysis:
        """The analysis a document holds (what `analyze --format json` or `save` wrote); a
        TraceError for one larger than DOCUMENT_MAX_BYTES."""
        p = Path(path)
        if not p.is_file():  # a FIFO or device would block or never end
            raise TraceError(path, "not a regular file: an analysis document is one")
        size = p.stat().st_size
        if size > DOCUMENT_MAX_BYTES:
            raise TraceError(path, f"an analysis document of {size / 2**20:,.0f} MiB: more than "
                                   f"the {DOCUMENT_MAX_BYTES >> 20} MiB one can hold")
        return cls.decode(p.read_bytes(), str(path))

    @classmethod
    def decode(cls, text: bytes | str, name: str = "<text>") -> Analysis:
        """The analysis of a document's text; a TraceError naming `name` if it is not one."""
        try:
            return msgspec.json.decode(text, type=cls)
        except msgspec.ValidationError as e:
            raise TraceError(name, f"not an {SCHEMA_ID} document: {e}") from None
        except msgspec.DecodeError as e:
            raise TraceError(name, f"not JSON: {e}") from None
        except RecursionError:
            raise TraceError(name, "values nested too deep for an analysis document") from None


# the annotation `Summary | None` resolved at run time too (help(), typing.get_type_hints): the
# module is complete by now, so summary's import of it does not cycle
from attrib.analysis.summary import Summary  # noqa: E402
