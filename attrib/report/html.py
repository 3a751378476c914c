"""The bottleneck report as one self-contained HTML file: inline CSS and
inline SVG plots, no script, no external resource, so it opens offline.
Every string from the trace or the stamp is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape as _escape

from attrib.analysis.finding import Finding
from attrib.analysis.model import Analysis, Phase
from attrib.report import fmt, whatif
from attrib.report import speculative as spec_report
from attrib.report.printable import printable

# kernel names longer than this fold into <details>: the start shown,
# the whole on click
LONG_NAME = 90

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d1d1f;\
margin:0;background:#f6f6f4}
main{max-width:1180px;margin:0 auto;padding:20px 28px 60px;background:#fff}
h1{font-size:21px;margin:4px 0 10px;word-break:break-all}\
h2{font-size:18px;margin:30px 0 8px;border-bottom:2px solid #4e79a7}
h3{font-size:15px;margin:18px 0 6px}
.stamp{color:#444;font-size:13px}.stamp div{margin:2px 0}.muted{color:#666}
table{border-collapse:collapse;width:100%;font-size:12.5px;margin:6px 0 12px}
th,td{padding:3px 7px;border-bottom:1px solid #e3e3e3;vertical-align:top}\
th{background:#f0f0ee;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;overflow-wrap:anywhere}
details summary{cursor:pointer}
.plot svg{max-width:100%;height:auto}
.sev-high{color:#b3261e;font-weight:600}\
.sev-medium{color:#a15c00;font-weight:600}.sev-info{color:#555}
.finding{margin:10px 0;padding:8px 12px;border-left:4px solid #ccc;background:#fafaf8}
.finding.high{border-color:#b3261e}.finding.medium{border-color:#e59400}
.kpi{display:flex;gap:10px;flex-wrap:wrap;margin:8px 0}\
.kpi div{background:#f0f4f8;padding:6px 10px;border-radius:4px}
#summary{font-size:13px;line-height:1.35;border:1px solid #cfd8e3;background:#f7f9fc;
padding:8px 14px;margin:0 0 14px}
#summary h1{font-size:17px;margin:2px 0 4px}#summary p{margin:3px 0}
#summary .phase{margin:8px 0 2px;font-weight:600}
#summary ol{margin:2px 0 4px;padding-left:22px}#summary li{margin:1px 0}#summary .ev{color:#555}
"""


def escape(text: str, quote: bool = True) -> str:
    """`text` as HTML text, without the control characters and terminal escapes a name may carry."""
    return _escape(printable(text), quote)


def _name(name: str) -> str:
    if len(name) <= LONG_NAME:
        return f"<code>{escape(name)}</code>"
    return (f"<details><summary><code>{escape(name[:LONG_NAME])}…</code></summary>"
            f"<code>{escape(name)}</code></details>")


def _table(head: tuple[str, ...], rows: Sequence[tuple[str, ...]],
           text_cols: tuple[int, ...] = (0,),
           raw_cols: tuple[int, ...] = ()) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = []
    for r in rows:
        cells = []
        for i, c in enumerate(r):
            if i in raw_cols:
                cells.append(f"<td>{c}</td>")  # already escaped markup
            elif i in text_cols:
                cells.append(f"<td>{escape(c)}</td>")
            else:
                cells.append(f'<td class="n">{escape(c)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _plot(plots: dict[str, str], key: str) -> str:
    svg = plots.get(key)
    return f'<div class="plot">{svg}</div>' if svg else ""


def _bottlenecks(ph: Phase, findings: tuple[Finding, ...]) -> str:
    b = ph.bottlenecks
    rows = []
    for r in b.ranked:
        links = ", ".join(f'<a href="#finding-{i}">{escape(findings[i].rule)}</a>'
                          for i in r.findings if i < len(findings))
        rows.append((str(r.rank), r.component or r.kind, fmt.num(r.ms_per_step),
                     fmt.pct(r.share_of_step), r.what, links or "-"))
    out = ""
    if rows:
        head = fmt.BOTTLENECK_HEAD + ("findings",)
        out += ("<h3>Bottlenecks, ranked by recoverable ms per step</h3>"
                "<p class=muted>Gap to the roofline, GPU "
                "idle time, and rules' estimates; "
                "each place the time goes is counted once.</p>"
                + _table(head, rows, text_cols=(1, 4), raw_cols=(5,)))
    total = fmt.total_line(ph, findings)
    if total:
        out += f"<p><b>{escape(total)}</b></p>"
    if b.unpriced:
        items = "".join(f"<li>{escape(u.component)}: "
                        f"{fmt.num(u.ms_per_step)} ms/step "
                        f"({fmt.pct(u.share)}), {escape(u.why)}</li>"
                        for u in b.unpriced)
        out += "<ul>" + items + "</ul>"
    return out


def _figures(f: Finding) -> str:
    """A finding's raw evidence as a folded table."""
    if not f.evidence:
        return ""
    rows = [(k, fmt.ev(v)) for k, v in f.evidence.items()]
    return ("<details><summary>figures</summary>"
            + _table(("figure", "value"), rows, text_cols=(0, 1)) + "</details>")


def _reference(r: str) -> str:
    """One reference as a list item, a link where it is a web address."""
    if str(r).startswith(("https://", "http://")):
        return f'<li><a href="{escape(r)}">{escape(r)}</a></li>'
    return f"<li>{escape(str(r))}</li>"


def _finding(i: int, f: Finding) -> str:
    head, _, remedy = fmt.finding_lines(f)
    sev = escape(f.severity)
    refs = "".join(_reference(r) for r in f.references)
    return (f'<div class="finding {sev}" id="finding-{i}">'
            f'<div class="sev-{sev}">{escape(head)}</div>'
            + f"<div><b>evidence</b>: {escape(f.phrase())}</div>" + _figures(f)
            + (f"<div><b>remedy</b>: {escape(remedy)}</div>" if remedy else "")
            + (f"<ul>{refs}</ul>" if refs else "") + "</div>")


def _phase(an: Analysis, ph: Phase, plots: dict[str, str]) -> str:
    p = ph.phase
    rates = fmt.phase_rates(ph, fmt.world_size(an))
    where = fmt.ledger_line(ph)
    kpis = [x for x in (rates, where) if x]
    tops = [r[:-1] + (_name(t.name),) for r, t in zip(fmt.top_rows(ph, None, None), ph.kernel_rows)]
    return (f"<h2>{escape(p)}</h2><p>{escape(fmt.phase_headline(ph))}</p>"
            + "".join(f'<div class="kpi"><div>{escape(k)}</div></div>' for k in kpis)
            + _bottlenecks(ph, an.findings)
            + _plot(plots, f"{p}_steps")
            + "<h3>Components (medians per step)</h3>"
            + _table(fmt.COMPONENT_HEAD, fmt.component_rows(ph), text_cols=(0, 7, 10))
            + _plot(plots, f"{p}_roofline")
            + "<h3>Top kernels (per step)</h3>"
            + _table(fmt.TOP_HEAD, tops, text_cols=(2,), raw_cols=(5,))
            + spec_report.html(ph, _table, escape))


def _summary(an: Analysis) -> str:
    """The verdict, the page's first element: facts, assumptions, per phase rate, time, actions."""
    s = an.summary
    out = f"<h1>attrib report: {escape(str(an.source.path))}</h1>"
    if s is None:
        return f'<section id="summary">{out}</section>'
    out += (f"<p><b>facts</b>: {escape(fmt.facts_line(s))}</p>"
            f"<p><b>assumed</b>: {escape(fmt.assumed_line(s))}</p>"
            + "".join(f"<p><b>caveat</b>: {escape(c)}</p>" for c in s.caveats))
    for ps in s.phases:
        out += f'<p class="phase">{escape(fmt.verdict_line(ps))}</p>'
        if (sp := spec_report.headline(an, ps.phase)) is not None:
            out += f"<p>{escape(sp)}</p>"
        tl = fmt.time_line(ps)
        if tl:
            out += f"<p>{escape(tl)}</p>"
        items = []
        for a in ps.actions:
            ref = (f' (<a href="#finding-{a.finding}">{escape(a.rule or "")}</a>)'
                   if a.finding is not None else "")
            share = fmt.pct(a.share_of_step, 0)
            items.append(f"<li><b>{a.ms_per_step:.3f} ms/step</b> ({share}) "
                         f"{escape(a.what)}{ref}: "
                         f'<span class="ev">{escape(a.evidence)}</span></li>')
        out += f"<ol>{''.join(items)}</ol>" if items else ""
    return f'<section id="summary">{out}</section>'


def render(an: Analysis, plots: dict[str, str] | None = None,
           plot_note: str | None = None) -> str:
    """The whole report; plots: plot name -> inline SVG (plots.report_plots);
    plot_note: why none."""
    src, plots = an.source, plots or {}
    prov = fmt.provenance(an.provenance)
    dist = [x for x in [fmt.distributed_line(an)] if x]
    stamp = [f"device: {fmt.device_line(an.device)}"] + dist + [
             f"source: {src.format}, {src.kernels} kernels, "
             f"{src.kernel_ms:.3f} ms kernel time (total)",
             f"run: {prov}" if prov else "run: no provenance stamp", fmt.coverage_line(an)]
    findings = an.findings
    finding_html = "".join(_finding(i, f) for i, f in enumerate(findings))
    body = (_summary(an) + "<div class=stamp>"
            + "".join(f"<div>{escape(s)}</div>" for s in stamp) + "</div>"
            + (f"<p class=muted>{escape(plot_note)}</p>" if plot_note else "")
            + _plot(plots, "timeline")
            + "".join(_phase(an, ph, plots) for ph in an.phases) + whatif.html_section(an)
            + "<h2>Findings</h2>" + (finding_html or "<p>No rule fired.</p>")
            + ("<h2>Notes</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in an.notes) + "</ul>"
               if an.notes else ""))
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
            "<meta name=viewport content='width=device-width,initial-scale=1'>"
            f"<title>attrib report: {escape(str(src.path))}</title><style>{CSS}</style></head>"
            f"<body><main>{body}</main></body></html>\n")
