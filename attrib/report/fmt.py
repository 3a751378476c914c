"""Formatting shared by the renderers: numbers, the provenance line, and the report's tables as rows
of plain strings (each renderer escapes and lays them out its own way). No figure is computed here.
"""

from __future__ import annotations

from typing import Any

PROV_KEYS = ("model", "quantization", "dtype", "batch", "concurrency", "context_length", "kv_cache_dtype",
             "kv_cache_state", "speculative", "correctness_gate", "baseline_id")


def num(x: Any, fmt: str = "{:.3f}", none: str = "-") -> str:
    return none if x is None else fmt.format(x)


def pct(x: Any, nd: int = 1) -> str:
    return "-" if x is None else f"{x * 100:.{nd}f}%"


def short(name: str, width: int | None) -> str:
    """`name` cut to `width` characters with an ellipsis; whole when width is None (file outputs)."""
    return name if width is None or len(name) <= width else name[: width - 1] + "…"


def ev(v: Any) -> str:
    """A finding's evidence value, compact."""
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(ev(x) for x in v[:6]) + (", …" if len(v) > 6 else "") + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {ev(x)}" for k, x in list(v.items())[:6]) + "}"
    return str(v)


def provenance(p: dict[str, Any]) -> str:
    """One line of the capture stamp: what ran, on what stack; unknown fields are left out."""
    parts = [f"{k}={p[k]}" for k in PROV_KEYS if p.get(k) is not None]
    versions = p.get("versions") or {}
    parts += [f"{k} {v}" for k, v in versions.items() if v and k in ("torch", "cuda", "hip", "vllm", "sglang")]
    gpu = p.get("gpu") or {}
    if gpu.get("name"):
        parts.append(f"gpu {gpu['name']} ({gpu.get('arch') or '?'})")
    env = p.get("env") or {}
    if env:
        parts.append(f"{len(env)} kernel-relevant env vars (see JSON)")
    return ", ".join(parts)


def device_line(dev: dict[str, Any]) -> str:
    bw = [f"{k} {dev[f'{k}_bw_gbs']:g} GB/s" for k in ("peak", "sustained") if dev.get(f"{k}_bw_gbs")]
    return (f"{dev.get('name') or '?'} (arch {dev.get('arch') or '?'}, from {dev.get('detected_from')})"
            + (f"; {', '.join(bw)}" if bw else ""))


def phase_headline(ph: dict[str, Any]) -> str:
    sm = ph["step_ms"]
    idle = ph.get("idle_fraction")
    return (f"{ph['steps']} steps, {num(ph['tokens_per_step'], '{}')} tokens/step"
            f" ({ph.get('tokens_from') or 'unknown source'}); step {num(sm['median'])} ms"
            f" (p10 {num(sm['p10'])}, p90 {num(sm['p90'])}); kernels {num(ph['kernel_ms'])} ms/step;"
            f" GPU idle {pct(idle)} ({num(ph.get('idle_ms'))} ms/step)")


def distributed_line(doc: dict[str, Any]) -> str | None:
    dist = doc.get("distributed") or {}
    if not dist.get("world_size"):
        return None
    return f"distributed: {dist.get('backend') or '?'}, world size {dist['world_size']}, rank {dist.get('rank')}"


def phase_rates(ph: dict[str, Any], world_size: int | None = None) -> str:
    out = []
    if ph.get("gb_per_token") is not None:
        out.append(f"{ph['gb_per_token']:.3f} GB/token")
    if ph.get("achieved_tok_s") is not None:
        out.append(f"{ph['achieved_tok_s']:.1f} tok/s achieved")
    if ph.get("ceiling_tok_s") is not None:
        out.append(f"{ph['ceiling_tok_s']:.1f} tok/s ceiling")
    if ph.get("communication_share") or (world_size or 1) > 1:
        out.append(f"communication {(ph.get('communication_share') or 0) * 100:.1f}% of kernel time")
    if ph.get("bytes_known_share") is not None:
        out.append(f"bytes known for {ph['bytes_known_share'] * 100:.1f}% of kernel time")
    return ", ".join(out)


COMPONENT_HEAD = ("component", "kernels/step", "ms/step", "share", "MB/step", "GB/s", "TFLOP/s", "bound",
                  "bytes known", "gap ms/step", "evidence (kernels/step)")


def component_rows(ph: dict[str, Any]) -> list[tuple[str, ...]]:
    rows = []
    for c in ph["components"]:
        evs = c.get("evidence_per_step") or c.get("evidence") or {}
        model = " [model]" if (c.get("bytes_from") or "").startswith("model") else ""
        mb = num(c.get("bytes") and c["bytes"] / 1e6, "{:.1f}")
        if (c.get("estimated_share") or 0) >= 0.5 and mb != "-":  # mostly an estimate (Inductor, model config)
            mb = "~" + mb
        if c.get("partial"):  # priced for under half its time: a lower bound, no rate
            mb, model = ">=" + mb, model + f" [priced {c['bytes_known_share'] * 100:.0f}%]"
        rows.append((c["component"], num(c["kernels"], "{}"), num(c["ms"]), pct(c["share"]), mb,
                     "n/a!" if c.get("inconsistent") else num(c.get("achieved_gbs"), "{:.0f}"),
                     num(c.get("achieved_tflops"), "{:.2f}"), c.get("bound") or "-",
                     pct(c.get("bytes_known_share"), 0), num(c.get("gap_ms")),
                     " ".join(f"{k}:{num(v, '{:g}')}" for k, v in evs.items()) + model))
    return rows


TOP_HEAD = ("ms/step", "calls/step", "component", "GB/s", "TFLOP/s", "kernel")


def top_rows(ph: dict[str, Any], top: int | None, width: int | None) -> list[tuple[str, ...]]:
    kern = ph["top_kernels"] if top is None else ph["top_kernels"][:top]
    return [(num(t["ms"]), num(t.get("calls_per_step"), "{:g}"), t["component"], num(t.get("achieved_gbs"), "{:.0f}"),
             num(t.get("achieved_tflops"), "{:.2f}"), short(t["name"], width)) for t in kern]


BOTTLENECK_HEAD = ("#", "where", "recoverable ms/step", "of step", "what")


def bottleneck_rows(ph: dict[str, Any]) -> list[tuple[str, ...]]:
    b = ph.get("bottlenecks") or {}
    return [(str(r["rank"]), r["component"] or r["kind"], num(r["ms_per_step"]), pct(r["share_of_step"]), r["what"])
            for r in b.get("ranked", [])]


def finding_lines(f: dict[str, Any]) -> tuple[str, str | None, str | None]:
    """(headline, evidence line, remedy) of a finding."""
    ms = f.get("ms_per_step")
    head = (f"[{f['severity']}] {f['rule']}" + (f" ({ms:.3f} ms/step)" if isinstance(ms, (int, float)) else "")
            + f": {f['title']}")
    e = f.get("evidence") or {}
    evl = ", ".join(f"{k}={ev(v)}" for k, v in e.items()) if isinstance(e, dict) and e else None
    return head, evl, f.get("remedy")


def coverage_line(doc: dict[str, Any]) -> str:
    cov = doc["coverage"]
    return (f"attributed: {pct(cov['attributed_share'])} of step kernel time; bytes known: "
            f"{pct(cov['bytes_known_share'])} of the phases' kernel time")


def total_line(ph: dict[str, Any], findings: list[dict[str, Any]]) -> str | None:
    """The phase's whole distance from its floor, when a rule states it."""
    t = (ph.get("bottlenecks") or {}).get("total")
    if not t or t.get("ms_per_step") is None:
        return None
    rule = findings[t["finding"]]["rule"] if t["finding"] < len(findings) else "?"
    return f"in total {t['ms_per_step']:.3f} ms/step above the floor ({rule}: {t['title']})"
