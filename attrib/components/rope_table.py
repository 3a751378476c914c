"""The rotary cos/sin table recast: a cast of a [positions, rotary dims] fp32 table to 16 bits.

vLLM's rotary embedding keeps its cos/sin cache in fp32 ([max_positions, rotary_dim], e.g.
[131072, 64] for gpt-oss) and, compiled, casts it to the model dtype inside every layer's graph
(`triton_poi_fused__to_copy_N(in[P, R] fp32, out[P, R] bf16, numel)`): a constant converted
again every step. Such a cast is `rope` work, and worth a finding (rules/constant_cast.py).
"""

from __future__ import annotations

import orjson
import polars as pl

from attrib.reads import Reads

CAST_OPS = r"^aten::_?to(?:_copy)?$|^triton_poi_fused__to_copy"
READS = Reads(ops=(CAST_OPS,))  # the casts of rotary tables, beside their kernels
MIN_POSITIONS = 4096   # a table of at least this many rows: positions, not a batch of tokens
MAX_ROTARY = 512       # and at most this many columns: rotary dims
_HALF = ("c10::BFloat16", "c10::Half")


def _is_table_cast(dims_text: str | None, types_text: str | None) -> bool:
    try:
        dims, types = orjson.loads(dims_text or "[]"), orjson.loads(types_text or "[]")
    except orjson.JSONDecodeError:
        return False
    if not dims or not types or types[0] != "float":
        return False
    src = dims[0]
    if not (isinstance(src, list) and len(src) == 2 and all(isinstance(v, int) for v in src)):
        return False
    table = src[0] >= MIN_POSITIONS and 0 < src[1] <= MAX_ROTARY
    # the 16-bit destination: a second buffer of the same shape (Inductor), or the op's own output
    halves = any(d == src and t in _HALF for d, t in zip(dims[1:], types[1:]))
    return table and (halves or len(dims) == 1 or not isinstance(dims[1], list))


def rope_table_casts(ops: pl.DataFrame) -> pl.Series:
    """Ids of the ops that cast a rotary cos/sin table (see the module doc)."""
    names = ops.lazy().select(pl.col("name").unique())
    casts = (names.filter(pl.col("name").str.contains(CAST_OPS))  # each name matched once
             .select(pl.col("name").implode()).collect(engine="in-memory")["name"])
    if casts[0].len() == 0:
        return pl.Series("id", [], dtype=pl.Int64)
    sig = ["input_dims", "input_types"]
    cand = (ops.lazy().select("id", "name", *sig).filter(pl.col("name").is_in(casts))
            .collect(engine="in-memory"))
    # the distinct signatures by their category codes (a unique on two text columns encodes
    # every row's text)
    codes = [pl.col(c).cast(pl.Categorical).to_physical().alias(f"_{c}") for c in sig]
    sigs = (cand.lazy().select(*sig, *codes).unique([f"_{c}" for c in sig]).select(sig)
            .collect(engine="in-memory"))
    hits = [(d, t) for d, t in sigs.iter_rows() if _is_table_cast(d, t)]
    if not hits:
        return pl.Series("id", [], dtype=pl.Int64)
    keys = pl.DataFrame(hits, schema={c: pl.Utf8 for c in sig}, orient="row")
    # the few casts whose texts are a hit's, then the pairs (a join on two text keys copies
    # the text of every row)
    cand = cand.filter(*(pl.col(c).is_in(keys[c].implode()) for c in sig))
    return cand.join(keys, on=sig)["id"]
