"""What a copy's source occupies in memory, from the profiler's "Input Strides": a dimension
with stride 0 (a view made by `expand`, e.g. HF's `repeat_kv`) repeats the same elements, so
copying the view out reads the storage once, not `size` times. The cost formulas take one dims
list per op, from which they also derive the output; only `aten::copy_` has its output in
another argument (`self`), so only its source arguments are priced with stride-0 dimensions set
to 1. (Elsewhere an expanded argument can be the one that gives the output its shape, e.g.
gather's index, so it is left as recorded.)
"""

from __future__ import annotations

import orjson
import polars as pl

# a stride list with a 0 in it: `[..., 0, ...]` at any nesting
# (Kineto writes `[[a, b], [0, c], []]`)
HAS_ZERO_STRIDE = r"[\[,]\s*0\s*[,\]]"


COPY_OPS = ("aten::copy_",)  # (self, src, ...): self is written, the rest read


def _collapse(dims: object, strides: object) -> object:
    """dims with each stride-0 dimension set to 1, argument by argument; anything that does not
    line up as a list of ints with its strides is left as it is."""
    if not (isinstance(dims, list) and isinstance(strides, list) and len(dims) == len(strides)):
        return dims
    if dims and all(isinstance(d, int) for d in dims):
        if all(isinstance(s, int) for s in strides):
            return [1 if s == 0 and d > 1 else d for d, s in zip(dims, strides)]
        return dims
    return [_collapse(d, s) for d, s in zip(dims, strides)]


def _sources(dims: object, strides: object) -> object:
    """A copy's dims with its source arguments (all but `self`) collapsed."""
    if not (isinstance(dims, list) and isinstance(strides, list) and dims
            and len(dims) == len(strides)):
        return dims
    return [dims[0], *(_collapse(d, s) for d, s in zip(dims[1:], strides[1:]))]


def stored_dims(ops: pl.DataFrame) -> pl.DataFrame:
    """`ops` whose copies count each stride-0 (expanded) source dimension once, for pricing;
    other ops, ops without strides, or without a zero stride, are unchanged."""
    if "input_strides" not in ops.columns:
        return ops
    hit = (pl.col("input_strides").str.contains(HAS_ZERO_STRIDE).fill_null(False)
           & pl.col("input_dims").is_not_null())
    # the copies first: the pattern then runs over their strides only
    copies = ops.filter(pl.col("name").is_in(COPY_OPS)).filter(hit)
    rows = copies.select("id", "input_dims", "input_strides")
    if not rows.height:
        return ops
    pairs = rows.select("input_dims", "input_strides").unique()
    stored_json = [orjson.dumps(_sources(orjson.loads(d), orjson.loads(s))).decode()
                   for d, s in pairs.iter_rows()]
    fixed = pairs.with_columns(pl.Series("_stored", stored_json, dtype=pl.Utf8))
    by_id = rows.join(fixed, on=["input_dims", "input_strides"], how="left").select("id", "_stored")
    # one column joined, the others shared (a join of the whole table copies every column)
    stored = ops.select("id").join(by_id, on="id", how="left", maintain_order="left")["_stored"]
    return ops.with_columns(pl.coalesce(stored, "input_dims").alias("input_dims"))
