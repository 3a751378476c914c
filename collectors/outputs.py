"""What a run produced, for the stamp's `correctness_gate`: a digest of the generated token ids (in
order, per request), or the outcome of a check the user ran themselves. `compare` reads it
(attrib.report.outputs): a speedup that changed the outputs is not a speedup.

Pure Python (no torch import): a tensor is read through its `tolist()`.

Example:
    >>> ids = model.generate(**inputs, do_sample=False)[:, inputs.input_ids.shape[1]:]
    >>> cap.outputs(ids)                      # a live capture: its stamp gets the digest
    >>> collectors.outputs.stamp("run.pt.trace.json.gz", digest(ids))   # a trace made earlier
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from attrib.errors import TraceError
from collectors import provenance

HOW_IDS = "greedy token ids"
MAX_TOKENS = 1 << 26  # token ids a digest reads (64 M): a run's outputs, not a corpus


def _ids(row: Any, where: str) -> list[int]:
    if not isinstance(row, (list, tuple)):
        raise ValueError(f"{where}: expected a list of token ids, got {type(row).__name__}")
    bad = next((x for x in row if not isinstance(x, int) or isinstance(x, bool) or x < 0), None)
    if bad is not None:
        raise ValueError(f"{where}: token ids are non-negative integers, got {bad!r}")
    return list(row)


def requests(token_ids: Any) -> list[list[int]]:
    """token_ids as one list of ids per request: a flat sequence is one request; a tensor or
    array is read with `tolist()`."""
    ids = token_ids.tolist() if hasattr(token_ids, "tolist") else token_ids
    if not isinstance(ids, (list, tuple)):
        raise ValueError(f"token ids: expected a sequence, got {type(ids).__name__}")
    rows = [ids] if all(isinstance(x, int) and not isinstance(x, bool) for x in ids) else ids
    out = [_ids(r, f"request {i}") for i, r in enumerate(rows)]
    if sum(map(len, out)) > MAX_TOKENS:
        raise ValueError(f"token ids: more than {MAX_TOKENS} of them")
    return out


def digest(token_ids: Any, how: str = HOW_IDS) -> dict[str, Any]:
    """The correctness_gate of generated token ids: {"outputs_sha256", "tokens", "requests",
    "how"}. The hash is of the ids as compact JSON, one list per request, in order: the same
    outputs give the same digest on any machine."""
    rows = requests(token_ids)
    blob = json.dumps(rows, separators=(",", ":")).encode()
    return {"outputs_sha256": hashlib.sha256(blob).hexdigest(),
            "tokens": sum(map(len, rows)), "requests": len(rows), "how": how}


def check(passed: bool, how: str, value: Any = None) -> dict[str, Any]:
    """The correctness_gate of a check the user ran (logits within a tolerance, an eval score):
    {"passed", "how", "value"}; compare says it and treats a failed check as outputs that
    differ."""
    return {"passed": bool(passed), "how": str(how), "value": provenance._jsonable(value)}


def from_file(path: str | Path) -> list[list[int]]:
    """Token ids a command wrote: JSON (a list of ids, or one list per request), or text with
    one request per line of whitespace-separated ids. Raises TraceError naming the file."""
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(str(p), f"cannot read token ids: {exc}") from None
    try:
        data = json.loads(text) if text.lstrip()[:1] in ("[", "{") else [
            [int(x) for x in line.split()] for line in text.splitlines() if line.strip()]
        return requests(data)
    except (ValueError, RecursionError) as exc:
        raise TraceError(str(p), f"not token ids: {exc}") from None


def stamp(trace_path: str | Path, gate: dict[str, Any]) -> Path:
    """Put `gate` in the stamp of `trace_path` (its sidecar, made if there is none); returns the
    sidecar's path."""
    doc = provenance.read_sidecar(trace_path)
    if not doc or "warning" in doc:
        doc = {"schema": provenance.SCHEMA, "trace": Path(trace_path).name}
    doc["correctness_gate"] = gate
    return provenance.write_sidecar(trace_path, doc)
