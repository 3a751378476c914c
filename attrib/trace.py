"""The normalized trace: the contract between collectors and the engine.

A `Trace` is a handful of polars tables, one row per event, all times integer nanoseconds on one
clock, plus metadata. Collectors build it; nothing downstream reads a file. Columns a source does
not know are present and null. `SCHEMAS` is the single definition of every table's columns.
"""

from __future__ import annotations

import re
from collections import defaultdict
from itertools import count
from typing import TYPE_CHECKING, Any, cast

import msgspec
from msgspec import field
from msgspec.structs import force_setattr, replace
import orjson
import polars as pl

if TYPE_CHECKING:
    from polars._typing import EngineType

DType = pl.DataType | type[pl.DataType]  # pl.Int64 or pl.List(pl.Int64): both are column types
_I64 = pl.Int64
_STR = pl.Utf8
_INTS = pl.List(pl.Int64)

SCHEMAS: dict[str, dict[str, DType]] = {
    # GPU kernels. grid/block are in workgroups/work-items per workgroup (CUDA blocks/threads).
    # launch_id: id in `launches` of the runtime call that issued it; graph: replayed from a graph.
    "kernels": {
        "id": _I64, "name": _STR, "start_ns": _I64, "dur_ns": _I64, "device": _I64, "stream": _I64,
        "correlation": _I64, "external_id": _I64, "grid": _INTS, "block": _INTS,
        "registers": _I64, "lds_bytes": _I64, "launch_id": _I64, "graph": pl.Boolean,
    },
    # CPU-side ops (aten / custom ops). input_dims/input_types/input_strides keep the raw JSON text
    # of the profiler's "Input Dims"/"Input type"/"Input Strides" (parsed only by the cost model,
    # only where needed), as the file wrote it: compact from Kineto, one number a line in a
    # pretty-printed file (`dims_text` is the text a pattern reads).
    "ops": {
        "id": _I64, "name": _STR, "start_ns": _I64, "dur_ns": _I64, "pid": _I64, "tid": _I64,
        "external_id": _I64, "parent": _I64, "input_dims": _STR, "input_types": _STR,
        "concrete_inputs": _STR, "input_strides": _STR,
    },
    # Python frames (with_stack); `nn.Module: Cls_N` frames name a module instance. Their nesting
    # comes from the times (attrib.link.nesting): the profiler's Python ids are not kept (no stage
    # read them; 27 MB per GB of trace).
    "frames": {
        "id": _I64, "name": _STR, "start_ns": _I64, "dur_ns": _I64, "pid": _I64, "tid": _I64,
    },
    # Runtime/driver API calls. kernel_name/grid/block are filled where the runtime records them
    # (ROCm launches; graph-capture traces).
    "launches": {
        "id": _I64, "name": _STR, "start_ns": _I64, "dur_ns": _I64, "pid": _I64, "tid": _I64,
        "correlation": _I64, "external_id": _I64, "kernel_name": _STR, "grid": _INTS,
        "block": _INTS,
    },
    # Annotations and ranges. side: "cpu" | "gpu".
    "markers": {
        "id": _I64, "name": _STR, "start_ns": _I64, "dur_ns": _I64, "side": _STR, "pid": _I64,
        "tid": _I64, "external_id": _I64,
    },
    # GPU memcpy/memset activity. kind: "memcpy" | "memset"; direction e.g. "HtoD" (null if
    # unknown).
    "copies": {
        "id": _I64, "name": _STR, "start_ns": _I64, "dur_ns": _I64, "device": _I64, "stream": _I64,
        "correlation": _I64, "external_id": _I64, "bytes": _I64, "kind": _STR, "direction": _STR,
    },
}

TABLES = tuple(SCHEMAS)

# The runtime call that replays a captured graph (cudaGraphLaunch, hipGraphLaunch).
GRAPH_LAUNCH = r"(?i)graphlaunch"


def mark_graph_replays(kernels: pl.DataFrame, launches: pl.DataFrame | None) -> pl.DataFrame:
    """`kernels` with `graph` true where a kernel was replayed from a graph: its source marked it,
    the launch sharing its correlation id is a graph launch, or its correlation id keys more than
    one kernel (one graph launch issues them all). The one definition; collectors apply it to the
    tables they build."""
    if "correlation" not in kernels.columns:
        return kernels
    flag = pl.col("graph").fill_null(False) if "graph" in kernels.columns else pl.lit(False)
    shared = pl.col("correlation").is_not_null() & pl.col("correlation").is_duplicated()
    graph = flag | shared
    if launches is not None and {"correlation", "name"} <= set(launches.columns):
        is_graph = pl.col("correlation").is_not_null() & pl.col("name").str.contains(GRAPH_LAUNCH)
        by_graph = launches.filter(is_graph)["correlation"].unique()
        graph = graph | pl.col("correlation").is_in(by_graph.implode()).fill_null(False)
    return kernels.with_columns(graph.alias("graph"))


# A step annotation as attrib's capture writes it (a record_function / roctx range around one step):
# "decode (tokens=8)", or "decode" without a count. `step_name` writes it, STEP_NAME reads it back.
STEP_NAME = re.compile(r"^(?P<name>.+?) \(tokens=(?P<tokens>\d+)\)$")


def step_name(phase: str, tokens: int | None = None) -> str:
    """The annotation of one step: `"decode (tokens=8)"`, or `"decode"` without a count."""
    if tokens is None:
        return f"{phase}"
    if isinstance(tokens, bool) or int(tokens) != tokens or tokens < 0:
        raise ValueError(f"tokens must be a non-negative integer, got {tokens!r}")
    return f"{phase} (tokens={int(tokens)})"


def dims_text(col: str = "input_dims") -> pl.Expr:
    """A shape column's JSON text without whitespace, `[[32000,2048],[8,512],[],[],[]]`,
    however the file spaced it (Kineto writes `[[32000, 2048], ...]`; a pretty-printed trace
    one number a line): the text a pattern over shapes matches."""
    return pl.col(col).str.replace_all(r"\s+", "")


def empty(table: str) -> pl.DataFrame:
    """An empty table with the contract's columns."""
    return pl.DataFrame(schema=SCHEMAS[table])


def conform(table: str, df: pl.DataFrame | None) -> pl.DataFrame:
    """Cast `df` to the contract of `table`: add missing columns as null, order and cast them.

    Extra columns a collector adds are kept after the contract's own.
    """
    schema = SCHEMAS[table]
    if df is None or df.width == 0:
        return empty(table)
    cols = [
        (pl.col(c).cast(t, strict=False) if c in df.columns else pl.lit(None, dtype=t)).alias(c)
        for c, t in schema.items()
    ]
    extra = [c for c in df.columns if c not in schema]
    return df.select(*cols, *extra)


# the kind of a warning that the file was cut short and what preceded the cut was read
TRUNCATED = "truncated"


class TraceWarning(str):
    """A reader's warning: the message (the string itself) and its `kind`, TRUNCATED or "note", so
    that what to do about it never depends on searching the text. Plain strings given to Meta are
    notes."""

    kind: str

    def __new__(cls, message: str, kind: str = "note") -> TraceWarning:
        w = super().__new__(cls, message)
        w.kind = getattr(message, "kind", kind) if kind == "note" else kind
        return w


# an escape sequence (CSI, OSC, DCS..., 8-bit CSI) or a control character but tab and newline (C0,
# DEL, C1, bidirectional overrides): what a device's name in a trace may carry that no output
# should (attrib.report.printable removes the same from every Analysis; this module is stdlib
# and polars only, so it says it again)
_UNSAFE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b.?|\x9b[0-?]*[ -/]*[@-~]"
    "|[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _safe(value: Any) -> Any:
    """`value` (a device record's field) with every string's escapes and control characters removed."""
    if isinstance(value, str):
        return value if value.isprintable() else _UNSAFE.sub("", value)
    if isinstance(value, dict):
        return {k: _safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_safe(v) for v in value]
    return value


class Meta(msgspec.Struct, frozen=True):
    """What is known about the trace as a whole.

    device: one dict per visible device, as the source recorded it (torch `deviceProperties`,
    rocprof agent info). vendor: "nvidia" | "amd" | None. provenance: the capture stamp (see
    collectors.capture), {} when absent. top: other top-level scalars of the source. warnings: what
    the reader salvaged or dropped (TraceWarning: message and kind), printed by the CLI on stderr.
    """

    path: str
    format: str
    events: int = 0
    vendor: str | None = None
    vendor_from: str | None = None
    devices: tuple[dict[str, Any], ...] = ()
    runtime: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    top: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[TraceWarning, ...] = ()

    def __post_init__(self) -> None:
        force_setattr(self, "warnings", tuple(TraceWarning(w) for w in self.warnings))
        # a device's name is the trace's text, shown as it is (`archs --template --trace`)
        force_setattr(self, "devices", tuple(_safe(d) for d in self.devices))


class Trace(msgspec.Struct, frozen=True):
    """The normalized trace. Build with `Trace.build(meta, kernels=df, ...)`."""

    meta: Meta
    kernels: pl.DataFrame
    ops: pl.DataFrame
    frames: pl.DataFrame
    launches: pl.DataFrame
    markers: pl.DataFrame
    copies: pl.DataFrame

    @classmethod
    def build(cls, meta: Meta, **tables: pl.DataFrame | None) -> "Trace":
        unknown = set(tables) - set(SCHEMAS)
        if unknown:
            raise ValueError(f"unknown tables: {sorted(unknown)}")
        return cls(meta=meta, **{t: conform(t, tables.get(t)) for t in TABLES})

    def largest(self) -> int:
        """Rows of its largest table."""
        return max(getattr(self, t).height for t in TABLES)

    def with_tables(self, **tables: pl.DataFrame) -> "Trace":
        return replace(self, **cast("dict[str, Any]", tables))

    def with_meta(self, **changes: Any) -> "Trace":
        return replace(self, meta=replace(self.meta, **changes))


def engine(rows: int) -> EngineType:
    """The engine of a lazy query over `rows` rows: below SMALL_ROWS the in-memory one (polars'
    default picks per query, at ten times the cost of a query of a few thousand rows)."""
    return "in-memory" if rows < SMALL_ROWS else "auto"


def grouped(df: pl.DataFrame, keys: list[str], *aggs: pl.Expr,
            any_order: bool = False) -> pl.DataFrame:
    """`df.group_by(keys).agg(aggs)`; from SMALL_ROWS rows, text keys grouped by their category
    codes: a group-by on text keys copies every row's key bytes (millions of kernel names at a
    time), codes are 4 bytes a row. The keys (text or categorical) come back as text.

    any_order: the aggregations give the same result in any order of a group's rows (counts,
    sums of integers, min, max; not float sums, first or last). From SMALL_ROWS rows it then
    runs on the streaming engine: a few bytes a group, where an eager group-by holds ~45 bytes a
    row (64 MB for 1.4 M kernels), but a group's rows meet in no fixed order."""
    if df.height < SMALL_ROWS:  # small: the key bytes cost less than the codes' extra queries
        return grouped_plan(df, keys, *aggs).collect(engine="in-memory")
    lf = _group_reads(df, keys, aggs)
    engine: EngineType = "streaming" if any_order else "in-memory"
    text = [c for c in keys if df.schema[c] in (pl.String, pl.Categorical)]
    if not text:
        return lf.group_by(keys).agg(*aggs).collect(engine=engine)
    # by the codes' integers (a group-by on categorical keys encodes their text, row by row),
    # each code's text joined back (one row of the code gives it)
    code = {c: f"_code_{c}" for c in text}
    coded = lf.with_columns(pl.col(c).cast(pl.Categorical).to_physical().alias(code[c])
                            for c in text)
    by = [code.get(c, c) for c in keys]
    out = coded.drop(text).group_by(by).agg(*aggs).collect(engine=engine)
    for c in text:
        # (a category cast to text is a copy of its text: cast once a code)
        texts = coded.select(code[c], c).unique(code[c]).collect(engine="streaming")
        out = out.join(texts.with_columns(pl.col(c).cast(pl.String)), on=code[c], how="left")
    return out.drop(code.values()).select(*keys, pl.exclude(keys))


def grouped_plan(df: pl.DataFrame, keys: list[str], *aggs: pl.Expr,
                 any_order: bool = False) -> pl.LazyFrame:
    """`grouped(df, keys, *aggs)` as a lazy frame a caller goes on from: below SMALL_ROWS rows
    its query, not run (one query with the caller's next steps, on the in-memory engine); from
    SMALL_ROWS grouped's result."""
    if df.height >= SMALL_ROWS:
        return grouped(df, keys, *aggs, any_order=any_order).lazy()
    text = [c for c in keys if df.schema[c] in (pl.String, pl.Categorical)]
    out = _group_reads(df, keys, aggs).group_by(keys).agg(*aggs)
    return out.with_columns(pl.col(text).cast(pl.String)) if text else out


def _group_reads(df: pl.DataFrame, keys: list[str], aggs: tuple[pl.Expr, ...]) -> pl.LazyFrame:
    """Only the columns a group-by reads: a group-by of a wide table copies more than its keys."""
    read = [n for e in aggs for n in e.meta.root_names()]
    return df.lazy().select(list(dict.fromkeys([*keys, *read])))


# Text columns, each distinct value's text held once. Polars strings are 16-byte views, so a
# column gathered from its distinct values by code holds each text once: `interned` (the
# reader's columns, from Python values), `as_views` and `compact` (parts and filtered tables),
# `views` (a categorical column as text); `coded` keeps a column as 4-byte codes instead.


def coded(df: pl.DataFrame) -> pl.DataFrame:
    """`df` with its text columns as categories: 4 bytes a row, not a 16-byte view (an
    attribution's kernels: millions of rows of a few thousand names, components, modules)."""
    text = [c for c, t in df.schema.items() if t == pl.String]
    return df.with_columns(pl.col(text).cast(pl.Categorical)) if text else df


# rows below which a table is small: its text a cast, its group-bys eager (the queries that
# spare a big table's memory cost a small one more time than they save)
SMALL_ROWS = 1 << 16
def views(s: pl.Series) -> pl.Series:
    """A categorical column as text, each row a view of its code's text, held once (a cast
    copies every row's bytes; below SMALL_ROWS rows that costs less than the views' queries)."""
    if s.len() < SMALL_ROWS:
        return s.cast(pl.String)
    distinct = s.unique().drop_nulls()
    codes = distinct.to_physical()
    # where each code's text sits in `distinct`, indexed by the code
    size = int(cast(int, codes.max() or 0)) + 1
    at = pl.repeat(None, size, dtype=pl.UInt32, eager=True)
    at = at.scatter(codes, pl.Series(range(distinct.len()), dtype=pl.UInt32))
    return distinct.cast(pl.String).gather(at.gather(s.to_physical())).alias(s.name)


def interned(values: list[str | None]) -> pl.Series:
    """A text column whose repeated values share their bytes: each distinct value stored once and
    every row a 16-byte view of it (polars strings are views; a gather copies views, not text).
    Values and dtype are those of `pl.Series(values, dtype=pl.Utf8)`; the memory is rows x 16
    bytes plus the distinct text (kernel names of 500 bytes, shape lists repeated per layer), and
    it is built faster than the plain column. Each new value takes the next code as it is met
    (a defaultdict of a counter: no Python code per row)."""
    seen: defaultdict[str | None, int] = defaultdict(count().__next__)
    codes = list(map(seen.__getitem__, values))
    return pl.Series(list(seen), dtype=pl.Utf8).gather(pl.Series(codes, dtype=pl.UInt32))


def joined(parts: list[pl.Series]) -> pl.Series:
    """The parts end to end, in their common supertype."""
    return pl.concat([s.to_frame() for s in parts], how="vertical_relaxed").to_series()


def as_views(parts: list[pl.Series], at: pl.Series | None = None) -> pl.Series:
    """Text rows `at` (all by default) of the parts end to end, as views of their distinct
    values, each value's text held once (a gather of the text itself would copy each row's
    bytes)."""
    distinct = joined([s.unique() for s in parts]).unique()
    table = distinct.to_frame().with_row_index("_code")
    codes = pl.concat([s.to_frame().join(table, on=s.name, how="left",
                                         maintain_order="left")["_code"] for s in parts])
    return distinct.gather(codes if at is None else codes.gather(at))


def compact(df: pl.DataFrame) -> pl.DataFrame:
    """`df` with each text column re-made from its distinct values, each held once: a part
    holds no more text than it reads (rows filtered from a table share its text buffers:
    polars strings are views)."""
    text = [c for c, t in df.schema.items() if t == pl.String]
    return df.with_columns([as_views([df[c]]) for c in text]) if text else df


def as_text(df: pl.DataFrame) -> pl.DataFrame:
    """`df` with its categorical columns as text (`views`): what the text functions read."""
    cats = [c for c, t in df.schema.items() if t == pl.Categorical]
    if not cats:
        return df
    if df.height < SMALL_ROWS:
        return df.with_columns(pl.col(cats).cast(pl.String))
    return df.with_columns(views(df[c]) for c in cats)


def input_dims(text: str | None) -> list | None:
    """An op's recorded `Input Dims` JSON text as a list; None where absent or not a JSON list."""
    try:
        dims = orjson.loads(text) if text else None
    except orjson.JSONDecodeError:
        return None
    return dims if isinstance(dims, list) else None
