"""Cost formulas of serving-engine custom ops (vLLM `_C`/`_rocm_C`/`_moe_C`, SGLang `sgl_kernel`,
AITER, FlashMLA, triton_kernels routing) whose argument order is their registered schema.

Caches, tables and worst-case-sized buffers are passed whole; only the rows an index selects are
counted (see /work/shared/knowledge/serving-ops.md for each schema and formula).
"""

from __future__ import annotations

from math import prod

from attrib.cost.dtypes import (NCCL_TYPES, SIZES, Cost, concrete_bool, concrete_int, dtype_of,
                                tensor, unknown)
from attrib.cost.elementwise import cache_write
from attrib.cost.matmul import expected_active_experts, uniform_routing_note


def store_cache(dims: list, types: list, concrete: list = ()) -> Cost:
    """sglang::store_cache(k[T, Hk*D], v, k_cache, v_cache, indices[T], ...): k/v read, written into
    the cache rows the indices select."""
    k, v, cache, indices = (tensor(dims, types, i) for i in (0, 1, 2, 4))
    return cache_write(k, v, cache, indices)


def concat_and_cache_mla(dims: list, types: list, concrete: list = ()) -> Cost:
    """_C_cache_ops::concat_and_cache_mla(kv_c[T, Rkv], k_pe[T, Rr], kv_cache,
    slot_mapping[T], ...): the latent and rope parts read, one latent row per token written."""
    kv_c, k_pe, cache, slots = (tensor(dims, types, i) for i in range(4))
    return cache_write(kv_c, k_pe, cache, slots, "latent K/V not recorded")


def rotary(dims: list, types: list, concrete: list = ()) -> Cost:
    """_C::rotary_embedding / sgl_kernel::rotary_embedding(positions[T], query[T, Hq*D]!,
    key[T, Hk*D]!?, head_size, cos_sin_cache[P, R], is_neox): the R rotated columns of every
    q/k head read and written in place, positions read, one cache row per token read."""
    pos, q, k, cache = (tensor(dims, types, i) for i in (0, 1, 2, 4))
    if pos is None or q is None:
        return unknown("rope", "rotary operands not recorded")
    head = concrete_int(concrete, 3)
    rot = cache.shape[-1] if cache else head
    frac = min(1.0, rot / head) if (rot and head) else 1.0
    qk = (q.nbytes + (k.nbytes if k else 0)) * frac
    rows = pos.numel * cache.shape[-1] * cache.size if cache else 0
    flops = 3.0 * (q.numel + (k.numel if k else 0)) * frac
    partial = None if frac == 1.0 else f"partial rotary: {rot} of {head} head dims"
    return Cost(pos.nbytes + 2 * qk + rows, flops, q.dtype, "rope", partial)


def _pairs(tq: int, tk: int, seqs: int, causal: bool) -> tuple[float, str | None]:
    """(query, key) pairs of `seqs` equal-length sequences holding tq queries and tk keys
    in total."""
    if not causal:
        return float(tq) * tk / max(seqs, 1), "equal-length sequences assumed"
    q, k = tq / max(seqs, 1), tk / max(seqs, 1)
    prefix = max(k - q, 0.0)
    return seqs * (q * prefix + q * (q + 1) / 2), "causal, equal-length sequences assumed"


def mha_batch_prefill(dims: list, types: list, concrete: list = ()) -> Cost:
    """aiter::mha_batch_prefill(q[Tq, Hq, D], k[slots(, page), Hk, D], v, cu_seqlens_q[B+1],
    kv_indptr[B+1], kv_page_indices[Nkv], max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
    logits_soft_cap, zero_tensors, is_causal, ...): q read and o written once, the Nkv pages of
    K and V read once. FLOPs = 4*Hq*D*P over the visible pairs."""
    q, k, cu, pages = (tensor(dims, types, i) for i in (0, 1, 3, 5))
    if q is None or k is None or pages is None or len(q.shape) != 3:
        return unknown("attention", "q/k or the page indices not recorded")
    tq, hq, d = q.shape
    hk, page = k.shape[-2], (k.shape[1] if len(k.shape) == 4 else 1)
    tk = pages.numel * page
    seqs = (cu.numel - 1) if cu else 1
    causal = concrete_bool(concrete, 12)
    pairs, why = _pairs(tq, tk, seqs, causal is not False)
    qo_bytes, kv_bytes = 2 * tq * hq * d * q.size, 2 * tk * hk * d * k.size
    nbytes = qo_bytes + kv_bytes + pages.nbytes + (cu.nbytes if cu else 0)
    note = f"KV tokens from the page indices; {why}"
    return Cost(nbytes, 4.0 * hq * d * pairs, q.dtype, "attention", note)


def fwd_kvcache_mla(dims: list, types: list, concrete: list = ()) -> Cost:
    """_flashmla_C::fwd_kvcache_mla(q[B, sq, Hq, Rkv+Rr], k_cache[blocks, bs, 1, Rkv+Rr],
    head_dim_v=Rkv, cache_seqlens[B], block_table[B, max_blocks], ...): the latent cache read
    once (V is its first Rkv columns), at most block_table's blocks per sequence (an upper
    bound: lengths are not recorded)."""
    q, cache, table = tensor(dims, types, 0), tensor(dims, types, 1), tensor(dims, types, 4)
    rkv = concrete_int(concrete, 2)
    if (q is None or cache is None or table is None
            or len(q.shape) != 4 or len(cache.shape) != 4 or not rkv):
        return unknown("attention", "MLA operands not recorded")
    b, sq, hq, dq = q.shape
    kv_tokens = table.numel * cache.shape[1]
    cache_bytes = kv_tokens * cache.shape[-1] * cache.size
    nbytes = cache_bytes + b * sq * hq * (dq + rkv) * q.size + table.nbytes
    flops = 2.0 * hq * (2 * rkv + (dq - rkv)) * kv_tokens * sq
    why = "upper bound: every block of the block table read"
    return Cost(nbytes, flops, q.dtype, "attention", why)


def fmoe(dims: list, types: list, concrete: list = ()) -> Cost:
    """aiter::fmoe(out[T, H], input[T, H], gate[E, 2I, H], down[E, H, I], sorted_token_ids,
    sorted_weights, sorted_expert_ids, num_valid_ids, topk): the expected active experts'
    weights read once (uniform routing), input read, output written; sorted buffers are
    worst-case sized and left out."""
    out, x, w1, w2 = (tensor(dims, types, i) for i in range(4))
    k = concrete_int(concrete, 8)
    if x is None or w1 is None or w2 is None or len(w1.shape) != 3 or not k:
        return unknown("moe", "fused MoE operands or top-k not recorded")
    t, h = prod(x.shape[:-1]), x.shape[-1]
    e, n1 = w1.shape[0], w1.shape[1]
    active = expected_active_experts(e, k, t)
    nbytes = x.nbytes + (out.nbytes if out else x.nbytes) + (w1.nbytes + w2.nbytes) * active / e
    why = uniform_routing_note(e, k, t)
    return Cost(nbytes, 2.0 * t * k * h * (n1 + n1 / 2), x.dtype, "moe", why)


def router_topk(dims: list, types: list, concrete: list = ()) -> Cost:
    """triton_kernels TopK(router_logits[T, E], k, apply_softmax, ...): logits read, k values
    and int16 indices and a T x E bit matrix written."""
    x, k = tensor(dims, types, 0), concrete_int(concrete, 1)
    if x is None or not k or len(x.shape) != 2:
        return unknown("topk", "router logits or k not recorded")
    t, e = x.shape
    return Cost(x.nbytes + t * k * (x.size + 2) + t * e / 8, float(x.numel), x.dtype, "topk")


def sort_tokens(dims: list, types: list, concrete: list = ()) -> Cost:
    """triton_kernels SortTokens(expt_scal[T, k], expt_indx[T, k], n_expts_tot, ...): the
    routing read and its gather/scatter indices and histograms written (about three passes
    over T*k entries)."""
    scal, idx = tensor(dims, types, 0), tensor(dims, types, 1)
    if scal is None or idx is None:
        return unknown("moe_dispatch", "routing tensors not recorded")
    n = scal.numel
    nbytes = scal.nbytes + idx.nbytes + n * (scal.size + 3 * 4)
    why = "estimate: gather/scatter indices (int32) and weights written once"
    return Cost(nbytes, float(n), scal.dtype, "moe_dispatch", why)


# paged attention ops: (query arg, key-cache arg, num_kv_heads position in Concrete Inputs or
# None when the key arg is the new keys [T, Hk, D]); the cache and lengths are not args of
# vLLM's unified ops
_PAGED_ARGS = {"vllm::unified_attention": (0, 1, None), "_rocm_C::paged_attention": (4, 5, 7),
               "aiter::paged_attention_rocm": (4, 5, 7), "_C::paged_attention_v2": (4, 5, 7),
               "_C::paged_attention_v1": (1, 2, 4)}


def windowed(sums: dict[str, int], window: tuple[float, int] | None) -> tuple[float, float, str]:
    """(Σk, Σq·k, why) with a share f of the layers attending at most `w` keys per query:
    a sliding layer reads at most Σq + n*w keys of n requests (each request's queries and
    the w before them) and pairs each query with at most w keys; the call stands for the
    layers' mean."""
    sk, sqsk = float(sums["sk"]), float(sums["sqsk"])
    if window is None:
        return sk, sqsk, "K/V read at every request's full context (step annotation Σk)"
    f, w = window
    n = sums.get("requests") or sums["sq"]
    sk_w, sqsk_w = min(sk, sums["sq"] + n * w), min(sqsk, sums["sq"] * w)
    why = (f"K/V read at every request's context (step annotation Σk); "
           f"{f:.0%} of the layers slide over {w} keys (model config): "
           f"they read at most Σq + {n} x {w}, the mean over layers")
    return (1 - f) * sk + f * sk_w, (1 - f) * sqsk + f * sqsk_w, why


def paged_attention(name: str, dims: list, types: list, concrete: list, sums: dict[str, int],
                    window: tuple[float, int] | None = None) -> Cost:
    """One paged-attention call from its q (and k) shapes and the step's Σk and Σq·k (vLLM's
    detailed step annotation): K/V read at every request's context, at most the window in
    sliding-window layers when a model config gives one (`window`), q read and o written
    once. FLOPs = 4*Hq*D*Σq·k. MLA (`unified_mla_attention*`: q[T, Hq, Dqk], kv_c[T, Rkv],
    k_pe[T, 1, Rr]) reads its latent cache once: Σk*(Rkv+Rr) elements."""
    q = tensor(dims, types, 0)
    if "mla_attention" in name:
        kv_c, k_pe = tensor(dims, types, 1), tensor(dims, types, 2)
        if q is None or kv_c is None or k_pe is None or len(q.shape) != 3:
            return unknown("attention", "MLA q / latent not recorded")
        (t, hq, dq), rkv, rr = q.shape, kv_c.shape[-1], k_pe.shape[-1]
        nbytes = sums["sk"] * (rkv + rr) * kv_c.size + t * hq * (dq + rkv) * q.size
        return Cost(nbytes, 2.0 * hq * (2 * rkv + rr) * sums["sqsk"], q.dtype, "attention",
                    "MLA latent cache read at every request's context (step annotation Σk)")
    qi, ki, kvh_at = next((v for n, v in _PAGED_ARGS.items() if name.startswith(n)), (0, 1, None))
    q, k = tensor(dims, types, qi), tensor(dims, types, ki)
    if q is None or k is None or len(q.shape) != 3:
        return unknown("attention", "paged-attention q / K not recorded")
    tokens, heads, hd = q.shape
    if kvh_at is not None:
        kv_heads = concrete_int(concrete, kvh_at)
    else:
        kv_heads = k.shape[1] if len(k.shape) == 3 else None
    if not kv_heads:
        return unknown("attention", "KV heads not recorded")
    sk, sqsk, why = windowed(sums, window)
    nbytes = sk * 2 * kv_heads * hd * k.size + 2 * tokens * heads * hd * q.size
    return Cost(nbytes, 4.0 * sqsk * heads * hd, q.dtype, "attention", why)


# NCCL/RCCL kernel names carry the collective, and older ones the element type too:
# ncclDevKernel_AllReduce_Sum_bf16_RING_LL, ncclDevKernel_AllGather_RING_LL
COLLECTIVE = (r"(?i)(AllReduce|AllGather|ReduceScatter)_(?:(?:\w+?_)?"
              r"(bf16|f16|half|f32|float|f8e4m3|f8e5m2|i8|u8)_)?")
# nccl-tests bus-bandwidth factors: bytes each rank moves over its links, per byte of the input
# buffer (an all-gather's output is n inputs: busBw = algBw x (n-1)/n over the output)
BUS_FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: float(n - 1),
              "reducescatter": lambda n: (n - 1) / n}


def collective(dims: list, coll: str, elt: str | None, world: int, types: list = ()) -> Cost:
    """A collective launched under `record_param_comms(inputTensors, ...)` (a TensorList of
    shapes, or one tensor with its type), the element type from the kernel name where it has one,
    else the input's: bytes = buffer x the nccl-tests bus factor (all-reduce 2(n-1)/n,
    all-gather (n-1) inputs = (n-1)/n of the gathered output, reduce-scatter (n-1)/n), what
    each rank's links carry; FLOPs of the reduction n-1 adds per element (all-reduce)."""
    first = dims[0] if dims and isinstance(dims[0], list) else []
    listed = bool(first) and isinstance(first[0], list)
    one = bool(first) and all(isinstance(d, int) for d in first)
    tensors = first if listed else [first] if one else []
    traced = dtype_of(types[0]) if one and types else None
    dtype = NCCL_TYPES.get(elt.lower()) if elt else (traced[0] if traced else None)
    size = SIZES.get(dtype) if dtype else None
    if not tensors or size is None or world < 2:
        return unknown("collective", "buffer shapes, element type or world size not recorded")
    numel = sum(prod(t) for t in tensors if isinstance(t, list))
    return _bus(numel, size, dtype, coll, world, "buffer")


def _bus(numel: int, size: float, dtype: str | None, coll: str, world: int, what: str) -> Cost:
    factor = BUS_FACTOR[coll.lower()](world)
    flops = float(numel * (world - 1)) if coll.lower() == "allreduce" else 0.0
    return Cost(numel * size * factor, flops, dtype, "collective",
                f"bus bytes (nccl-tests): {what} x {factor:g} over {world} ranks, link traffic")


# PyTorch symmetric-memory all-reduces (vLLM's all-reduce on NVLink machines: the tensor copied
# into a symmetric buffer, reduced in place): symm_mem::<op>(input[N], reduce_op, group_name)
SYMM_ALL_REDUCE = ("symm_mem::multimem_all_reduce_", "symm_mem::multimem_one_shot_all_reduce",
                   "symm_mem::one_shot_all_reduce", "symm_mem::two_shot_all_reduce_")


def symm_all_reduce(dims: list, types: list, world: int) -> Cost:
    """symm_mem::multimem_all_reduce_(input[N]!, "sum", group) and its one-/two-shot siblings:
    the N elements all-reduced over the group, priced like NCCL's all-reduce (bus bytes, so
    GB/s compare with nccl-tests' busBw whatever the algorithm: NVLS multimem reduces in the
    switch)."""
    x = tensor(dims, types, 0)
    if x is None or world < 2:
        return unknown("collective", "symmetric buffer or world size not recorded")
    return _bus(x.numel, x.size, x.dtype, "allreduce", world, "symmetric buffer")
