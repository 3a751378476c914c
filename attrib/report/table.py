"""The analysis document as a terminal table (one renderer per output format).

Every figure is per step (medians over the phase's steps) unless labelled a total. Kernel names are
cut to `width` characters on a terminal and printed whole in a file (`width=None`).
"""

from __future__ import annotations

from attrib.analysis.model import Analysis
from attrib.report import fmt
from attrib.report import speculative as spec_report
from attrib.report.printable import printable_tree

NAME_WIDTH = 60


def _grid(head: tuple[str, ...], rows: list[tuple[str, ...]], indent: str = "   ") -> list[str]:
    """Left-align the first and last column, right-align the others."""
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(r: tuple[str, ...]) -> str:
        cells = [r[0].ljust(widths[0])] + [r[i].rjust(widths[i]) for i in range(1, len(r) - 1)] + [r[-1]]
        return (indent + "  ".join(cells)).rstrip()
    return [line(head)] + [line(r) for r in rows]


def render(an: Analysis, top: int | None = 5, width: int | None = NAME_WIDTH) -> str:
    """Per phase: headline, component table, ranked bottlenecks, top kernels; then coverage, notes, findings.

    Every string of the analysis passes `printable` first (names come from the trace)."""
    an = printable_tree(an)
    src = an.source
    lines = [f"{src.path}  [{src.format}]  {src.kernels} kernels, {src.kernel_ms:.3f} ms kernel time (total)",
             f"device: {fmt.device_line(an.device)}"]
    dist = fmt.distributed_line(an)
    if dist:
        lines.append(dist)
    prov = fmt.provenance(an.provenance)
    if prov:
        lines.append(f"run: {prov}")
    for ph in an.phases:
        lines += ["", f"== {ph.phase}: {fmt.phase_headline(ph)}"]
        rates = fmt.phase_rates(ph, fmt.world_size(an))
        if rates:
            lines.append("   " + rates)
        where = fmt.ledger_line(ph)
        if where:
            lines.append("   " + where)
        for x in ph.excluded_steps:
            lines.append(
                f"   left out: step {x.step} ({x.reason}): {fmt.num(x.step_ms)} ms, {x.kernels} kernels,"
                f" {fmt.num(x.kernel_ms)} ms of kernels"
            )
        lines += _grid(fmt.COMPONENT_HEAD, fmt.component_rows(ph))
        ranked = fmt.bottleneck_rows(ph)
        if ranked:
            lines.append("   bottlenecks (recoverable ms/step: roofline gap, GPU idle, findings):")
            total = fmt.total_line(ph, an.findings)
            if total:
                lines.append("     " + total)
            lines += _grid(fmt.BOTTLENECK_HEAD, ranked[: top or None], "     ")
        lines.append("   top kernels (per step):")
        lines += _grid(fmt.TOP_HEAD, fmt.top_rows(ph, top, width), "     ")
        lines += spec_report.text(ph, _grid)
    lines += ["", fmt.coverage_line(an)]
    for n in an.notes:
        lines.append(f"note: {n}")
    for f in an.findings:
        head, evl, remedy = fmt.finding_lines(f)
        lines += ["", head]
        if evl:
            lines.append(f"   evidence: {evl}")
        if remedy:
            lines.append(f"   remedy: {remedy}")
        for ref in f.references[:3]:
            lines.append(f"   see: {ref}")
    return "\n".join(lines) + "\n"
