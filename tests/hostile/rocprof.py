"""Hostile rocprof output: the real rocpd SQLite database (edited by SQL), rocprofv3 JSON (cut to its
first 1500 records, then edited), rocprofv3 CSV (cells, rows, encodings, folders) and legacy v1."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Callable

from sources import CSV_DIR, ROCPD, V1, Variant, v3json_small

# ------------------------------------------------------------------ rocpd SQLite


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


def _rocpd_wal(d: Path) -> Path:
    """The real rocpd database switched to WAL mode (as a crashed or live rocprofv3 leaves it)."""
    out = _rocpd(d)
    con = sqlite3.connect(out)
    assert con.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    con.close()
    return out


# ------------------------------------------------------------------ rocprofv3 JSON


def _dispatches(p: dict) -> list[dict]:
    """A rocprofv3 JSON document's kernel dispatch records."""
    return p["buffer_records"]["kernel_dispatch"]


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


def _v3json_nan(d: Path) -> Path:
    doc = json.loads(json.dumps(v3json_small()))
    rec = doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"]
    rec[3]["start_timestamp"] = float("nan")  # json.dumps writes the bare literal NaN
    out = d / "908_results.json"
    out.write_text(json.dumps(doc))
    return out


# ------------------------------------------------------------------ rocprofv3 CSV


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


def _two_csv_procs(d: Path) -> Path:
    """A folder with the same process's rocprofv3 CSV twice, under two prefixes (same ids)."""
    for prefix in ("decode", "copy"):
        shutil.copy(CSV_DIR / "decode_kernel_trace.csv", d / f"{prefix}_kernel_trace.csv")
        shutil.copy(CSV_DIR / "decode_hip_api_trace.csv", d / f"{prefix}_hip_api_trace.csv")
    return d


def _two_csv_runs(d: Path) -> Path:
    """One rocprofv3 CSV run and the same run again 60 s later under another prefix (two sessions)."""
    _csv(d, lambda ls: ls, name="run1_kernel_trace.csv")
    _csv(d, _csv_times(lambda v: str(int(v) + 60 * 10**9)), name="run2_kernel_trace.csv")
    return d


def _utf16_csv(d: Path) -> Path:
    out = d / "decode_kernel_trace.csv"
    out.write_bytes((CSV_DIR / "decode_kernel_trace.csv").read_text().encode("utf-16"))
    return out


# ------------------------------------------------------------------ legacy rocprof v1 (CSV, SQLite, JSON)


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


def _bom_v1(d: Path) -> Path:
    out = d / "results.csv"
    out.write_bytes(b"\xef\xbb\xbf" + gzip.decompress((V1 / "results.csv.gz").read_bytes()))
    return out


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


# ------------------------------------------------------------------ variants, by class

VARIANTS = [
    # --- crashes seen: strings for numbers, wrong JSON shapes
    Variant("rocpd-start-text", "crash", lambda d: _rocpd(
        d, "UPDATE {rocpd_kernel_dispatch} SET start = 'soon' WHERE id % 50 = 0"), "salvage", "start time"),
    Variant("v3json-dispatch-object", "crash", lambda d: _v3json(
        d, lambda p: p["buffer_records"].update(kernel_dispatch={"a": 1})), "error", "kernel_dispatch"),
    Variant("v3json-sdk-tool-string", "crash", _v3json_top(lambda v: "rocprofv3"), "error",
            "rocprofiler-sdk-tool"),
    Variant("v3json-timestamps-strings", "crash", lambda d: _v3json(d, lambda p: [
        r.update(start_timestamp=str(r["start_timestamp"])) for r in _dispatches(p)]), "any"),
    Variant("v3json-no-symbols-agents-strings", "crash", lambda d: _v3json(
        d, lambda p: [p.pop(k, None) for k in ("kernel_symbols", "agents", "strings")]), "salvage", "name"),
    # --- memory
    Variant("rocpd-duplicate-dispatch-ids", "memory", lambda d: _rocpd(
        d, "UPDATE {rocpd_kernel_dispatch} SET dispatch_id = 7"), "salvage", "id"),
    Variant("rocpd-duplicate-symbols", "memory", lambda d: _rocpd(
        d, "DROP VIEW rocpd_info_kernel_symbol; CREATE VIEW rocpd_info_kernel_symbol AS SELECT * FROM "
           "{rocpd_info_kernel_symbol} UNION ALL SELECT * FROM {rocpd_info_kernel_symbol}"),
            "salvage", "duplicate"),
    Variant("v3json-duplicate-dispatch-ids", "memory", lambda d: _v3json(d, lambda p: [
        r["dispatch_info"].update(dispatch_id=1) for r in _dispatches(p)]), "salvage", "id"),
    Variant("csv-duplicate-dispatch-ids", "memory",
            lambda d: _csv(d, _csv_field("Dispatch_Id", "5", range(1, 145))),
            "salvage", "id"),
    # --- confident nonsense
    Variant("csv-ts-1e5", "nonsense", lambda d: _csv(d, _csv_field("Start_Timestamp", "1e5")), "salvage"),
    Variant("csv-ts-hex", "nonsense", lambda d: _csv(d, _csv_field("End_Timestamp", "0x10")), "salvage"),
    Variant("csv-ts-spaced-small", "nonsense",
            lambda d: _csv(d, _csv_field("Start_Timestamp", " 12 ")), "salvage"),
    Variant("csv-duplicated-row", "nonsense", lambda d: _csv(d, lambda ls: ls[:50] + [ls[49]] + ls[50:],
                                                             extra=("decode_hip_api_trace.csv",
                                                                    )), "salvage", "copies"),
    Variant("csv-dir-two-processes-same-ids", "nonsense", _two_csv_procs, "salvage", "copies"),
    Variant("v1-csv-negative-durations", "nonsense", lambda d: _v1_csv(d, _v1_swap), "salvage", "negative"),
    # issue 19
    Variant(
        "csv-ts-minus-zero",
        "nonsense",
        lambda d: _csv(d, _csv_field("Start_Timestamp", "-0")),
        "salvage",
        "row",
    ),
    Variant("csv-two-runs-in-folder", "nonsense", _two_csv_runs, "error", "session"),
    # --- messages
    Variant("rocpd-renamed-column", "message", lambda d: _rocpd(
        d, 'PRAGMA legacy_alter_table=ON; '
           'ALTER TABLE {rocpd_kernel_dispatch} RENAME COLUMN "start" TO "begin"'),
            "error", "'start'"),
    Variant("v1-db-renamed-column", "message", lambda d: _sqlite_v1_rename(d), "error", "KernelName"),
    Variant("csv-semicolons", "message", lambda d: _csv(d, lambda ls: [x.replace('","', '";"') for x in ls],
                                                        name="trace.csv"), "error", "';'"),
    Variant("csv-missing-column", "message", lambda d: _csv(d, lambda ls: [
        ",".join(c for j, c in enumerate(x.split(",")) if j != 9) for x in ls]), "error", "Start_Timestamp"),
    Variant("csv-cut-mid-row", "message", lambda d: _csv(d, lambda ls: ls[:40] + [ls[40][:30]]),
            "salvage", "mid-row"),
    # issue 19: messages that named the wrong cause
    Variant("v3json-nan-literal", "message", _v3json_nan, "error", "NaN literal"),
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
    # --- other readers and classes
    Variant("v1-json-mangled-events", "reader", lambda d: _v1_json(d), "any"),
    Variant("v3json-names-null", "reader", lambda d: _v3json(d, lambda p: [
        s.update(formatted_kernel_name=None,
                 kernel_name=None) for s in p["kernel_symbols"]]), "salvage", "name"),
    # --- issue 19: inputs untouched
    Variant("rocpd-wal-mode", "untouched", lambda d: _rocpd_wal(d), "ok"),
]
