"""Replicate a real Kineto trace N times into one large trace, for load benchmarks.

    python bench/scale.py FIXTURE N OUT

Copy k is shifted in time by k x (span of the trace + 1 ms), and every id that links events
(correlation, External id, Python id/parent id, flow id, Record function id, Ev Idx) is offset
by k x (max id + 1), so the copies stay distinct and the linking still holds. Output is plain
JSON unless OUT ends in .gz. The file is written as Kineto writes it (one event per block).
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import orjson

_ID_ARGS = ("correlation", "External id", "Python id", "Python parent id", "Record function id", "Ev Idx")


def _max_ids(events: list[dict]) -> int:
    top = 0
    for e in events:
        if isinstance(e.get("id"), int):
            top = max(top, e["id"])
        args = e.get("args") or {}
        for k in _ID_ARGS:
            v = args.get(k)
            if isinstance(v, int):
                top = max(top, v)
    return top


def scale(src: Path, n: int, out: Path) -> int:
    raw = src.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = orjson.loads(raw)
    events = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    shift_us = (t1 - t0) + 1000.0
    id_step = _max_ids(events) + 1
    trace_name = doc.pop("traceName", None)
    count = 0
    fh_ctx = gzip.open(out, "wb", compresslevel=1) if out.suffix == ".gz" else open(out, "wb")
    with fh_ctx as fh:
        head = orjson.dumps(doc, option=orjson.OPT_INDENT_2)[:-2]  # drop closing "\n}"
        fh.write(head + b',\n  "traceEvents": [\n')
        first = True
        for k in range(n):
            for e in events:
                if k and e.get("ph") == "M":
                    continue  # metadata once
                e2 = dict(e)
                if k:
                    if isinstance(e2.get("ts"), (int, float)):
                        e2["ts"] = round(e2["ts"] + k * shift_us, 3)
                    if isinstance(e2.get("id"), int):
                        e2["id"] += k * id_step
                    if "args" in e2:
                        args = dict(e2["args"])
                        for key in _ID_ARGS:
                            if isinstance(args.get(key), int) and args[key] >= 0:
                                args[key] += k * id_step
                        e2["args"] = args
                fh.write((b"" if first else b",\n") + orjson.dumps(e2, option=orjson.OPT_INDENT_2))
                first = False
                count += 1
        tail = b"\n  ]"
        if trace_name is not None:
            tail += b',\n  "traceName": ' + orjson.dumps(trace_name)
        fh.write(tail + b"\n}\n")
    return count


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    n = scale(Path(argv[0]), int(argv[1]), Path(argv[2]))
    print(f"wrote {n} events to {argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
