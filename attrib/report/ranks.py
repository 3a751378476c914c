"""The `attrib.ranks/1` document of a run's ranks merged, and its table and markdown renderings.

Built from attrib.steps.ranks' tables (by_step, by_phase, split collectives)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from attrib.report.grid import Cut, grid, wrap

SCHEMA_ID = "attrib.ranks/1"
_FIGS = ("step_ms", "skew_ms", "comm_ms", "wait_ms", "transfer_ms", "latency_ms")


def _r(x: object, nd: int = 6) -> float | None:
    return round(float(x), nd) if isinstance(x, (int, float)) else None


def _rank_row(r: Mapping[str, Any], keys: Sequence[str]) -> dict[str, object]:
    return {"rank": r["rank"], **{k: _r(r.get(k)) for k in keys}}


def _steps(table: pl.DataFrame) -> list[dict[str, object]]:
    out = []
    keys = ("step_ms", "skew_ms", "comm_ms", "wait_ms", "transfer_ms", "latency_ms")
    for (index,), g in table.group_by(["index"], maintain_order=True):
        rows = g.sort("rank").to_dicts()
        slow = next(r["rank"] for r in rows if r["slowest"])
        out.append({"index": index, "step": rows[0]["step"], "phase": rows[0]["phase"],
                    "excluded": rows[0]["excluded"], "slowest_rank": slow,
                    "skew_ms": _r(max(r["skew_ms"] for r in rows)),
                    "ranks": [_rank_row(r, keys) | {"collectives": r["collectives"]}
                              for r in rows]})
    return out


def _phases(phase: pl.DataFrame) -> list[dict[str, object]]:
    out = []
    for (name,), g in phase.group_by(["phase"], maintain_order=True):
        rows = g.sort("rank").to_dicts()
        out.append({"phase": name, "steps": rows[0]["steps"],
                    "ranks": [_rank_row(r, _FIGS) | {"slowest_steps": r["slowest_steps"]}
                              for r in rows]})
    return out


def _collectives(colls: pl.DataFrame, issued: int) -> dict[str, object]:
    one = colls.filter(pl.col("rank") == colls["rank"].min()) if colls.height else colls
    priced = one.filter(pl.col("bytes").is_not_null()).height
    return {"issued": issued, "matched": one.height,
            "name_mismatch": one.filter(~pl.col("same_name")).height,
            "priced": priced}


def document(ranks: Sequence[Mapping[str, object]], table: pl.DataFrame, phase: pl.DataFrame,
             colls: pl.DataFrame, link: Mapping[str, object], clock: str,
             notes: Sequence[str] = ()) -> dict[str, object]:
    """The attrib.ranks/1 document: the ranks read, the clock and link used, per phase and per step
    each rank's figures (medians over the phase's counted steps), the collectives matched."""
    issued = max((int(str(r["collectives"])) for r in ranks), default=0)
    return {"schema": SCHEMA_ID, "world_size": len(ranks), "ranks": list(ranks),
            "clock": clock, "link": dict(link), "phases": _phases(phase),
            "steps": _steps(table), "collectives": _collectives(colls, issued),
            "notes": list(notes)}


def _f(x: object, fmt: str = "{:.3f}") -> str:
    return "-" if x is None else fmt.format(x)


def _phase_lines(doc: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for p in doc["phases"]:
        for r in p["ranks"]:
            rows.append([p["phase"], str(r["rank"]), str(p["steps"]),
                         *(_f(r[k]) for k in _FIGS), str(r["slowest_steps"])])
    return rows


_HEAD = ["phase", "rank", "steps", "step ms", "skew ms", "comm ms", "wait ms", "transfer ms",
         "latency ms", "slowest"]


def _step_lines(doc: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    steps = doc["steps"]
    ranks = [r["rank"] for r in steps[0]["ranks"]] if steps else []
    head = ["#", "phase", *(f"r{r} ms" for r in ranks), "slowest", "skew ms",
            *(f"r{r} wait/xfer/lat" for r in ranks)]
    rows = []
    for s in steps:
        split = [f"{_f(r['wait_ms'])}/{_f(r['transfer_ms'], '{:.4f}')}/{_f(r['latency_ms'])}"
                 for r in s["ranks"]]
        rows.append([str(s["index"]), str(s["phase"]) + (" (excl.)" if s["excluded"] else ""),
                     *(_f(r["step_ms"]) for r in s["ranks"]), f"r{s['slowest_rank']}",
                     _f(s["skew_ms"]), *split])
    return head, rows


def _link_line(doc: Mapping[str, Any]) -> str:
    link = doc["link"]
    gbs = link.get("gbs")
    if not gbs:
        return "link: bandwidth unknown (give --link-gbs): transfer not split from latency"
    return f"link: {gbs:g} GB/s per direction ({link.get('from')})"


# on a terminal too narrow for a table, its columns go in this order (the per-step table: each
# rank's wait/transfer/latency from the last rank, then the skew, then the ranks' step ms past r1)
PHASE_DROP = ("latency ms", "transfer ms", "comm ms", "slowest", "steps")


def _step_drop(head: list[str]) -> tuple[str, ...]:
    split = [h for h in head if h.endswith("wait/xfer/lat")]
    ms = [h for h in head if h.startswith("r") and h.endswith(" ms")]
    return (*reversed(split), "skew ms", *reversed(ms[2:]))


def render_table(doc: Mapping[str, Any], width: int | None = None) -> str:
    """The terminal table: per phase and rank, then per step side by side; with `width`, every
    line fits it (prose wraps, columns drop with a footer naming them)."""

    c = doc["collectives"]
    cut = Cut()
    out = [x for line in (f"{doc['world_size']} ranks; clock: {doc['clock']}", _link_line(doc),
                          f"collectives: {c['matched']} of {c['issued']} matched across ranks by "
                          f"order ({c['priced']} with bus bytes)") for x in wrap(line, width)]
    out += [""] + grid(tuple(_HEAD), [tuple(r) for r in _phase_lines(doc)], width, PHASE_DROP,
                       None, "", cut=cut, table="per phase")
    head, rows = _step_lines(doc)
    out += ["", *wrap("per step (ms; wait/transfer/latency of the step's collectives):", width)]
    out += grid(tuple(head), [tuple(r) for r in rows], width, _step_drop(head), None, "",
                cut=cut, table="per step", left=("phase",))
    out += [x for n in doc["notes"] for x in wrap(f"note: {n}", width)]
    out += cut.footer(width, ", or `--format md`")
    return "\n".join(out).rstrip() + "\n"


def _md(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def render_markdown(doc: Mapping[str, Any]) -> str:
    """The report section: ranks side by side, wait vs transfer, skew."""
    head, rows = _step_lines(doc)
    notes = "".join(f"- {n}\n" for n in doc["notes"])
    return (f"## Ranks ({doc['world_size']})\n\nClock: {doc['clock']}. {_link_line(doc)}. "
            "Wait: time a rank sits in a collective before the last rank starts it; transfer: "
            "its bus bytes at the link bandwidth; latency: the rest.\n\n"
            f"{_md(_HEAD, _phase_lines(doc))}\n### Per step\n\n{_md(head, rows)}"
            + (f"\n{notes}" if notes else ""))


def render_html(doc: Mapping[str, Any]) -> str:
    """The ranks as one self-contained page: per phase and rank, then per step side by side."""
    from attrib.report.html import CSS, escape

    def table(head: list[str], rows: list[list[str]]) -> str:
        th = "".join(f"<th>{escape(h)}</th>" for h in head)
        body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" if i < 2 else
                                        f'<td class="n">{escape(c)}</td>'
                                        for i, c in enumerate(r)) + "</tr>" for r in rows)
        return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"
    c = doc["collectives"]
    head, rows = _step_lines(doc)
    body = (f"<h1>attrib ranks: {doc['world_size']} ranks</h1><div class=stamp>"
            f"<div>clock: {escape(str(doc['clock']))}</div><div>{escape(_link_line(doc))}</div>"
            f"<div>collectives: {c['matched']} of {c['issued']} matched across ranks by order "
            f"({c['priced']} with bus bytes)</div></div>"
            "<h2>Per phase and rank (medians over the phase's steps, ms)</h2>"
            + table(_HEAD, _phase_lines(doc))
            + "<h2>Per step</h2><p class=muted>ms; wait/transfer/latency of the step's "
            "collectives.</p>" + table(head, rows)
            + "".join(f"<p class=muted>note: {escape(n)}</p>" for n in doc["notes"]))
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>attrib ranks</title>"
            f"<style>{CSS}</style></head><body><main>{body}</main></body></html>\n")
