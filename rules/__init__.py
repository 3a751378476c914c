"""Known pathologies: the catalog of rules, each a small pure function over
an attribution and its document.

Each rule is `fn(a: Attribution, an: Analysis, th: Thresholds) ->
list[Finding]`: it reads `a.kernels`, `a.steps`, `a.trace`'s tables and the
typed analysis (the device comes from `an.device`, never guessed), cites its
catalog id (../shared/knowledge/hardware-and-pathologies.md, Part 2) in
`Finding.rule`, puts the milliseconds per step it explains in
`Finding.ms_per_step` (the phase, components or idle/step row it accounts
for in `phase`, `components`, `explains`), and returns [] when its evidence
is absent. `run` applies the rules that apply to the analysis' device, marks
findings on a what-if device (`--arch`) as projections, and sorts them by
milliseconds per step.

A PairRule (P22) reads a baseline and a candidate analysis: `run_pair`
applies those (`attrib compare`). Not covered: the crash classes P09, P11,
P24, P25 (their signatures live in logs, not traces).
"""

from __future__ import annotations

from attrib.analysis.model import Analysis
from attrib.components import rope_table
from attrib.pipeline import Attribution
from attrib.reads import Reads, union
from attrib.threads import each
from rules import (
    attention,
    compare,
    constant_cast,
    copies,
    decode_weights,
    gemm,
    idle,
    jit,
    kvcache,
    launch,
    ledger,
    linear_attention,
    llamacpp,
    lowbit,
    platform,
    quant,
    roofline,
    sampler,
    speculative,
)
from rules.finding import CAVEATS, OPPORTUNITIES, RDNA, SEVERITIES, Finding, PairRule, Rule, graded
from rules.thresholds import DEFAULT, Thresholds

CATALOG: tuple[Rule | PairRule, ...] = (
    Rule(
        "P01-skinny-gemm-gfx1151",
        gemm.skinny_gemm_gfx1151,
        "kernel names (wvSplitK/LLGemm1); bytes for GB/s",
        ("gfx1151",),
        gemm.P01_REFS,
    ),
    Rule(
        "P02-decode-gemm-big-tile",
        gemm.big_tile_decode_gemm,
        "kernel names (Cijk_ MT tiles); decode tokens/step",
        (),
        gemm.P02_REFS,
    ),
    Rule(
        "P03-rocblas-tensile-fallback",
        gemm.rocblas_fallback,
        "kernel names (Cijk_ UserArgs/MI tokens); prefill " "FLOPs from shapes",
        ("gfx1151", "gfx1150", "gfx1103"),
        gemm.P03_REFS,
    ),
    Rule(
        "P04-tunableop-in-window",
        jit.tunableop_in_window,
        "capture stamp env, or Cijk_ kernels with op shapes",
        (),
        jit.P04_REFS,
    ),
    Rule(
        "P05-compile-in-window",
        jit.compile_in_window,
        "CPU ops / annotations / Python frames of compile and " "autotune; kernel durations",
        (),
        jit.P05_REFS,
    ),
    Rule(
        "P06-launch-bound-decode",
        launch.launch_bound_decode,
        "kernels and step windows (annotations or steps)",
        (),
        launch.P06_REFS,
    ),
    Rule(
        "P07-graph-opaque-steps",
        launch.graph_opaque_steps,
        "graph-replayed kernels; CPU ops",
        (),
        launch.P07_REFS,
    ),
    Rule(
        "P08-sampler-share",
        sampler.sampler_share,
        "sampler component or kernels after the lm_head in a step; decode tokens/step",
        RDNA,
        sampler.REFS,
    ),
    Rule(
        "P10-decode-attention-no-split-kv",
        attention.decode_attention_no_split_kv,
        "attention kernel names; decode "
        "attention bytes and query/key shapes (any device; vLLM paged kernels on RDNA)",
        (),
        attention.P10_REFS,
    ),
    Rule(
        "P12-navi-paged-attention",
        attention.navi_paged_attention_traps,
        "kernel names; stamp kv_cache_dtype/" "block_size",
        RDNA,
        attention.P12_REFS,
    ),
    Rule(
        "P13-fp8-emulated-gfx11",
        quant.fp8_emulated_gfx11,
        "kernel names or dtypes (FP8)",
        quant.NO_FP8,
        quant.P13_REFS,
    ),
    Rule(
        "P14-fp8-kernel-choice-gfx1201",
        quant.fp8_kernel_choice_gfx1201,
        "kernel names (FP8 GEMMs, quantize)",
        ("gfx12",),
        quant.P14_REFS,
    ),
    Rule(
        "P15-low-bit-dequant",
        quant.low_bit_dequant,
        "kernel names (MXFP4/W4A16/AWQ/GPTQ); bytes for GB/s",
        RDNA,
        quant.P15_REFS,
    ),
    Rule(
        "P16-aiter-ck-on-rdna",
        platform.aiter_on_rdna,
        "kernel names (aiter, ck_tile)",
        RDNA,
        platform.P16_REFS,
    ),
    Rule(
        "P17-unfused-attention",
        attention.unfused_attention,
        "CPU ops with shapes (softmax, bmm, SDPA math)",
        (),
        attention.P17_REFS,
        attention.P17_READS,
    ),
    Rule(
        "P18-llamacpp-mmvq-bandwidth",
        llamacpp.mmvq_below_bandwidth,
        "mul_mat_vec_q kernels; bytes from shapes or " "--model",
        RDNA,
        llamacpp.P18_REFS,
    ),
    Rule(
        "P19-llamacpp-prefill-microbatch",
        llamacpp.mmq_prefill_microbatch,
        "mul_mat_q kernels in a prefill phase",
        RDNA,
        llamacpp.P19_REFS,
    ),
    Rule(
        "P20-gtt-limit-default",
        platform.gtt_limit,
        "deviceProperties totalGlobalMem; stamp host.memory_bytes",
        ("gfx1151", "gfx1150"),
        platform.P20_REFS,
    ),
    Rule(
        "P21-host-device-copies-decode",
        copies.host_copies_in_decode,
        "GPU copies with direction; step windows",
        (),
        copies.REFS,
    ),
    PairRule(
        "P22-r9700-bimodal-decode",
        compare.bimodal_decode,
        "two analyses (attrib compare BASE CANDIDATE)",
        ("gfx1201",),
        compare.REFS,
    ),
    Rule(
        "P23-hsa-override-gfx-version",
        platform.hsa_override,
        "stamp env, or Tensile _ISA tokens in kernel names",
        ("gfx",),
        platform.P23_REFS,
    ),
    Rule(
        "step-time-ledger",
        ledger.step_ledger,
        "kernels, copies, runtime calls, CPU ops and Python frames in "
        "each step window (attrib.steps.ledger)",
        (),
        idle.ALL_REFS,
    ),
    Rule(
        "linear-attention-torch-fallback",
        linear_attention.torch_fallback,
        "Python frames (with_stack) of "
        "transformers' torch_*_gated_delta_rule / torch_causal_conv1d_*; kernels",
        (),
        linear_attention.REFS,
        linear_attention.READS,
    ),
    Rule(
        "constant-table-cast-every-step",
        constant_cast.constant_casts,
        "CPU ops with shapes (an fp32 "
        "[>= 4096, <= 512] table cast to 16 bits in the step) and their kernels",
        (),
        reads=rope_table.READS,
    ),
    Rule(
        "kv-cache-recopied",
        kvcache.kv_cache_recopy,
        "aten::cat ops with shapes in kv_cache_write; attention bytes",
        (),
        kvcache.REFS,
    ),
    Rule(
        speculative.RULE,
        speculative.net_effect,
        "a speculative loop's rounds (draft and verify passes, tokens accepted); plain decode from "
        "--baseline or the verify pass",
        (),
    ),
    Rule(
        "low-bit-gemm-large-m",
        lowbit.low_bit_large_m,
        "weight-only low-bit GEMMs priced from their shapes (int4pack/int8pack ops, Triton AWQ "
        "launches); the device's 16-bit matrix roof",
        (),
        lowbit.REFS,
    ),
    Rule(
        "decode-below-bandwidth-ceiling",
        roofline.decode_below_ceiling,
        "bytes per step (shapes or --model)",
        (),
    ),
    Rule("bytes-model-inconsistent", roofline.bytes_inconsistent, "bytes per component", ()),
    Rule("roofline-memory-bound-gap", roofline.memory_bound_gap, "bytes per component", ()),
    Rule(
        decode_weights.RULE,
        decode_weights.sixteen_bit_decode,
        "dense GEMM ops with shapes in decode (their 16-bit weight operands); bytes per component",
        (),
        decode_weights.REFS,
    ),
)

__all__ = ["CATALOG", "DEFAULT", "Finding", "PairRule", "Rule", "Thresholds", "run", "run_pair"]


def reads() -> Reads:
    """What the rules read by name beyond the kernels' own ops (their `Rule.reads`): the chunked
    read of a huge trace keeps it."""
    return union(r.reads for r in CATALOG if isinstance(r, Rule))


def _key(f: Finding) -> tuple[bool, bool, float, int]:
    """Opportunities last (OPPORTUNITIES: a format the run did not use, not time it lost), caveats
    about the measurement before them (CAVEATS: no time to recover), then by ms per step, then
    severity."""
    ms = f.ms_per_step if f.ms_per_step is not None else -1.0
    return (f.rule in OPPORTUNITIES, f.rule in CAVEATS, -ms, SEVERITIES.index(f.severity))


def _marked(an: Analysis, found: list[Finding]) -> list[Finding]:
    """Findings graded by the share of the step they explain, as projections on a what-if device,
    by ms per step."""
    found = [graded(f, an) for f in found]
    dev = an.device
    if dev.what_if:
        found = [f.projected(f"{dev.name} ({dev.arch})") for f in found]
    return sorted(found, key=_key)


def run(a: Attribution, an: Analysis, rules: tuple[Rule | PairRule, ...] = CATALOG,
        thresholds: Thresholds = DEFAULT) -> list[Finding]:
    """The findings of every rule that applies to the analysis' device, by
    milliseconds per step (largest first; findings without an estimate
    last), each marked a projection when the device is a what-if."""
    one = [r for r in rules if isinstance(r, Rule) and r.applies(an.arch)]
    found = each(lambda rule: rule.fn(a, an, thresholds), one, rows=a.largest())
    return _marked(an, [f for fs in found for f in fs])


def run_pair(base: Analysis, cand: Analysis, rules: tuple[Rule | PairRule, ...] = CATALOG,
             thresholds: Thresholds = DEFAULT) -> list[Finding]:
    """The findings of the baseline rules that apply to the candidate's device."""
    pair = [r for r in rules if isinstance(r, PairRule) and r.applies(cand.arch)]
    return _marked(cand, [f for rule in pair for f in rule.fn(base, cand, thresholds)])
