"""Before/after: two sides (each one or more analysis documents of the same stack) compared
per phase and per component, with statistics over steps, and the change of the mean step split
over the step-time ledger rows of both sides (attrib.multi.ledger_diff). The result is a typed
`Comparison`; its `to_dict()` is the `attrib.compare/1` document.

One statistic: every time is the MEAN step (what the ledger sums to). Per row (the whole step,
then each component): the means over the pooled steps of each side, their difference, the
two-sided Mann-Whitney U p-value, and a bootstrap 95% CI of the difference of means (fixed seed).
With several traces on a side the bootstrap resamples traces first, then steps within each drawn
trace, so run-to-run variance widens the CI (a run-level test).

With one trace per side the test is within-run: it knows step-to-step spread, not how far a
second run of the same job would land. Kernel times are stable between runs; host time is not
(two processes of one job on the H200: decode host time +51%). So a step change is called
faster/slower only when the part of it beyond a run-to-run bound (KERNEL_RUN_BOUND of the base's
device time for the device rows, HOST_RUN_BOUND of its host-side time for the rest) is itself at
least the minimum effect; else the verdict is `inconclusive`, with the number of runs a side
that would tell. Verdicts: `faster` / `slower` when p < ALPHA, the CI excludes 0 and the change
is at least `min_effect_pct` (and 1 microsecond); `not testable` with one step per side;
`inconclusive` as above; else `no significant change`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import math

import msgspec
import numpy as np

from attrib.analysis.records import as_dict
from attrib.analysis.finding import Finding
from attrib.analysis.model import Analysis, Phase
from attrib.multi.speculative import compare_rows
from attrib.multi.ledger_diff import LedgerDiff, explain, ledger_diff, moved_words
from attrib.multi.outputs import OutputsCheck, outputs_check
from attrib.multi.provenance_diff import provenance_diff

SCHEMA_ID = "attrib.compare/1"
ALPHA = 0.05
MIN_EFFECT_PCT = 3.0
MIN_EFFECT_MS = 0.001
BOOT = 2000
SEED = 20261130
SAME = "no significant change"
UNTESTABLE = "not testable"
NOT_COMPARABLE = "not comparable"
EXIT_NOT_COMPARABLE = 3  # --gate on a pair the stamps call not a matched baseline
CHANGED = ("faster", "slower")
INCONCLUSIVE = "inconclusive"
# Run-to-run bounds with one trace per side (docs/compare.md shows how they were measured):
# device (kernel and copy) time of the base that a second run of the same job may differ by:
# two processes of one job on the H200 (tests/fixtures/captured sdpa_attn_a/_b, issue37 aa2_a/_b)
# differ by 0.1-0.3% in kernel time; 3% leaves room for clocks and thermals
KERNEL_RUN_BOUND = 0.03
# host-side (launch, host, sync, profiler) time of the base: the same pairs differ by up to 51%
HOST_RUN_BOUND = 0.6
MAX_RUNS = 50  # the most runs a side an inconclusive verdict asks for ("or more" beyond it)


class Stats(msgspec.Struct, frozen=True):
    """One row's figures: steps per side, means (ms), their difference, p, the CI, the verdict."""

    n_base: int
    n_cand: int
    base_ms: float | None
    cand_ms: float | None
    delta_ms: float | None
    delta_pct: float | None
    p_value: float | None
    ci_low_ms: float | None
    ci_high_ms: float | None
    verdict: str

    def to_dict(self, *, counts: bool = True, ci: bool = True) -> dict[str, Any]:
        out = as_dict(self)
        if not counts:
            del out["n_base"], out["n_cand"]
        if not ci:
            del out["ci_low_ms"], out["ci_high_ms"]
        return out


class Row(msgspec.Struct, frozen=True):
    """A compared row: the step of a phase (name: the phase) or a component, per step and
    per token."""

    name: str
    step: bool
    stats: Stats
    per_token: Stats

    def to_dict(self) -> dict[str, Any]:
        head = {"phase" if self.step else "component": self.name}
        return head | self.stats.to_dict() | {"per_token": self.per_token.to_dict(counts=False)}


class RunLevel(msgspec.Struct, frozen=True):
    """One trace per side: the mean step's change split into device and host-side parts, each
    against its run-to-run bound (ms), the signed part beyond the bounds, and, when that is
    too small to call, why and the runs a side that would tell."""

    device_ms: float
    device_bound_ms: float
    host_ms: float
    host_bound_ms: float
    beyond_ms: float
    inconclusive: str | None = None
    runs: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v)
                for k, v in as_dict(self).items()}


class PhaseComparison(msgspec.Struct, frozen=True):
    """One phase: its step row, the summed kernel time, the component rows (largest change
    first), the ledger diff (where the mean step's change went) and, with one trace per side,
    the run-level check of the step's verdict."""

    phase: str
    step: Row
    kernels: Row
    components: tuple[Row, ...]
    steps: tuple[int, int]
    tokens_per_step: tuple[Any, Any]
    cause: str | None
    speculative: tuple[dict[str, Any], ...] = ()  # both sides a speculative loop: figure rows
    ledger: LedgerDiff | None = None
    run_level: RunLevel | None = None

    def rows_dict(self) -> list[dict[str, Any]]:
        k = self.kernels.stats.to_dict(counts=False, ci=False)
        step = self.step.to_dict() | {"kernel_ms": k | {"per_token": self.kernels.per_token.to_dict(
            counts=False)}, "cause": self.cause}
        return [step] + [r.to_dict() for r in self.components]


class Gate(msgspec.Struct, frozen=True):
    """--gate's outcome: failed phases and why, what was not gated, and the exit code (0 pass,
    1 a regression, 3 not comparable: the stamps say not a matched baseline)."""

    pct: float
    failed_phases: tuple[str, ...]
    reasons: dict[str, list[str]]
    not_gated: dict[str, str]
    exit_code: int
    not_comparable: str | None = None
    allow_mismatch: bool = False
    moved: dict[str, str] = {}  # failed phase -> the ledger rows that moved most, with their ms

    def to_dict(self) -> dict[str, Any]:
        return {"pct": self.pct, "failed_phases": list(self.failed_phases), "reasons": self.reasons,
                "not_gated": self.not_gated, "exit_code": self.exit_code,
                "not_comparable": self.not_comparable, "allow_mismatch": self.allow_mismatch,
                "moved": self.moved}


class Comparison(msgspec.Struct, frozen=True):
    """The comparison of two sides (what the compare renderers read)."""

    base_traces: tuple[str, ...]
    cand_traces: tuple[str, ...]
    provenance_diff: dict[str, Any]
    run_to_run_variance: str
    min_effect_pct: float
    phases: tuple[PhaseComparison, ...]
    gate: Gate | None
    notes: tuple[str, ...]
    findings: tuple[Finding, ...] = ()
    outputs: OutputsCheck = OutputsCheck("not recorded")
    alpha: float = ALPHA
    resamples: int = BOOT
    seed: int = SEED

    @property
    def matched_baseline(self) -> bool:
        return not self.provenance_diff["mismatch"]

    def phase(self, name: str) -> PhaseComparison | None:
        return next((p for p in self.phases if p.phase == name), None)

    def to_dict(self) -> dict[str, Any]:
        """The attrib.compare/1 document."""
        summary = {p.phase: {"steps": list(p.steps), "tokens_per_step": list(p.tokens_per_step),
                             "cause": p.cause}
                   | ({"speculative": list(p.speculative)} if p.speculative else {})
                   | ({"ledger_diff": p.ledger.to_dict()} if p.ledger else {})
                   | ({"run_level": p.run_level.to_dict()} if p.run_level else {})
                   for p in self.phases}
        return {"schema": SCHEMA_ID,
                "base": {"traces": list(self.base_traces)},
                "cand": {"traces": list(self.cand_traces)},
                "matched_baseline": self.matched_baseline, "provenance_diff": self.provenance_diff,
                "run_to_run_variance": self.run_to_run_variance, "alpha": self.alpha,
                "min_effect_pct": self.min_effect_pct,
                "bootstrap": {"resamples": self.resamples, "seed": self.seed},
                "phases": {p.phase: p.rows_dict() for p in self.phases}, "summary": summary,
                "outputs": self.outputs.to_dict(),
                "gate": None if self.gate is None else self.gate.to_dict(),
                "notes": list(self.notes),
                "findings": [f.to_json() for f in self.findings]}


def _mean(groups: list[np.ndarray]) -> float:
    return float(np.mean(np.concatenate(groups)))


def _boot_means(groups: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """BOOT bootstrap means: traces drawn with replacement (when more than one), then steps within
    each drawn trace; vectorised, shorter traces padded with NaN."""
    lens = np.array([len(g) for g in groups])
    nmax, t = int(lens.max()), len(groups)
    padded = np.full((t, nmax), np.nan)
    for i, g in enumerate(groups):
        padded[i, : len(g)] = g
    tr = rng.integers(0, t, (BOOT, t)) if t > 1 else np.zeros((BOOT, 1), dtype=int)
    n = lens[tr]  # (BOOT, t) steps of each drawn trace
    idx = (rng.random((BOOT, t, nmax)) * n[..., None]).astype(int)  # step draws within the trace
    vals = padded[tr[..., None], idx]
    vals[np.arange(nmax)[None, None, :] >= n[..., None]] = np.nan
    return np.nanmean(vals.reshape(BOOT, -1), axis=1)


def _untestable(nb: int, nc: int, mb: float, mc: float) -> Stats:
    """One step per side: the means and their difference, no p and no CI (nothing to test)."""
    delta = mc - mb
    pct = delta / mb * 100 if mb else None
    return Stats(nb, nc, round(mb, 4), round(mc, 4), round(delta, 4),
                 None if pct is None else round(pct, 2), None, None, None, UNTESTABLE)


def stats(base: list[list[float]], cand: list[list[float]],
          min_effect_pct: float = MIN_EFFECT_PCT) -> Stats:
    """base/cand: per trace, the per-step values (ms). The row's figures and verdict."""
    b = [np.asarray(g, float) for g in base if len(g)]
    c = [np.asarray(g, float) for g in cand if len(g)]
    if not b or not c:
        return Stats(sum(len(g) for g in b), sum(len(g) for g in c),
                     None, None, None, None, None, None, None, NOT_COMPARABLE)
    mb, mc = _mean(b), _mean(c)
    pb, pc = np.concatenate(b), np.concatenate(c)
    if len(pb) <= 1 and len(pc) <= 1:
        return _untestable(len(pb), len(pc), mb, mc)
    from scipy.stats import mannwhitneyu  # scipy.stats takes ~0.5 s to import: only compare pays it

    p = float(mannwhitneyu(pb, pc, alternative="two-sided").pvalue)
    if np.isnan(p):
        p = 1.0  # every value identical on both sides
    rng = np.random.default_rng(SEED)
    diff = _boot_means(c, rng) - _boot_means(b, rng)
    lo, hi = (float(x) for x in np.percentile(diff, [2.5, 97.5]))
    delta = mc - mb
    pct = delta / mb * 100 if mb else None
    big = abs(delta) >= MIN_EFFECT_MS and (pct is None or abs(pct) >= min_effect_pct)
    sig = p < ALPHA and (lo > 0 or hi < 0) and big
    verdict = SAME if not sig else ("slower" if delta > 0 else "faster")
    return Stats(int(len(pb)), int(len(pc)), round(mb, 4), round(mc, 4), round(delta, 4),
                 None if pct is None else round(pct, 2), float(f"{p:.4g}"),
                 round(lo, 4), round(hi, 4), verdict)


def _phase(docs: Sequence[Analysis], phase: str) -> list[Phase]:
    return [p for d in docs for p in d.phases if p.phase == phase]


def _generated(ph: Phase) -> list[float] | None:
    """A speculative loop's ms per generated token: each round after the prefill's gives its
    time over its accepted + 1 tokens once per token (so the mean is the rounds' time over
    their tokens, the analysis's rate); None for a plain phase."""
    rounds = ph.speculative.rounds if ph.speculative is not None else ()
    out = [r.round_ms / (r.accepted + 1) for r in rounds
           if not r.prefill and r.accepted is not None for _ in range(r.accepted + 1)]
    return out or None


def _series(phs: list[Phase], key: str, component: str | None = None,
            per_token: bool = False) -> list[list[float]]:
    """Per trace, the per-step values of `key` (or a component's ms); per token: over the
    step's tokens, or for a speculative loop's step time, a round's over its generated tokens."""
    out = []
    for ph in phs:
        gen = _generated(ph) if per_token and key == "step_ms" and component is None else None
        if gen is not None:
            out.append(gen)
            continue
        s = ph.per_step
        vals: Sequence[float | None] = (s.components.get(component, (0.0,) * len(s.step))
                                        if component else getattr(s, key))
        toks = s.tokens
        if per_token:
            vals = [v / t for v, t in zip(vals, toks) if v is not None and t]
        out.append([v for v in vals if v is not None])
    return out


def _row(name: str, step: bool, b: list[Phase], c: list[Phase], key: str,
         comp: str | None, min_effect: float) -> Row:
    return Row(name, step, stats(_series(b, key, comp), _series(c, key, comp), min_effect),
               stats(_series(b, key, comp, True), _series(c, key, comp, True), min_effect))


def _cause(step: Stats, diff: LedgerDiff | None, min_effect_pct: float) -> str | None:
    """Why the step moved: the ledger rows that moved most, host-side or kernels, the larger
    side first; for a step that did not move, the rows that did by the minimum effect of the
    step (one offsetting another); else None."""
    if diff is None or not diff.rows:
        return None
    if step.verdict in (*CHANGED, INCONCLUSIVE):
        return explain(diff)
    big = abs(diff.rows[0].delta_ms) >= min_effect_pct / 100 * diff.base_step_ms
    if step.verdict == UNTESTABLE and abs(step.delta_pct or 0) >= min_effect_pct:
        return explain(diff)
    if step.verdict in (SAME, UNTESTABLE) and big:
        # rows that moved by the minimum effect while the step did not (one offsets another)
        return "rows moved: " + explain(diff)
    return None


def _excess(x: float, bound: float) -> float:
    """The signed part of x beyond +-bound."""
    return float(np.sign(x)) * max(abs(x) - bound, 0.0)


def _run_level(step: Stats, diff: LedgerDiff, min_effect_pct: float) -> RunLevel:
    """The step change against the run-to-run bounds of one trace per side (module docstring):
    inconclusive when what lies beyond them is below the minimum effect or of the other sign."""
    dev_b, dev_c = diff.side_ms("device")
    host_b, host_c = (sum(x) for x in zip(diff.side_ms("host"), diff.side_ms("wait")))
    dev_bound, host_bound = KERNEL_RUN_BOUND * dev_b, HOST_RUN_BOUND * host_b
    beyond = _excess(dev_c - dev_b, dev_bound) + _excess(host_c - host_b, host_bound)
    level = RunLevel(dev_c - dev_b, dev_bound, host_c - host_b, host_bound, beyond)
    delta = step.delta_ms or 0.0
    floor = max(MIN_EFFECT_MS, min_effect_pct / 100 * diff.base_step_ms)
    if step.verdict not in CHANGED or (abs(beyond) >= floor and beyond * delta > 0):
        return level
    runs = min(MAX_RUNS, max(3, math.ceil(((dev_bound + host_bound) / max(abs(delta), 1e-9))
                                          ** 2)))
    why = (f"the mean step's {delta:+.3f} ms (host-side {level.host_ms:+.3f}, device "
           f"{level.device_ms:+.3f}) lies within what two runs of one job differ by "
           f"(host-side +-{HOST_RUN_BOUND:.0%} of {host_b:.3f} ms, device "
           f"+-{KERNEL_RUN_BOUND:.0%} of {dev_b:.3f} ms): one trace per side cannot tell it "
           f"from run-to-run drift; repeat each side {runs} times"
           f"{' or more' if runs == MAX_RUNS else ''} (-b ... -c ...)")
    return msgspec.structs.replace(level, inconclusive=why, runs=runs)


def _settle(row: Row, level: RunLevel | None, per_token: bool = True) -> Row:
    """The step row with its faster/slower verdicts made inconclusive when the run-level check
    says so (per step, and per token unless `per_token` is False: a speculative loop's per
    generated token, which moves with acceptance more than with the verify step's time)."""
    if level is None or level.inconclusive is None:
        return row
    fix = (lambda s: msgspec.structs.replace(s, verdict=INCONCLUSIVE)
           if s.verdict in CHANGED else s)
    tok = fix(row.per_token) if per_token else row.per_token
    return msgspec.structs.replace(row, stats=fix(row.stats), per_token=tok)


def _mismatch_line(diff: dict[str, Any]) -> str | None:
    keys = [m["key"] for m in diff["mismatch"]]
    return None if not keys else f"not a matched baseline ({', '.join(keys)} differ)"


def _gate(phases: tuple[PhaseComparison, ...], pct: float, not_comparable: str | None,
          allow_mismatch: bool) -> Gate:
    """Exit 1 when a phase's per-token GPU kernel time, or its per-token step time, is
    significantly slower by more than pct. A step change the run-level check calls inconclusive
    (one trace per side, within the run-to-run bounds: module docstring) is reported, not gated.
    Exit 3, whatever the numbers, when the stamps say the two sides are not a matched baseline
    (unless allow_mismatch)."""
    failed, reasons, not_gated = [], {}, {}
    for ph in phases:
        tok, ktok = ph.step.per_token, ph.kernels.per_token
        why = []
        if ktok.verdict == "slower" and (ktok.delta_pct or 0) > pct:
            why.append(f"GPU kernel time per token {ktok.delta_pct:+.1f}%")
        if tok.verdict == "slower" and (tok.delta_pct or 0) > pct:
            why.append(f"step time per token {tok.delta_pct:+.1f}%")
        level = ph.run_level
        if tok.verdict == INCONCLUSIVE and (tok.delta_pct or 0) > pct and level is not None:
            not_gated[ph.phase] = (f"step time per token {tok.delta_pct:+.1f}% is inconclusive "
                                   f"with one trace per side: repeat each side {level.runs} "
                                   "times (-b ... -c ...) to gate it")
        if why:
            failed.append(ph.phase)
            reasons[ph.phase] = why
    code = 1 if failed else 0
    if not_comparable and not allow_mismatch:
        code = EXIT_NOT_COMPARABLE
    moved = {ph.phase: moved_words(ph.ledger) for ph in phases
             if ph.phase in failed and ph.ledger is not None and ph.ledger.rows}
    return Gate(pct, tuple(failed), reasons, not_gated, code, not_comparable, allow_mismatch,
                moved)


def _compare_phase(ph: str, b: list[Phase], c: list[Phase],
                   min_effect_pct: float, one_run: bool) -> PhaseComparison:
    comps = list(dict.fromkeys(x.component for p in b + c for x in p.component_rows))
    step = _row(ph, True, b, c, "step_ms", None, min_effect_pct)
    kern = _row(ph, True, b, c, "kernel_ms", None, min_effect_pct)
    rows = tuple(sorted((_row(x, False, b, c, "", x, min_effect_pct) for x in comps),
                        key=lambda r: -abs(r.stats.delta_ms or 0)))
    diff = ledger_diff(b, c) if all(p.ledger_rows for p in b + c) else None
    level = _run_level(step.stats, diff, min_effect_pct) if one_run and diff else None
    spec = any(p.speculative is not None for p in b + c)
    step = _settle(step, level, per_token=not spec)
    steps = (sum(p.steps for p in b), sum(p.steps for p in c))
    tokens = (b[0].tokens_per_step, c[0].tokens_per_step)
    return PhaseComparison(ph, step, kern, rows, steps, tokens,
                           _cause(step.stats, diff, min_effect_pct),
                           tuple(compare_rows(b, c)), diff, level)


def compare(base: Sequence[Analysis], cand: Sequence[Analysis],
            min_effect_pct: float = MIN_EFFECT_PCT, gate_pct: float | None = None,
            allow_mismatch: bool = False, findings: tuple[Finding, ...] = ()) -> Comparison:
    """The Comparison of two sides' analyses (each side one or more runs)."""
    names_b = [p.phase for d in base for p in d.phases]
    names_c = {p.phase for d in cand for p in d.phases}
    phases = [p for p in dict.fromkeys(names_b) if p in names_c]
    notes = [f"phase {p} only in {side}" for side, a, o in (("base", names_b, names_c),
                                                            ("cand", names_c, set(names_b)))
             for p in sorted(set(a) - set(o))]
    n_b, n_c = len(base), len(cand)
    one_run = n_b == 1 or n_c == 1
    out = tuple(_compare_phase(ph, _phase(base, ph), _phase(cand, ph), min_effect_pct, one_run)
                for ph in phases)
    diff = provenance_diff(base, cand)
    variance = ("unknown: one trace per side, so the statistics cover step-to-step variation "
                "only (within-run); a step change within the run-to-run bounds is inconclusive"
                if one_run else
                f"included: {n_b} base and {n_c} candidate traces; the bootstrap resamples traces, "
                "then steps")
    outputs = outputs_check(base, cand)
    apart = "; ".join(x for x in (_mismatch_line(diff),
                                  f"outputs differ ({outputs.why})" if outputs.differ else None)
                      if x)
    gate = None if gate_pct is None else _gate(out, gate_pct, apart or None, allow_mismatch)
    base_paths = tuple(str(d.source.path) for d in base)
    cand_paths = tuple(str(d.source.path) for d in cand)
    return Comparison(base_paths, cand_paths, diff,
                      variance, min_effect_pct, out, gate, tuple(notes), findings, outputs)
