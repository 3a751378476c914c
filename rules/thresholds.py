"""Every rule's thresholds, named in one frozen record; pass your own to
`rules.run(..., thresholds=...)`.

Values are the catalog's heuristics
(../shared/knowledge/hardware-and-pathologies.md, Part 2) where it gives
one, else our proposal (said in the comment).
"""

from __future__ import annotations

import msgspec



class Thresholds(msgspec.Struct, frozen=True):
    # P06 launch-bound decode: launch gaps above this share of the step (catalog: idle > 0.3)
    launch_gap_share: float = 0.3
    # share of a phase's kernel time replayed from graphs to call it graphed
    graph_majority: float = 0.5
    # P07: below this share of replayed time with a CPU op, steps are opaque
    op_known_min: float = 0.5
    # idle by cause: a phase's median GPU-idle share and milliseconds above which idle is explained
    idle_share: float = 0.2
    idle_min_ms: float = 0.05
    # P01 / P02 GEMM paths
    p01_share: float = 0.5
    p01_bw_fraction: float = 0.10
    big_tile: int = 64
    max_decode_tokens: int = 4
    p02_share: float = 0.20
    p02_bw_fraction: float = 0.30
    # P02 below p02_bw_fraction: fires from this share of decode up
    p02_slow_min_share: float = 0.05
    # P03 prefill GEMM TFLOP/s below this fraction of peak (catalog: 15 % of 59.4 TF on gfx1151)
    p03_tflops_fraction: float = 0.15
    p03_min_tokens: int = 512
    # P03 also beside hipBLASLt: rocBLAS kernels' share of Cijk_ GEMM time
    p03_rocblas_share: float = 0.5
    # P05: a kernel's first call this many times its median; a step's kernel
    # count off the median by this ratio
    first_call_ratio: float = 20.0
    kernel_count_ratio: float = 1.5
    # P05: a kernel needs this many calls for its first to be "cold"
    cold_min_calls: int = 3
    # P05: a step with an odd kernel count and this x its phase median
    slow_step_ratio: float = 2.0
    # P04: distinct Cijk_ kernels for one (op, shape) that only a candidate sweep produces
    tunableop_variants: int = 4
    # P08 sampler share of decode kernel time at batch <= max_decode_tokens (catalog: 10 %)
    sampler_share: float = 0.10
    # P10 attention share of decode with single-pass paged kernels
    attention_share: float = 0.30
    # P10 on any device: at >= this many keys, attention reading K/V below
    # this fraction of the roofline (catalog: per-step attention time > 5x
    # the KV read at sustained bandwidth, at L >= 8K)
    p10_min_keys: int = 8192
    p10_bw_fraction: float = 0.20
    # P13/P14 quantize/dequantize share of decode kernel time (catalog: 15 %)
    quant_share: float = 0.15
    # P15 / P18: quantized GEMM achieved GB/s below these fractions of sustained
    p15_bw_fraction: float = 0.40
    p18_bw_fraction: float = 0.75
    # P17: softmax/matmul kernels of unfused attention above this share of a phase's kernel time
    unfused_attention_share: float = 0.10
    # P20: totalGlobalMem below this fraction of the host's memory
    gtt_fraction: float = 0.6
    # P21: host copy time per decode step above this share of the step
    copy_step_share: float = 0.05
    # P22: every bandwidth-bound kernel slower by a uniform factor in this band against a baseline
    bimodal_low: float = 0.5
    bimodal_high: float = 0.8
    bimodal_spread: float = 0.15       # max - min of the per-kernel ratios (uniform)
    # linear attention on the torch fallback: below this many ms per step it
    # is not worth a finding (our proposal)
    la_fallback_min_ms: float = 0.05
    # KV cache re-copied: cat bytes per step at least this share of attention's bytes
    kv_recopy_vs_attention: float = 0.5
    # a constant table (the rotary cos/sin cache) recast inside the step: reported from this ms/step
    constant_cast_min_ms: float = 0.01
    # decode below the bandwidth ceiling: achieved tok/s below this share of the ceiling
    ceiling_fraction: float = 0.25
    # a weight-only low-bit GEMM at large M (compute-bound by its own shapes): reported when its
    # kernels take this share of the step and run this many times slower than their FLOPs at the
    # device's 16-bit matrix roof
    lowbit_large_m_share: float = 0.10
    lowbit_large_m_ratio: float = 2.0
    # the inverse (16-bit-gemm-decode, an opportunity): 16-bit GEMM weights in decode reported when
    # they are this share of the step's bytes and the GEMMs run at this fraction of the roofline
    # bandwidth or more (bytes-bound enough that fewer bytes shorten them; our proposal)
    weights16_bytes_share: float = 0.5
    weights16_bw_fraction: float = 0.3
    # roofline gap
    gap_min_share: float = 0.10
    gap_max_fraction: float = 0.50
    min_bytes_known: float = 0.5


DEFAULT = Thresholds()
