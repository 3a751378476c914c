"""Hostile inputs derived from the real fixtures: broken, cut, hand-edited, merged, adversarial.

Each `Variant` writes one input into an empty folder (from a real trace in tests/fixtures, never
from a hand-written format) and says which outcome it must have: "error" (exit 2, one line naming
the file), "salvage" (exit 0 with a warning on stderr), "ok" (exit 0), or "any" (0 or 2). `run()`
runs `attrib analyze` on each in its own process with a time and memory bound and checks the rules
of issue 13 (see `check`). `python tests/hostile/corpus.py` prints the totals.
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
import sqlite3
import zlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Callable

from files import _fifo, _gz, _loop, _mkdir, _random, _sparse, _write  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
TORCH = FIX / "torch" / "h200_dense_prefill_cudagraph_decode.json.gz"
ROCM_TORCH = FIX / "torch" / "mi300_vllm_prefilldecode_piecewise" / "graph_execution.json.gz"
ROCPD = FIX / "rocprof" / "gfx1201_llamacpp_rocpd_rocm7.2" / "32432_results.db.gz"
CSV_DIR = FIX / "rocprof" / "gfx1151_llamacpp_rocprofv3_csv"
V1 = FIX / "rocprof" / "gfx1201_llamacpp_legacy_rocprof_v1"
V3JSON = FIX / "rocprof" / "gfx950_rocprofv3_json" / "908_results.json.gz"


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


# ------------------------------------------------------------------ sources (read once)


@cache
def torch_doc() -> dict:
    return json.loads(gzip.decompress(TORCH.read_bytes()))


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
    out.write_bytes(edit(gzip.decompress(TORCH.read_bytes())))
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


def _v3json(d: Path, edit: Callable[[dict], None]) -> Path:
    doc = json.loads(json.dumps(v3json_small()))
    edit(doc["rocprofiler-sdk-tool"][0] if isinstance(doc["rocprofiler-sdk-tool"], list) else doc)
    out = d / "908_results.json"
    out.write_text(json.dumps(doc))
    return out


def _v3json_top(value) -> Callable[[Path], Path]:
    def build(d: Path) -> Path:
        doc = dict(v3json_small())
        doc["rocprofiler-sdk-tool"] = value(doc["rocprofiler-sdk-tool"])
        out = d / "908_results.json"
        out.write_text(json.dumps(doc))
        return out
    return build


def _rocpd(d: Path, *sql: str) -> Path:
    out = d / "1_results.db"
    out.write_bytes(gzip.decompress(ROCPD.read_bytes()))
    con = sqlite3.connect(out)
    table = {n: v for n, v in ((r[0].rsplit("_", 5)[0], r[0]) for r in con.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'rocpd_%'"))}
    for s in sql:
        con.executescript(s.format(**table))
    con.commit()
    con.close()
    return out


def _csv(d: Path, edit: Callable[[list[str]], list[str]], name: str = "decode_kernel_trace.csv",
         extra: tuple[str, ...] = ()) -> Path:
    lines = (CSV_DIR / "decode_kernel_trace.csv").read_text().splitlines(keepends=True)
    out = d / name
    out.write_text("".join(edit(lines)))
    for sib in extra:
        shutil.copy(CSV_DIR / sib, d / sib)
    return out


def _csv_field(col: str, value: str, rows=range(1, 6)) -> Callable[[list[str]], list[str]]:
    def edit(lines: list[str]) -> list[str]:
        header = [h.strip('"') for h in lines[0].strip().split(",")]
        j = header.index(col)
        for i in rows:
            cells = lines[i].rstrip("\n").split('","')
            cells[j] = value if 0 < j < len(cells) - 1 else cells[j]
            lines[i] = '","'.join(cells) + "\n"
        return lines
    return edit


def _swap_csv_times(lines: list[str]) -> list[str]:
    header = [h.strip('"') for h in lines[0].strip().split(",")]
    s, e = header.index("Start_Timestamp"), header.index("End_Timestamp")
    for i in range(1, len(lines)):
        cells = lines[i].rstrip("\n").split('","')
        cells[s], cells[e] = cells[e], cells[s]
        lines[i] = '","'.join(cells) + "\n"
    return lines


def _v1_csv(d: Path, edit: Callable[[list[str]], list[str]]) -> Path:
    lines = gzip.decompress((V1 / "results.csv.gz").read_bytes()).decode().splitlines(keepends=True)
    out = d / "results.csv"
    out.write_text("".join(edit(lines)))
    return out


def _v1_swap(lines: list[str]) -> list[str]:
    head = lines[0].strip().split(",")
    b, e = head.index('"BeginNs"'), head.index('"EndNs"')
    out = [lines[0]]
    for line in lines[1:]:
        cells = line.rstrip("\n").split(",")
        if len(cells) == len(head):
            cells[b], cells[e] = cells[e], cells[b]
        out.append(",".join(cells) + "\n")
    return out


def _bomb(d: Path) -> Path:
    """A real trace's event list with 96 MB of whitespace inside it, gzip'd to ~100 KB."""
    text = gzip.decompress(TORCH.read_bytes())
    at = text.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [z.compress(text[:at])]
    block = b" " * (1 << 20)
    parts += [z.compress(block) for _ in range(96)]
    parts += [z.compress(text[at:]), z.flush()]
    out = d / "bomb.json.gz"
    out.write_bytes(b"".join(parts))
    return out


def _two_torch(d: Path) -> Path:
    shutil.copy(TORCH, d / "rank0.json.gz")
    shutil.copy(TORCH, d / "rank1.json.gz")
    return d


def _two_csv_procs(d: Path) -> Path:
    """A folder with the same process's rocprofv3 CSV twice, under two prefixes (same ids)."""
    for prefix in ("decode", "copy"):
        shutil.copy(CSV_DIR / "decode_kernel_trace.csv", d / f"{prefix}_kernel_trace.csv")
        shutil.copy(CSV_DIR / "decode_hip_api_trace.csv", d / f"{prefix}_hip_api_trace.csv")
    return d


def _cut_half(d: Path) -> Path:
    text = gzip.decompress(TORCH.read_bytes())
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
    text = gzip.decompress(TORCH.read_bytes())
    at = text.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    deep = b'{"ph": "X", "cat": "cpu_op", "name": "x", "ts": 1, "dur": 1, "args": ' + b"[" * 100_000 + b"]" * 100_000 + b"}, "
    (d / "deep.json").write_bytes(text[:at] + deep + text[at:])
    return d / "deep.json"


VARIANTS = [
    # --- crashes seen: recursion, overflow, strings for numbers, unhashable, wrong JSON shapes
    Variant("kineto-deep-nesting", "crash", _deep, "error", "nested"),
    Variant("kineto-ts-above-2^64", "crash", lambda d: _torch(d, _set("kernel", "ts", 2**70, every=5)), "salvage"),
    Variant("kineto-ts-1e300", "crash", lambda d: _torch(d, _set("kernel", "ts", 1e300, every=5)), "salvage"),
    Variant("kineto-dur-NaN-string", "crash", lambda d: _torch(d, _set("kernel", "dur", "NaN", every=4)), "salvage"),
    Variant("kineto-ts-Infinity-string", "crash", lambda d: _torch(d, _set("cpu_op", "ts", "Infinity", every=3)),
            "salvage"),
    Variant("kineto-cat-object", "crash", lambda d: _torch(d, _set("cpu_op", "cat", {"a": 1}, every=10)), "salvage"),
    Variant("kineto-grid-string", "crash", lambda d: _torch(d, _set("kernel", "grid", "64x1x1", arg=True)), "salvage"),
    Variant("kineto-correlation-2^70", "nonsense", lambda d: _torch(d, _set("kernel", "correlation", 2**70, arg=True)),
            "salvage", "correlation"),
    Variant("rocpd-start-text", "crash", lambda d: _rocpd(
        d, "UPDATE {rocpd_kernel_dispatch} SET start = 'soon' WHERE id % 50 = 0"), "salvage", "start time"),
    Variant("v3json-dispatch-object", "crash", lambda d: _v3json(
        d, lambda p: p["buffer_records"].update(kernel_dispatch={"a": 1})), "error", "kernel_dispatch"),
    Variant("v3json-sdk-tool-string", "crash", _v3json_top(lambda v: "rocprofv3"), "error", "rocprofiler-sdk-tool"),
    Variant("v3json-timestamps-strings", "crash", lambda d: _v3json(d, lambda p: [
        r.update(start_timestamp=str(r["start_timestamp"])) for r in p["buffer_records"]["kernel_dispatch"]]), "any"),
    Variant("v3json-no-symbols-agents-strings", "crash", lambda d: _v3json(
        d, lambda p: [p.pop(k, None) for k in ("kernel_symbols", "agents", "strings")]), "salvage", "name"),
    # --- hangs and non-regular paths
    Variant("fifo", "hang", _fifo, "error", "fifo"),
    Variant("model-config-fifo", "hang", _fifo, "error", "fifo", option="--model"),
    Variant("arch-file-fifo", "hang", _fifo, "error", "fifo", option="--arch-file"),
    Variant("symlink-loop", "message", _loop, "error", "loop"),
    Variant("broken-symlink", "message", lambda d: (d / "x.json").symlink_to(d / "gone.json") or d / "x.json",
            "error", "broken"),
    # --- memory
    Variant("rocpd-duplicate-dispatch-ids", "memory", lambda d: _rocpd(
        d, "UPDATE {rocpd_kernel_dispatch} SET dispatch_id = 7"), "salvage", "id"),
    Variant("rocpd-duplicate-symbols", "memory", lambda d: _rocpd(
        d, "DROP VIEW rocpd_info_kernel_symbol; CREATE VIEW rocpd_info_kernel_symbol AS SELECT * FROM "
           "{rocpd_info_kernel_symbol} UNION ALL SELECT * FROM {rocpd_info_kernel_symbol}"), "salvage", "duplicate"),
    Variant("v3json-duplicate-dispatch-ids", "memory", lambda d: _v3json(d, lambda p: [
        r["dispatch_info"].update(dispatch_id=1) for r in p["buffer_records"]["kernel_dispatch"]]), "salvage", "id"),
    Variant("csv-duplicate-dispatch-ids", "memory", lambda d: _csv(d, _csv_field("Dispatch_Id", "5", range(1, 145))),
            "salvage", "id"),
    Variant("gzip-bomb-whitespace", "memory", _bomb, "error", "bomb"),
    Variant("sparse-3GB-json", "memory", lambda d: _sparse(d, gzip.decompress(TORCH.read_bytes())[:4096]),
            "error", "memory"),
    Variant("event-20MB-name", "memory", lambda d: _raw_torch(d, _name_bytes(3, b"A" * (20 << 20))), "error", "MB"),
    # --- confident nonsense
    Variant("kineto-negative-dur", "nonsense", lambda d: _torch(d, _set("kernel", "dur", -5, every=3)),
            "salvage", "negative"),
    Variant("csv-ts-1e5", "nonsense", lambda d: _csv(d, _csv_field("Start_Timestamp", "1e5")), "salvage"),
    Variant("csv-ts-hex", "nonsense", lambda d: _csv(d, _csv_field("End_Timestamp", "0x10")), "salvage"),
    Variant("csv-ts-spaced-small", "nonsense", lambda d: _csv(d, _csv_field("Start_Timestamp", " 12 ")), "salvage"),
    Variant("csv-duplicated-row", "nonsense", lambda d: _csv(d, lambda ls: ls[:50] + [ls[49]] + ls[50:],
                                                             extra=("decode_hip_api_trace.csv",)), "salvage", "copies"),
    Variant("csv-dir-two-processes-same-ids", "nonsense", _two_csv_procs, "salvage", "copies"),
    Variant("kineto-duplicate-correlation", "nonsense", lambda d: _torch(d, _dup_correlation), "salvage", "correlation"),
    Variant("kineto-missing-ts", "nonsense", lambda d: _torch(d, lambda evs: _kernels(evs)[10].pop("ts")), "ok"),
    Variant("kineto-ts-zero", "nonsense", lambda d: _torch(d, _set("kernel", "ts", 0, every=97)), "salvage", "hours"),
    Variant("kineto-no-ph", "nonsense", lambda d: _torch(d, _no_ph), "salvage", "ph"),
    Variant("kineto-all-events-twice", "nonsense", lambda d: _torch(d, _dup_events), "salvage", "copies"),
    Variant("v1-csv-negative-durations", "nonsense", lambda d: _v1_csv(d, _v1_swap), "salvage", "negative"),
    Variant("kineto-cut-in-half", "nonsense", _cut_half, "salvage", "truncated"),
    Variant("kineto-cut-before-gpu-events", "nonsense", _cut_before_kernels, "error", "before the cut"),
    Variant("kineto-no-kernels", "nonsense", lambda d: _torch(d, lambda evs: [
        e.update(cat="kernel_x") for e in _kernels(evs)]), "error", "no GPU kernels"),
    # --- messages
    Variant("random-bytes-gzip", "message", _write("r.json.gz", _gz(_random(300_000, 1))), "error"),
    Variant("corrupt-gzip", "message", _write("c.json.gz", lambda: b"\x1f\x8b\x08\x00" + _random(5000, 2)()),
            "error", "gzip"),
    Variant("torch-json-named-pftrace", "message", lambda d: shutil.copy(TORCH, d / "t.pftrace") and d / "t.pftrace",
            "ok"),
    Variant("random-bytes-pftrace", "message", _write("r.pftrace", _random(50_000, 3)), "error", "perfetto"),
    Variant("rocpd-renamed-column", "message", lambda d: _rocpd(
        d, 'PRAGMA legacy_alter_table=ON; ALTER TABLE {rocpd_kernel_dispatch} RENAME COLUMN "start" TO "begin"'),
            "error", "'start'"),
    Variant("v1-db-renamed-column", "message", lambda d: _sqlite_v1_rename(d), "error", "KernelName"),
    Variant("csv-semicolons", "message", lambda d: _csv(d, lambda ls: [x.replace('","', '";"') for x in ls],
                                                        name="trace.csv"), "error", "';'"),
    Variant("csv-missing-column", "message", lambda d: _csv(d, lambda ls: [
        ",".join(c for j, c in enumerate(x.split(",")) if j != 9) for x in ls]), "error", "Start_Timestamp"),
    Variant("csv-cut-mid-row", "message", lambda d: _csv(d, lambda ls: ls[:40] + [ls[40][:30]]), "salvage", "mid-row"),
    Variant("dir-two-torch-traces", "message", _two_torch, "error", "pass one"),
    Variant("dir-without-traces", "message", _mkdir, "error", "no profiler output"),
    # --- other readers and classes
    Variant("kineto-invalid-utf8-name", "reader", lambda d: _raw_torch(d, _name_bytes(400, b"\xff\xfe")),
            "salvage", "utf-8"),
    Variant("kineto-control-chars-in-name", "reader", lambda d: _torch(d, lambda evs: [
        e.update(name="\x1b]0;owned\x07\x1b[31m\r" + e["name"] + "\x00") for e in _kernels(evs)]), "ok",
            table=True),
    Variant("kineto-truncated-gzip", "reader", _truncated_gzip, "any"),
    Variant("kineto-top-level-array", "reader", lambda d: _write("a.json", lambda: json.dumps(
        torch_doc()["traceEvents"][:2000]).encode())(d), "error"),
    Variant("empty-file", "reader", _write("e.json", lambda: b""), "error", "empty"),
    Variant("rocm-torch-memcpy-bytes-strings", "reader", lambda d: shutil.copy(ROCM_TORCH, d / "g.json.gz")
            and d / "g.json.gz", "ok"),
    Variant("v1-json-mangled-events", "reader", lambda d: _v1_json(d), "any"),
    # --- issue 19: inputs untouched, reports without live links or control bytes
    Variant("rocpd-wal-mode", "untouched", lambda d: _rocpd_wal(d), "ok"),
    Variant("kineto-markdown-link-in-names", "report", lambda d: _torch(
        d, _names("[l](javascript:alert(3))")), "ok", report="md"),
    Variant("kineto-esc-bel-in-names-html", "report", lambda d: _torch(
        d, _names("\x1b]8;;javascript:alert(1)\x07gemm\x1b[31m\x07")), "ok", report="html"),
    Variant("v3json-names-null", "reader", lambda d: _v3json(d, lambda p: [
        s.update(formatted_kernel_name=None, kernel_name=None) for s in p["kernel_symbols"]]), "salvage", "name"),
]


def _rocpd_wal(d: Path) -> Path:
    """The real rocpd database switched to WAL mode (as a crashed or live rocprofv3 leaves it)."""
    out = _rocpd(d)
    con = sqlite3.connect(out)
    assert con.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    con.close()
    return out


def _names(name: str) -> Callable[[list[dict]], None]:
    def edit(evs: list[dict]) -> None:
        for e in _kernels(evs):
            e["name"] = name
    return edit


def _sqlite_v1_rename(d: Path) -> Path:
    out = d / "results.db"
    out.write_bytes(gzip.decompress((V1 / "results.db.gz").read_bytes()))
    con = sqlite3.connect(out)
    con.execute('ALTER TABLE KERN RENAME COLUMN "KernelName" TO "Kernel"')
    con.commit()
    con.close()
    return out


def _v1_json(d: Path) -> Path:
    doc = json.loads(gzip.decompress((V1 / "results.json.gz").read_bytes()))
    for i, e in enumerate(doc["traceEvents"]):
        if i % 7 == 0 and isinstance(e, dict):
            e["args"] = "x" if i % 2 else [1, 2]
        if i % 11 == 0 and isinstance(e, dict):
            e["pid"] = {"p": 1}
    out = d / "results.json"
    out.write_text(json.dumps(doc))
    return out


# ------------------------------------------------------------------ issue 19 (each from a real fixture)


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
    text = gzip.decompress(TORCH.read_bytes())
    head = json.dumps(torch_doc()["traceEvents"][:2000]).encode()
    at = text.index(b"{") + 1
    (d / "dup.json").write_bytes(text[:at] + b'"traceEvents": ' + head + b", " + text[at:])
    return d / "dup.json"


def _instants(d: Path) -> Path:
    """The real trace (its instant events as Kineto writes them: `"name": "Iteration Start: PyTorch
    Profiler", "ph": "i", "s": "g",` on one line) with one kernel name given raw quotes, the Kineto
    bug the repair is for: only that name is repaired."""
    (d / "inst.json").write_bytes(_name_bytes(5, b'warmup "a" ')(gzip.decompress(TORCH.read_bytes())))
    return d / "inst.json"


def _spaces_gz(d: Path) -> Path:
    """4 GiB of spaces, then the real trace: 256 gzip members of 16 MiB of spaces (one compressed
    once, repeated: ~4 MB on disk, nothing large written), then the trace's own gzip member."""
    member = gzip.compress(b" " * (16 << 20), 9)
    out = d / "spaces.json.gz"
    with out.open("wb") as fh:
        for _ in range(256):
            fh.write(member)
        fh.write(TORCH.read_bytes())
    return out


def _deep_top(d: Path) -> Path:
    text = gzip.decompress(TORCH.read_bytes())
    at = text.index(b"{") + 1
    (d / "deep.json").write_bytes(text[:at] + b'"x": ' + b"[" * 100_000 + b"]" * 100_000 + b", " + text[at:])
    return d / "deep.json"


def _shuffled_gz(d: Path) -> Path:
    data = bytearray(gzip.decompress(TORCH.read_bytes())[:300_000])
    random.Random(4).shuffle(data)
    (d / "s.json.gz").write_bytes(gzip.compress(bytes(data)))
    return d / "s.json.gz"


def _v3json_nan(d: Path) -> Path:
    doc = json.loads(json.dumps(v3json_small()))
    rec = doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"]
    rec[3]["start_timestamp"] = float("nan")  # json.dumps writes the bare literal NaN
    out = d / "908_results.json"
    out.write_text(json.dumps(doc))
    return out


def _dir_with_loop(d: Path) -> Path:
    shutil.copy(CSV_DIR / "decode_kernel_trace.csv", d / "decode_kernel_trace.csv")
    (d / "a_kernel_trace.csv").symlink_to(d / "b_kernel_trace.csv")
    (d / "b_kernel_trace.csv").symlink_to(d / "a_kernel_trace.csv")
    return d


def _utf16_csv(d: Path) -> Path:
    out = d / "decode_kernel_trace.csv"
    out.write_bytes((CSV_DIR / "decode_kernel_trace.csv").read_text().encode("utf-16"))
    return out


def _bom_v1(d: Path) -> Path:
    out = d / "results.csv"
    out.write_bytes(b"\xef\xbb\xbf" + gzip.decompress((V1 / "results.csv.gz").read_bytes()))
    return out


def _csv_times(fn: Callable[[str], str]) -> Callable[[list[str]], list[str]]:
    """Every Start_Timestamp and End_Timestamp cell of the CSV rewritten by `fn`."""
    def edit(lines: list[str]) -> list[str]:
        header = [h.strip('"') for h in lines[0].strip().split(",")]
        cols = [header.index("Start_Timestamp"), header.index("End_Timestamp")]
        for i in range(1, len(lines)):
            cells = lines[i].rstrip("\n").split('","')
            for j in cols:
                cells[j] = fn(cells[j])
            lines[i] = '","'.join(cells) + "\n"
        return lines
    return edit


def _two_csv_runs(d: Path) -> Path:
    """One rocprofv3 CSV run and the same run again 60 s later under another prefix (two sessions)."""
    _csv(d, lambda ls: ls, name="run1_kernel_trace.csv")
    _csv(d, _csv_times(lambda v: str(int(v) + 60 * 10**9)), name="run2_kernel_trace.csv")
    return d


VARIANTS += [
    # --- issue 19: silent nonsense
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
        "csv-ts-minus-zero",
        "nonsense",
        lambda d: _csv(d, _csv_field("Start_Timestamp", "-0")),
        "salvage",
        "row",
    ),
    Variant("csv-two-runs-in-folder", "nonsense", _two_csv_runs, "error", "session"),
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
    Variant("kineto-instant-events-and-a-raw-quote", "reader", _instants, "salvage", "1 event names"),
    # --- issue 19: messages that named the wrong cause
    Variant("gzip-of-shuffled-bytes", "message", _shuffled_gz, "error", "not a trace"),
    Variant("gzip-4GiB-spaces-before-trace", "memory", _spaces_gz, "error", "bomb"),
    Variant("kineto-deep-value-first", "message", _deep_top, "error", "nested"),
    Variant(
        "kineto-every-kernel-without-dur",
        "message",
        lambda d: _torch(d, lambda evs: [e.pop("dur") for e in _kernels(evs)]),
        "error",
        "duration",
    ),
    Variant("v3json-nan-literal", "message", _v3json_nan, "error", "NaN literal"),
    Variant("dir-with-symlink-loop", "message", _dir_with_loop, "error", "loop"),
    Variant("csv-utf16", "message", _utf16_csv, "error", "UTF-16"),
    # every timestamp in E-notation, as a spreadsheet re-saves it
    Variant(
        "csv-e-notation-timestamps",
        "message",
        lambda d: _csv(d, _csv_times(lambda v: f"{float(v):.6e}")),
        "error",
        "written in E-notation",
    ),
    Variant("v1-csv-utf8-bom", "message", _bom_v1, "ok"),
    Variant(
        "arch-file-missing",
        "message",
        lambda d: d / "archs.toml",
        "error",
        "does not exist",
        option="--arch-file",
    ),
]


# ------------------------------------------------------------------ issue 39: numbers out of domain

RANK0 = FIX / "captured" / "tp2_decode_rank0.pt.trace.json.gz"  # a real distributedInfo (world 2)
RANK0_MODEL = FIX / "captured" / "tp2_decode_rank0.model.json"  # its HF config under "config"


def _rank0_top(key: str, edit: Callable[[dict], None]) -> Callable[[Path], Path]:
    """The real TP=2 rank-0 trace with its top-level `key` edited."""
    def build(d: Path) -> Path:
        doc = json.loads(gzip.decompress(RANK0.read_bytes()))
        edit(doc[key])
        out = d / "rank0.json"
        out.write_text(json.dumps(doc))
        return out
    return build


def _model_config(**changes) -> Callable[[Path], Path]:
    def build(d: Path) -> Path:
        cfg = {**json.loads(RANK0_MODEL.read_text())["config"], **changes}
        out = d / "config.json"
        out.write_text(json.dumps(cfg))
        return out
    return build


def _deep_arch_file(d: Path) -> Path:
    """The real device database with one entry's match_names nested 5,000 deep."""
    text = (ROOT / "attrib" / "data" / "archs.toml").read_text()
    at = text.index("match_names = [") + len("match_names = ")
    out = d / "archs.toml"
    out.write_text(text[:at] + "[" * 5000 + '"x"' + "]" * 5000 + text[text.index("\n", at):])
    return out


NUMBER_VARIANTS = [
    Variant("kineto-world-size-2^70", "crash", _rank0_top("distributedInfo", lambda i: i.update(world_size=2**70)),
            "error", "distributedInfo.world_size = 1180591620717411303424"),
    Variant("kineto-world-size-0", "nonsense", _rank0_top("distributedInfo", lambda i: i.update(world_size=0)),
            "error", "distributedInfo.world_size = 0"),
    Variant("model-config-heads-0", "crash", _model_config(num_attention_heads=0), "error",
            "num_attention_heads = 0", option="--model"),
    Variant("model-config-negative-hidden", "nonsense", _model_config(hidden_size=-2048), "error",
            "hidden_size = -2048", option="--model"),
    Variant("model-config-negative-layers", "nonsense", _model_config(num_hidden_layers=-4), "error",
            "num_hidden_layers = -4", option="--model"),
    Variant("arch-file-5000-deep", "crash", _deep_arch_file, "error", "nested more than 32 deep",
            option="--arch-file"),
]
VARIANTS += NUMBER_VARIANTS

