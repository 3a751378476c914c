"""Low-bit GEMM kernels launched with no torch op around them, priced from the ops beside the launch.

A Triton AWQ GEMM (`awq_gemm_kernel`: vLLM's awq_triton.py, a user's own) is launched by Triton's
driver call, outside every cpu_op: the kernel has no shapes. Its launch does: the output is
allocated just before it (`aten::empty` / `aten::zeros` [.., M, N] with its dtype code), and the
module it runs in received the activations [.., K] (the first op of that module whose first input
has M rows). Those three numbers price it (attrib.cost.lowbit.awq_gemm); a kernel whose launch
lacks them stays unpriced.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from math import prod

import orjson
import polars as pl

from attrib.components.patterns import AWQ_TRITON
from attrib.cost.dtypes import SCALAR_TYPES, concrete_int, size_of
from attrib.cost.lowbit import awq_gemm
from attrib.link.launches import module_paths
from attrib.link.nesting import innermost
from attrib.trace import Trace

ALLOCATIONS = ("aten::empty", "aten::zeros", "aten::new_empty", "aten::new_zeros")
_BY = ["pid", "tid"]
OUT = {"id": pl.Int64, "_lb": pl.Float64, "_lf": pl.Float64, "_ld": pl.Utf8, "_lm": pl.Utf8}


def json_list(text: str | None) -> list:
    """A JSON list as recorded (an arg list, a size list); [] for anything else."""
    try:
        value = orjson.loads(text or "[]")
    except orjson.JSONDecodeError:
        return []
    return value if isinstance(value, list) else []


def alloc_sizes(conc: list) -> list[int] | None:
    """The size list an allocation got (its first concrete input, `[1, 2048]`)."""
    first = conc[0] if conc else ""
    sizes = json_list(first) if isinstance(first, str) and first.startswith("[") else []
    ok = sizes and all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes)
    return sizes if ok else None


def _price(names: list[str], dims: list[str | None],
           conc: list[str | None]) -> tuple[float, float, str, str] | None:
    """(bytes, flops, dtype, cost_model) of the GEMM launched after the ops given (name, input
    dims text, concrete inputs text: its module's ops before the launch, in time order), or None."""
    at = [i for i, name in enumerate(names) if name in ALLOCATIONS]
    if not at:
        return None
    alloc = json_list(conc[at[-1]])
    out = alloc_sizes(alloc)
    dtype = SCALAR_TYPES.get(concrete_int(alloc, 1) or -1)
    size = size_of(dtype)
    if not out or len(out) < 2 or dtype is None or size is None:
        return None
    m, n = out[-2], out[-1]
    for text in dims:
        shapes = json_list(text)
        x = shapes[0] if shapes else None
        if (isinstance(x, list) and len(x) >= 2 and all(isinstance(d, int) for d in x)
                and prod(x[:-1]) == m):
            c = awq_gemm(m, n, x[-1], dtype, size, prod(out))
            return float(c.bytes or 0), float(c.flops or 0), dtype, c.model
    return None


def launched_costs(trace: Trace, kernels: pl.DataFrame) -> pl.DataFrame:
    """id, _lb bytes, _lf flops, _ld dtype, _lm cost_model of the op-less low-bit GEMM kernels of
    `kernels` (id, name, op_id, launch_id) that their launch's ops price."""
    todo = kernels.filter(pl.col("op_id").is_null()
                          & pl.col("name").cast(pl.String).str.contains(AWQ_TRITON))
    if not todo.height:
        return pl.DataFrame(schema=OUT)
    la = trace.launches.select(pl.col("id").alias("launch_id"), pl.col("start_ns").alias("t_ns"),
                               *_BY)
    pts = todo.select("id", "launch_id").join(la, on="launch_id").rename({"id": "pid_"})
    mods = module_paths(trace.frames).select("id", "start_ns", "dur_ns", *_BY)
    inner = innermost(mods, pts, _BY).join(
        mods.select(pl.col("id").alias("inner"), pl.col("start_ns").alias("from_ns")), on="inner")
    where = pts.join(inner, on="pid_").select("pid_", "t_ns", "from_ns", *_BY)
    if not where.height:   # no module frame around the launches (with_stack off)
        return pl.DataFrame(schema=OUT)
    lo, hi = where["from_ns"].min(), where["t_ns"].max()
    threads = where.select(*_BY).unique()
    ops = (trace.ops.select("name", "start_ns", "input_dims", "concrete_inputs", *_BY)
           .filter(pl.col("start_ns").is_between(lo, hi)).join(threads, on=_BY)
           .sort("start_ns"))
    rows = []
    for (pid, tid), part in ops.group_by(_BY):
        mine = part.sort("start_ns")
        starts = mine["start_ns"].to_list()
        names, dims, conc = (mine[c].to_list() for c in ("name", "input_dims", "concrete_inputs"))
        cache: dict[tuple[int, int], tuple[float, float, str, str] | None] = {}
        at = where.filter((pl.col("pid") == pid) & (pl.col("tid") == tid))
        for kid, t, t0 in at.select("pid_", "t_ns", "from_ns").iter_rows():
            a, b = bisect_left(starts, t0), bisect_right(starts, t)
            if (a, b) not in cache:
                cache[(a, b)] = _price(names[a:b], dims[a:b], conc[a:b])
            got = cache[(a, b)]
            if got is not None:
                rows.append((kid, *got))
    return pl.DataFrame(rows, schema=OUT, orient="row")
