"""The sweep table: one row per trace and phase, the capture stamp's keys beside the figures.

`rows(an, trace)` reads one Analysis; `table(rows)` makes the polars table (a fixed schema, so
tables from a pool, Ray or one process compare equal); `routing(table)` says, per workload shape,
which configuration wins each phase; `document(table)` is the `attrib.sweep/1` JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from attrib.analysis.model import Analysis, Phase

SCHEMA = "attrib.sweep/1"
# each key of a row: where the stamp (collectors.provenance) holds it, first found wins;
# user keys that are not USER_FIELDS land under "extra"
STAMP: Mapping[str, tuple[tuple[str, ...], ...]] = {
    "model": (("model",),),
    "backend": (("extra", "backend"), ("backend",)),
    "batch": (("batch",),),
    "concurrency": (("concurrency",),),
    "prompt": (("extra", "prompt"), ("extra", "prompt_length"), ("prompt",)),
    "micro_batch": (("extra", "micro_batch"), ("micro_batch",)),
    "context": (("context_length",),),
    "quantization": (("quantization",),),
    "speculative": (("speculative",),),
    "arch": (("gpu", "arch"),),
}
KEYS = tuple(STAMP)
INT_KEYS = ("batch", "concurrency", "prompt", "micro_batch", "context")
FIGURES = ("achieved_tok_s", "ceiling_tok_s", "gb_per_token", "step_ms")
# a workload's shape; the other keys are the configuration that serves it
SHAPE = ("model", "batch", "concurrency", "prompt", "context")
CONFIG = tuple(k for k in KEYS if k not in SHAPE)
COLUMNS: Mapping[str, Any] = {
    "trace": pl.String, "phase": pl.String,
    **{k: pl.Int64 if k in INT_KEYS else pl.String for k in KEYS},
    **{f: pl.Float64 for f in FIGURES}, "top_cause": pl.String,
}


def _stamp(provenance: Mapping[str, Any], paths: tuple[tuple[str, ...], ...]) -> Any:
    for path in paths:
        v: Any = provenance
        for key in path:
            v = v.get(key) if isinstance(v, Mapping) else None
        if v is not None:
            return v
    return None


def _key(name: str, value: Any) -> int | str | None:
    """A stamp value as its column's type; None where it does not fit (a batch of "8x2")."""
    if value is None:
        return None
    if name not in INT_KEYS:
        return str(value)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value))
    except ValueError:
        return None


def top_cause(ph: Phase) -> str | None:
    """The ledger row that holds most of the mean step, the profiler's own cost left out (a
    caveat about the measurement, not a cause): `cause: what`."""
    rows = [r for r in ph.ledger_rows if r.cause != "profiler"]
    if not rows:
        return None
    row = max(rows, key=lambda r: r.ms_per_step)
    return f"{row.cause}: {row.what}"


def rows(an: Analysis, trace: str) -> list[dict[str, Any]]:
    """One row per phase of `an` (trace: the name the table shows)."""
    prov = dict(an.provenance)
    keys = {k: _key(k, _stamp(prov, STAMP[k])) for k in KEYS}
    keys["arch"] = an.device.arch or keys["arch"]
    return [{"trace": trace, "phase": ph.phase, **keys,
             "achieved_tok_s": ph.achieved_tok_s, "ceiling_tok_s": ph.ceiling_tok_s,
             "gb_per_token": ph.gb_per_token, "step_ms": ph.step_ms.median,
             "top_cause": top_cause(ph)}
            for ph in an.phases]


def table(found: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """The sweep table of `rows` results, in the order given."""
    return pl.DataFrame(list(found), schema=dict(COLUMNS), orient="row")


def varying(df: pl.DataFrame, among: Sequence[str] = KEYS) -> list[str]:
    """The keys of `among` that take more than one value in `df` (null counts as one)."""
    return [k for k in among if df[k].n_unique() > 1]


def _label(row: Mapping[str, Any], keys: Sequence[str]) -> str:
    return ", ".join(f"{k}={row[k]}" for k in keys) or "the one configuration"


def routing(df: pl.DataFrame) -> pl.DataFrame:
    """Per workload shape (SHAPE keys) and phase: the configuration with the highest achieved
    tok/s, its figure, the runner-up's and how many configurations were compared."""
    shape = varying(df, SHAPE)
    scored = df.filter(pl.col("achieved_tok_s").is_not_null())
    out = []
    for (phase, *values), group in scored.group_by(["phase", *shape], maintain_order=True):
        ranked = group.sort("achieved_tok_s", descending=True).to_dicts()
        best = ranked[0]
        second = ranked[1]["achieved_tok_s"] if len(ranked) > 1 else None
        config = varying(group, CONFIG)  # what tells this shape's configurations apart
        out.append({**dict(zip(shape, values)), "phase": phase,
                    "winner": _label(best, config), "trace": best["trace"],
                    "achieved_tok_s": best["achieved_tok_s"], "runner_up_tok_s": second,
                    "configurations": len(ranked)})
    schema = {**{k: COLUMNS[k] for k in shape}, "phase": pl.String, "winner": pl.String,
              "trace": pl.String, "achieved_tok_s": pl.Float64,
              "runner_up_tok_s": pl.Float64, "configurations": pl.Int64}
    found = pl.DataFrame(out, schema=schema, orient="row")
    return found.sort(shape, maintain_order=True) if shape else found


def document(df: pl.DataFrame) -> dict[str, Any]:
    """The `attrib.sweep/1` document: {"schema", "rows": [...]}."""
    return {"schema": SCHEMA, "rows": df.to_dicts()}
