"""The what-if section (--what-if): one function per output, called by the table, markdown and
HTML renderers. Every figure is labelled a projection."""

from __future__ import annotations

from typing import Any

from attrib.analysis.model import Analysis
from attrib.analysis.whatif import WhatIf
from attrib.report.grid import grid, wrap

HEAD = ("component", "re-priced", "MB/step", "projected MB", "floor ms", "projected ms", "bound")
# on a terminal too narrow for the table, its columns go in this order (then the bound is cut)
DROP = ("re-priced", "floor ms", "MB/step")


def _n(x: float | None, f: str = "{:,.0f}") -> str:
    return "-" if x is None else f.format(x)


def headline(w: WhatIf) -> str:
    """One line: the formats, GB/token and the ceiling before -> after, what was re-priced."""
    pairs = {(w.weight_bits_from[c], w.weight_bits_to[c]) for c in w.weight_bits_from}
    bits = ", ".join(f"{c} {w.weight_bits_from[c]:g} -> {w.weight_bits_to[c]:g} bits"
                     for c in w.weight_bits_from)
    if len(pairs) == 1 and len(w.weight_bits_from) > 1:
        (old, new), = pairs
        bits = f"weights ({', '.join(w.weight_bits_from)}) {old:g} -> {new:g} bits"
    kv = (f"KV {w.kv_bytes_from:g} -> {w.kv_bytes_to:g} B"
          if w.kv_bytes_to != w.kv_bytes_from else "")
    return (f"what-if {w.formats} ({w.label}) on {w.phase}: {w.gb_per_token:.4f} -> "
            f"{w.projected_gb_per_token:.4f} GB/token, ceiling {_n(w.ceiling_tok_s)} -> "
            f"{_n(w.projected_ceiling_tok_s)} tok/s at context {w.context}, {w.tokens_per_step} "
            f"tokens/step" + "".join(f"; {x}" for x in (bits, kv) if x))


def rows(w: WhatIf) -> list[list[str]]:
    """The per-component table: bytes (MB per step) and floors (ms) before and after."""
    out = []
    for r in w.rows:
        if not r.repriced and r.bytes < 0.001 * w.bytes_per_step:
            continue
        bound = "compute-bound: floor unchanged" if r.bound == "compute" else (r.bound or "-")
        out.append([r.component, r.repriced or "kept", _n(r.bytes / 1e6, "{:,.2f}"),
                    _n(r.projected_bytes / 1e6, "{:,.2f}"), _n(r.floor_ms, "{:.4f}"),
                    _n(r.projected_floor_ms, "{:.4f}"), bound])
    return out


def table_lines(an: Analysis, width: int | None = None, cut: Any = None) -> list[str]:
    """The terminal section (empty without a what-if); with `width`, every line fits it (columns
    dropped are noted in `cut`, a table.Cut)."""

    w = an.what_if
    if w is None:
        return []
    return (["", *wrap(f"== {headline(w)}", width, more="   ")]
            + grid(HEAD, [tuple(r) for r in rows(w)], width, DROP, "bound", sentence=True,
                   cut=cut, table="what-if")
            + [x for n in w.notes for x in wrap(f"note: {n}", width, "   ", "     ")])


def markdown_lines(an: Analysis) -> list[str]:
    """The markdown section (empty without a what-if)."""
    w = an.what_if
    if w is None:
        return []
    md = ["| " + " | ".join(HEAD) + " |", "|" + " --- |" * len(HEAD)]
    md += ["| " + " | ".join(r) + " |" for r in rows(w)]
    return ["", "## What-if (projection)", "", headline(w), "", *md, *(f"- {x}" for x in w.notes)]


def html_section(an: Analysis) -> str:
    """The HTML section ("" without a what-if)."""
    from html import escape  # only HTML output needs it: 1-3 ms to import

    w = an.what_if
    if w is None:
        return ""
    cells = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows(w))
    head = "".join(f"<th>{escape(h)}</th>" for h in HEAD)
    notes = "".join(f"<li>{escape(x)}</li>" for x in w.notes)
    return (f"<h2>What-if (projection)</h2><p>{escape(headline(w))}</p>"
            f"<table><tr>{head}</tr>{cells}</table>" + (f"<ul>{notes}</ul>" if notes else ""))
