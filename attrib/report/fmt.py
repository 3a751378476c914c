"""Formatting shared by the renderers: numbers, the provenance line, and the report's tables as rows
of plain strings (each renderer escapes and lays them out its own way). No figure is computed here:
everything is read from the typed Analysis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from attrib.analysis.finding import JSON, Finding, count
from attrib.analysis.model import Analysis, Component, Device, Phase
from attrib.analysis.summary import Action, PhaseSummary, Summary

PROV_KEYS = ("model", "quantization", "dtype", "batch", "concurrency", "context_length",
             "kv_cache_dtype", "kv_cache_state", "speculative", "correctness_gate",
             "baseline_id")


def num(x: Any, fmt: str = "{:.3f}", none: str = "-") -> str:
    return none if x is None else fmt.format(x)


def pct(x: Any, nd: int = 1) -> str:
    return "-" if x is None else f"{x * 100:.{nd}f}%"


def short(name: str, width: int | None, end: bool = False) -> str:
    """`name` shortened in the middle to `width` characters (its start and end kept, an ellipsis
    between), or at its end for a sentence (`end`); whole when width is None (file outputs). The
    one place names and texts are shortened."""
    if width is None or len(name) <= width:
        return name
    if width <= 1:
        return "…"[:width]
    if end:
        return name[: width - 1].rstrip() + "…"
    # two thirds from the start: a kernel's name opens with its kind
    head = -(-2 * (width - 1) // 3)
    tail = width - 1 - head
    return name[:head] + "…" + (name[-tail:] if tail else "")


def _common(names: Sequence[str]) -> tuple[int, int]:
    """The lengths of the prefix and the suffix all `names` share (not overlapping)."""
    first, shortest = names[0], min(len(n) for n in names)
    pre = 0
    while pre < shortest and all(n[pre] == first[pre] for n in names):
        pre += 1
    suf = 0
    while suf < shortest - pre and all(n[-1 - suf] == first[-1 - suf] for n in names):
        suf += 1
    return pre, suf


def apart(names: Sequence[str], width: int | None) -> list[str]:
    """`names` each shortened to `width`, keeping the part where they differ: the prefix and suffix
    they all share are cut first (the prefix keeps its end, the suffix its start, next to what
    differs), the differing part only when it alone is too long (in the middle, `short`). Two names
    that differ only in their middle stay told apart (`short` alone would cut that middle)."""
    names = list(names)
    if width is None or all(len(n) <= width for n in names):
        return names
    if len(set(names)) < 2:
        return [short(n, width) for n in names]
    pre, suf = _common(names)
    out = []
    for n in names:
        if len(n) <= width:
            out.append(n)
            continue
        head, mid, tail = n[:pre], n[pre:len(n) - suf], n[len(n) - suf:]
        room = width - len(mid)
        if room < 2 * bool(head) + 2 * bool(tail):
            out.append(("…" if head else "") + short(mid, width - bool(head) - bool(tail))
                       + ("…" if tail else ""))
            continue
        # the tail keeps up to a third of the room, the head the rest (each with its ellipsis)
        t = min(len(tail), max(room // 3, 2 if tail else 0)) if tail else 0
        h = room - t
        if h >= len(head):
            h, t = len(head), min(len(tail), room - len(head))
        elif t < len(tail) and h + t < room:
            t = room - h
        left = head if h >= len(head) else "…" + head[len(head) - h + 1:] if h > 1 else "…"
        right = tail if t >= len(tail) else tail[:t - 1] + "…" if t > 1 else "…"
        out.append(left + mid + right)
    return out


def ev(v: Any) -> str:
    """A finding's evidence value, compact."""
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(ev(x) for x in v[:6]) + (", …" if len(v) > 6 else "") + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {ev(x)}" for k, x in list(v.items())[:6]) + "}"
    return str(v)


def provenance(p: Mapping[str, JSON]) -> str:
    """One line of the capture stamp: what ran, on what stack; unknown fields are left out."""
    parts = [f"{k}={p[k]}" for k in PROV_KEYS if p.get(k) is not None]
    versions = p.get("versions")
    if isinstance(versions, dict):
        parts += [f"{k} {v}" for k, v in versions.items()
                  if v and k in ("torch", "cuda", "hip", "vllm", "sglang")]
    gpu = p.get("gpu")
    if isinstance(gpu, dict) and gpu.get("name"):
        parts.append(f"gpu {gpu['name']} ({gpu.get('arch') or '?'})")
    env = p.get("env")
    if isinstance(env, dict) and env:
        parts.append(f"{len(env)} kernel-relevant env vars (see JSON)")
    return ", ".join(parts)


def device_line(dev: Device) -> str:
    bws = (("peak", dev.peak_bw_gbs), ("sustained", dev.sustained_bw_gbs))
    bw = [f"{k} {v:g} GB/s" + (" (the rooflines')" if k == dev.roofline_bw_basis else "")
          for k, v in bws if v]
    detected = dev.detected_from if dev.known else "unknown"
    return (f"{dev.name or '?'} (arch {dev.arch or '?'}, from {detected})"
            + (f"; {', '.join(bw)}" if bw else ""))


def phase_headline(ph: Phase) -> str:
    sm = ph.step_ms
    per = (f"{ph.samples_per_step} samples/step "
           "(a vision/diffusion forward: no token figure applies)"
           if ph.samples_per_step else
           f"{num(ph.tokens_per_step, '{}')} tokens/step ({ph.tokens_from or 'unknown source'})")
    return (f"{count(ph.steps, 'step')}, {per}; mean step {num(sm.mean)} ms"
            f" (median {num(sm.median)}, p10 {num(sm.p10)}, p90 {num(sm.p90)});"
            f" kernels {num(ph.kernel_ms)} ms/step;"
            f" GPU idle {pct(ph.idle_fraction)} ({num(ph.idle_ms)} ms/step)")


def world_size(an: Analysis) -> int | None:
    return an.distributed.world_size if an.distributed else None


def distributed_line(an: Analysis) -> str | None:
    dist = an.distributed
    if dist is None or not dist.world_size:
        return None
    return (f"distributed: {dist.backend or '?'}, world size {dist.world_size}, "
            f"rank {dist.rank}")


def phase_rates(ph: Phase, world: int | None = None) -> str:
    out = []
    if ph.gb_per_sample is not None:
        out.append(f"{ph.gb_per_sample:.3f} GB/sample")
    if ph.achieved_samples_s is not None:
        out.append(f"{ph.achieved_samples_s:.1f} samples/s achieved")
    if ph.gb_per_token is not None:
        out.append(f"{ph.gb_per_token:.3f} GB/token")
    if ph.achieved_tok_s is not None:
        out.append(f"{ph.achieved_tok_s:.1f} tok/s achieved")
    if ph.ceiling_tok_s is not None:
        out.append(f"{ph.ceiling_tok_s:.1f} tok/s ceiling")
    if ph.communication_share or (world or 1) > 1:
        out.append(f"communication {(ph.communication_share or 0) * 100:.1f}% of kernel time")
    if ph.bytes_known_share is not None:
        out.append(f"bytes known for {ph.bytes_known_share * 100:.1f}% of kernel time")
    return ", ".join(out)


COMPONENT_HEAD = ("component", "kernels/step", "ms/step", "share", "MB/step", "GB/s",
                  "TFLOP/s", "bound", "bytes known", "gap ms/step", "evidence (kernels/step)")


LEDGER_ROWS = 4  # the ledger rows under a phase's headline


def ledger_line(ph: Phase, top: int = LEDGER_ROWS) -> str | None:
    """Where the mean step's time goes: its largest ledger rows, ms and share."""
    rows = ph.ledger_rows[:top]
    if not rows:
        return None
    parts = [f"{r.cause} {r.what} {r.ms_per_step:.3f} ms ({pct(r.share, 0)})" for r in rows]
    total = sum(r.ms_per_step for r in ph.ledger_rows)
    return f"mean step {total:.3f} ms: " + "; ".join(parts)


def _weights(c: Component) -> str:
    """A component's weight format where it is not 16 bits, short (the JSON has it whole):
    ` [int4]` for int4 g128, ` [fp8]` for fp8_e4m3fn."""
    f = c.weight_format
    if not f or f in ("bf16", "fp16", "fp32"):
        return ""
    return f" [{'fp8' if f.startswith('fp8') else f.split()[0]}]"


def component_rows(ph: Phase) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for c in ph.component_rows:
        evs: Mapping[str, float | int | None] = c.evidence_per_step or c.evidence
        model = " [model]" if (c.bytes_from or "").startswith("model") else ""
        mb = num(c.bytes and c.bytes / 1e6, "{:.1f}")
        # mostly an estimate (Inductor, model config)
        if (c.estimated_share or 0) >= 0.5 and mb != "-":
            mb = "~" + mb
        if c.partial:  # priced for under half its time: a lower bound, no rate
            mb, model = ">=" + mb, model + f" [priced {(c.bytes_known_share or 0) * 100:.0f}%]"
        rows.append((c.component + _weights(c), num(c.kernels, "{}"), num(c.ms), pct(c.share), mb,
                     "n/a!" if c.inconsistent else num(c.achieved_gbs, "{:.0f}"),
                     num(c.achieved_tflops, "{:.2f}"), c.bound or "-",
                     pct(c.bytes_known_share, 0), num(c.gap_ms),
                     " ".join(f"{k}:{num(v, '{:g}')}" for k, v in evs.items()) + model))
    return rows


TOP_HEAD = ("ms/step", "calls/step", "component", "GB/s", "TFLOP/s", "kernel")


def top_rows(ph: Phase, top: int | None, width: int | None) -> list[tuple[str, ...]]:
    kern = ph.kernel_rows if top is None else ph.kernel_rows[:top]
    return [(num(t.ms), num(t.calls_per_step, "{:g}"), str(t.component),
             num(t.achieved_gbs, "{:.0f}"), num(t.achieved_tflops, "{:.2f}"),
             short(t.name, width)) for t in kern]


BOTTLENECK_HEAD = ("#", "where", "recoverable ms/step", "of step", "what")


def bottleneck_rows(ph: Phase) -> list[tuple[str, ...]]:
    return [(str(r.rank), r.component or r.kind, num(r.ms_per_step), pct(r.share_of_step), r.what)
            for r in ph.bottlenecks.ranked]


def finding_lines(f: Finding) -> tuple[str, str | None, str | None]:
    """(headline, evidence line, remedy) of a finding."""
    ms = f.ms_per_step
    cost = f" ({round(ms, 4):.3f} ms/step)" if ms is not None else ""
    head = f"[{f.severity}] {f.rule}" + cost + f": {f.title}"
    evl = ", ".join(f"{k}={ev(v)}" for k, v in f.evidence.items()) if f.evidence else None
    return head, evl, f.remedy


def coverage_line(an: Analysis) -> str:
    cov = an.coverage
    return (f"attributed: {pct(cov.attributed_share)} of step kernel time; bytes known: "
            f"{pct(cov.bytes_known_share)} of the phases' kernel time")


def total_line(ph: Phase, findings: tuple[Finding, ...]) -> str | None:
    """The phase's whole distance from its floor, when a rule states it."""
    t = ph.bottlenecks.total
    if t is None or t.ms_per_step is None:
        return None
    rule = findings[t.finding].rule if t.finding < len(findings) else "?"
    return f"in total {t.ms_per_step:.3f} ms/step above the floor ({rule}: {t.title})"


def facts_line(s: Summary) -> str:
    """The run's key facts: model, device, batch, context, dtype."""
    return ", ".join(f"{f.name} {f.value}" for f in s.facts) or "no facts known"


def verdict_line(ps: PhaseSummary) -> str:
    """A phase's rate against its ceiling, its step, its distance from the floor."""
    head = f"{ps.phase}, {count(ps.steps, 'step')}:"
    if ps.achieved is not None and ps.ceiling is not None:
        head += (f" {ps.achieved:.1f} {ps.unit} of a {ps.ceiling:.1f} {ps.unit} ceiling"
                 f" ({pct(ps.of_ceiling)});")
    elif ps.achieved is not None:
        head += f" {ps.achieved:.1f} {ps.unit} achieved (no ceiling: bytes unknown);"
    head += f" mean step {num(ps.step_ms)} ms"
    if ps.above_floor_ms is not None:
        head += f", {ps.above_floor_ms:.3f} ms/step above its floor"
    return head


def time_line(ps: PhaseSummary) -> str | None:
    """Where the step's time goes: the ledger's top rows (ms per step and share)."""
    if not ps.time:
        return None
    parts = [f"{'profiler (estimate)' if t.cause == 'profiler' else t.cause + ' ' + t.what} "
             f"{t.ms_per_step:.3f} ms ({pct(t.share, 0)})" for t in ps.time]
    return "time per step: " + "; ".join(parts)


def action_head(a: Action) -> str:
    """An action's rank, the ms per step it could recover, what it is."""
    return f"{a.rank}. {a.ms_per_step:.3f} ms/step ({pct(a.share_of_step, 0)}) {a.what}"


def assumed_line(s: Summary) -> str:
    return "; ".join(s.assumed) if s.assumed else "nothing beyond the trace"
