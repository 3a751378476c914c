"""The analysis as flat tables for users' own tools (pandas, polars, a spreadsheet): components, top
kernels, steps, the phase ledger and the per-step ledger, one row per (phase, ...), every column a
scalar (a mapping such as a component's evidence is its JSON text). `index` describes them: file,
rows, columns and dtypes, under the `attrib.tables/1` schema id."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import orjson
import polars as pl

from attrib.analysis.records import as_dict
from attrib.analysis.model import Analysis, Component, LedgerRow, Phase, TopKernel

SCHEMA_ID = "attrib.tables/1"
NAMES = ("components", "top_kernels", "steps", "ledger", "step_ledger")
DESCRIBE = {
    "components": "per phase and component: medians per step (ms, bytes, GB/s, roofline)",
    "top_kernels": "per phase: the top kernels by time per step",
    "steps": "per counted step: window, kernel and idle ms, tokens, context; "
             "a ms column per component",
    "ledger": "per phase: the mean counted step's time by cause (sums to the step)",
    "step_ledger": "per step: its window's time by cause (sums to the window)",
}


def _flat(rec: Mapping[str, Any]) -> dict[str, Any]:
    return {k: orjson.dumps(v).decode() if isinstance(v, (dict, list, tuple)) else v
            for k, v in rec.items()}


DTYPES = {"int": pl.Int64, "float": pl.Float64, "bool": pl.Boolean}


def _frame(rows: list[dict[str, Any]], schema: dict[str, Any]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)


def _schema(cls: type[msgspec.Struct], head: dict[str, Any]) -> dict[str, Any]:
    """head, then a column per field of the record `cls`: its annotation's scalar type, text for
    the rest (a mapping's JSON)."""
    out = dict(head)
    notes = cls.__annotations__  # the annotations as written (text: postponed evaluation)
    for name in cls.__struct_fields__:
        out[name] = DTYPES.get(str(notes[name]).split(" |")[0], pl.Utf8)
    return out


PHASE = {"phase": pl.Utf8}


def components(an: Analysis) -> pl.DataFrame:
    rows = [{"phase": ph.phase} | _flat(as_dict(c)) for ph in an.phases for c in ph.component_rows]
    return _frame(rows, _schema(Component, PHASE))


def top_kernels(an: Analysis) -> pl.DataFrame:
    rows = [{"phase": ph.phase, "rank": i + 1} | _flat(as_dict(t))
            for ph in an.phases for i, t in enumerate(ph.kernel_rows)]
    return _frame(rows, _schema(TopKernel, PHASE | {"rank": pl.Int64}))


STEP_COLS = {"phase": pl.Utf8, "step": pl.Int64, "start_ms": pl.Float64, "step_ms": pl.Float64,
             "kernel_ms": pl.Float64, "idle_ms": pl.Float64, "kernels": pl.Int64,
             "tokens": pl.Int64, "context": pl.Int64}


def _steps(ph: Phase, comps: list[str]) -> list[dict[str, Any]]:
    s = ph.per_step
    out = []
    for i, step in enumerate(s.step):
        row: dict[str, Any] = {"phase": ph.phase, "step": step}
        for k in list(STEP_COLS)[2:]:
            row[k] = getattr(s, k)[i]
        for c in comps:
            v = s.components.get(c)
            row[f"ms {c}"] = None if v is None else v[i]
        out.append(row)
    return out


def steps(an: Analysis) -> pl.DataFrame:
    comps = list(dict.fromkeys(c for ph in an.phases for c in ph.per_step.components))
    rows = [r for ph in an.phases for r in _steps(ph, comps)]
    return _frame(rows, STEP_COLS | {f"ms {c}": pl.Float64 for c in comps})


def _ledger_dict(r: LedgerRow) -> dict[str, Any]:
    return as_dict(r)


def ledger(an: Analysis) -> pl.DataFrame:
    rows = [{"phase": ph.phase} | _ledger_dict(r) for ph in an.phases for r in ph.ledger_rows]
    return _frame(rows, _schema(LedgerRow, PHASE))


def step_ledger(an: Analysis) -> pl.DataFrame:
    rows = [{"phase": ph.phase, "step": step} | _ledger_dict(r)
            for ph in an.phases for step, rs in zip(ph.per_step.step, ph.per_step.ledger)
            for r in rs]
    return _frame(rows, _schema(LedgerRow, PHASE | {"step": pl.Int64}))


def tables(an: Analysis) -> dict[str, pl.DataFrame]:
    """name -> table, in NAMES order."""
    return {"components": components(an), "top_kernels": top_kernels(an), "steps": steps(an),
            "ledger": ledger(an), "step_ledger": step_ledger(an)}


def index(an: Analysis, frames: Mapping[str, pl.DataFrame], files: Mapping[str, str],
          fmt: str) -> bytes:
    """index.json: the schema id, the trace, and per table its file, rows and (name, dtype)
    columns."""
    doc = {"schema": SCHEMA_ID, "source": an.source.path, "format": fmt,
           "tables": [{"name": n, "file": files[n], "rows": df.height, "description": DESCRIBE[n],
                       "columns": [{"name": c, "dtype": str(t)} for c, t in df.schema.items()]}
                      for n, df in frames.items()]}
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"
