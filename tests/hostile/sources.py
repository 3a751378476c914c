"""What the hostile corpus derives its inputs from: the real fixtures (read once) and the `Variant` record.

Each `Variant` writes one input into an empty folder (from a real trace in tests/fixtures, never
from a hand-written format) and says which outcome it must have: "error" (exit 2, one line naming
the file), "salvage" (exit 0 with a warning on stderr), "ok" (exit 0), or "any" (0 or 2).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
TORCH = FIX / "torch" / "h200_dense_prefill_cudagraph_decode.json.gz"
ROCM_TORCH = FIX / "torch" / "mi300_vllm_prefilldecode_piecewise" / "graph_execution.json.gz"
ROCPD = FIX / "rocprof" / "gfx1201_llamacpp_rocpd_rocm7.2" / "32432_results.db.gz"
CSV_DIR = FIX / "rocprof" / "gfx1151_llamacpp_rocprofv3_csv"
V1 = FIX / "rocprof" / "gfx1201_llamacpp_legacy_rocprof_v1"
V3JSON = FIX / "rocprof" / "gfx950_rocprofv3_json" / "908_results.json.gz"
RANK0 = FIX / "captured" / "tp2_decode_rank0.pt.trace.json.gz"  # a real distributedInfo (world 2)
RANK0_MODEL = FIX / "captured" / "tp2_decode_rank0.model.json"  # its HF config under "config"


@dataclass(frozen=True)
class Variant:
    name: str
    cls: str  # crash | hang | memory | nonsense | message | reader (what issue 13 saw, or other)
    build: Callable[[Path], Path]
    expect: str  # error | salvage | ok | any
    says: str = ""  # a fragment the stderr line must hold (case-insensitive)
    table: bool = False  # also render the terminal table and check it for control characters
    option: str = ""  # the built file is given to this option of `attrib analyze TORCH` (not as TRACE)
    report: str = ""  # also write `attrib report -o report.<this>` (md, html) and check it for live links


@cache
def torch_text() -> bytes:
    """The JSON text of TORCH (the builders cut, pad and edit it; bytes, so no builder can change it)."""
    return gzip.decompress(TORCH.read_bytes())


@cache
def torch_doc() -> dict:
    return json.loads(torch_text())


@cache
def v3json_small() -> dict:
    """The gfx950 rocprofv3 JSON cut to its first 1500 dispatches and 1500 HIP calls (real records)."""
    doc = json.loads(gzip.decompress(V3JSON.read_bytes()))
    for proc in doc["rocprofiler-sdk-tool"]:
        rec = proc.get("buffer_records", {})
        for key in ("kernel_dispatch", "hip_api", "memory_copy", "marker_api"):
            if isinstance(rec.get(key), list):
                rec[key] = rec[key][:1500]
    return doc
