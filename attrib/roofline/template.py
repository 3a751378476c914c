"""A device-database entry to fill in (`attrib archs --template`), prefilled from what a trace
reported.

An unknown device gets no rooflines or ceilings; measuring one takes a TOML entry passed with
`--arch-file` (or added to attrib/data/archs.toml with its sources, then `python -m
attrib.roofline.arch` to store it parsed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


def _key(name: str) -> str:
    key = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return key or "my-gpu"


def _v(value: Any, placeholder: str, quoted: bool = False) -> str:
    if value is None or value == "":
        return f'"<{placeholder}>"' if quoted else f"<{placeholder}>"
    if isinstance(value, str):
        return f'"{value}"'
    return f"{value:g}" if isinstance(value, float) else str(value)


def _literal(name: str) -> str:
    """A TOML literal string holding the regex that matches `name` exactly."""
    return "'" + re.escape(name).replace("\\ ", " ") + "'"


def template(device: Mapping[str, Any] | None = None) -> str:
    """TOML text of one entry: required fields first (prefilled from a trace's device record
    when given: torch deviceProperties or a rocprof agent), then the figures the roofline
    reads."""
    d = dict(device or {})
    torch_like = "computeMajor" in d
    name = str(d.get("product_name") or d.get("name") or "")
    gfx = d.get("name") if str(d.get("name", "")).startswith("gfx") else None
    nvidia_like = torch_like and d.get("warpSize") == 32 and "gfx" not in name
    sm = f"sm_{d['computeMajor']}{d.get('computeMinor', 0)}" if nvidia_like else None
    arch = gfx or sm
    sms = d.get("numSms") or d.get("cu_count")
    mem = d.get("totalGlobalMem")
    amd_like = (arch or "").startswith("gfx") or re.search(r"amd|radeon|instinct", name, re.I)
    vendor = ("nvidia" if (arch or "").startswith("sm_") or "nvidia" in name.lower() else
              "amd" if amd_like else None)
    pattern = _literal(name) if name else _v(None, "regex on the device name traces report", True)
    units = d.get("cu_count") or (sms if vendor == "nvidia" else None)
    lines = [
        "# Fill in every <...>, then: attrib analyze TRACE --arch-file this.toml",
        ("# Bandwidth in GB/s (1e9 B/s), throughput in dense TFLOP/s; "
         "say where each figure comes from in `sources`."),
        f"[{_key(name)}]",
        f"arch = {_v(arch, 'gfxNNNN or sm_NN', True)}",
        f"name = {_v(name, 'product name', True)}",
        f"vendor = {_v(vendor, 'amd | nvidia', True)}",
        f"match_names = [{pattern}]",
        f"wave_size = {_v(d.get('warpSize') or d.get('wave_front_size'), '32 | 64')}",
        f"compute_units = {_v(units, 'CUs or SMs')}",
        f"num_sms_reported = {_v(sms, 'numSms a torch trace reports (WGPs on RDNA)')}",
        f"compute_major = {_v(d.get('computeMajor'), 'major')}",
        f"compute_minor = {_v(d.get('computeMinor'), 'minor')}",
        f"memory_gb = {_v(round(mem / 2**30, 1) if isinstance(mem, (int, float)) else None, 'GB')}",
        "peak_bw_gbs = <peak DRAM GB/s: transfer rate x bus bytes>",
        "# sustained_bw_gbs = <measured copy GB/s (rocm_bandwidth_test, nvbandwidth)>",
        "# sustained_source = \"<how it was measured>\"",
        "sources = [\"<datasheet URL>\"]",
        f"[{_key(name)}.matrix_tflops]",
        "bf16 = <dense matrix TFLOP/s>",
        "fp16 = <dense matrix TFLOP/s>",
        "# fp8 = <...>",
        f"[{_key(name)}.vector_tflops]",
        "fp32 = <TFLOP/s>",
    ]
    return "\n".join(lines) + "\n"


def unknown_device_note(devices: tuple[Mapping[str, Any], ...], path: str | None = None,
                        vendor: str | None = None, targets: tuple[str, ...] = ()) -> str:
    """The note of an analysis whose device is not in the database: with a device record, how to
    add it; without one (a rocprofv3 CSV without its agent_info.csv, say), precisely what to
    pass: the database target (of `targets`) the trace's path names, else the targets of its
    vendor."""
    d = devices[0] if devices else {}
    keys = ("name", "product_name", "computeMajor", "computeMinor", "numSms", "warpSize",
            "cu_count")
    what = ", ".join(f"{k} {d[k]}" for k in keys if d.get(k) not in (None, ""))
    if not what:
        named = [t for t in dict.fromkeys(re.findall(r"gfx\d{3,4}[a-z]?|sm_\d{2,3}", path or ""))
                 if t in targets]
        prefix = {"amd": "gfx", "nvidia": "sm_"}.get(vendor or "", "")
        if len(named) == 1:
            arg = f"--arch {named[0]} (the target its path names)"
        else:
            arg = "--arch NAME, one of " + ", ".join(t for t in targets if t.startswith(prefix))
        return (f"device unknown: the trace records none (no device record, no gfx target in its "
                f"kernel names): pass the device it ran on, {arg}, and its rooflines and "
                "ceilings are measured on it (`attrib archs` lists the names)")
    return (f"device not in the database ({what}): no rooflines, ceilings or "
            "achieved-vs-peak checks; `attrib archs --template --trace TRACE` prints an entry to "
            "fill in, then pass it with --arch-file (or measure against a known chip with --arch)")
