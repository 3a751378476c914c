"""Analytic bytes and FLOPs of one decode step from a Hugging Face config.json, per component.

The figures are the ideal traffic of well-fused kernels: every weight a step needs read once (only
the expected active experts of a MoE), K/V read at the given context, activations read and written
once per op. They are the yardstick the measured per-component bytes are checked against.
Supports Llama / Qwen2 / Qwen3 dense and Qwen2/Qwen3-MoE, Mixtral, DeepSeek-style MoE fields, and
sliding-window layers (`layer_types`); MLA and linear-attention layers are refused, not guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from msgspec.structs import replace
import polars as pl

from attrib.bounds import (MAX_CONTEXT, MAX_DIM, MAX_EXPERTS, MAX_LAYERS, OutOfDomain,
                           out_of_domain, span, whole)
from attrib.cost.matmul import expected_active_experts
from attrib.cost.weights import Bits, bits_for

_SCHEMA = {"component": pl.Utf8, "weight_bytes": pl.Float64, "kv_bytes": pl.Float64,
           "act_bytes": pl.Float64, "bytes": pl.Float64, "flops": pl.Float64, "note": pl.Utf8}


class ModelShape(msgspec.Struct, frozen=True):
    """The dimensions a decode budget needs, read from a config.json."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    experts: int = 0
    top_k: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0
    shared_gate: bool = False
    moe_layers: int = 0
    qk_norm: bool = False
    tie_word_embeddings: bool = False
    sliding_layers: int = 0
    sliding_window: int = 0


SHARDING = ("attention heads split over the ranks (KV heads replicated where fewer than ranks), "
            "dense-MLP, expert and shared-expert intermediates split, "
            "the vocabulary split (embedding, lm_head); "
            "norms and the router replicated (vLLM / Megatron tensor parallelism)")


def shard(m: ModelShape, tp: int) -> ModelShape:
    """One rank's part of the model under tensor parallelism over `tp` ranks (SHARDING)."""
    if tp <= 1:
        return m
    def part(n: int) -> int:
        return -(-n // tp) if n else 0
    return replace(m, heads=part(m.heads), kv_heads=max(1, m.kv_heads // tp),
                   intermediate=part(m.intermediate), moe_intermediate=part(m.moe_intermediate),
                   shared_intermediate=part(m.shared_intermediate), vocab=part(m.vocab))


def _first(cfg: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    return next((cfg[k] for k in keys if cfg.get(k) is not None), default)


def _dim(cfg: Mapping[str, Any], keys: str | tuple[str, ...], lo: int, hi: int,
         default: Any = None, why: str = "") -> int:
    """The first of `keys` the config sets (else `default`), a whole number in lo..hi."""
    names = (keys,) if isinstance(keys, str) else keys
    key = next((k for k in names if cfg.get(k) is not None), None)
    if key is None and default is None:
        raise KeyError(names[0])
    value = cfg[key] if key is not None else default
    got = whole(value, lo, hi)
    if got is None:
        raise OutOfDomain(out_of_domain(key or names[0], value,
                                      f"a whole number in {span(lo, hi)}{why}"))
    return got


def model_shape(config: Mapping[str, Any]) -> ModelShape:
    """Parse a config.json dict (a nested `text_config` wins for multimodal wrappers). Each figure
    is checked for its domain (OutOfDomain: a head count of 0, negative layers, ...); KeyError for a
    missing one."""
    text = config.get("text_config")
    cfg = {**config, **config.get("text_config", {})} if isinstance(text, dict) else config
    hidden = _dim(cfg, "hidden_size", 1, MAX_DIM)
    layers = _dim(cfg, "num_hidden_layers", 1, MAX_LAYERS)
    heads = _dim(cfg, "num_attention_heads", 1, hidden, why=" (at most hidden_size)")
    head_dim = _dim(cfg, "head_dim", 1, MAX_DIM, default=hidden // heads)
    if cfg.get("head_dim") is None and hidden % heads:
        raise OutOfDomain(out_of_domain("num_attention_heads", cfg["num_attention_heads"],
                                      f"a divisor of hidden_size {hidden} (no head_dim given)"))
    kv_heads = _dim(cfg, "num_key_value_heads", 1, heads, default=heads,
                    why=" (at most num_attention_heads)")
    expert_keys = ("num_experts", "num_local_experts", "n_routed_experts")
    experts = _dim(cfg, expert_keys, 0, MAX_EXPERTS, default=0)
    moe_layers = 0
    if experts:
        sparse_step = _dim(cfg, "decoder_sparse_step", 0, MAX_LAYERS, default=1) or 1
        dense_first = _dim(cfg, "first_k_dense_replace", 0, MAX_LAYERS, default=0)
        only_mlp = set(cfg.get("mlp_only_layers") or ())
        moe_layers = sum(1 for i in range(layers)
                         if i >= dense_first and i not in only_mlp and (i + 1) % sparse_step == 0)
    inter = _dim(cfg, "intermediate_size", 0, MAX_DIM, default=0)
    shared = _dim(cfg, "shared_expert_intermediate_size", 0, MAX_DIM, default=0)
    moe_inter = _dim(cfg, "moe_intermediate_size", 0, MAX_DIM, default=inter)
    if not shared and cfg.get("n_shared_experts"):
        shared = _dim(cfg, "n_shared_experts", 0, MAX_EXPERTS) * moe_inter
    top_k = _dim(cfg, ("num_experts_per_tok", "experts_per_token"), 0, experts or MAX_EXPERTS,
                 default=0, why=" (at most the experts)" if experts else "")
    model_type = str(cfg.get("model_type", ""))
    if cfg.get("kv_lora_rank"):
        raise ValueError("MLA attention (kv_lora_rank) is not modelled by the decode budget")
    kinds = list(cfg.get("layer_types") or [])
    if any(k not in ("full_attention", "sliding_attention") for k in kinds):
        listed = sorted(set(kinds))
        raise ValueError(f"layer types {listed} include ones the decode budget does not model")
    window = _dim(cfg, "sliding_window", 0, MAX_CONTEXT, default=0)
    return ModelShape(
        hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        intermediate=inter, vocab=_dim(cfg, "vocab_size", 1, MAX_DIM), experts=experts,
        top_k=top_k, moe_intermediate=moe_inter, shared_intermediate=shared,
        shared_gate=bool(shared) and "qwen2_moe" in model_type, moe_layers=moe_layers,
        qk_norm=model_type.startswith("qwen3"),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        sliding_layers=kinds.count("sliding_attention") if window else 0, sliding_window=window,
    )


def _row(component: str, weight: float, kv: float, act: float, flops: float,
         note: str | None = None) -> dict:
    return {"component": component, "weight_bytes": float(weight), "kv_bytes": float(kv),
            "act_bytes": float(act), "bytes": float(weight + kv + act), "flops": float(flops),
            "note": note}


def decode_budget(config: Mapping[str, Any], *, batch: int = 1, context: int,
                  weight_bits: Bits = 16, kv_bytes: float = 2, act_bytes: float = 2,
                  lm_head_bits: float | None = None, qkv_fused: bool = True,
                  gate_up_fused: bool = True, tp: int = 1) -> pl.DataFrame:
    """Bytes (weights / KV / activations) and FLOPs of one decode step, one row per component.

    batch: sequences, one new token each (tokens per step). context: K/V positions each sequence's
    attention reads this step, the new token included (a static cache read whole: its length).
    weight_bits: bits per GEMM weight incl. scales (16 bf16, 8 fp8, 4.25 mxfp4, 4.5 Q4_0), one
    figure or per weight class (attrib.cost.weights: experts, attention, mlp, ..., default);
    norm and router weights stay at act_bytes. qkv_fused / gate_up_fused: one input read
    instead of 3 / 2.
    tp: tensor-parallel ranks; the figures are one rank's shard (SHARDING).
    """
    m = shard(model_shape(config), tp)
    t, h, d, a = batch, m.hidden, m.head_dim, act_bytes
    w = bits_for(weight_bits, "attention") / 8
    lw = (lm_head_bits if lm_head_bits is not None else bits_for(weight_bits, "lm_head")) / 8
    q_dim, kv_dim = m.heads * d, m.kv_heads * d
    dense_layers = m.layers - m.moe_layers
    tp_note = f"; one rank of TP={tp}: {SHARDING}" if tp > 1 else ""
    emb_note = "gathered rows, not the table" + tp_note
    rows = [
        _row(
            "embedding",
            t * h * bits_for(weight_bits, "embedding") / 8,
            0,
            t * h * a + t * 8,
            0,
            emb_note,
        )
    ]
    qkv_w = h * (q_dim + 2 * kv_dim)
    rows.append(_row("qkv_proj", m.layers * qkv_w * w, 0,
                     m.layers * t * (h * (1 if qkv_fused else 3) + q_dim + 2 * kv_dim) * a,
                     m.layers * 2 * t * qkv_w))
    full = m.layers - m.sliding_layers
    window_read = min(context, m.sliding_window)
    positions = full * context + m.sliding_layers * window_read   # summed over layers
    sliding_note = f" ({m.sliding_layers} sliding-window layers read {window_read})"
    note = f"K/V read at context {context}" + (sliding_note if m.sliding_layers else "")
    kv_read = t * 2 * kv_dim * positions * kv_bytes
    rows.append(_row("attention", 0, kv_read, m.layers * t * 2 * q_dim * a,
                     4 * t * m.heads * positions * d, note))
    kv_write = m.layers * t * 2 * kv_dim * kv_bytes
    rows.append(_row("kv_cache_write", 0, kv_write, m.layers * t * 2 * kv_dim * a, 0,
                     "new K/V read and written into the cache"))
    rows.append(_row("o_proj", m.layers * q_dim * h * w, 0, m.layers * t * (q_dim + h) * a,
                     m.layers * 2 * t * q_dim * h))
    norms = 2 * m.layers + 1
    norm_w, norm_act = norms * h * a, norms * 2 * t * h * a
    if m.qk_norm:
        norm_w += m.layers * 2 * d * a
        norm_act += m.layers * 2 * t * (q_dim + kv_dim) * a
    qk_note = "; incl. q/k norms" if m.qk_norm else ""
    norm_note = "fused norms; residual adds not counted" + qk_note
    rows.append(_row("norm", norm_w, 0, norm_act, 2 * norm_act / a, norm_note))
    if dense_layers:
        i, w = m.intermediate, bits_for(weight_bits, "mlp") / 8
        gate_up_reads = 1 if gate_up_fused else 2
        rows.append(_row("mlp_gate_up", dense_layers * h * 2 * i * w, 0,
                         dense_layers * t * (h * gate_up_reads + 2 * i) * a,
                         dense_layers * 4 * t * h * i))
        rows.append(_row("activation", 0, 0, dense_layers * t * 3 * i * a, dense_layers * t * i))
        rows.append(_row("mlp_down", dense_layers * i * h * w, 0, dense_layers * t * (i + h) * a,
                         dense_layers * 2 * t * i * h))
    if m.moe_layers:
        rows.extend(_moe_rows(m, t, weight_bits, a))
    tied = "tied to the embedding table (same bytes read)" if m.tie_word_embeddings else None
    rows.append(_row("lm_head", m.vocab * h * lw, 0, t * (h + m.vocab) * a, 2 * t * h * m.vocab,
                     tied))
    df = pl.DataFrame(rows, schema=_SCHEMA)
    nums = [c for c in _SCHEMA if c not in ("component", "note")]
    notes = pl.col("note").drop_nulls().str.join("; ").alias("note")
    summed = df.group_by("component", maintain_order=True).agg(
        *[pl.col(c).sum() for c in nums], notes)
    no_blank = pl.when(pl.col("note") == "").then(None).otherwise(pl.col("note"))
    return summed.with_columns(no_blank.alias("note"))


def _moe_rows(m: ModelShape, t: int, bits: Bits, a: float) -> list[dict]:
    h, e, k, mi, n = m.hidden, m.experts, m.top_k, m.moe_intermediate, m.moe_layers
    active = expected_active_experts(e, k, t)
    routed = t * k
    out = [_row("moe_router", n * h * e * a, 0, n * t * (h + e) * a, n * 2 * t * h * e,
                "router weights in the model dtype")]
    expert_weights = n * active * 3 * h * mi * bits_for(bits, "experts") / 8
    expert_note = f"expected active experts {active:.3f} of {e} (uniform routing, T={t}, k={k})"
    out.append(_row("moe_experts", expert_weights, 0, n * routed * (2 * h + 3 * mi) * a,
                    n * 6 * routed * h * mi, expert_note))
    out.append(_row("activation", 0, 0, n * routed * 3 * mi * a, n * routed * mi,
                    "routed experts' gated activation"))
    out.append(_row("moe_combine", 0, 0, n * (routed + t) * h * a, n * routed * h))
    if m.shared_intermediate:
        s = m.shared_intermediate
        gate = h if m.shared_gate else 0
        shared_weights = n * (3 * h * s + gate) * bits_for(bits, "shared_experts") / 8
        out.append(_row("moe_shared_expert", shared_weights, 0, n * t * (2 * h + 6 * s) * a,
                        n * (6 * t * h * s + 2 * t * gate)))
    return out


def budget_totals(budget: pl.DataFrame, tokens_per_step: int) -> dict[str, float]:
    """Totals of a decode budget: bytes, weight/KV/activation bytes, GB per token."""
    total = float(budget["bytes"].sum())
    return {"bytes": total, "weight_bytes": float(budget["weight_bytes"].sum()),
            "kv_bytes": float(budget["kv_bytes"].sum()),
            "act_bytes": float(budget["act_bytes"].sum()),
            "flops": float(budget["flops"].sum()), "gb_per_token": total / tokens_per_step / 1e9}


class Budget(msgspec.Struct, frozen=True):
    """A model config (`--model config.json`) to budget decode bytes where the trace has no
    shapes."""

    config: Mapping[str, Any]
    source: str
    context: int | None
    weight_bits: Bits = 16
    kv_bytes: float = 2
    tp: int = 1   # tensor-parallel ranks: the budget is one rank's shard (SHARDING)

    def table(self, batch: int) -> pl.DataFrame:
        """The decode budget at `batch` tokens per step (needs the context)."""
        if self.context is None:
            raise ValueError("a decode budget needs the context")
        return decode_budget(self.config, batch=batch, context=self.context,
                             weight_bits=self.weight_bits, kv_bytes=self.kv_bytes, tp=self.tp)

    def shape(self) -> ModelShape:
        """The rank's shard of the model's shape."""
        return shard(model_shape(self.config), self.tp)


def for_world(budget: Budget | None, world: int | None) -> Budget | None:
    """The budget of one rank of `world` tensor-parallel ranks (the trace's distributedInfo)."""
    if budget is None or not isinstance(world, int) or world <= 1 or budget.tp == world:
        return budget
    return replace(budget, tp=world)
