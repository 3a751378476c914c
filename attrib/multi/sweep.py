"""The sweep table: one row per trace and phase, the capture stamp's keys beside the figures.

`rows(an, trace)` reads one Analysis; `table(rows)` makes the polars table (a fixed schema, so
tables from a pool, Ray or one process compare equal) and checks, per phase, that the rows ran on
a comparable host (attrib.multi.host_check: `comparable`, `not_comparable`); `routing(table)`
says, per workload shape, which configuration wins each phase, from comparable rows only;
`document(table)` is the `attrib.sweep/1` JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import polars as pl

from attrib.analysis.model import Analysis, Phase
from attrib.multi import host_check

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
    # the host check (attrib.multi.host_check): the host-side share of the mean step, host ms per
    # kernel launch (us), the launch-gap median (us), ms/step descheduled, the stamp's host load;
    # then, over the rows of the phase, whether the row is comparable and why not
    "host_share": pl.Float64, "host_us": pl.Float64, "gap_us": pl.Float64,
    "stalls_ms": pl.Float64, "ledger_ms": pl.Float64, "steps": pl.Int64, "host_load": pl.String,
    "comparable": pl.String, "not_comparable": pl.String,
}
HOST = ("host_share", "host_us", "gap_us", "stalls_ms", "ledger_ms", "steps", "host_load")


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
    """The phase's top cause (Phase.top_cause) as `cause: what`."""
    row = ph.top_cause()
    return None if row is None else f"{row.cause}: {row.what}"


def _host(ph: Phase, prov: Mapping[str, Any]) -> dict[str, Any]:
    c = host_check.cost(ph, prov)
    if c is None:
        return dict.fromkeys(HOST)
    return {"host_share": round(c.host_share, 4), "host_us": _round(c.us_per_launch),
            "gap_us": c.median_gap_us, "stalls_ms": round(c.stalls_ms, 4),
            "ledger_ms": round(c.step_ms, 4), "steps": c.steps, "host_load": c.load}


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


def rows(an: Analysis, trace: str) -> list[dict[str, Any]]:
    """One row per phase of `an` (trace: the name the table shows)."""
    prov = dict(an.provenance)
    keys = {k: _key(k, _stamp(prov, STAMP[k])) for k in KEYS}
    keys["arch"] = an.device.arch or keys["arch"]
    return [{"trace": trace, "phase": ph.phase, **keys,
             "achieved_tok_s": ph.achieved_tok_s, "ceiling_tok_s": ph.ceiling_tok_s,
             "gb_per_token": ph.gb_per_token, "step_ms": ph.step_ms.mean,
             "top_cause": top_cause(ph), **_host(ph, prov)}
            for ph in an.phases]


def host_cost(row: Mapping[str, Any]) -> host_check.HostCost | None:
    """A row's HostCost, from its host columns."""
    if row.get("host_share") is None or row.get("ledger_ms") is None:
        return None
    return host_check.HostCost(step_ms=row["ledger_ms"], steps=row["steps"] or 0,
                               host_share=row["host_share"],
                               us_per_launch=row["host_us"], median_gap_us=row["gap_us"],
                               stalls_ms=row["stalls_ms"] or 0.0, load=row["host_load"])


def checked(found: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows with `comparable` and `not_comparable` filled: per phase, each row against the
    host most of the phase's rows ran on (host_check.reasons)."""
    out = [dict(r) for r in found]
    for phase in dict.fromkeys(r["phase"] for r in out):
        mine = [r for r in out if r["phase"] == phase]
        _, why = host_check.reasons([host_cost(r) for r in mine])
        for r, w in zip(mine, why):
            r["not_comparable"], r["comparable"] = w, host_check.short(w)
    return out


def reference(df: pl.DataFrame, phase: str) -> host_check.Common | None:
    """The common host the phase's rows are held against (host_check.common)."""
    mine = df.filter(pl.col("phase") == phase).to_dicts()
    return host_check.common([host_cost(r) for r in mine])


def table(found: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """The sweep table of `rows` results, in the order given, the host check done."""
    return pl.DataFrame(checked(found), schema=dict(COLUMNS), orient="row")


def varying(df: pl.DataFrame, among: Sequence[str] = KEYS) -> list[str]:
    """The keys of `among` that take more than one value in `df` (null counts as one)."""
    return [k for k in among if df[k].n_unique() > 1]


def _label(row: Mapping[str, Any], keys: Sequence[str]) -> str:
    return ", ".join(f"{k}={row[k]}" for k in keys) or "the one configuration"


def routing(df: pl.DataFrame) -> pl.DataFrame:
    """Per workload shape (SHAPE keys) and phase: the configuration with the highest achieved
    tok/s among the comparable rows (host_check), its figure, the runner-up's, how many
    configurations were compared and how many were left out as not comparable. A shape whose
    rows are not comparable, or that keeps one of several, has no winner (None)."""
    shape = varying(df, SHAPE)
    scored = df.filter(pl.col("achieved_tok_s").is_not_null())
    out = []
    for (phase, *values), group in scored.group_by(["phase", *shape], maintain_order=True):
        config = varying(group, CONFIG)  # what tells this shape's configurations apart
        ok = group.filter(pl.col("comparable").fill_null("yes") == "yes")
        ranked = ok.sort("achieved_tok_s", descending=True).to_dicts()
        left = group.height - ok.height
        best = ranked[0] if ranked and (not left or len(ranked) > 1) else None
        second = ranked[1]["achieved_tok_s"] if best and len(ranked) > 1 else None
        out.append({**dict(zip(shape, values)), "phase": phase,
                    "winner": _label(best, config) if best else None,
                    "trace": best["trace"] if best else None,
                    "achieved_tok_s": best["achieved_tok_s"] if best else None,
                    "runner_up_tok_s": second, "configurations": len(ranked),
                    "not_comparable": left})
    schema = {**{k: COLUMNS[k] for k in shape}, "phase": pl.String, "winner": pl.String,
              "trace": pl.String, "achieved_tok_s": pl.Float64,
              "runner_up_tok_s": pl.Float64, "configurations": pl.Int64,
              "not_comparable": pl.Int64}
    found = pl.DataFrame(out, schema=schema, orient="row")
    return found.sort(shape, maintain_order=True) if shape else found


def document(df: pl.DataFrame) -> dict[str, Any]:
    """The `attrib.sweep/1` document: {"schema", "rows": [...], "routing": [...], "host_check":
    the bound and, per phase, the common host the rows were held against}."""
    common = {ph: reference(df, ph) for ph in df["phase"].unique(maintain_order=True)}
    return {"schema": SCHEMA, "rows": df.to_dicts(), "routing": routing(df).to_dicts(),
            "host_check": {"bound": host_check.BOUND, "host_share": host_check.HOST_SHARE,
                           "min_steps": host_check.MIN_STEPS,
                           "common": {ph: None if c is None else msgspec.to_builtins(c)
                                      for ph, c in common.items()}}}
