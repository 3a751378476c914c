"""Position in the layer: name GEMMs that nothing else named, from the kernels around them.

Within a step, in time order, the GEMMs between two attention kernels are: o_proj (first after
attention), then the MLP (gate/up, then down) or, in a MoE layer, the router GEMM(s) before the
expert kernels, then the next layer's qkv projection(s). The number of qkv GEMMs per layer is learnt
from the GEMMs before the step's first attention kernel. After the last attention kernel: o_proj,
the MLP and finally lm_head. A step with no attention kernel at all (a stack of GEMMs: MLP-only
layers, a quantized-GEMM benchmark) anchors on its norms and activations instead (`_by_norms`).
"""

from __future__ import annotations

import polars as pl

SPLITK_REDUCE = r"(?i)split_?k_?reduce"


def _mlp(ids: list[int], out: dict[int, str]) -> None:
    for i, kid in enumerate(ids):
        out[kid] = "mlp_down" if i == len(ids) - 1 and len(ids) > 1 else "mlp_gate_up"


def _after_attention(seg: list[tuple[int, str]], q: int, last: bool, out: dict[int, str]) -> None:
    gemms = [kid for kid, kind in seg if kind == "G"]
    if not gemms:
        return
    out[gemms[0]] = "o_proj"
    experts = [i for i, (_, kind) in enumerate(seg) if kind == "E"]
    rest = gemms[1:]
    named_head = any(kind == "H" for _, kind in seg)
    if last and not named_head and len(rest) >= 3 - bool(experts):
        out[rest[-1]] = "lm_head"
        rest = rest[:-1]
    elif not last:
        qkv = rest[-q:] if len(rest) > q or experts else []
        for kid in qkv:
            out[kid] = "qkv_proj"
        rest = rest[: len(rest) - len(qkv)]
    if experts:
        before = {kid for kid, _ in seg[: experts[0]]}
        for kid in rest:
            out[kid] = "moe_router" if kid in before else "moe_shared_expert"
    else:
        _mlp(rest, out)


def _softmax_attention(seq: list[tuple[int, str]]) -> tuple[list[tuple[int, str]], dict[int, str]]:
    """Attention written as GEMM, softmax, GEMM (llama.cpp without flash attention, eager torch):
    the GEMM right before an 'S' softmax-attention kernel (Q·K^T) and the one right after it (P·V)
    are attention, not projections; the rest of the sequence with 'S' as 'A'.

    An 's' softmax kernel that nothing named (a graph replay has no op to tell the attention
    softmax from the sampler's or a router's) is attention only between two GEMMs, as Q·K^T and
    P·V hold it; elsewhere it leaves the sequence."""
    att: dict[int, str] = {}
    gemm_at = lambda i: 0 <= i < len(seq) and seq[i][1] == "G"  # noqa: E731
    for i, (kid, kind) in enumerate(seq):
        weak = kind == "s" and gemm_at(i - 1) and gemm_at(i + 1)
        if kind == "S" or weak:
            att |= {seq[j][0]: "attention" for j in (i - 1, i + 1) if gemm_at(j)}
        if weak:
            att[kid] = "attention"
    rest = []
    for kid, kind in seq:
        softmax = kind in ("S", "s")
        if (kid in att) != (kind == "s"):  # a claimed GEMM, or a softmax that is not attention
            continue
        rest.append((kid, "A" if softmax else kind))
    return rest, att


def label(seq: list[tuple[int, str]]) -> dict[int, str]:
    """seq: (kernel id, 'G' gemm | 'R' split-K reduce of the GEMM before it | 'A' attention |
    'S' softmax of a GEMM-softmax-GEMM attention | 's' a softmax nothing named | 'E' MoE expert |
    'N' norm | 'F' activation | 'H' an lm_head named otherwise: no GEMM is taken for it) in time
    order -> kernel id -> component (GEMMs, and the 's' softmaxes found to be attention)."""
    seq, att = _softmax_attention(seq)
    owner: dict[int, int] = {}
    prev_g = None
    plain = []
    for kid, kind in seq:
        if kind == "R" and prev_g is not None:
            owner[kid] = prev_g
            continue
        if kind in ("G", "R"):
            prev_g = kid
        plain.append((kid, "G" if kind == "R" else kind))
    out = _label(plain) | att
    out.update({kid: out[g] for kid, g in owner.items() if g in out})
    return out


def _label(seq: list[tuple[int, str]]) -> dict[int, str]:
    segments: list[list[tuple[int, str]]] = [[]]
    for kid, kind in seq:
        if kind == "A":
            if segments[-1] or len(segments) == 1:
                segments.append([])
        else:
            segments[-1].append((kid, kind))
    out: dict[int, str] = {}
    if len(segments) == 1:  # no attention kernel: anchor on norms and activations
        return _by_norms(seq)
    head = [kid for kid, kind in segments[0] if kind == "G"]
    q = max(len(head), 1)
    for kid in head:
        out[kid] = "qkv_proj"
    for i, seg in enumerate(segments[1:], start=1):
        _after_attention(seg, q, i == len(segments) - 1, out)
    return out


def _by_norms(seq: list[tuple[int, str]]) -> dict[int, str]:
    """A pre-norm layer without attention kernels: its GEMMs sit between 'N' norm kernels. A
    stretch holding an 'F' activation is the MLP (gate/up before it, down after); a stretch without
    one is the attention half (its last GEMM o_proj, the ones before it qkv_proj); GEMMs after the
    last norm with no activation are the lm_head. Nothing before the first norm, and nothing at all
    without both a norm and an activation to anchor on."""
    kinds = {kind for _, kind in seq}
    if "N" not in kinds or "F" not in kinds:
        return {}
    # what follows each norm (consecutive norm kernels: one)
    stretches: list[list[tuple[int, str]]] = []
    for kid, kind in seq:
        if kind == "N":
            if not stretches or stretches[-1]:
                stretches.append([])
        elif stretches:
            stretches[-1].append((kid, kind))
    out: dict[int, str] = {}
    last = len(stretches) - 1
    for i, st in enumerate(stretches):
        gemms = [kid for kid, kind in st if kind == "G"]
        act = next((j for j, (_, kind) in enumerate(st) if kind == "F"), None)
        if act is not None:
            before = {kid for kid, _ in st[:act]}
            out.update({g: "mlp_gate_up" if g in before else "mlp_down" for g in gemms})
        elif i == last and not any(kind == "H" for _, kind in st):
            out.update({g: "lm_head" for g in gemms[-1:]})
        elif len(gemms) > 1:
            out.update({g: "qkv_proj" for g in gemms[:-1]} | {gemms[-1]: "o_proj"})
    return out


def _per_step(todo: pl.DataFrame) -> list[list[tuple[int, str]]]:
    """Each step's (id, kind) in time order, of rows sorted by step then start."""
    out: list[list[tuple[int, str]]] = []
    prev = None
    for step, kid, kind in zip(*(todo[c].to_list() for c in ("step", "id", "_kind"))):
        if step != prev or not out:
            out.append([])
            prev = step
        out[-1].append((kid, kind))
    return out


def gemm_positions(k: pl.DataFrame) -> pl.DataFrame:
    """Fill `comp` for rows flagged `_gemm`, and for unnamed softmax kernels between two GEMMs,
    from their position; evidence 'position'."""
    comp = pl.col("comp")
    is_softmax = pl.col("name").str.contains(r"(?i)soft_?max")
    softmax = (comp == "attention") & is_softmax
    norm = (comp == "norm") | (comp.is_null() & (pl.col("op") == "aten::rsqrt"))
    kind = (pl.when(pl.col("_gemm") & pl.col("name").str.contains(SPLITK_REDUCE)).then(pl.lit("R"))
            .when(pl.col("_gemm")).then(pl.lit("G"))
            .when(softmax).then(pl.lit("S"))
            .when(comp.is_null() & is_softmax).then(pl.lit("s"))
            .when(comp.is_in(["attention", "linear_attention"])).then(pl.lit("A"))
            .when(comp == "moe_experts").then(pl.lit("E"))
            .when(norm).then(pl.lit("N"))
            .when(comp == "activation").then(pl.lit("F"))
            .when(comp == "lm_head").then(pl.lit("H")))
    placed = pl.col("_kind").is_not_null() & pl.col("step").is_not_null()
    todo = (k.lazy().with_columns(kind.alias("_kind")).filter(placed)
            .sort("step", "start_ns", maintain_order=True)  # one query, not two a step
            .collect(engine="in-memory"))
    labels: dict[int, str] = {}
    for seq in _per_step(todo):  # a Python pass per step, over its GEMM, attention, expert kernels
        if any(kind in ("G", "R") for _, kind in seq):
            labels.update(label(seq))
    if not labels:
        return k.drop("_gemm")
    lab = pl.DataFrame({"id": list(labels), "_pos": list(labels.values())},
                       schema={"id": pl.Int64, "_pos": pl.Utf8})
    return k.lazy().join(lab.lazy(), on="id", how="left").with_columns(
        pl.coalesce("comp", "_pos").alias("comp"),
        pl.when(pl.col("comp").is_null() & pl.col("_pos").is_not_null()).then(pl.lit("position"))
        .otherwise(pl.col("evidence")).alias("evidence")).drop("_pos", "_gemm").collect(
        engine="in-memory")
