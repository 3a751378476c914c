"""The analysis document as a terminal table (one renderer per output format)."""

from __future__ import annotations

from typing import Any

from attrib.report.printable import printable_tree


def _f(x: Any, fmt: str = "{:.3f}", none: str = "-") -> str:
    return none if x is None else fmt.format(x)


def _ev(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_ev(x) for x in v[:6]) + (", …" if len(v) > 6 else "") + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_ev(x)}" for k, x in list(v.items())[:6]) + "}"
    return str(v)


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


_PROV_KEYS = ("model", "quantization", "dtype", "batch", "concurrency", "context_length", "kv_cache_dtype",
              "kv_cache_state", "speculative", "correctness_gate", "baseline_id")


def _provenance(p: dict[str, Any]) -> str:
    """One line of the capture stamp: what ran, on what stack; unknown fields are left out."""
    parts = [f"{k}={p[k]}" for k in _PROV_KEYS if p.get(k) is not None]
    versions = p.get("versions") or {}
    parts += [f"{k} {v}" for k, v in versions.items() if v and k in ("torch", "cuda", "hip", "vllm", "sglang")]
    gpu = p.get("gpu") or {}
    if gpu.get("name"):
        parts.append(f"gpu {gpu['name']} ({gpu.get('arch') or '?'})")
    env = p.get("env") or {}
    if env:
        parts.append(f"{len(env)} kernel-relevant env vars (see JSON)")
    return ", ".join(parts)


def render(doc: dict[str, Any]) -> str:
    """Per phase: a header line, the component table, the top kernels; then coverage and notes.

    Every string of the document passes `printable` first (names come from the trace)."""
    doc = printable_tree(doc)
    src, dev, cov = doc["source"], doc["device"], doc["coverage"]
    lines = [f"{src['path']}  [{src['format']}]  {src['kernels']} kernels, {src['kernel_ms']:.3f} ms kernel time",
             f"device: {dev.get('name') or '?'} (arch {dev.get('arch') or '?'}, from {dev.get('detected_from')})"]
    dist = doc.get("distributed") or {}
    if dist.get("world_size"):
        lines.append(f"distributed: {dist.get('backend') or '?'}, world size {dist['world_size']}, rank {dist.get('rank')}")
    prov = _provenance(doc.get("provenance") or {})
    if prov:
        lines.append(f"run: {prov}")
    for ph in doc["phases"]:
        sm = ph["step_ms"]
        lines += ["", f"== {ph['phase']}: {ph['steps']} steps, {_f(ph['tokens_per_step'], '{}')} tokens/step"
                  f" ({ph.get('tokens_from') or 'unknown source'}); step {_f(sm['median'])} ms"
                  f" (p10 {_f(sm['p10'])}, p90 {_f(sm['p90'])}); kernels {_f(ph['kernel_ms'])} ms;"
                  f" GPU idle {_f(ph['idle_fraction'] and ph['idle_fraction'] * 100, '{:.1f}')}%"
                  f" ({_f(ph.get('idle_ms'))} ms/step)"]
        extra = []
        if ph.get("gb_per_token") is not None:
            extra.append(f"{ph['gb_per_token']:.3f} GB/token")
        if ph.get("achieved_tok_s") is not None:
            extra.append(f"{ph['achieved_tok_s']:.1f} tok/s achieved")
        if ph.get("ceiling_tok_s") is not None:
            extra.append(f"{ph['ceiling_tok_s']:.1f} tok/s ceiling")
        if ph.get("communication_share") or (dist.get("world_size") or 1) > 1:
            extra.append(f"communication {(ph.get('communication_share') or 0) * 100:.1f}% of kernel time")
        if ph.get("bytes_known_share") is not None:
            extra.append(f"bytes known for {ph['bytes_known_share'] * 100:.1f}% of kernel time")
        if extra:
            lines.append("   " + ", ".join(extra))
        for x in ph.get("excluded_steps") or ():
            lines.append(f"   left out: step {x['step']} ({x['reason']}): {_f(x['step_ms'])} ms, {x['kernels']} kernels,"
                         f" {_f(x['kernel_ms'])} ms of kernels")
        lines.append(f"   {'component':<18}{'kernels':>8}{'ms/step':>10}{'share':>8}{'MB/step':>10}{'GB/s':>8}{'gap ms':>9}"
                     "  evidence")
        for c in ph["components"]:
            ev = ",".join(f"{k}:{v}" for k, v in (c.get("evidence") or {}).items())
            gbs = "n/a!" if c.get("inconsistent") else _f(c.get("achieved_gbs"), "{:.0f}")
            src = " [model]" if (c.get("bytes_from") or "").startswith("model") else ""
            mb = _f(c.get("bytes") and c["bytes"] / 1e6, "{:.1f}")
            if (c.get("estimated_share") or 0) >= 0.5 and mb != "-":   # mostly an estimate (Inductor, model config)
                mb = "~" + mb
            if c.get("partial"):     # priced for under half its time: a lower bound, no rate
                mb, src = ">=" + mb, src + f" [priced {c['bytes_known_share'] * 100:.0f}%]"
            lines.append(f"   {c['component']:<18}{c['kernels']:>8}{_f(c['ms']):>10}{_f(c['share'] * 100, '{:.1f}%'):>8}"
                         f"{mb:>10}{gbs:>8}{_f(c.get('gap_ms')):>9}  {ev}{src}")
        lines.append("   top kernels:")
        for t in ph["top_kernels"][:5]:
            lines.append(f"     {_f(t['ms']):>8} ms/step {t['calls']:>5}x  {t['component']:<14} {_short(t['name'])}")
    lines += ["", f"attributed: {_f(cov['attributed_share'] and cov['attributed_share'] * 100, '{:.1f}')}% of step kernel"
              f" time; bytes known: {_f(cov['bytes_known_share'] and cov['bytes_known_share'] * 100, '{:.1f}')}%"
              " of the phases' kernel time"]
    for n in doc.get("notes", []):
        lines.append(f"note: {n}")
    for f in doc.get("findings", []):
        ms = f.get("ms_per_step")
        lines += ["", f"[{f['severity']}] {f['rule']}" + (f" ({ms:.3f} ms/step)" if ms is not None else "") + f": {f['title']}"]
        ev = f.get("evidence") or {}
        if isinstance(ev, dict) and ev:
            lines.append("   evidence: " + ", ".join(f"{k}={_ev(v)}" for k, v in ev.items()))
        if f.get("remedy"):
            lines.append(f"   remedy: {f['remedy']}")
        for ref in f.get("references", [])[:3]:
            lines.append(f"   see: {ref}")
    return "\n".join(lines) + "\n"
