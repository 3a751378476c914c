"""The bottleneck report as GitHub markdown. Plots are SVG files beside the report (the CLI writes
them; `plots` maps a plot name to its file name), or omitted with a note. Every string from a trace
is escaped for markdown tables; kernel names are whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attrib.analysis.finding import Finding
from attrib.analysis.model import Analysis, Phase
from attrib.report import fmt, whatif
from attrib.report import speculative as spec_report
from attrib.report.printable import printable


def esc(text: Any) -> str:
    """Safe inside a GitHub table cell and as text: no HTML, no column breaks, no line breaks, no
    links (`[l](javascript:...)`), no control characters."""
    s = printable(str(text)).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = s.replace("[", "\\[").replace("]", "\\]")
    return s.replace("|", "\\|").replace("`", "&#96;")


def table(head: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return out + ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]


def link(ref: str) -> str:
    """A reference as a markdown link (its host and path as the text), else as text."""
    if not str(ref).startswith(("https://", "http://")) or any(c in ref for c in "()<> "):
        return esc(ref)
    return f"[{esc(fmt.short(ref.split('://', 1)[1], 70))}]({ref})"


def _finding(i: int, f: Finding) -> list[str]:
    head, _, remedy = fmt.finding_lines(f)
    out = [f"- <a id=\"finding-{i}\"></a>**{esc(head)}**", f"  - evidence: {esc(f.phrase())}"]
    if remedy:
        out.append(f"  - remedy: {esc(remedy)}")
    out += [f"  - see: {link(r)}" for r in f.references]
    if f.evidence:
        rows = [(k, fmt.ev(v)) for k, v in f.evidence.items()]
        out += ["", "  <details><summary>figures</summary>", ""]
        out += ["  " + line for line in table(("figure", "value"), rows)] + ["", "  </details>", ""]
    return out


def _verdict(an: Analysis) -> list[str]:
    """The summary: facts, what was assumed, per phase the verdict, the time, the top actions."""
    s = an.summary
    if s is None:
        return []
    out = ["## Verdict", "", f"- facts: {esc(fmt.facts_line(s))}",
           f"- assumed: {esc(fmt.assumed_line(s))}",
           *(f"- caveat: {esc(c)}" for c in s.caveats)]
    for ps in s.phases:
        out += ["", f"**{esc(fmt.verdict_line(ps))}**"]
        if (sp := spec_report.headline(an, ps.phase)) is not None:
            out += ["", esc(sp)]
        tl = fmt.time_line(ps)
        if tl:
            out += ["", esc(tl)]
        if ps.actions:
            out.append("")
        for a in ps.actions:
            ref = f" ([{esc(a.rule)}](#finding-{a.finding}))" if a.finding is not None else ""
            out.append(f"{a.rank}. **{a.ms_per_step:.3f} ms/step** ({fmt.pct(a.share_of_step, 0)}) "
                       f"{esc(a.what)}{ref}: {esc(a.evidence)}")
    return out


def _bottlenecks(ph: Phase, findings: tuple[Finding, ...]) -> list[str]:
    b = ph.bottlenecks
    rows = []
    for r in b.ranked:
        refs = ", ".join(findings[i].rule for i in r.findings if i < len(findings))
        rows.append((str(r.rank), r.component or r.kind, fmt.num(r.ms_per_step),
                     fmt.pct(r.share_of_step), r.what, refs or "-"))
    out = []
    if rows:
        out += ["**Bottlenecks**, ranked by the milliseconds per step a fix could recover "
                "(gap to the roofline, GPU idle, rules' estimates):", ""]
        out += table(fmt.BOTTLENECK_HEAD + ("findings",), rows)
    total = fmt.total_line(ph, findings)
    if total:
        out += ["", f"_{esc(total)}_"]
    for u in b.unpriced:
        out += [
            "",
            f"- {esc(u.component)}: {fmt.num(u.ms_per_step)} ms/step "
            f"({fmt.pct(u.share)}), {esc(u.why)}",
        ]
    return out


def render(an: Analysis, plots: dict[str, str] | None = None,
           plot_note: str | None = None) -> str:
    """The report; plots: plot name -> SVG file name beside the report; plot_note: why there
    are none."""
    src, plots = an.source, plots or {}
    out = (
        [f"# attrib report: {esc(src.path)}", ""] + _verdict(an)
        + ["", "## Run", "", f"- device: {esc(fmt.device_line(an.device))}"]
        + [f"- {esc(x)}" for x in [fmt.distributed_line(an)] if x]
        + [
            f"- source: {esc(src.format)}, {src.kernels} kernels, "
            f"{src.kernel_ms:.3f} ms kernel time (total)"
        ]
    )
    prov = fmt.provenance(an.provenance)
    unstamped = "- run: no provenance stamp (capture with collectors.capture to record one)"
    out.append(f"- run: {esc(prov)}" if prov else unstamped)
    out.append(f"- coverage: {esc(fmt.coverage_line(an))}")
    if plot_note:
        out += ["", f"_{esc(plot_note)}_"]
    if "timeline" in plots:
        out += ["", f"![step timeline]({plots['timeline']})"]
    findings = an.findings
    for ph in an.phases:
        out += ["", f"## {esc(ph.phase)}", "", esc(fmt.phase_headline(ph))]
        rates = fmt.phase_rates(ph, fmt.world_size(an))
        if rates:
            out += ["", esc(rates)]
        where = fmt.ledger_line(ph)
        if where:
            out += ["", esc(where)]
        out += [""] + _bottlenecks(ph, findings)
        out += ["", "**Components** (medians per step):", ""]
        out += table(fmt.COMPONENT_HEAD, fmt.component_rows(ph))
        out += ["", "**Top kernels** (per step):", ""]
        out += table(fmt.TOP_HEAD, fmt.top_rows(ph, None, None))
        out += spec_report.markdown(ph, table, esc)
        for key, title in (("roofline", "roofline"), ("steps", "per-step time by component")):
            name = plots.get(f"{ph.phase}_{key}")
            if name:
                out += ["", f"![{esc(ph.phase)} {title}]({name})"]
    out += whatif.markdown_lines(an)
    out += ["", "## Findings", ""]
    out += [line for i, f in enumerate(findings) for line in _finding(i, f)] or ["No rule fired."]
    if an.notes:
        out += ["", "## Notes", ""] + [f"- {esc(n)}" for n in an.notes]
    return "\n".join(out) + "\n"
