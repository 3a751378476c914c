"""The analysis document as a terminal table (one renderer per output format).

It opens with the verdict (attrib.analysis.summary): the run's facts and what was assumed, then per
phase its rate against the ceiling, where the step's time goes and the top actions. Every figure is
per step unless labelled a total: the step's time (tok/s, the ledger, the findings) is the mean
counted step; a component's figures are medians over the steps.

On a terminal every line fits `width` (`terminal_width()`: COLUMNS, else the tty, else 100).
Prose wraps. A table too wide drops columns in this order until it fits:
- components: evidence, TFLOP/s, kernels/step, bytes known, MB/step, bound, GB/s;
- bottlenecks: of step;
- top kernels: TFLOP/s, calls/step, GB/s, component;
then its name or sentence column is shortened in the middle (`fmt.short`). A finding's evidence
is a short phrase, its raw figures whole with `verbose` (`attrib analyze -v`). In a file
(`width=None`) nothing is dropped or shortened.
"""

from __future__ import annotations


from attrib.analysis.model import Analysis, Phase
from attrib.report import fmt, whatif
from attrib.report import speculative as spec_report
from attrib.report.grid import Cut, grid, terminal_width, wrap
from attrib.report.printable import printable_tree

__all__ = ["render", "terminal_width", "Cut", "grid", "wrap"]

NOTE_LINES = 3  # lines of a note on a terminal without verbose
COMPONENT_DROP = ("evidence (kernels/step)", "TFLOP/s", "kernels/step", "bytes known", "MB/step",
                  "bound", "GB/s")
BOTTLENECK_DROP = ("of step",)
TOP_DROP = ("TFLOP/s", "calls/step", "GB/s", "component")


def _verdict(an: Analysis, width: int | None) -> list[str]:
    s = an.summary
    if s is None:
        return []
    out = wrap(f"facts: {fmt.facts_line(s)}", width)
    out += wrap(f"assumed: {fmt.assumed_line(s)}", width)
    for c in s.caveats:
        out += wrap(f"caveat: {c}", width)
    for ps in s.phases:
        out += wrap(f">> {fmt.verdict_line(ps)}", width)
        if (sp := spec_report.headline(an, ps.phase)) is not None:
            out += wrap(sp, width, "   ", "     ")
        tl = fmt.time_line(ps)
        if tl:
            out += wrap(tl, width, "   ", "     ")
        for a in ps.actions:
            out += wrap(fmt.action_head(a), width, "   ", "      ", lines=1)
            out += wrap(a.evidence, width, "      ", "      ", lines=2)
    return out


def _phase(an: Analysis, ph: Phase, top: int | None, width: int | None, cut: Cut) -> list[str]:
    lines = [""] + wrap(f"== {ph.phase}: {fmt.phase_headline(ph)}", width, more="   ")
    rates = fmt.phase_rates(ph, fmt.world_size(an))
    if rates:
        lines += wrap(rates, width, "   ")
    where = fmt.ledger_line(ph)
    if where:
        lines += wrap(where, width, "   ")
    for x in ph.excluded_steps:
        lines += wrap(f"left out: step {x.step} ({x.reason}): {fmt.num(x.step_ms)} ms, {x.kernels} "
                      f"kernels, {fmt.num(x.kernel_ms)} ms of kernels", width, "   ")
    lines += grid(fmt.COMPONENT_HEAD, fmt.component_rows(ph), width, COMPONENT_DROP, "component",
                  cut=cut, table="components")
    ranked = fmt.bottleneck_rows(ph)
    if ranked:
        lines.append("   bottlenecks (recoverable ms/step: roofline gap, GPU idle, findings):")
        total = fmt.total_line(ph, an.findings)
        if total:
            lines += wrap(total, width, "     ", "       ", lines=2)
        lines += grid(fmt.BOTTLENECK_HEAD, ranked[: top or None], width, BOTTLENECK_DROP, "what",
                      "     ", sentence=True, cut=cut, table="bottlenecks")
    lines.append("   top kernels (per step):")
    lines += grid(fmt.TOP_HEAD, fmt.top_rows(ph, top, None), width, TOP_DROP, "kernel", "     ",
                  cut=cut, table="top kernels")
    lines += spec_report.text(
        ph, lambda head, rows, indent: grid(head, rows, width, (), None, indent))
    return lines


def render(an: Analysis, top: int | None = 5, width: int | None = None,
           verbose: bool = False) -> str:
    """The verdict; per phase: headline, component table, ranked bottlenecks, top kernels; then
    coverage, notes, findings. `width`: the terminal's (None: a file, nothing cut).

    Every string of the analysis passes `printable` first (names come from the trace)."""
    an = printable_tree(an)
    src = an.source
    rest = f"  [{src.format}]  {src.kernels} kernels, {src.kernel_ms:.3f} ms kernel time (total)"
    path = fmt.short(str(src.path), max(width - len(rest), 12) if width else None)
    lines = wrap(path + rest, width)
    lines += _verdict(an, width)
    lines += wrap(f"device: {fmt.device_line(an.device)}", width)
    dist = fmt.distributed_line(an)
    if dist:
        lines += wrap(dist, width)
    prov = fmt.provenance(an.provenance)
    if prov:
        lines += wrap(f"run: {prov}", width)
    cut = Cut()
    for ph in an.phases:
        lines += _phase(an, ph, top, width, cut)
    lines += whatif.table_lines(an, width, cut)
    lines += [""] + wrap(fmt.coverage_line(an), width)
    cap = None if verbose else NOTE_LINES
    for n in an.notes:
        lines += wrap(f"note: {n}", width, lines=cap)
    for f in an.findings:
        head, evl, remedy = fmt.finding_lines(f)
        lines += [""] + wrap(head, width)
        words = evl if (verbose and evl) else f.phrase()
        lines += wrap(f"evidence: {words}", width, "   ", "     ")
        if remedy:
            lines += wrap(f"remedy: {remedy}", width, "   ", "     ")
        for ref in f.references[:3]:
            lines += wrap(f"see: {ref}", width, "   ", "     ")
    foot = cut.footer(width, ", or `attrib report` as markdown")
    lines += [""] + foot if foot else []
    return "\n".join(lines) + "\n"
