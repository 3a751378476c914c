"""Bits per weight by tensor class, for model-config budgets: one figure, a per-class mapping
(`experts=4.25,attention=16,default=16`), or what a HF config's `quantization_config` says.

Classes: attention (q/k/v/o projections), mlp (dense gate/up/down), experts (routed MoE experts),
shared_experts, router, embedding, lm_head; `default` for any class not given (16 when absent).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from msgspec import field

from attrib.bounds import BITS as BOUNDS
from attrib.bounds import OutOfDomain, out_of_domain, span, whole
from attrib.bounds import bits as in_bits
from attrib.cost.dtypes import KV_BYTES, WEIGHT_BITS, WHAT_IF_BITS

CLASSES = ("attention", "mlp", "experts", "shared_experts", "router", "embedding", "lm_head",
           "default")
Bits = float | Mapping[str, float]


def bits_for(bits: Bits, cls: str) -> float:
    """Bits per weight of a tensor class: its own entry, else `default`, else 16."""
    if not isinstance(bits, Mapping):
        return float(bits)
    return float(bits.get(cls, bits.get("default", 16)))


def parse_bits(text: str) -> Bits:
    """`4.5` or `experts=4.25,attention=16,default=16` (a format name such as mxfp4 or q4_0
    stands for its bits); ValueError names what is wrong."""
    def value(v: str) -> float:
        v = v.strip()
        if v.lower() in WEIGHT_BITS:
            return float(WEIGHT_BITS[v.lower()])
        try:
            x = float(v)
        except ValueError:
            raise ValueError(f"{v!r}: expected bits per weight ({span(*BOUNDS)}) or a format "
                             f"({', '.join(WEIGHT_BITS)})") from None
        return in_bits(x)
    if "=" not in text:
        return value(text)
    out: dict[str, float] = {}
    for part in text.split(","):
        cls, sep, v = part.partition("=")
        cls = cls.strip()
        if not sep or cls not in CLASSES:
            raise ValueError(f"{part.strip()!r}: expected CLASS=BITS with CLASS one of "
                             f"{', '.join(CLASSES)}")
        out[cls] = value(v)
    return out


def count_of(value: Any, field: str, lo: int, hi: int) -> int:
    """A whole number in lo..hi, else OutOfDomain naming the field and the value."""
    got = whole(value, lo, hi)
    if got is None:
        raise OutOfDomain(out_of_domain(field, value, f"a whole number in {span(lo, hi)}"))
    return got


def _not_converted(qc: Mapping[str, Any], cls_names: tuple[str, ...]) -> bool:
    skip = " ".join(str(m) for m in (qc.get("modules_to_not_convert") or qc.get("ignore") or ()))
    return any(n in skip for n in cls_names)


def from_quantization_config(config: Mapping[str, Any]) -> dict[str, float] | None:
    """Bits per class from a HF config's `quantization_config`; None when there is none.

    mxfp4 (gpt-oss): routed experts 4.25 (E2M1 + an E8M0 scale per 32), the rest as the model dtype.
    fp8: 8 bits plus one fp32 scale per weight block; awq/gptq: `bits` plus an fp16 scale and a
    packed zero point per group. Modules listed in modules_to_not_convert / ignore stay 16-bit;
    embeddings and lm_head are not quantized unless the config says so. ValueError for other
    methods.
    """
    qc = config.get("quantization_config")
    if not isinstance(qc, Mapping):
        return None
    method = str(qc.get("quant_method", "")).lower()
    out = {"default": 16.0, "embedding": 16.0, "lm_head": 16.0, "router": 16.0}
    if method == "mxfp4":
        out["experts"] = WEIGHT_BITS["mxfp4"]
        return out
    if method == "fp8":
        block = qc.get("weight_block_size") or [128, 128]
        if not isinstance(block, list) or len(block) != 2:
            raise OutOfDomain(out_of_domain("quantization_config.weight_block_size", block,
                                            "two whole numbers (rows, columns)"))
        rows, cols = (count_of(b, "quantization_config.weight_block_size", 1, 1 << 24)
                      for b in block)
        q = 8 + 32 / (rows * cols)
    elif method in ("awq", "gptq"):
        bits = count_of(qc.get("bits", 4), "quantization_config.bits", 1, 32)
        group = qc.get("group_size", 128) or 128
        if whole(group, -1, 1 << 24) is None:  # -1: one group per row (GPTQ)
            raise OutOfDomain(out_of_domain("quantization_config.group_size", group,
                                            "a whole number in -1..16777216"))
        group = int(group)
        q = bits + (16 + bits) / (group if group > 0 else 4096)
    else:
        raise ValueError(f"quantization_config.quant_method {method!r} is not modelled: "
                         "give --weight-bits")
    modules = (("attention", ("self_attn", "attn")), ("mlp", ("mlp",)), ("experts", ("experts",)),
               ("shared_experts", ("shared_expert",)))
    for cls, names in modules:
        out[cls] = 16.0 if _not_converted(qc, names) else q
    out["default"] = q
    return out



# weight classes a what-if re-prices (norms and the router stay in the model dtype in every format)
QUANTIZED = ("attention", "mlp", "experts", "shared_experts", "embedding", "lm_head")
KV_FORMATS = ("bf16", "fp16", "fp8", "int8")


class Formats(msgspec.Struct, frozen=True):
    """A what-if: weight format per class (name -> bits, WHAT_IF_BITS) and the KV-cache format."""

    weights: Mapping[str, str] = field(default_factory=dict)
    kv: str | None = None

    def bits(self, cls: str) -> float | None:
        """Bits per weight of a class under the what-if (its own entry, else `default`), None to
        keep."""
        name = self.weights.get(cls, self.weights.get("default"))
        return WHAT_IF_BITS[name] if name is not None else None

    @property
    def kv_bytes(self) -> float | None:
        return KV_BYTES[self.kv] if self.kv is not None else None

    def label(self) -> str:
        parts = [f"{'weights' if k == 'default' else k}={v}" for k, v in self.weights.items()]
        return ",".join(parts + ([f"kv={self.kv}"] if self.kv else []))


def parse_formats(text: str) -> Formats:
    """`weights=int4,kv=fp8` or per class (`experts=mxfp4,attention=fp8,default=int8`):
    `weights` and `default` set every class; ValueError names what is wrong."""
    weights: dict[str, str] = {}
    kv = None
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, fmt = (x.strip().lower() for x in part.partition("="))
        if not sep:
            raise ValueError(f"{part!r}: expected CLASS=FORMAT "
                             "(weights=int4, kv=fp8, experts=mxfp4, ...)")
        if key == "kv":
            if fmt not in KV_FORMATS:
                raise ValueError(f"kv={fmt}: KV formats are {', '.join(KV_FORMATS)}")
            kv = fmt
            continue
        cls = "default" if key == "weights" else key
        if cls not in QUANTIZED + ("default",):
            raise ValueError(f"{key!r}: classes are weights, default, {', '.join(QUANTIZED)}, kv")
        if fmt not in WHAT_IF_BITS:
            raise ValueError(f"{part}: weight formats are {', '.join(WHAT_IF_BITS)}")
        weights[cls] = fmt
    if not weights and kv is None:
        raise ValueError("empty: give weights=FORMAT and/or kv=FORMAT")
    return Formats(weights=weights, kv=kv)


# the weight class of each GEMM component's weights (what a what-if re-prices); norms, the router
# and activations keep their dtype
WEIGHT_CLASS = {"qkv_proj": "attention", "o_proj": "attention",
                "mlp_gate_up": "mlp", "mlp_down": "mlp",
                "moe_experts": "experts", "moe_shared_expert": "shared_experts",
                "embedding": "embedding", "lm_head": "lm_head"}
# components whose bytes beyond their activations are K/V in the cache's format (reads, the
# cache's own copies, GQA expansions)
KV_COMPONENTS = ("attention", "kv_cache_write")
