"""Renderers of a Comparison: terminal table, markdown, HTML, JSON. Print, never compute."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import orjson

from attrib.report import fmt
from attrib.multi.compare import CHANGED, Comparison, PhaseComparison, Row, Stats
from attrib.report import speculative as spec_report
from attrib.report.html import CSS, escape
from attrib.report.markdown import esc, table as md_table
from attrib.report.table import Cut, grid, wrap

HEAD = ("row", "base ms", "cand ms", "delta ms", "delta %", "p", "95% CI of delta (ms)", "verdict",
        "per token")
# the ledger diff: where the mean step's change went, one row per ledger row of either side
LEDGER_HEAD = ("where the time went", "base ms", "cand ms", "delta ms", "a step", "median us")
LEDGER_DROP = ("median us", "a step", "base ms")
# on a terminal too narrow for the table, its columns go in this order (then the row names shorten)
DROP = ("per token", "p", "base ms", "cand ms", "95% CI of delta (ms)")
# a changed row in the HTML: its class and colour (slower red, faster green)
ROW_CSS = ("tr.slower td{background:#fbe9e7}tr.faster td{background:#e8f5e9}"
           "tr.slower td:nth-child(8){color:#b3261e;font-weight:600}"
           "tr.faster td:nth-child(8){color:#1b5e20;font-weight:600}")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1f}%"


def _ci(s: Stats) -> str:
    if s.ci_low_ms is None or s.ci_high_ms is None:
        return "-"
    return f"[{s.ci_low_ms:+.4f}, {s.ci_high_ms:+.4f}]"


def _verdict(s: Stats) -> str:
    steps = f" ({s.n_base} vs {s.n_cand} steps)" if s.p_value is None else ""
    return s.verdict + steps


def _cells(r: Row) -> tuple[str, ...]:
    s, t = r.stats, r.per_token
    name = f"step ({r.name})" if r.step else r.name
    tok = (f"{fmt.num(t.base_ms, '{:.4f}')}->{fmt.num(t.cand_ms, '{:.4f}')} "
           f"{_pct(t.delta_pct)}")
    return (name, fmt.num(s.base_ms, "{:.4f}"), fmt.num(s.cand_ms, "{:.4f}"),
            fmt.num(s.delta_ms, "{:+.4f}"), _pct(s.delta_pct), fmt.num(s.p_value, "{:.3g}"),
            _ci(s), _verdict(s), tok)


def rows(ph: PhaseComparison) -> list[tuple[str, ...]]:
    return [_cells(r) for r in (ph.step, *ph.components)]


def _both(a: float | None, b: float | None, spec: str) -> str:
    if a is None and b is None:
        return "-"
    return f"{fmt.num(a, spec)} -> {fmt.num(b, spec)}"


def ledger_rows(ph: PhaseComparison) -> list[tuple[str, ...]]:
    """The ledger diff's rows (the largest changes, the rest summed), then their sum."""
    if ph.ledger is None:
        return []
    d = ph.ledger
    out = [(f"kernels: {m.label}" if m.cause == "kernels" else m.label, f"{m.base_ms:.4f}", f"{m.cand_ms:.4f}",
            f"{m.delta_ms:+.4f}", _both(m.base_n, m.cand_n, "{:.3g}"),
            _both(m.base_median_us, m.cand_median_us, "{:.1f}")) for m in d.shown()]
    return out + [("mean step (the rows' sum)", f"{d.base_step_ms:.4f}", f"{d.cand_step_ms:.4f}",
                   f"{d.delta_ms:+.4f}", _both(d.base_launches, d.cand_launches, "{:.3g}")
                   + " kernels", "-")]


def _pair(a: object, b: object, width: int = 70) -> tuple[str, str]:
    """Two differing values, each shortened to `width` keeping the part where they differ (the
    shared start and end are cut first: `fmt.apart`), so the two never read the same."""
    x, y = fmt.apart([fmt.ev(a), fmt.ev(b)], width)
    return x, y


def verdict_lines(c: Comparison) -> list[str]:
    """The verdict, first in every format: per phase the step's change and its verdict (and the
    cause), whether the sides are a matched baseline, the gate's outcome."""
    out = []
    for ph in c.phases:
        # a speculative loop is judged per generated token: its steps are verify passes
        s = ph.step.per_token if ph.speculative else ph.step.stats
        unit = "ms per generated token" if ph.speculative else "step"
        change = (f"{unit} {fmt.num(s.base_ms, '{:.4f}')} -> {fmt.num(s.cand_ms, '{:.4f}')} ms "
                  f"({_pct(s.delta_pct)}, p {fmt.num(s.p_value, '{:.3g}')})")
        out.append(f"verdict {ph.phase}: {_verdict(s)}, {change}"
                   + (f"; cause: {ph.cause}" if ph.cause else ""))
        if ph.run_level is not None and ph.run_level.inconclusive and not ph.speculative:
            out.append(f"verdict {ph.phase}: inconclusive: {ph.run_level.inconclusive}")
    if c.provenance_diff["mismatch"]:
        out.append("verdict: the two sides are NOT A MATCHED BASELINE (below: what differs)")
    out.append(f"verdict: {c.outputs.line()}")
    return out + gate_lines(c)


def header_lines(c: Comparison, width: int | None = None) -> list[str]:
    """The sides' traces and stamps; with `width`, each trace's path shortened to fit a line,
    keeping the part where the paths differ (two paths never read the same)."""
    d = c.provenance_diff
    names = fmt.apart([*c.base_traces, *c.cand_traces], None if width is None else width - 6)
    base, cand = names[:len(c.base_traces)], names[len(c.base_traces):]
    out = [f"base: {', '.join(base)}", f"cand: {', '.join(cand)}"]
    if d["mismatch"]:
        out.append("NOT A MATCHED BASELINE: " + "; ".join(
            f"{m['key']}: {fmt.ev(m['base'])} vs {fmt.ev(m['cand'])}" for m in d["mismatch"]))
    else:
        out.append("matched baseline (model, arch, dtype, batch, context, speculative mode, "
                   "KV dtype, tokens/step, env)")
    if d["unstamped"]:
        out.append(f"no provenance stamp: {', '.join(d['unstamped'])}")
    if d["other"]:
        out.append("other differences: " + "; ".join(
            "{}: {} vs {}".format(o["key"], *_pair(o["base"], o["cand"])) for o in d["other"]))
    for w in d["within_side"]:
        out.append(f"within {w['side']}: {w['key']} differs ({fmt.ev(w['values'])})")
    out.append(f"run-to-run variance: {c.run_to_run_variance}")
    out.append(f"verdicts: step times are means (what the ledger sums to); Mann-Whitney U p < "
               f"{c.alpha}, bootstrap 95% CI of the difference of means excluding 0 "
               f"({c.resamples} resamples, seed {c.seed}), |change| >= {c.min_effect_pct:g}%; "
               "one step per side: not testable; one trace per side: a step change within the "
               "run-to-run bounds is inconclusive")
    return out


def phase_lines(ph: PhaseComparison) -> list[str]:
    k = ph.kernels.stats
    out = [f"steps {ph.steps[0]} vs {ph.steps[1]}, tokens/step {ph.tokens_per_step[0]} vs "
           f"{ph.tokens_per_step[1]}",
           f"summed kernel time {fmt.num(k.base_ms, '{:.4f}')} -> {fmt.num(k.cand_ms, '{:.4f}')} "
           f"ms/step ({_pct(k.delta_pct)}, p {fmt.num(k.p_value, '{:.3g}')}): {k.verdict}"]
    if ph.cause:
        out.append(f"cause: {ph.cause}")
    spec = spec_report.compare_line(list(ph.speculative))
    return out + ([spec] if spec else [])


def gate_lines(c: Comparison) -> list[str]:
    g = c.gate
    if g is None:
        return []
    out = [f"gate {g.pct:g}%: not gated: {ph}: {why}" for ph, why in g.not_gated.items()]
    if g.not_comparable and not g.allow_mismatch:
        return out + [f"gate {g.pct:g}%: NOT COMPARABLE (exit {g.exit_code}): {g.not_comparable}; "
                      "pass --allow-mismatch to gate anyway"]
    if g.not_comparable:
        out.append(f"gate {g.pct:g}%: gated with --allow-mismatch although {g.not_comparable}")
    if g.failed_phases:
        return out + [f"gate {g.pct:g}%: FAILED: " + "; ".join(
            f"{ph}: {', '.join(g.reasons[ph])}"
            + (f" (moved most: {g.moved[ph]})" if g.moved.get(ph) else "")
            for ph in g.failed_phases)]
    return out + [f"gate {g.pct:g}%: passed"]


def finding_lines(c: Comparison) -> list[str]:
    """Findings that need a baseline (the rules' compare checks), one line each."""
    return [f"finding {f.rule}: {f.title}"
            + (f" ({f.ms_per_step:.3f} ms/step)" if f.ms_per_step is not None else "")
            + (f"; remedy: {f.remedy}" if f.remedy else "") for f in c.findings]


def render_table(c: Comparison, width: int | None = None) -> str:
    """The terminal table, its verdict first; with `width`, every line fits it (prose wraps,
    columns drop in DROP's order with a footer naming them, then row names shorten)."""
    cut = Cut()
    lines = [x for line in verdict_lines(c) + [""] + header_lines(c, width)
             for x in wrap(line, width)]
    for ph in c.phases:
        lines += [""] + wrap(f"== {ph.phase}: " + "; ".join(phase_lines(ph)), width)
        lines += grid(HEAD, rows(ph), width, DROP, "row", cut=cut, table=ph.phase, apart=True)
        if ph.ledger is not None:
            lines += grid(LEDGER_HEAD, ledger_rows(ph), width, LEDGER_DROP, LEDGER_HEAD[0],
                          cut=cut, table=f"{ph.phase} ledger", left=LEDGER_HEAD[4:])
    tail = [f"note: {n}" for n in c.notes] + finding_lines(c)
    lines += [x for line in tail for x in wrap(line, width)]
    return "\n".join(lines + cut.footer(width, ", or `--format md`")) + "\n"


def render_markdown(c: Comparison) -> str:
    out = ["# attrib compare", ""] + [f"**{esc(x)}**  " for x in verdict_lines(c)]
    out += [""] + [f"- {esc(x)}" for x in header_lines(c)]
    for ph in c.phases:
        out += ["", f"## {esc(ph.phase)}", ""] + [f"- {esc(x)}" for x in phase_lines(ph)] + [""]
        out += md_table(HEAD, rows(ph))
        if ph.ledger is not None:
            out += ["", f"Where the mean step's change went ({esc(ph.phase)}):", ""]
            out += md_table(LEDGER_HEAD, ledger_rows(ph))
    out += [""] * bool(c.notes or c.findings)
    out += [f"- note: {esc(n)}" for n in c.notes] + [f"- {esc(x)}" for x in finding_lines(c)]
    return "\n".join(out) + "\n"


def _html_table(ph: PhaseComparison) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in HEAD)
    body = []
    for r in (ph.step, *ph.components):
        v = r.stats.verdict
        cls = f' class="{v}"' if v in CHANGED else ""
        tds = "".join(f"<td>{escape(x)}</td>" if i in (0, 7) else f'<td class="n">{escape(x)}</td>'
                      for i, x in enumerate(_cells(r)))
        body.append(f"<tr{cls}>{tds}</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _html_ledger(ph: PhaseComparison) -> str:
    """The ledger diff as a table under the phase's rows."""
    if ph.ledger is None:
        return ""
    th = "".join(f"<th>{escape(h)}</th>" for h in LEDGER_HEAD)
    body = "".join("<tr>" + "".join(
        f"<td>{escape(x)}</td>" if i in (0, 4, 5) else f'<td class="n">{escape(x)}</td>'
        for i, x in enumerate(cells)) + "</tr>" for cells in ledger_rows(ph))
    return (f"<h3>where the mean step's change went</h3><table><thead><tr>{th}</tr></thead>"
            f"<tbody>{body}</tbody></table>")


def render_html(c: Comparison, plots: Mapping[str, str] | None = None) -> str:
    """The whole comparison as one self-contained page; plots: phase -> inline SVG (delta bars)."""
    plots = plots or {}

    def phase(ph: PhaseComparison) -> str:
        svg = plots.get(ph.phase)
        return (f"<h2>{escape(ph.phase)}</h2>"
                + "".join(f"<p>{escape(x)}</p>" for x in phase_lines(ph))
                + (f'<div class="plot">{svg}</div>' if svg else "") + _html_table(ph)
                + _html_ledger(ph))
    verdict = "".join(f"<p><b>{escape(x)}</b></p>" for x in verdict_lines(c))
    body = (f'<section id="summary"><h1>attrib compare</h1>{verdict}</section><div class=stamp>'
            + "".join(f"<div>{escape(x)}</div>" for x in header_lines(c)) + "</div>"
            + "".join(phase(ph) for ph in c.phases)
            + "".join(f"<p class=muted>note: {escape(n)}</p>" for n in c.notes)
            + "".join(f"<p>{escape(x)}</p>" for x in finding_lines(c)))
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>attrib compare</title>"
            f"<style>{CSS}{ROW_CSS}</style></head><body><main>{body}</main></body></html>\n")


def render_json(c: Comparison) -> str:
    return orjson.dumps(c.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n"


def _no_plots(render: Callable[[Comparison], str]
              ) -> Callable[[Comparison, Mapping[str, str]], str]:
    return lambda c, plots: render(c)


# --format name -> render(comparison, plots); only html draws the plots
FORMATS: dict[str, Callable[[Comparison, Mapping[str, str]], str]] = {
    "table": _no_plots(render_table), "json": _no_plots(render_json),
    "md": _no_plots(render_markdown), "html": render_html,
}
