"""Platform and stack on RDNA: AITER/CK kernels (P16), the GTT limit on Strix Halo (P20),
HSA_OVERRIDE_GFX_VERSION (P23)."""

from __future__ import annotations

import re

import polars as pl

from attrib.components.patterns import AITER_CK, ISA
from attrib.analysis.model import Analysis
from attrib.pipeline import Attribution
from rules.finding import Finding, distinct, first_names, kernel_ns, kernels_in, ns, num, r
from rules.thresholds import Thresholds


P16_REFS = (
    "https://github.com/vllm-project/vllm/issues/51136",
    "https://github.com/vllm-project/vllm/issues/56021",
    "https://github.com/vllm-project/vllm/pull/46822",
    "https://github.com/vllm-project/vllm/pull/30952",
    "https://github.com/ROCm/aiter/issues/3294",
    "https://github.com/ROCm/aiter/issues/5683",
)
P20_REFS = (
    "https://rocm.docs.amd.com/en/latest/how-to/system-optimization/strixhalo.html",
    "https://github.com/kyuz0/amd-strix-halo-toolboxes/issues/98",
)
P23_REFS = (
    "https://github.com/ROCm/rocm-systems/issues/3531",
    "https://github.com/ROCm/legacy-rocm-build/issues/4440",
    "https://github.com/1bit-MONSTER/1bit-MONSTER/issues/251",
)


def aiter_on_rdna(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """P16: AITER / Composable Kernel kernels (CDNA-tuned, wave64) running on an RDNA device."""
    ai = kernels_in(a, where=pl.col("name").str.contains(AITER_CK))
    if not ai.height:
        return []
    steps = max(ai["step"].n_unique(), 1)
    total = kernel_ns(a)
    share = ns(ai) / max(total, 1)
    components = sorted(ai["component"].unique().drop_nulls().to_list())
    return [Finding(
        rule="P16-aiter-ck-on-rdna", severity="medium",
        title=f"AITER/CK kernels run on {an.arch}: experimental or unsupported "
              f"on RDNA ({ai.height} launches, {share:.0%} of kernel time)",
        ms_per_step=ns(ai) / 1e6 / steps,
        evidence={"kernels": ai.height, "share_of_kernel_time": r(share),
                  "components": components,
                  "names": first_names(ai, 3),
                  "VLLM_ROCM_USE_AITER": an.env_var("VLLM_ROCM_USE_AITER")},
        remedy="AITER is supported on gfx942/gfx950 only: set "
               "VLLM_ROCM_USE_AITER=0 on gfx1151; on gfx1201 use it only for "
               "the paths validated there (unified attention, bf16 KV) and "
               "watch for the 64 KiB LDS limit.",
        references=P16_REFS)]


def _total_mem(a: Attribution, an: Analysis) -> int | None:
    d = a.trace.meta.devices[0] if a.trace.meta.devices else {}
    v = d.get("totalGlobalMem") or an.stamp("gpu", "total_memory_bytes")
    return int(num(v)) if v else None


def gtt_limit(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """P20: the GPU sees less than `gtt_fraction` of the host's memory
    (stamp `host.memory_bytes`) on the APU."""
    host = num(an.stamp("host", "memory_bytes"))
    gpu = _total_mem(a, an)
    if not host or not gpu or gpu >= th.gtt_fraction * float(host):
        return []
    return [Finding(
        rule="P20-gtt-limit-default", severity="medium",
        title=f"the GPU can allocate {gpu / 2**30:.0f} GiB of the host's "
              f"{float(host) / 2**30:.0f} GiB: "
              "the GTT/TTM limit looks like its default",
        evidence={"total_global_mem_gib": r(gpu / 2**30, 1),
                  "host_memory_gib": r(float(host) / 2**30, 1),
                  "fraction": r(gpu / float(host))},
        remedy="Raise the TTM limit (amd-ttm --set <GB>, or ttm.pages_limit "
               "with amdgpu.gttsize together) and keep a small BIOS carve-out; "
               "then the KV cache and larger models fit.",
        references=P20_REFS)]


def _gfx_from_override(v: str) -> str | None:
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\.(\d+)\s*", v)
    return f"gfx{m[1]}{m[2]}{int(m[3]):x}" if m else None


def hsa_override(a: Attribution, an: Analysis, th: Thresholds) -> list[Finding]:
    """P23: HSA_OVERRIDE_GFX_VERSION in the stamp's environment, or (on the
    traced device, not a what-if) Tensile ISA tokens in kernel names that
    differ from the device's arch."""
    dev = an.device
    v = an.env_var("HSA_OVERRIDE_GFX_VERSION")
    isa = distinct(a, "name").str.extract(ISA).drop_nulls().unique().sort().to_list()
    own = (dev.arch or "").removeprefix("gfx")
    other = (
        [f"gfx{i}" for i in isa if own and i != own]
        if dev.detected_from not in ("override", "kernel_names")
        else []
    )
    if not v and not other:
        return []
    as_gfx = _gfx_from_override(v) if v else None
    foreign = bool(as_gfx and as_gfx != dev.arch)
    runs = f" (runs {as_gfx} code on {dev.arch})" if foreign else ""
    return [
        Finding(
            rule="P23-hsa-override-gfx-version",
            severity="high" if foreign or other else "medium",
            title=(
                f"HSA_OVERRIDE_GFX_VERSION={v} in the capture environment" + runs
                if v
                else f"kernels built for {', '.join(other)} run on {dev.arch}: "
                     "an override or fallback library is in effect"
            ),
            evidence={
                "HSA_OVERRIDE_GFX_VERSION": v,
                "override_as_arch": as_gfx,
                "device_arch": dev.arch,
                "kernel_isa_tokens": [f"gfx{i}" for i in isa],
            },
            remedy="Remove the override where the ROCm build supports the GPU "
                   "natively (gfx1151 on ROCm >= 7); a wrong override runs code "
                   "for another ISA, trips library arch filters, and has "
                   "crashed the driver.",
            references=P23_REFS,
        )
    ]
