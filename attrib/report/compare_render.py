"""Renderers of the attrib.compare/1 document: terminal table, markdown, HTML. Print, never compute."""

from __future__ import annotations

from typing import Any

from attrib.report import fmt
from attrib.report import speculative as spec_report
from attrib.report.html import CSS, escape
from attrib.report.markdown import esc, table as md_table

HEAD = ("row", "base ms", "cand ms", "delta ms", "delta %", "p", "95% CI of delta (ms)", "verdict", "per token")


def _pct(x: Any) -> str:
    return "-" if x is None else f"{x:+.1f}%"


def rows(rs: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    out = []
    for r in rs:
        name = f"step ({r['phase']})" if "phase" in r else r["component"]
        t = r.get("per_token") or {}
        tok = f"{fmt.num(t.get('base_ms'), '{:.4f}')}->{fmt.num(t.get('cand_ms'), '{:.4f}')} {_pct(t.get('delta_pct'))}"
        ci = ("-" if r["ci_low_ms"] is None else f"[{r['ci_low_ms']:+.4f}, {r['ci_high_ms']:+.4f}]")
        verdict = r["verdict"] + (f" ({r.get('n_base')} vs {r.get('n_cand')} steps)" if r["p_value"] is None else "")
        out.append((name, fmt.num(r["base_ms"], "{:.4f}"), fmt.num(r["cand_ms"], "{:.4f}"),
                    fmt.num(r["delta_ms"], "{:+.4f}"), _pct(r["delta_pct"]), fmt.num(r["p_value"], "{:.3g}"),
                    ci, verdict, tok))
    return out


def _cut(v: Any, width: int = 70) -> str:
    return fmt.short(fmt.ev(v), width)


def header_lines(doc: dict[str, Any]) -> list[str]:
    d = doc["provenance_diff"]
    out = [f"base: {', '.join(doc['base']['traces'])}", f"cand: {', '.join(doc['cand']['traces'])}"]
    if d["mismatch"]:
        out.append("NOT A MATCHED BASELINE: " + "; ".join(f"{m['key']}: {fmt.ev(m['base'])} vs {fmt.ev(m['cand'])}"
                                                         for m in d["mismatch"]))
    else:
        out.append("matched baseline (model, arch, dtype, batch, context, speculative mode, KV dtype, tokens/step, env)")
    if d["unstamped"]:
        out.append(f"no provenance stamp: {', '.join(d['unstamped'])}")
    if d["other"]:
        out.append("other differences: " + "; ".join(f"{o['key']}: {_cut(o['base'])} vs {_cut(o['cand'])}"
                                                    for o in d["other"]))
    for w in d["within_side"]:
        out.append(f"within {w['side']}: {w['key']} differs ({fmt.ev(w['values'])})")
    out.append(f"run-to-run variance: {doc['run_to_run_variance']}")
    out.append(f"verdicts: Mann-Whitney U p < {doc['alpha']}, bootstrap 95% CI of the median difference excluding 0 "
               f"({doc['bootstrap']['resamples']} resamples, seed {doc['bootstrap']['seed']}), |change| >= "
               f"{doc['min_effect_pct']:g}%")
    return out


def _phase_lines(doc: dict[str, Any], ph: str) -> list[str]:
    s = doc["summary"][ph]
    k = doc["phases"][ph][0]["kernel_ms"]
    out = [f"steps {s['steps'][0]} vs {s['steps'][1]}, tokens/step {s['tokens_per_step'][0]} vs {s['tokens_per_step'][1]}",
           f"summed kernel time {fmt.num(k['base_ms'], '{:.4f}')} -> {fmt.num(k['cand_ms'], '{:.4f}')} ms/step "
           f"({_pct(k['delta_pct'])}, p {fmt.num(k['p_value'], '{:.3g}')}): {k['verdict']}"]
    if s.get("cause"):
        out.append(f"cause: {s['cause']}")
    spec = spec_report.compare_line(s.get("speculative") or [])
    return out + ([spec] if spec else [])


def _gate_lines(doc: dict[str, Any]) -> list[str]:
    g = doc.get("gate")
    if not g:
        return []
    out = [f"gate {g['pct']:g}%: not gated: {ph}: {why}" for ph, why in g.get("not_gated", {}).items()]
    if g["failed_phases"]:
        return out + [f"gate {g['pct']:g}%: FAILED: " + "; ".join(f"{ph}: {', '.join(g['reasons'][ph])}"
                                                                 for ph in g["failed_phases"])]
    return out + [f"gate {g['pct']:g}%: passed"]


def _finding_lines(doc: dict[str, Any]) -> list[str]:
    """Findings that need a baseline (the rules' compare checks), one line each."""
    return [f"finding {f['rule']}: {f['title']}"
            + (f" ({f['ms_per_step']:.3f} ms/step)" if f.get("ms_per_step") is not None else "")
            + (f"; remedy: {f['remedy']}" if f.get("remedy") else "") for f in doc.get("findings") or []]


def render_table(doc: dict[str, Any]) -> str:
    lines = header_lines(doc)
    for ph, rs in doc["phases"].items():
        lines += ["", f"== {ph}: " + "; ".join(_phase_lines(doc, ph))]
        body = rows(rs)
        widths = [max(len(r[i]) for r in [HEAD, *body]) for i in range(len(HEAD))]
        for r in [HEAD, *body]:
            lines.append("   " + "  ".join(r[0].ljust(widths[0]) if i == 0 else
                                           (c.ljust(widths[i]) if i >= 7 else c.rjust(widths[i]))
                                           for i, c in enumerate(r)).rstrip())
    lines += [f"note: {n}" for n in doc["notes"]] + _finding_lines(doc)
    return "\n".join(lines + _gate_lines(doc)) + "\n"


def render_markdown(doc: dict[str, Any]) -> str:
    out = ["# attrib compare", ""] + [f"- {esc(x)}" for x in header_lines(doc)]
    for ph, rs in doc["phases"].items():
        out += ["", f"## {esc(ph)}", ""] + [f"- {esc(x)}" for x in _phase_lines(doc, ph)] + [""]
        out += md_table(HEAD, rows(rs))
    out += [f"- note: {esc(n)}" for n in doc["notes"]] + [f"- {esc(x)}" for x in _finding_lines(doc)]
    return "\n".join(out + [x for g in _gate_lines(doc) for x in ("", f"**{esc(g)}**")]) + "\n"


def render_html(doc: dict[str, Any]) -> str:
    def tbl(rs):
        th = "".join(f"<th>{escape(h)}</th>" for h in HEAD)
        body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" if i in (0, 7) else f'<td class="n">{escape(c)}</td>'
                                        for i, c in enumerate(r)) + "</tr>" for r in rows(rs))
        return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"
    body = ("<h1>attrib compare</h1><div class=stamp>" + "".join(f"<div>{escape(x)}</div>" for x in header_lines(doc))
            + "</div>" + "".join(f"<h2>{escape(ph)}</h2>" + "".join(f"<p>{escape(x)}</p>" for x in _phase_lines(doc, ph))
                                 + tbl(rs) for ph, rs in doc["phases"].items())
            + "".join(f"<p class=muted>note: {escape(n)}</p>" for n in doc["notes"])
            + "".join(f"<p>{escape(x)}</p>" for x in _finding_lines(doc))
            + "".join(f"<p><b>{escape(g)}</b></p>" for g in _gate_lines(doc)))
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>attrib compare</title>"
            f"<style>{CSS}</style></head><body><main>{body}</main></body></html>\n")
