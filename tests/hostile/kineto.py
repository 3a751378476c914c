"""Hostile torch-profiler (Kineto) JSON: the real H200 trace (and the MI300 and TP=2 rank-0 ones)
edited as events, as raw bytes, cut, nested, duplicated and merged."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Callable

from files import _write
from sources import RANK0, ROCM_TORCH, TORCH, Variant, torch_doc, torch_text

# ------------------------------------------------------------------ builders


def _torch(d: Path, edit: Callable[[list[dict]], None], name: str = "t.json") -> Path:
    doc = json.loads(json.dumps(torch_doc()))
    edit(doc["traceEvents"])
    out = d / name
    out.write_text(json.dumps(doc))
    return out


def _kernels(evs: list[dict]) -> list[dict]:
    return [e for e in evs if e.get("cat") == "kernel"]


def _set(cat: str, key: str, value, every: int = 1, arg: bool = False):
    def edit(evs: list[dict]) -> None:
        for i, e in enumerate(x for x in evs if x.get("cat") == cat):
            if i % every == 0:
                (e.setdefault("args", {}) if arg else e)[key] = value
    return edit


def _raw_torch(d: Path, edit: Callable[[bytes], bytes], name: str = "t.json") -> Path:
    out = d / name
    out.write_bytes(edit(torch_text()))
    return out


def _name_bytes(kernel_index: int, insert: bytes) -> Callable[[bytes], bytes]:
    """Insert raw bytes into the name of the n-th kernel event of the JSON text."""
    def edit(text: bytes) -> bytes:
        pos = -1
        for _ in range(kernel_index + 1):
            pos = text.index(b'"cat": "kernel"', pos + 1)
        at = text.index(b'"name": "', pos) + len(b'"name": "')
        return text[:at] + insert + text[at:]
    return edit


def _cut_half(d: Path) -> Path:
    text = torch_text()
    (d / "cut.json").write_bytes(text[: len(text) // 2])
    return d / "cut.json"


def _cut_before_kernels(d: Path) -> Path:
    """Cut where the GPU events begin (torch lists them after the CPU ones)."""
    text = gzip.decompress(ROCM_TORCH.read_bytes())
    (d / "cut.json").write_bytes(text[: text.index(b'"cat": "kernel"')])
    return d / "cut.json"


def _truncated_gzip(d: Path) -> Path:
    raw = TORCH.read_bytes()
    (d / "cut.json.gz").write_bytes(raw[: int(len(raw) * 0.7)])
    return d / "cut.json.gz"


def _dup_events(evs: list[dict]) -> None:
    evs.extend(json.loads(json.dumps(evs)))


def _dup_correlation(evs: list[dict]) -> None:
    for e in evs:
        if e.get("cat") in ("kernel", "cuda_runtime") and "correlation" in e.get("args", {}):
            e["args"]["correlation"] = e["args"]["correlation"] % 7


def _no_ph(evs: list[dict]) -> None:
    for e in _kernels(evs)[::3]:
        e.pop("ph", None)


def _deep(d: Path) -> Path:
    text = torch_text()
    at = text.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    nested = b"[" * 100_000 + b"]" * 100_000
    deep = b'{"ph": "X", "cat": "cpu_op", "name": "x", "ts": 1, "dur": 1, "args": ' + nested + b"}, "
    (d / "deep.json").write_bytes(text[:at] + deep + text[at:])
    return d / "deep.json"


def _names(name: str) -> Callable[[list[dict]], None]:
    def edit(evs: list[dict]) -> None:
        for e in _kernels(evs):
            e["name"] = name
    return edit


def _scale(cat: str, factor: float, every: int = 1):
    """ts and dur of every `every`-th event of `cat` multiplied by `factor` (1e-6: us -> s)."""
    def edit(evs: list[dict]) -> None:
        for i, e in enumerate(x for x in evs if x.get("cat") == cat):
            if i % every == 0:
                e["ts"], e["dur"] = e["ts"] * factor, e.get("dur", 0) * factor
    return edit


def _negate(evs: list[dict]) -> None:
    for e in evs:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = -e["ts"]


def _shifted_copy(evs: list[dict]) -> None:
    """The trace merged with its copy shifted by 1 s (1e6 us)."""
    copy = json.loads(json.dumps(evs))
    for e in copy:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] += 1e6
    evs.extend(copy)


def _dup_key(d: Path) -> Path:
    """`"traceEvents"` twice: its first 2000 events, then the whole list under the same key."""
    text = torch_text()
    head = json.dumps(torch_doc()["traceEvents"][:2000]).encode()
    at = text.index(b"{") + 1
    (d / "dup.json").write_bytes(text[:at] + b'"traceEvents": ' + head + b", " + text[at:])
    return d / "dup.json"


def _instants(d: Path) -> Path:
    """The real trace (its instant events as Kineto writes them: `"name": "Iteration Start: PyTorch
    Profiler", "ph": "i", "s": "g",` on one line) with one kernel name given raw quotes, the Kineto
    bug the repair is for: only that name is repaired."""
    (d / "inst.json").write_bytes(_name_bytes(5, b'warmup "a" ')(torch_text()))
    return d / "inst.json"


def _deep_top(d: Path) -> Path:
    text = torch_text()
    at = text.index(b"{") + 1
    (d / "deep.json").write_bytes(text[:at] + b'"x": ' + b"[" * 100_000 + b"]" * 100_000 + b", " + text[at:])
    return d / "deep.json"


def _rank0_top(key: str, edit: Callable[[dict], None]) -> Callable[[Path], Path]:
    """The real TP=2 rank-0 trace with its top-level `key` edited."""
    def build(d: Path) -> Path:
        doc = json.loads(gzip.decompress(RANK0.read_bytes()))
        edit(doc[key])
        out = d / "rank0.json"
        out.write_text(json.dumps(doc))
        return out
    return build


# ------------------------------------------------------------------ variants, by class

# issue 39: numbers out of their domain
NUMBER_VARIANTS = [
    Variant("kineto-world-size-2^70", "crash",
            _rank0_top("distributedInfo", lambda i: i.update(world_size=2**70)),
            "error", "distributedInfo.world_size = 1180591620717411303424"),
    Variant("kineto-world-size-0", "nonsense",
            _rank0_top("distributedInfo", lambda i: i.update(world_size=0)),
            "error", "distributedInfo.world_size = 0"),
]

VARIANTS = [
    # --- crashes seen: recursion, overflow, strings for numbers, unhashable, wrong JSON shapes
    Variant("kineto-deep-nesting", "crash", _deep, "error", "nested"),
    Variant("kineto-ts-above-2^64", "crash",
            lambda d: _torch(d, _set("kernel", "ts", 2**70, every=5)), "salvage"),
    Variant("kineto-ts-1e300", "crash", lambda d: _torch(d, _set("kernel", "ts", 1e300, every=5)), "salvage"),
    Variant("kineto-dur-NaN-string", "crash",
            lambda d: _torch(d, _set("kernel", "dur", "NaN", every=4)), "salvage"),
    Variant("kineto-ts-Infinity-string", "crash",
            lambda d: _torch(d, _set("cpu_op", "ts", "Infinity", every=3)),
            "salvage"),
    Variant("kineto-cat-object", "crash",
            lambda d: _torch(d, _set("cpu_op", "cat", {"a": 1}, every=10)), "salvage"),
    Variant("kineto-grid-string", "crash",
            lambda d: _torch(d, _set("kernel", "grid", "64x1x1", arg=True)), "salvage"),
    Variant("kineto-correlation-2^70", "nonsense",
            lambda d: _torch(d, _set("kernel", "correlation", 2**70, arg=True)),
            "salvage", "correlation"),
    # --- memory
    Variant("event-20MB-name", "memory", lambda d: _raw_torch(d, _name_bytes(3, b"A" * (20 << 20))),
            "error", "MB"),
    # --- confident nonsense
    Variant("kineto-negative-dur", "nonsense", lambda d: _torch(d, _set("kernel", "dur", -5, every=3)),
            "salvage", "negative"),
    Variant("kineto-duplicate-correlation", "nonsense", lambda d: _torch(d, _dup_correlation),
            "salvage", "correlation"),
    Variant("kineto-missing-ts", "nonsense",
            lambda d: _torch(d, lambda evs: _kernels(evs)[10].pop("ts")), "ok"),
    Variant("kineto-ts-zero", "nonsense", lambda d: _torch(d, _set("kernel", "ts", 0, every=97)),
            "salvage", "hours"),
    Variant("kineto-no-ph", "nonsense", lambda d: _torch(d, _no_ph), "salvage", "ph"),
    Variant("kineto-all-events-twice", "nonsense", lambda d: _torch(d, _dup_events), "salvage", "copies"),
    Variant("kineto-cut-in-half", "nonsense", _cut_half, "salvage", "truncated"),
    Variant("kineto-cut-before-gpu-events", "nonsense", _cut_before_kernels, "error", "before the cut"),
    Variant("kineto-no-kernels", "nonsense", lambda d: _torch(d, lambda evs: [
        e.update(cat="kernel_x") for e in _kernels(evs)]), "error", "no GPU kernels"),
    # issue 19
    Variant(
        "kineto-kernels-in-seconds",
        "nonsense",
        lambda d: _torch(d, _scale("kernel", 1e-6, every=2)),
        "error",
        "unit",
    ),
    Variant(
        "kineto-cpu-ops-in-ns", "nonsense", lambda d: _torch(d, _scale("cpu_op", 1e3)), "error", "unit"
    ),
    Variant(
        "kineto-merged-with-shifted-copy",
        "nonsense",
        lambda d: _torch(d, _shifted_copy),
        "error",
        "session",
    ),
    Variant("kineto-timestamps-negated", "nonsense", lambda d: _torch(d, _negate), "error", "negative"),
    Variant(
        "kineto-every-dur-zero",
        "nonsense",
        lambda d: _torch(d, _set("kernel", "dur", 0)),
        "error",
        "duration",
    ),
    Variant(
        "kineto-kernels-without-name",
        "nonsense",
        lambda d: _torch(d, lambda evs: [e.pop("name") for e in _kernels(evs)]),
        "salvage",
        "no name",
    ),
    Variant("kineto-duplicated-traceEvents-key", "nonsense", _dup_key, "salvage", "traceEvents"),
    # --- messages
    Variant("torch-json-named-pftrace", "message",
            lambda d: shutil.copy(TORCH, d / "t.pftrace") and d / "t.pftrace",
            "ok"),
    # issue 19: messages that named the wrong cause
    Variant("kineto-deep-value-first", "message", _deep_top, "error", "nested"),
    Variant(
        "kineto-every-kernel-without-dur",
        "message",
        lambda d: _torch(d, lambda evs: [e.pop("dur") for e in _kernels(evs)]),
        "error",
        "duration",
    ),
    # --- other readers and classes
    Variant("kineto-invalid-utf8-name", "reader", lambda d: _raw_torch(d, _name_bytes(400, b"\xff\xfe")),
            "salvage", "utf-8"),
    Variant("kineto-control-chars-in-name", "reader", lambda d: _torch(d, lambda evs: [
        e.update(name="\x1b]0;owned\x07\x1b[31m\r" + e["name"] + "\x00") for e in _kernels(evs)]), "ok",
            table=True),
    Variant("kineto-truncated-gzip", "reader", _truncated_gzip, "any"),
    Variant("kineto-top-level-array", "reader", lambda d: _write("a.json", lambda: json.dumps(
        torch_doc()["traceEvents"][:2000]).encode())(d), "error"),
    Variant("rocm-torch-memcpy-bytes-strings", "reader", lambda d: shutil.copy(ROCM_TORCH, d / "g.json.gz")
            and d / "g.json.gz", "ok"),
    Variant("kineto-instant-events-and-a-raw-quote", "reader", _instants, "salvage", "1 event names"),
    # --- issue 19: reports without live links or control bytes
    Variant("kineto-markdown-link-in-names", "report", lambda d: _torch(
        d, _names("[l](javascript:alert(3))")), "ok", report="md"),
    Variant("kineto-esc-bel-in-names-html", "report", lambda d: _torch(
        d, _names("\x1b]8;;javascript:alert(1)\x07gemm\x1b[31m\x07")), "ok", report="html"),
    *NUMBER_VARIANTS,
]
