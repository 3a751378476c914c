"""FlashInfer / TensorRT-LLM-gen fused MoE (`trtllm_fp4_block_scale_moe`: vLLM's MXFP4 experts on
Blackwell) priced kernel by kernel from what the trace shows.

The op is a FlashInfer Python function, not a torch op: the trace records only the vLLM op around
it, `vllm::moe_forward(hidden[T, H], router_logits[T, E], layer)`, the allocations the launcher
makes inside it (`aten::empty` with its sizes and dtype code in `Concrete Inputs`) and the kernels'
names, which spell the element types of the batched GEMMs (`bmm_<out>_<weights><acts>_<acc>_...`).
From them: T, H (as run: padded), E, top-k (the [T, k] routing outputs), the experts' intermediate
I (as run: padded; the first GEMM's output [P, I]) and the weight format (MxE2m1 = MXFP4). Each
kernel is priced for its own work (routing, activation quantize, GEMM1+SwiGLU, GEMM2, finalize), so
the experts' weights land on the GEMMs, not on the routing kernels beside them. Schemas, packing
and sources: docs/lowbit-gemms.md.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right

import orjson
import polars as pl

from attrib.components.patterns import (TRTLLM_MOE_FINALIZE, TRTLLM_MOE_GEMM, TRTLLM_MOE_QUANT,
                                        TRTLLM_MOE_ROUTING)
from attrib.cost.dtypes import SCALAR_TYPES, SIZES, WEIGHT_BITS, Cost, concrete_int, tensor
from attrib.cost.launched import ALLOCATIONS, alloc_sizes, json_list
from attrib.cost.matmul import expected_active_experts

OPS = ("vllm::moe_forward", "vllm::moe_forward_shared")
OUT = {"id": pl.Int64, "_mb": pl.Float64, "_mf": pl.Float64, "_md": pl.Utf8, "_mm": pl.Utf8}

# trtllm-gen element types (batchedGemm::trtllm::gen::Dtype): bits per element, block scales
# included (MX: one E8M0 byte per 32; NVFP4 E2m1: one E4M3 byte per 16), and the format's name
FORMAT = {"MxE2m1": "mxfp4", "E2m1": "nvfp4", "MxE4m3": "mxfp8", "E4m3": "fp8_e4m3fn",
          "E5m2": "fp8_e5m2", "Bfloat16": "bf16", "Fp16": "fp16", "Fp32": "fp32"}
BITS = {t: WEIGHT_BITS.get(f) or 8.0 * SIZES[f] for t, f in FORMAT.items()}
BIAS_BYTES = 4   # the experts' GEMM biases go to the kernels as fp32 (vLLM mxfp4.py)


def mma_dtype(weights: str, acts: str) -> str:
    """The dtype whose tensor-core peak a GEMM of these operand types runs at: 4-bit by 4-bit at
    the FP4 rate, any 8-bit float operand (MXFP4 x MXFP8: the f8f6f4 MMA) at the FP8 rate, else
    the activations' 16 bits."""
    four = ("MxE2m1", "E2m1")
    if weights in four and acts in four:
        return "fp4x2"
    if {weights, acts} & {"MxE4m3", "E4m3", "E5m2"} or acts in four:
        return "fp8_e4m3fn"
    return FORMAT.get(acts, "bf16")


def shapes(dims: list, types: list, allocs: list[tuple[list[int], str | None]]
           ) -> tuple[int, int, int, int, int] | None:
    """T, H, E from `vllm::moe_forward(hidden[T, H], router_logits[T, E], ...)`; k from the
    launcher's [T, k] routing outputs; I from its first GEMM's output [P, I] (P >= T*k rows, the
    rows its second GEMM's output [P, H] has too). None when any is missing."""
    x, logits = tensor(dims, types, 0), tensor(dims, types, 1)
    if x is None or logits is None or len(x.shape) != 2 or len(logits.shape) != 2:
        return None
    (t, h), e = x.shape, logits.shape[1]
    k = next((s[1] for s, _ in allocs if len(s) == 2 and s[0] == t and 0 < s[1] <= min(e, 64)
              and s[1] != h), None)
    if not k:
        return None
    rows = {s[0] for s, _ in allocs if len(s) == 2 and s[1] == h and s[0] >= t * k}
    i = next((s[1] for s, _ in allocs if len(s) == 2 and s[0] in rows and s[1] != h), None)
    return (t, h, e, k, i) if i else None


def gemm(name: str, t: int, h: int, e: int, k: int, i: int) -> Cost | None:
    """One of the two batched GEMMs (its types from the name): the E_active experts' packed
    weights, scales and fp32 bias read once, the routed activations read, its output written.
    GEMM1 (`_swiGlu`): [T*k, H] x [2I, H] -> SwiGLU -> [T*k, I]; GEMM2: [T*k, I] x [H, I] ->
    [T*k, H]. FLOPs 2*T*k*N*K at the MMA's peak (mma_dtype)."""
    m = re.match(TRTLLM_MOE_GEMM, name)
    if m is None:
        return None
    w, a, o = m["weights"], m["acts"], m["out"]
    if not all(x in BITS for x in (w, a, o)):
        return None
    active = expected_active_experts(e, k, t)
    first = "swiGlu" in name or "SwiGlu" in name
    n, kk, rows_in, rows_out = (2 * i, h, t, i) if first else (h, i, t * k, h)
    weights = active * n * kk * BITS[w] / 8
    bias = active * n * BIAS_BYTES if "_bias" in name else 0.0
    nbytes = weights + bias + rows_in * kk * BITS[a] / 8 + t * k * rows_out * BITS[o] / 8
    fmt = FORMAT[w]
    why = (f"{'GEMM1+SwiGLU' if first else 'GEMM2'} of a trtllm-gen fused MoE: {fmt} weights "
           f"({BITS[w]:g} bits), {FORMAT[a]} activations; E_active = {active:.2f} of {e} "
           f"(uniform routing: E*(1-(1-k/E)^T), T={t}, k={k}), H={h}, I={i} as run (padded)")
    return Cost(nbytes, 2.0 * t * k * n * kk, mma_dtype(w, a), f"gemm ({fmt})", why)


def part(name: str, t: int, h: int, e: int, k: int, i: int, act_bits: float) -> Cost | None:
    """The fused MoE's other kernels: the activations' block quantization (bf16 read, `act_bits`
    written), the routing (logits read; top-k ids, weights and the permutation written, for all
    its kernels together) and the finalize (the T*k expert rows read with their weights, the T
    token rows written)."""
    if re.search(TRTLLM_MOE_QUANT, name):
        return Cost(t * h * (2 + act_bits / 8), float(t * h), "bf16", "block quantize",
                    f"block quantization of the MoE input to {act_bits:g} bits")
    if re.search(TRTLLM_MOE_ROUTING, name):
        return Cost(t * e * 2 + t * k * (4 + 2 + 4 + 4) + e * 4, float(t * e), "bf16",
                    "routing", "trtllm-gen routing: logits read, top-k and permutation written")
    if re.search(TRTLLM_MOE_FINALIZE, name):
        return Cost(t * k * (h * 2 + 2 + 4) + t * h * 2, 2.0 * t * k * h, "bf16", "finalize",
                    "finalize: the T*k expert rows weighted and summed into T tokens")
    return None


def _allocs(conc: list[str | None]) -> list[tuple[list[int], str | None]]:
    """(sizes, dtype) of each allocation (its Concrete Inputs text)."""
    args = [json_list(text) for text in conc]
    return [(s, SCALAR_TYPES.get(concrete_int(a, 1) or -1))
            for a in args if (s := alloc_sizes(a)) is not None]


def moe_kernel_costs(ops: pl.DataFrame, kernels: pl.DataFrame) -> pl.DataFrame:
    """id, _mb bytes, _mf flops, _md dtype, _mm cost_model of every kernel of a vLLM MoE op that
    launched a trtllm-gen batched GEMM (`kernels`: id, name, op_id, dur_ns). The routing kernels
    share the routing's cost by duration. A kernel of such an op this does not price gets null
    bytes: the op's model-config estimate is not shared over it. Each distinct call (its shapes,
    allocations and kernel names) is priced once."""
    mine = (kernels.filter(pl.col("op_id").is_not_null())
            .select("id", "op_id", "dur_ns", pl.col("name").cast(pl.String)))
    hosts = mine.filter(pl.col("name").str.contains(TRTLLM_MOE_GEMM))["op_id"].unique()
    the_ops = ops.filter(pl.col("id").is_in(hosts.implode()) & pl.col("name").is_in(OPS))
    if not the_ops.height:
        return pl.DataFrame(schema=OUT)
    lo, hi = the_ops["start_ns"].min(), (the_ops["start_ns"] + the_ops["dur_ns"]).max()
    allocs = ops.filter(pl.col("name").is_in(ALLOCATIONS) & pl.col("start_ns").is_between(lo, hi))
    threads = {key: (part["start_ns"].to_list(), part["concrete_inputs"].to_list())
               for key, part in allocs.sort("start_ns").group_by(["pid", "tid"])}
    launched = {key[0]: part for key, part in mine.filter(
        pl.col("op_id").is_in(hosts.implode())).group_by("op_id")}
    rows: list[tuple[int, float | None, float | None, str | None, str | None]] = []
    cache: dict[tuple, tuple[Cost | None, ...]] = {}
    for oid, pid, tid, t0, dur, dims, types in the_ops.select(
            "id", "pid", "tid", "start_ns", "dur_ns", "input_dims", "input_types").iter_rows():
        starts, conc = threads.get((pid, tid), ([], []))
        inside = tuple(conc[bisect_left(starts, t0):bisect_right(starts, t0 + dur)])
        ks = launched[oid]
        names = tuple(ks["name"].to_list())
        key = (dims, types, inside, names)
        if key not in cache:
            got = shapes(orjson.loads(dims or "[]"), orjson.loads(types or "[]"),
                         _allocs(list(inside)))
            cache[key] = tuple(_kernel(n, got, names) for n in names)
        routing = [d for d, c in zip(ks["dur_ns"], cache[key]) if c and c.model == "routing"]
        for kid, dur_ns, c in zip(ks["id"], ks["dur_ns"], cache[key]):
            if c is None or c.bytes is None:
                rows.append((kid, None, None, None, None))
                continue
            share = 1.0
            if c.model == "routing":
                share = dur_ns / sum(routing) if sum(routing) > 0 else 1.0 / len(routing)
            rows.append((kid, c.bytes * share, (c.flops or 0.0) * share, c.dtype, c.model))
    return pl.DataFrame(rows, schema=OUT, orient="row")


def _kernel(name: str, got: tuple[int, int, int, int, int] | None,
            names: tuple[str, ...]) -> Cost | None:
    """One kernel of the call (its routing part whole), None where unpriced."""
    if got is None:
        return None
    acts = [m for m in (re.match(TRTLLM_MOE_GEMM, n) for n in names) if m]
    act_bits = BITS.get(acts[0]["acts"], BITS["MxE4m3"]) if acts else BITS["MxE4m3"]
    return gemm(name, *got) or part(name, *got, act_bits)
