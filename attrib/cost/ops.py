"""Bytes and FLOPs per CPU op from its recorded shapes and dtypes.

`op_cost(name, dims, types, concrete)` prices one call; `op_costs(ops)` prices a whole `ops` table,
parsing the raw "Input Dims" JSON (orjson) only for ops that have a formula and only once per
distinct (name, dims, types, concrete) signature. Unknown stays null, never guessed.

Nested ops (aten::linear > aten::mm, sdpa > _cudnn_attention_forward, aten::to > _to_copy > copy_)
are each priced; charge a kernel to the innermost op that launched it, not to its ancestors too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import orjson
import polars as pl

from attrib.cost.dtypes import Cost, concrete_int, unknown
from attrib.cost.registry import BY_NAME, PREFIXED, Call, shape_model

GROUPED = frozenset({"aten::_grouped_mm", "aten::_scaled_grouped_mm"})


def _load(text: str | None) -> list:
    if not text:
        return []
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return []
    return value if isinstance(value, list) else []


def op_cost(name: str, dims: list | str | None, types: list | str | None,
            concrete: list | str | None = None, top_k: int | None = None,
            tokens: int | None = None) -> Cost:
    """Price one op call. dims/types/concrete: the parsed lists or their raw JSON text."""
    d = _load(dims) if isinstance(dims, str) or dims is None else dims
    t = _load(types) if isinstance(types, str) or types is None else types
    c = _load(concrete) if isinstance(concrete, str) or concrete is None else concrete
    model = shape_model(name)
    if model is None:
        return unknown("none", f"no cost formula for {name}")
    if model in PREFIXED:   # (Inductor launches: the formula itself says what is missing)
        return model.price(Call(name, d, t, c))
    if not d:
        return unknown(model.price(Call(name, [], [], [])).model,
                       "shapes not recorded (record_shapes off or graph replay)")
    try:
        return model.price(Call(name, d, t, c, top_k=top_k, tokens=tokens))
    except (TypeError, ValueError, IndexError, ZeroDivisionError):
        return unknown("malformed", "recorded shapes do not fit the op's signature")


def moe_top_k(ops: pl.DataFrame) -> dict[int, int]:
    """{num_experts: k}: the router's k of aten::topk calls, keyed by the last dim they select from
    (the router's expert count). Lets grouped-GEMM pricing use T = rows / k.

    Group-limited routing (DeepSeek-V3) also runs top-k over grouped views of the scores, 3-D
    [T, groups, E / groups] (with one group, [T, 1, E]); the experts' k is that of the top-k over
    the 2-D [T, E] scores, so 2-D calls decide when there are any; then the most common k."""
    rows = (ops.filter(pl.col("name") == "aten::topk")
            .group_by("input_dims", "concrete_inputs").len())
    votes: dict[int, Counter[int]] = {}
    grouped: dict[int, Counter[int]] = {}
    for dims, conc, n in rows.sort("input_dims", "concrete_inputs").iter_rows():
        d, c = _load(dims), _load(conc)
        k = concrete_int(c, 1)
        if d and isinstance(d[0], list) and d[0] and k:
            into: dict[int, Counter[int]] = votes if len(d[0]) <= 2 else grouped
            into.setdefault(int(d[0][-1]), Counter())[k] += n
    for e, counts in grouped.items():
        votes.setdefault(e, counts)
    return {e: counts.most_common(1)[0][0] for e, counts in votes.items()}


def router_tokens(ops: pl.DataFrame) -> dict[int, list[int]]:
    """{num_experts: [T, ...]}: the token counts of the 2-D router top-k calls [T, E]."""
    out: dict[int, set[int]] = {}
    topk = ops.filter(pl.col("name") == "aten::topk")["input_dims"].unique()
    for dims in topk.to_list():
        d = _load(dims)
        if d and isinstance(d[0], list) and len(d[0]) == 2:
            out.setdefault(int(d[0][1]), set()).add(int(d[0][0]))
    return {e: sorted(ts) for e, ts in out.items()}


def routed_tokens(rows: int, k: int | None, tokens: list[int]) -> int | None:
    """The router's T of a grouped GEMM over R rows: the largest T whose T x k routed rows fit in R
    (the rest is each expert's alignment padding); None without k or a fitting T."""
    fits = [t for t in tokens if k and t * k <= rows]
    return max(fits) if fits else None


_OUT = {"id": pl.Int64, "bytes": pl.Float64, "flops": pl.Float64, "dtype": pl.Utf8,
        "cost_model": pl.Utf8, "assumption": pl.Utf8}
_KEYS = ["name", "input_dims", "input_types", "concrete_inputs"]


def op_costs(ops: pl.DataFrame, top_k: int | Mapping[int, int] | None = None) -> pl.DataFrame:
    """One row per op of `ops`: id, bytes, flops, dtype, cost_model, assumption.

    Ops without a formula get cost_model null; ops with one but no recorded shapes get null bytes.
    top_k: the MoE router's k for grouped GEMMs (an int, or {num_experts: k}); inferred from the
    aten::topk calls in `ops` when None.
    """
    if ops.height == 0:
        return pl.DataFrame(schema=_OUT)
    ks = moe_top_k(ops) if top_k is None else top_k
    router = router_tokens(ops)
    prefixed = [pl.col("name").str.starts_with(p) for m in PREFIXED for p in m.prefixes]
    hit = pl.col("name").is_in(list(BY_NAME)) | pl.any_horizontal(prefixed)
    named = ops.filter(hit).select("id", *[pl.col(c).cast(pl.Utf8).fill_null("") for c in _KEYS])
    # each text as an integer code (hashed once a row, no row encoding that copies every op's text):
    # the signatures are the distinct code tuples, each priced once from its first op's text
    code = named.select("id", *[pl.col(c).cast(pl.Categorical).to_physical() for c in _KEYS])
    first = code.with_row_index("_r").group_by(_KEYS).agg(pl.col("_r").first())
    sigs = named[first["_r"]].select(_KEYS)
    rows = []
    for name, dims, types, conc in sigs.iter_rows():
        k = t = None
        d = _load(dims)
        if name in GROUPED:
            experts = d[1][0] if len(d) > 1 and isinstance(d[1], list) and d[1] else None
            k = ks if isinstance(ks, int) else ks.get(experts) if experts else None
            routed = d[0][0] if d and isinstance(d[0], list) and d[0] else 0
            t = routed_tokens(routed, k, router.get(experts, []) if experts else [])
        c = op_cost(name, d, _load(types), _load(conc), top_k=k, tokens=t)
        rows.append((name, dims, types, conc, c.bytes, c.flops, c.dtype, c.model, c.assumption))
    schema = {**{c: pl.Utf8 for c in _KEYS}, **{k: v for k, v in _OUT.items() if k != "id"}}
    priced = pl.DataFrame(rows, schema=schema, orient="row")
    priced = pl.concat([first.select(_KEYS), priced.drop(_KEYS)], how="horizontal")
    del named, first, sigs
    # the code-keyed join over the ops that have a formula only; every op by its integer id
    got = code.join(priced, on=_KEYS, how="left").select(list(_OUT))
    out = ops.select("id").join(got, on="id", how="left", maintain_order="left")
    return out.select(list(_OUT)).cast(_OUT)  # type: ignore[arg-type]
