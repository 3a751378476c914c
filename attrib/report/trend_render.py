"""The trend's renderers: its document as a terminal table and as one HTML page."""

from __future__ import annotations

from typing import Any

from attrib.multi.trend import label
from attrib.report.fmt import apart
from attrib.report.grid import Cut, grid, wrap


def _cell(v: float | None, fmt: str = "{:.4g}") -> str:
    return "-" if v is None else fmt.format(v)


HEAD = ("#", "captured (UTC)", "tok/step", "ms/tok", "tok/s", "GB/tok", "vs before (± noise)",
        "top cause")
# on a terminal too narrow for the table, its columns go in this order (then the top cause is cut
# at its end); each file's path and flags follow its row, whole or shortened where paths agree
DROP = ("captured (UTC)", "GB/tok", "tok/step", "tok/s")


def render(doc: dict[str, Any], width: int | None = None) -> str:
    """The terminal table of a trend document; with `width`, every line fits it."""

    cut = Cut()
    rows = []
    for i, r in enumerate(doc["rows"]):
        c = r["top_cause"]
        share = f" ({c['share']:.0%})" if c and c["share"] is not None else ""
        cause = "-" if c is None else f"{c['cause']}: {c['what']} {c['ms_per_step']:.3g} ms{share}"
        rows.append((str(i), str(r["created_utc"] or "-"), _cell(r["tokens_per_step"], "{}"),
                     _cell(r["ms_per_token"]), _cell(r["achieved_tok_s"]),
                     _cell(r["gb_per_token"]), label(r["vs_previous"]), cause))
    table = grid(HEAD, rows, width, DROP, "top cause", "", sentence=True, cut=cut,
                 left=("captured (UTC)", "vs before (± noise)"))
    lines = wrap(f"attrib trend: {doc['files']} files, phase {doc['phase']} (each against the "
                 f"{doc['window']} before it; faster/slower: p < {doc['alpha']} and a change "
                 f"beyond its noise band, at least {doc['min_effect_pct']:g}%)", width)
    lines.append(table[0])
    paths = apart([str(r["path"]) for r in doc["rows"]], None if width is None else width - 5)
    for r, line, path in zip(doc["rows"], table[1:], paths):
        lines.append(line)
        lines += [x for flag in r["changes"] for x in wrap(f"! {flag}", width, " " * 5, " " * 7)]
        lines.append(f"{'':>5}{path}")
    lines += [x for n in doc["notes"] for x in wrap(f"note: {n}", width)]
    changed = len(doc["changed"])
    lines.append(f"{changed} file(s) flagged" if changed else "no change flagged")
    lines += cut.footer(width, ", or `--format json`")
    return "\n".join(lines) + "\n"


def render_html(doc: dict[str, Any]) -> str:
    """The trend as one self-contained page: a row per file, its flags and path under it."""
    from attrib.report.html import CSS, escape

    th = "".join(f"<th>{escape(h)}</th>" for h in HEAD)
    body = []
    for i, r in enumerate(doc["rows"]):
        c = r["top_cause"]
        share = f" ({c['share']:.0%})" if c and c["share"] is not None else ""
        cause = "-" if c is None else f"{c['cause']}: {c['what']} {c['ms_per_step']:.3g} ms{share}"
        cells = (str(i), str(r["created_utc"] or "-"), _cell(r["tokens_per_step"], "{}"),
                 _cell(r["ms_per_token"]), _cell(r["achieved_tok_s"]),
                 _cell(r["gb_per_token"]), label(r["vs_previous"]), cause)
        body.append("<tr>" + "".join(f'<td class="n">{escape(x)}</td>' if j in (0, 2, 3, 4, 5)
                                     else f"<td>{escape(x)}</td>" for j, x in enumerate(cells))
                    + "</tr>")
        under = [f"! {f}" for f in r["changes"]] + [str(r["path"])]
        body.append(f'<tr class=sub><td></td><td colspan="{len(HEAD) - 1}"><code>'
                    + "<br>".join(escape(x) for x in under) + "</code></td></tr>")
    changed = len(doc["changed"])
    page = (f"<h1>attrib trend: {doc['files']} files, phase {escape(doc['phase'])}</h1>"
            + (f"<p><b>{changed} file(s) flagged</b></p>" if changed
               else "<p><b>no change flagged</b></p>")
            + f"<p class=muted>each file against the {doc['window']} before it; faster/slower: "
            f"p &lt; {doc['alpha']} and a change beyond its noise band, at least "
            f"{doc['min_effect_pct']:g}%</p>"
            + f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            + "".join(f"<p class=muted>note: {escape(n)}</p>" for n in doc["notes"]))
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>attrib trend</title>"
            f"<style>{CSS}tr.sub td{{border-bottom:1px solid #ccc;color:#555}}</style></head>"
            f"<body><main>{page}</main></body></html>\n")
