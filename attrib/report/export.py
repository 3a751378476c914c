"""Perfetto export: the original Kineto trace with attrib's attribution added, loadable in
ui.perfetto.dev.

Each kernel event's args gain `component`, `phase`, `step`, `bytes` and `gbs` (achieved GB/s of that
kernel, bytes / duration; null where the bytes are unknown). A process "attrib" is added with one
track per component (a component's kernels that overlap in time, from several streams, take extra
lanes so every track's slices nest) and one track of the steps, each slice a copy of its kernel's or
step's time. Nothing else in the document changes.
"""

from __future__ import annotations

from typing import Any

import polars as pl

PROCESS = "attrib: components"


def _lanes(starts: list[float], ends: list[float]) -> list[int]:
    """Greedy lane per interval (sorted by start) so intervals on one lane never overlap."""
    free: list[float] = []
    out = []
    for s, e in zip(starts, ends):
        lane = next((i for i, end in enumerate(free) if end <= s), None)
        if lane is None:
            free.append(e)
            lane = len(free) - 1
        else:
            free[lane] = e
        out.append(lane)
    return out


def _pid(events: list[Any]) -> int:
    pids = [e.get("pid") for e in events if isinstance(e, dict)]
    return max([p for p in pids if isinstance(p, int) and not isinstance(p, bool)] + [0]) + 1


def _meta(pid: int, tid: int | None, kind: str, name: str | int) -> dict[str, Any]:
    key = "name" if "name" in kind else "sort_index"
    ev = {"ph": "M", "pid": pid, "name": kind, "args": {key: name}}
    if tid is not None:
        ev["tid"] = tid
    return ev


def _kernel_event(events: list[Any], at: int | None) -> dict[str, Any] | None:
    ev = events[at] if at is not None and 0 <= at < len(events) else None
    return ev if isinstance(ev, dict) and ev.get("cat") == "kernel" else None


def annotate(doc: dict[str, Any], kernels: pl.DataFrame, steps: pl.DataFrame) -> dict[str, Any]:
    """Add attrib's args to `doc`'s kernel events (`kernels.event`: each kernel's index in
    traceEvents, as the reader kept it) and the component and step tracks; returns doc (changed in
    place). A kernel whose index is not a kernel event of `doc` is a ValueError."""
    events = doc["traceEvents"]
    k = kernels.select("event", "component", "phase", "step", "bytes", "dur_ns").with_columns(
        pl.when((pl.col("dur_ns") > 0) & pl.col("bytes").is_not_null())
        .then((pl.col("bytes") / pl.col("dur_ns")).round(1)).alias("gbs")).sort("event")
    pid = _pid(events)
    added: list[dict[str, Any]] = [_meta(pid, None, "process_name", PROCESS),
                                   _meta(pid, None, "process_sort_index", -1)]
    per_comp: dict[str, list[dict[str, Any]]] = {}
    for at, comp, phase, step, nbytes, _, gbs in k.iter_rows():
        ev = _kernel_event(events, at)
        if ev is None:
            raise ValueError(f"kernel at traceEvents[{at}] is not a kernel event of the document")
        old = ev.get("args")
        args: dict[str, Any] = old if isinstance(old, dict) else {}
        rounded = None if nbytes is None else round(nbytes)
        args.update(component=comp, phase=phase, step=step, bytes=rounded, gbs=gbs)
        ev["args"] = args
        per_comp.setdefault(comp or "unattributed", []).append(ev)
    share = sorted(per_comp, key=lambda c: -sum(float(e.get("dur") or 0) for e in per_comp[c]))
    tid = 1
    for rank, comp in enumerate(share):
        evs = sorted(per_comp[comp], key=lambda e: float(e["ts"]))
        starts = [float(e["ts"]) for e in evs]
        lanes = _lanes(starts, [s + float(e.get("dur") or 0) for s, e in zip(starts, evs)])
        for lane in range(max(lanes) + 1):
            name = comp if lane == 0 else f"{comp} #{lane + 1}"
            added += [_meta(pid, tid + lane, "thread_name", name),
                      _meta(pid, tid + lane, "thread_sort_index", rank * 100 + lane + 1)]
        for e, lane in zip(evs, lanes):
            figs = {x: e["args"][x] for x in ("phase", "step", "bytes", "gbs")}
            added.append({"ph": "X", "cat": "attrib", "name": e.get("name", ""), "pid": pid,
                          "tid": tid + lane, "ts": e["ts"], "dur": e.get("dur") or 0,
                          "args": {"component": comp, **figs}})
        tid += max(lanes) + 1
    added += [_meta(pid, 0, "thread_name", "steps"), _meta(pid, 0, "thread_sort_index", 0)]
    s = steps.filter(pl.col("window_start").is_not_null()).sort("window_start")
    windows = s.select("step", "phase", "tokens", "window_start", "window_end")
    for step, phase, tokens, w0, w1 in windows.iter_rows():
        added.append({"ph": "X", "cat": "attrib", "name": f"{phase} step {step}", "pid": pid,
                      "tid": 0, "ts": w0 / 1e3, "dur": (w1 - w0) / 1e3,
                      "args": {"phase": phase, "step": step, "tokens": tokens}})
    events.extend(added)
    return doc
