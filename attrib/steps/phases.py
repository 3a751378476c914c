"""Steps and phases: which kernels ran in which prefill/decode step, and with how many tokens.

Sources, best first: step annotations (record_function / roctx ranges named `prefill`, `decode`,
`NAME (tokens=N)` as attrib's capture writes them, names mapped by the user, vLLM
`execute_..._context_N(..)_generation_M(..)`, SGLang `step[DECODE bs=N]`), then `ProfilerStep#N`
ranges, then one step per forward pass found from embedding ops. A step's phase, when no
annotation names it, follows from shapes: one new token per sequence is decode.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from typing import TypeVar

import polars as pl

from attrib.components.patterns import (
    COMPILED_CALL,
    GEMM_OPS,
    LLAMACPP_MMQ,
    LLAMACPP_MMVQ_COLS,
    LLAMACPP_NORM_ROWS,
)
from attrib.link.launches import KERNEL_LAUNCH
from attrib.link.nesting import innermost
from attrib.steps.excluded import compile_spans, inside
from attrib.steps.passes import GPU_PIECE, gpu_forward_starts
from attrib.steps.speculative import mark_roles
from attrib.steps.tokens import COMPILED_PIECE
from attrib.trace import STEP_NAME, Trace, dims_text, input_dims

TOKEN_PHASES = ("decode", "mixed")  # phases whose steps generate tokens
PHASE_ORDER = {"prefill": 0, "mixed": 1, "decode": 2}  # the order phases are reported in
DEFAULT_MAP = {"prefill": "prefill", "decode": "decode", "mixed": "mixed",
               "extend": "prefill", "generate": "decode"}
_VLLM = re.compile(r"^execute_(?:(?P<total>\d+)_)?context_(?P<nctx>\d+)\((?P<cb>[^)]*)\)"
                   r"_generation_(?P<ngen>\d+)\((?P<gb>[^)]*)\)")
_SGLANG = re.compile(r"^step\[(?P<mode>[A-Z]+)(?:\s+bs=(?P<bs>\d+))?")
_LEAD_NUM = re.compile(r"^(?:sq)?(\d+)")
_SOURCE_ORDER = ("annotation", "vllm annotation", "sglang annotation")
STEP_COLS = {"step": pl.Int64, "phase": pl.Utf8, "tokens": pl.Int64, "tokens_from": pl.Utf8,
             "marker": pl.Utf8, "cpu_start": pl.Int64, "cpu_end": pl.Int64,
             "gpu_start": pl.Int64, "gpu_end": pl.Int64}
_SGLANG_PHASES = {"DECODE": "decode", "EXTEND": "prefill", "PREFILL": "prefill", "MIXED": "mixed"}
_KERNEL_STEP = {"id": pl.Int64, "step": pl.Int64}
Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)


def parse_marker(name: str, phase_map: dict[str, str]) -> tuple[str, int | None, str] | None:
    """(phase, tokens or None, source) for a step annotation name, None if it is not one."""
    m = STEP_NAME.match(name)
    base, tokens = (m["name"], int(m["tokens"])) if m else (name, None)
    if base in phase_map:
        return phase_map[base], tokens, "annotation"
    low = base.lower()
    if low in phase_map:
        return phase_map[low], tokens, "annotation"
    m = _VLLM.match(name)
    if m:
        nctx, ngen = int(m["nctx"]), int(m["ngen"])
        phase = "mixed" if nctx and ngen else "prefill" if nctx else "decode"
        if m["total"]:
            return phase, int(m["total"]), "vllm annotation"
        parts = [_LEAD_NUM.match(b) for b in (m["cb"], m["gb"])]
        return phase, sum(int(p[1]) for p in parts if p), "vllm annotation"
    m = _SGLANG.match(name)
    if m:
        mode = m["mode"]
        phase = _SGLANG_PHASES.get(mode)
        if phase:
            batch = int(m["bs"]) if (m["bs"] and phase == "decode") else None
            return phase, batch, "sglang annotation"
    return None


_VLLM_SUMS = re.compile(r"(sqsq|sqsk|sq|sk)(\d+)")


def vllm_sums(marker: str | None) -> dict[str, int] | None:
    """Σq, Σk (context), Σq², Σq·k over a step's requests, from vLLM's detailed step
    annotation (`execute_N_context_n(sq..sk..sqsq..sqsk..)_generation_m(...)`); None for other
    names."""
    m = _VLLM.match(marker or "")
    if not m:
        return None
    sums = {"sq": 0, "sk": 0, "sqsq": 0, "sqsk": 0}
    found = False
    for part in (m["cb"], m["gb"]):
        for key, val in _VLLM_SUMS.findall(part):
            sums[key] += int(val)
            found = True
    return sums if found else None


def vllm_requests(marker: str | None) -> int | None:
    """Requests in a step (context + generation), from vLLM's detailed step annotation."""
    m = _VLLM.match(marker or "")
    return int(m["nctx"]) + int(m["ngen"]) if m else None


def _spans(trace: Trace, phase_map: dict[str, str]) -> pl.DataFrame:
    """Step spans from annotations: CPU range paired with its GPU projection (same External id)."""
    mk = trace.markers
    names = mk["name"].unique().to_list()
    parsed = {n: parse_marker(n, phase_map) for n in names}
    # one source of steps: nested annotations of two kinds (attrib's spans inside vLLM's) would
    # count every step twice
    sources = {p[2] for p in parsed.values() if p}
    best = next((src for src in _SOURCE_ORDER if src in sources), None)
    step_names = [n for n, p in parsed.items() if p and p[2] == best]
    if not step_names:
        step_names = [n for n in names if n.startswith("ProfilerStep#")]
        parsed = {n: ("unknown", None, "ProfilerStep") for n in step_names}
    if not step_names:
        return pl.DataFrame(schema=STEP_COLS)
    tokens_from = [parsed[n][2] if parsed[n][1] is not None else None for n in step_names]
    info = pl.DataFrame({"marker": step_names, "phase": [parsed[n][0] for n in step_names],
                         "tokens": [parsed[n][1] for n in step_names],
                         "tokens_from": tokens_from},
                        schema={"marker": pl.Utf8, "phase": pl.Utf8, "tokens": pl.Int64,
                                "tokens_from": pl.Utf8})
    sel = mk.lazy().filter(pl.col("name").is_in(step_names))
    cpu = sel.filter(pl.col("side") == "cpu").select(
        pl.col("name").alias("marker"), "external_id", pl.col("start_ns").alias("cpu_start"),
        (pl.col("start_ns") + pl.col("dur_ns")).alias("cpu_end")).collect(engine="in-memory")
    # one GPU projection per annotation: a range projected on several streams is their hull
    g = sel.filter(pl.col("side") == "gpu").select(
        "external_id", pl.col("name").alias("gname"), pl.col("start_ns").alias("gpu_start"),
        (pl.col("start_ns") + pl.col("dur_ns")).alias("gpu_end"))
    has_id = pl.col("external_id").is_not_null()
    hull = g.filter(has_id).group_by("external_id", "gname").agg(
        pl.col("gpu_start").min(), pl.col("gpu_end").max())
    gpu = pl.concat([hull, g.filter(~has_id)])
    if cpu.height:
        spans = cpu.lazy().join(gpu, on="external_id", how="left").drop("gname")
    else:
        spans = gpu.rename({"gname": "marker"}).with_columns(
            pl.col("gpu_start").alias("cpu_start"), pl.col("gpu_end").alias("cpu_end"))
    spans = spans.join(info.lazy(), on="marker", how="left").sort("cpu_start")
    return (spans.with_row_index("step").select(list(STEP_COLS)).cast(STEP_COLS)
            .collect(engine="in-memory"))


def annotated_spans(trace: Trace, phase_map: dict[str, str] | None = None) -> pl.DataFrame:
    """The steps the trace's annotations mark (before any split into forward passes): step,
    marker, cpu_start/end, gpu_start/end, ... (STEP_COLS)."""
    return _spans(trace, DEFAULT_MAP | (phase_map or {}))


def _forward_spans(trace: Trace) -> pl.DataFrame:
    """No annotations: one step per token lookup (`_token_lookups`: each forward pass starts
    with one), or per pass of a thread whose ops were not recorded (attrib.steps.passes)."""
    lookups = _token_lookups(trace.ops.lazy().filter(pl.col("name") == "aten::embedding"))
    gpu = gpu_forward_starts(trace)
    emb = pl.concat([
        lookups.select("start_ns", pl.lit("forward (embedding op)").alias("marker")),
        gpu.lazy().select(
            pl.col("t").alias("start_ns"),
            pl.format("forward {}{}", pl.int_range(pl.len()), pl.lit(GPU_PIECE)).alias("marker")),
    ]).sort("start_ns", maintain_order=True).collect(engine="in-memory")
    if emb.height == 0:
        return pl.DataFrame(schema=STEP_COLS)
    # the last forward pass runs to the end of the host's last op (or call of a thread without
    # ops), not to the end of time
    host = trace.ops if gpu.height == 0 else pl.concat([trace.ops[["start_ns", "dur_ns"]],
                                                        trace.launches[["start_ns", "dur_ns"]]])
    last = int((host["start_ns"] + host["dur_ns"].fill_null(0)).max())
    nxt = pl.col("start_ns").shift(-1).fill_null(pl.lit(last))
    return (emb.lazy().with_row_index("step").select(
        "step", pl.lit("unknown").alias("phase"), pl.lit(None, pl.Int64).alias("tokens"),
        pl.lit(None, pl.Utf8).alias("tokens_from"), "marker",
        pl.col("start_ns").alias("cpu_start"), nxt.alias("cpu_end"),
        pl.lit(None, pl.Int64).alias("gpu_start"), pl.lit(None, pl.Int64).alias("gpu_end"))
        .cast(STEP_COLS).collect(engine="in-memory"))


def _token_lookups(ops: Frame) -> Frame:
    """The embedding ops that look up a token table: where the tables' rows are known (the
    first of the op's shapes), those on a table of the most rows. One forward pass looks up its
    token table once, and may look up smaller ones beside it: BERT its position and token-type
    tables, GPT-2 and OPT their position tables, T5 its relative-position bias in a layer. An op
    of unknown table is kept."""
    rows = dims_text().str.extract(r"^\[\[(\d+),", 1).cast(pl.Int64, strict=False)
    # no table known: every row's is null (and the most, too)
    return ops.filter(rows.is_null() | (rows == rows.max()))


def _launching_embeddings(trace: Trace, compiling: pl.DataFrame) -> pl.DataFrame:
    """t: start of each embedding op that is a forward pass: a token lookup (`_token_lookups`),
    not traced by a compile (fake tensors; `compiling`: compile_spans), and, in a trace with GPU
    launches, one that launched GPU work (its gather kernel)."""
    ops = trace.ops.filter(pl.col("name") == "aten::embedding")
    traced = inside(ops["start_ns"], compiling)
    ops = _token_lookups(ops.lazy().filter(~traced)).collect(engine="in-memory")
    pts = (trace.launches.lazy().filter(pl.col("name").str.contains(KERNEL_LAUNCH))
           .select(pl.col("id").alias("pid_"), pl.col("start_ns").alias("t_ns"), "pid", "tid")
           .collect(engine="in-memory"))
    lookups = ops.lazy()
    if pts.height:
        hit = innermost(ops[["id", "start_ns", "dur_ns", "pid", "tid"]], pts, ["pid", "tid"])
        launched = hit.lazy().drop_nulls("inner").select(pl.col("inner").alias("id")).unique()
        lookups = lookups.join(launched, on="id", how="semi")
    t = lookups.select(pl.col("start_ns").alias("t")).sort("t")
    return t.collect(engine="in-memory")


def _compiled_calls(trace: Trace) -> pl.DataFrame:
    """(s, e) of each call of a torch.compile'd function that is a forward pass: the calls of
    the lowest frame id (the compiled function itself, not the resumes after a graph break), not
    inside another such call. A compiled forward has no embedding op of its own (Inductor fuses
    the lookup into a kernel)."""
    frame = pl.col("name").str.extract(COMPILED_CALL, 1).cast(pl.Int64, strict=False)
    calls = (trace.ops.lazy().select("start_ns", "dur_ns", frame.alias("frame")).drop_nulls()
             .collect(engine="in-memory"))
    if calls.height == 0:
        return pl.DataFrame(schema={"s": pl.Int64, "e": pl.Int64})
    first = calls.lazy().filter(pl.col("frame") == pl.col("frame").min())
    spans = first.select(pl.col("start_ns").alias("s"),
                         (pl.col("start_ns") + pl.col("dur_ns")).alias("e")).sort("s")
    outer = pl.col("e").cum_max().shift(1)  # the furthest end of the calls before
    return (spans.filter(outer.is_null() | (pl.col("s") >= outer))
            .collect(engine="in-memory"))


def _forward_starts(trace: Trace, compiling: pl.DataFrame) -> pl.DataFrame:
    """t: where each forward pass starts, kind: the end of its piece's marker. An eager one starts
    at its launching embedding op, a compiled one at its call (an embedding op inside a compiled
    call is that call's), one of a thread whose ops were not recorded at its first kernel's launch
    (attrib.steps.passes)."""
    calls = _compiled_calls(trace)
    eager, gpu = _launching_embeddings(trace, compiling), gpu_forward_starts(trace)
    emb = pl.concat([eager.lazy().with_columns(pl.lit("").alias("kind")),
                     gpu.lazy().with_columns(pl.lit(GPU_PIECE).alias("kind"))])
    if calls.height == 0:
        return emb.sort("t", maintain_order=True).collect(engine="in-memory")
    emb = emb.collect(engine="in-memory")
    within = inside(emb["t"], pl.DataFrame({"start_ns": calls["s"], "end_ns": calls["e"]}))
    compiled = calls.lazy().select(pl.col("s").alias("t"), pl.lit(COMPILED_PIECE).alias("kind"))
    return pl.concat([emb.lazy().filter(~within), compiled]).sort("t").collect(engine="in-memory")


def _split_forwards(spans: pl.DataFrame, trace: Trace, compiling: pl.DataFrame) -> pl.DataFrame:
    """Step spans (ProfilerStep or user annotations, not a serving engine's own step annotation)
    that hold several forward passes (several embedding ops: one prof.step() or record_function
    around a whole generate() call) become one step per forward pass. The pieces tile the span:
    each runs from its embedding op to the next (the first from the span's start, the last to its
    end), so the host time between forward passes stays in the piece it follows. A piece's phase
    and tokens come from its shapes (one new token per sequence is decode); `annotated_phase`
    keeps the span's."""
    if spans.height == 0:
        return spans
    emb = _forward_starts(trace, compiling)
    if emb.height <= 1:
        return spans
    marker = pl.col("marker")
    engine = marker.str.contains(_VLLM.pattern) | marker.str.contains(_SGLANG.pattern)
    rows = []
    known = emb.drop_nulls("t")  # sorted by t: a span's starts are a slice (not a query a span)
    starts, kinds = known["t"].to_list(), known["kind"].to_list()
    for r in spans.with_columns(engine.alias("_engine")).iter_rows(named=True):
        engine, c0, c1 = r.pop("_engine"), r["cpu_start"], r["cpu_end"]
        bare = engine or c0 is None or c1 is None
        lo, hi = (0, 0) if bare else (bisect_left(starts, c0), bisect_left(starts, c1))
        ts = starts[lo:hi]
        if len(ts) < 2:
            rows.append(r)
            continue
        cuts = [c0, *ts[1:], c1]
        kind = kinds[lo:hi]
        phase = "unknown" if r["phase"] in ("unknown", "decode") else r["phase"]
        for i in range(len(cuts) - 1):
            rows.append(r | {"cpu_start": cuts[i], "cpu_end": cuts[i + 1],
                             "marker": f"{r['marker']} forward {i}{kind[i]}",
                             "phase": phase, "tokens": None, "tokens_from": None,
                             "gpu_start": r["gpu_start"] if i == 0 else None,
                             "gpu_end": r["gpu_end"] if i == len(cuts) - 2 else None})
    out = pl.DataFrame(rows, schema=STEP_COLS, orient="row").sort("cpu_start")
    return out.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("step"))


def _periodic(trace: Trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """No annotations, no CPU ops (llama.cpp under rocprof): steps from the repeating kernel loop;
    without one, the whole trace is one step of unknown phase."""
    k = trace.kernels[["id", "name", "start_ns", "dur_ns"]]
    if k.height == 0:
        return pl.DataFrame(schema=STEP_COLS), pl.DataFrame(schema=_KERNEL_STEP)
    from attrib.steps.periodic import split_tokens  # numpy's FFT: imported only where needed

    got = split_tokens(k)
    if got["step"].null_count() == got.height:
        got = k.with_columns(pl.lit(0, pl.Int64).alias("step"), pl.lit("unknown").alias("phase"))
        marker = "whole trace (no steps found)"
    else:
        marker = "repeating kernel sequence"
    stepped = got.lazy().filter(pl.col("step").is_not_null())
    steps = stepped.group_by("step").agg(
        pl.col("phase").first(), pl.col("start_ns").min().alias("cpu_start"),
        (pl.col("start_ns") + pl.col("dur_ns")).max().alias("cpu_end"))
    steps = steps.select("step", "phase", pl.lit(None, pl.Int64).alias("tokens"),
                         pl.lit(None, pl.Utf8).alias("tokens_from"),
                         pl.lit(marker).alias("marker"), "cpu_start", "cpu_end",
                         pl.col("cpu_start").alias("gpu_start"),
                         pl.col("cpu_end").alias("gpu_end"))
    return (steps.cast(STEP_COLS).sort("step").collect(engine="in-memory"),
            stepped.select("id", "step").collect(engine="in-memory"))


def _assign(spans: pl.LazyFrame, keys: pl.LazyFrame, start: str, end: str) -> pl.LazyFrame:
    """keys (id, t) -> step whose [start, end) holds t (latest-starting span first)."""
    s = (spans.filter(pl.col(start).is_not_null())
         .select("step", pl.col(start).alias("t"), pl.col(end).alias("_end")).sort("t"))
    out = keys.sort("t").join_asof(s, on="t", strategy="backward", check_sortedness=False)
    return out.filter(pl.col("t") < pl.col("_end")).select("id", "step")


def step_spans(trace: Trace, phase_map: dict[str, str] | None = None,
               compiling: pl.DataFrame | None = None) -> pl.DataFrame:
    """The steps' spans, before any kernel is assigned to them (they read no link: the
    pipeline finds them while it links). compiling: the trace's compile_spans, where already
    found."""
    pmap = DEFAULT_MAP | (phase_map or {})
    compiling = compile_spans(trace) if compiling is None else compiling
    spans = mark_roles(_split_forwards(_spans(trace, pmap), trace, compiling), trace.frames)
    if spans.height == 0:
        spans = _forward_spans(trace).with_columns(
            pl.lit(None, pl.Utf8).alias("role"), pl.lit(None, pl.Utf8).alias("model"),
            pl.lit(None, pl.Int64).alias("fwd_start"), pl.lit(None, pl.Int64).alias("fwd_end"))
    return spans


def assign_steps(trace: Trace, links: pl.DataFrame, phase_map: dict[str, str] | None = None,
                 compiling: pl.DataFrame | None = None,
                 spans: pl.DataFrame | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(steps table, kernel id -> step). Kernels outside every step get no row. compiling: the
    trace's compile_spans, where already found; spans: its step_spans, where already found."""
    if spans is None:
        spans = step_spans(trace, phase_map, compiling)
    if spans.height == 0 and trace.ops.height == 0:
        return _periodic(trace)
    if spans.height == 0:
        return spans, pl.DataFrame(schema=_KERNEL_STEP)
    launch_times = trace.launches.lazy().select(pl.col("id").alias("launch_id"),
                                                pl.col("start_ns").alias("launch_ns"))
    k = (trace.kernels.lazy().select("id", "start_ns")
         .join(links.lazy().select("id", "graph", "launch_id"), on="id", how="left")
         .join(launch_times, on="launch_id", how="left"))
    # Launched kernels (graph replays too: by their graph launch) go by their launch time in the
    # CPU range, so a host that runs ahead still gives each step its own kernels; unlaunched
    # kernels by their own start in the GPU range (or, without one, until the next step starts).
    by_launch = (k.filter(pl.col("launch_ns").is_not_null())
                 .select("id", pl.col("launch_ns").alias("t")))
    rest = (k.join(by_launch.select("id"), on="id", how="anti")
            .select("id", pl.col("start_ns").alias("t")))
    gpu_or_next = spans.lazy().with_columns(
        pl.coalesce("gpu_start", "cpu_start").alias("g0"),
        pl.coalesce("gpu_end", pl.col("cpu_start").shift(-1), pl.lit(2**62)).alias("g1"))
    got = pl.concat([_assign(spans.lazy(), by_launch, "cpu_start", "cpu_end"),
                     _assign(gpu_or_next, rest, "g0", "g1")])
    return spans, got.collect(engine="in-memory")


# the activation operand of a projection GEMM: its leading dims are the step's tokens
_GEMM_INPUT = {op: i for op, i in GEMM_OPS.items() if i is not None}


def tokens_from_shapes(trace: Trace, spans: pl.DataFrame) -> pl.DataFrame:
    """Per step: tokens, and tokens per sequence, from the step's first embedding op (ids [B, S]);
    steps without one take the token dimension of their first projection GEMM (no per_seq)."""
    schema = {"step": pl.Int64, "tokens": pl.Int64, "per_seq": pl.Int64}
    if spans.height == 0:
        return pl.DataFrame(schema=schema)
    # (no candidate: no row)
    cand = trace.ops.lazy().filter(pl.col("name").is_in(["aten::embedding", *_GEMM_INPUT]))
    hit = _assign(spans.lazy(), cand.select("id", pl.col("start_ns").alias("t")),
                  "cpu_start", "cpu_end")
    first = (hit.join(cand.select("id", "name", "start_ns", "input_dims"), on="id")
             .with_columns((pl.col("name") != "aten::embedding").alias("_gemm"))
             .sort("_gemm", "start_ns").unique("step", keep="first")
             .select("step", "name", "input_dims").collect(engine="in-memory"))
    rows = []
    # one row per step
    for step, name, dim_text in first.iter_rows():
        if name == "aten::embedding":
            shape = _ids_shape(dim_text)
            if shape:
                rows.append((step, math.prod(shape), shape[-1] if len(shape) > 1 else None))
            continue
        act = _operand(dim_text, _GEMM_INPUT[name])
        if act and len(act) >= 2:
            rows.append((step, math.prod(act[:-1]), None))
    return pl.DataFrame(rows, schema=schema, orient="row")


def _operand(dim_text: str | None, i: int) -> list[int] | None:
    dims = input_dims(dim_text)
    if isinstance(dims, list) and len(dims) > i and _int_list(dims[i]):
        return dims[i]
    return None


def tokens_from_kernel_names(kernels: pl.DataFrame) -> pl.DataFrame:
    """Per step: tokens from llama.cpp kernels. A decode step (GEMVs, MMVQ): the GEMV template
    argument ncols_dst (mul_mat_vec_q<(ggml_type)T, ncols_dst, ...> demangled,
    _Z13mul_mat_vec_qIL9ggml_typeTELiNE... mangled), the most common value. A prefill step (more
    MMQ `mul_mat_q` GEMMs than GEMVs): the rows of its RMS norms (rms_norm_f32 runs one workgroup
    per row: grid x = tokens), the most common value. Columns: step, name_tokens,
    name_tokens_from."""
    cols = pl.coalesce(*[pl.col("name").str.extract(LLAMACPP_MMVQ_COLS, g) for g in (1, 2)])
    k = kernels.lazy().filter(pl.col("step").is_not_null())
    gemv = k.select("step", cols.cast(pl.Int64).alias("n")).drop_nulls().group_by("step").agg(
        pl.col("n").mode().min().alias("_gemv"), pl.len().alias("_n_gemv"))
    mmq = (k.filter(pl.col("name").str.contains(LLAMACPP_MMQ)).group_by("step")
           .agg(pl.len().alias("_n_mmq")))
    if "grid" in kernels.columns:
        norm = pl.col("name").str.contains(LLAMACPP_NORM_ROWS) & pl.col("grid").is_not_null()
        rows = k.filter(norm).group_by("step").agg(
            pl.col("grid").list.first().mode().max().alias("_rows"))
    else:
        rows = pl.LazyFrame(schema={"step": pl.Int64, "_rows": pl.Int64})
    got = gemv.join(mmq, on="step", how="full", coalesce=True).join(rows, on="step", how="left")
    more_mmq = pl.col("_n_mmq").fill_null(0) > pl.col("_n_gemv").fill_null(0)
    prefill = more_mmq & pl.col("_rows").is_not_null()
    tokens = pl.when(prefill).then(pl.col("_rows")).otherwise(pl.col("_gemv")).cast(pl.Int64)
    source = (pl.when(prefill).then(pl.lit("llama.cpp rms_norm rows (prefill, MMQ)"))
              .when(pl.col("_gemv").is_not_null()).then(pl.lit("llama.cpp mul_mat_vec_q ncols")))
    return got.select(
        "step", tokens.alias("name_tokens"), source.alias("name_tokens_from"),
    ).filter(pl.col("name_tokens").is_not_null()).collect(engine="in-memory")


def _ids_shape(dim_text: str | None) -> list[int] | None:
    dims = input_dims(dim_text)
    if dims and len(dims) > 1 and dims[1] and _int_list(dims[1]):
        return dims[1]
    return None


def _int_list(x: object) -> bool:
    """Whether `x` is a list of ints."""
    return isinstance(x, list) and all(isinstance(v, int) for v in x)
