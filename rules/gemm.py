"""GEMM family: decode GEMMs on the wrong kernels (P01 vLLM skinny GEMM on
gfx1151, P02 big BLAS tiles), BLAS on the rocBLAS/Tensile fallback instead
of hipBLASLt (P03)."""

from __future__ import annotations


import polars as pl

from attrib.components.patterns import (
    HIPBLASLT_TENSILE,
    NVJET_TILE,
    ROCBLAS_TILE,
    SKINNY_GEMM,
    TENSILE,
    TENSILE_TILE,
)
from attrib.analysis.model import Analysis, Component
from attrib.components.taxonomy import GEMM_COMPONENTS
from attrib.pipeline import Attribution
from attrib.roofline.model import achieved_gbs
from rules.finding import (DECODE_LIKE, Finding, kernel_ns, kernels_in, kernels_where, ns,
                           num, r)
from rules.thresholds import Thresholds

P01_REFS = (
    "https://github.com/vllm-project/vllm/pull/51511",
    "https://github.com/vllm-project/vllm/pull/34709",
    "https://github.com/vllm-project/vllm/pull/40784",
    "https://github.com/ROCm/vllm/pull/942",
)
P02_REFS = (
    "https://github.com/mudler/vllm.cpp/issues/487",
    "https://github.com/mudler/vllm.cpp/pull/506",
)


def _achieved_gbs(k: pl.DataFrame, an: Analysis) -> float | None:
    """The roofline's achieved GB/s over these kernels' priced time; None
    above the device's peak."""
    return achieved_gbs(k, an.device.peak_bw_gbs)


def _tile_dim(group: str) -> pl.Expr:
    """Tile dimension `group` ("1": M, "2": N) of a Tensile macro tile
    (`mt`) or else a cuBLASLt nvjet CTA tile (`nv`)."""
    tensile, nvjet = pl.col("mt").struct.field(group), pl.col("nv").struct.field(group)
    return pl.coalesce(tensile, nvjet).cast(pl.Int64)


# what P02 reads of each GEMM: its tile (name), component, time and what the roofline prices
TILE_COLUMNS = ("name", "component", "dur_ns", "bytes", "flops", "dtype")


def big_tile_decode_gemm(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """P02: M<=4 decode GEMMs served by BLAS kernels with >= 64x64 tiles
    (Tensile macro tiles; cuBLASLt nvjet CTA tiles): the token side of each
    tile is mostly padding."""
    ph = an.phase("decode")
    tokens = ph.tokens_per_step if ph else None
    if ph is None or not tokens or tokens > th.max_decode_tokens:
        return []
    total = kernel_ns(a, "decode")
    smaller = pl.min_horizontal("mt_m", "mt_n")
    tiles = (
        kernels_in(a, "decode", pl.col("component").is_in(GEMM_COMPONENTS), TILE_COLUMNS)
        .with_columns(
            pl.col("name").str.extract_groups(TENSILE_TILE).alias("mt"),
            pl.col("name").str.extract_groups(NVJET_TILE).alias("nv"),
        )
        .with_columns(_tile_dim("1").alias("mt_m"), _tile_dim("2").alias("mt_n"))
        .filter(smaller >= th.big_tile)
    )
    if not tiles.height or not total:
        return []
    share = ns(tiles) / total
    gbs, bw = _achieved_gbs(tiles, an), an.device.roofline_bw
    frac = gbs / bw if (gbs is not None and bw) else None
    slow = frac is not None and frac < th.p02_bw_fraction
    if share <= th.p02_share and not (slow and share >= th.p02_slow_min_share):
        return []
    steps = max(ph.steps, 1)
    ms = ns(tiles) / 1e6 / steps
    priced = num(tiles["bytes"].sum()) if tiles["bytes"].null_count() == 0 else None
    # the same bytes at the roofline
    floor = priced / 1e9 / bw * 1e3 / steps if (priced and bw) else None
    nvidia = tiles["nv"].struct.field("1").is_not_null().any()
    by_tile = (
        tiles.group_by("mt_m", "mt_n", "component")
        .agg((pl.col("dur_ns").sum() / 1e6 / steps).alias("ms"))
        .sort("ms", descending=True)
        .head(8)
    )
    smallest = int(tiles.select(smaller.min()).item())
    shown = [
        {"tile": f"{t['mt_m']}x{t['mt_n']}", "component": t["component"],
         "ms_per_step": r(t["ms"], 4)}
        for t in by_tile.iter_rows(named=True)
    ]
    remedy = (
        "cuBLASLt has no small-M tile for these GEMMs (bf16 GEMMs at this M "
        "get 64x8-type tiles): route M<=4 GEMMs of this dtype to a skinny "
        "kernel (CUTLASS/Machete/Marlin-style mixed-input or FP8 GEMV "
        "kernels, as vLLM does), or run more tokens per step."
        if nvidia
        else "Send M<=4 GEMMs to a GEMV / skinny-GEMM kernel (e.g. a "
        "wvSplitK-style path) or tune hipBLASLt for the skinny decode shapes "
        "so it picks small tiles."
    )
    big = share > th.p02_share and slow
    return [Finding(
        rule="P02-decode-gemm-big-tile", severity="high" if big else "medium",
        title=f"decode GEMMs with {tokens} token(s) per step run on "
              f">= {th.big_tile}x{th.big_tile} BLAS "
              f"tiles: {share:.0%} of decode kernel time",
        ms_per_step=max(ms - floor, 0.0) if floor is not None else ms,
        evidence={"tokens_per_step": tokens, "share_of_decode": r(share),
                  "ms_per_step": r(ms, 4),
                  "roofline_ms_per_step": r(floor, 4),
                  "tile_waste": r(smallest / tokens, 1),
                  "achieved_gbs": r(gbs, 1), "roofline_bw_gbs": bw,
                  "fraction_of_roofline": r(frac),
                  "tiles": shown},
        remedy=remedy,
        references=P02_REFS)]


def skinny_gemm_gfx1151(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """P01: vLLM's skinny-GEMM kernels (wvSplitK / LLGemm1) on gfx1151,
    slow or dominating decode."""
    out = []
    for phase in DECODE_LIKE:
        sk = kernels_in(a, phase, pl.col("name").str.contains(SKINNY_GEMM))
        total = kernel_ns(a, phase)
        if not sk.height or not total:
            continue
        share = ns(sk) / total
        gbs, bw = _achieved_gbs(sk, an), an.device.roofline_bw
        frac = gbs / bw if (gbs is not None and bw) else None
        slow = frac is not None and frac < th.p01_bw_fraction
        if share <= th.p01_share and not slow:
            continue
        at = (
            f" at {frac:.0%} of the memory roofline"
            if frac is not None and frac < 0.5
            else ""
        )
        out.append(Finding(
            rule="P01-skinny-gemm-gfx1151", severity="high",
            title=f"vLLM skinny-GEMM kernels take {share:.0%} of {phase} "
                  "kernel time on gfx1151" + at,
            ms_per_step=ns(sk) / 1e6 / max(sk["step"].n_unique(), 1), phase=phase,
            evidence={"phase": phase, "kernels": sk.height, "share": r(share),
                      "achieved_gbs": r(gbs, 1),
                      "roofline_bw_gbs": bw, "fraction_of_roofline": r(frac),
                      "names": sk["name"].unique().sort().head(5).to_list()},
            remedy="On gfx1151 set VLLM_ROCM_USE_SKINNY_GEMM=0 (GEMMs go to "
                   "hipBLASLt) or use a vLLM with the per-arch skinny-GEMM "
                   "selector; do not disable it blindly on gfx1201, where it helps.",
            references=P01_REFS))
    return out


P03_REFS = (
    "https://github.com/ROCm/legacy-rocm-build/issues/5643",
    "https://github.com/ROCm/TheRock/issues/154",
    "https://github.com/ROCm/pytorch/pull/2580",
    "https://github.com/pytorch/pytorch/issues/138067",
    "https://github.com/ROCm/TheRock/issues/5314",
)


def rocblas_fallback(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """P03: GEMMs on rocBLAS/legacy Tensile kernels (no `_UserArgs_`,
    4-field MI token), none on hipBLASLt or most of the GEMM time
    (`p03_rocblas_share`), or prefill GEMMs (>= `p03_min_tokens` tokens)
    far below the device's matrix peak."""
    cijk = kernels_where(a, pl.col("name").str.contains(TENSILE))
    if not cijk.height:
        return []
    legacy = cijk.filter(
        pl.col("name").str.contains(ROCBLAS_TILE) & ~pl.col("name").str.contains(HIPBLASLT_TENSILE)
    )
    lt = cijk.filter(pl.col("name").str.contains(HIPBLASLT_TENSILE))
    peak = an.device.matrix_peak("bf16")
    pre = an.phase("prefill")
    slow: list[Component] = []
    if pre and (pre.tokens_per_step or 0) >= th.p03_min_tokens and peak:
        for c in pre.component_rows:
            tf = c.achieved_tflops
            if (
                c.component in GEMM_COMPONENTS
                and tf is not None
                and tf < th.p03_tflops_fraction * float(peak)
            ):
                slow.append(c)
    # rocBLAS-only, or rocBLAS beside hipBLASLt for most of the GEMM time
    # (shapes hipBLASLt did not take)
    legacy_share = ns(legacy) / max(ns(cijk), 1.0)
    most = legacy_share >= th.p03_rocblas_share
    fallback = legacy.height > 0 and (not lt.height or most)
    if not fallback and not slow:
        return []
    steps = max(a.steps.height, 1)
    ms = (ns(legacy) / 1e6 / steps) if legacy.height else sum(c.ms or 0 for c in slow)
    return [
        Finding(
            rule="P03-rocblas-tensile-fallback",
            severity="high" if slow else "medium",
            title=(
                f"{legacy.height} GEMM kernels run on rocBLAS/legacy Tensile, "
                "none on hipBLASLt"
                if legacy.height and not lt.height
                else (
                    f"{legacy.height} GEMM kernels ({legacy_share:.0%} of GEMM time) run on "
                    f"rocBLAS/legacy Tensile, "
                    f"{lt.height} on hipBLASLt"
                    if fallback
                    else "prefill GEMMs reach under "
                    f"{th.p03_tflops_fraction:.0%} of the {peak:g} "
                    "TFLOP/s matrix peak"
                )
            ),
            ms_per_step=ms,
            evidence={
                "rocblas_kernels": legacy.height,
                "hipblaslt_kernels": lt.height,
                "rocblas_share": r(legacy_share),
                "names": legacy["name"].unique().sort().head(3).to_list(),
                "slow_prefill_gemms": [
                    {"component": c.component,
                     "achieved_tflops": c.achieved_tflops, "ms_per_step": c.ms}
                    for c in slow
                ],
                "matrix_peak_tflops": peak,
            },
            remedy="Use a PyTorch/ROCm build whose hipBLASLt lists this arch and prefer it "
                   "(TORCH_BLAS_PREFER_HIPBLASLT=1, "
                   "ROCBLAS_USE_HIPBLASLT=1); on gfx1151 a newer ROCm/TheRock.",
            references=P03_REFS,
        )
    ]
