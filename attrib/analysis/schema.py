"""The JSON schema of the `attrib.analysis/1` document, generated from the structs it encodes.

The repo stores it as attrib/data/attrib.analysis-1.schema.json (tests/test_schema.py fails when
the two differ); `python -m attrib.analysis.schema` writes the stored file again after a change
of the structs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
import orjson

from attrib.analysis.model import SCHEMA_ID, Analysis

STORED = Path(__file__).resolve().parents[1] / "data" / "attrib.analysis-1.schema.json"
DESCRIPTION = (
    "The contract between attrib's engine, its reports and anyone scripting it, generated from "
    "attrib.analysis.model.Analysis (msgspec). Step figures are per mean counted step; a "
    "component's ms, bytes and flops are per step. A figure that cannot be known is null (with "
    "a reason in `notes` where useful), never a guess. Readers should ignore keys they do not "
    "know.")


def schema() -> dict[str, object]:
    """The document's JSON schema (draft 2020-12), its root the Analysis struct."""
    generated = msgspec.json.schema(Analysis)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            "title": "attrib analysis (output of `attrib analyze --format json`)",
            "description": DESCRIPTION, **generated}


def text() -> str:
    """The schema as the stored file holds it."""
    return orjson.dumps(schema(), option=orjson.OPT_INDENT_2).decode() + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the stored schema file (or the path given)."""
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else STORED
    out.write_text(text())
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
