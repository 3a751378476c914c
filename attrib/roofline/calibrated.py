"""The `--arch-file` entry of a calibration (`attrib calibrate`): measured roofs on a database
entry.

The entry is the database's own for the measured device (found as a trace's deviceProperties
would find it), with `sustained_bw_gbs` the measured figure, `measured_bw_gbs` (read, write, copy),
`measured_tflops` and `calibrated` (device, date, torch, driver, method) added. A device the
database lacks gets an entry from what torch reported, its peak the measured figure (marked so).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgspec
from msgspec.structs import fields

from attrib.roofline.arch import Arch, detect
from attrib.roofline.template import _key, _literal

ROOF_KINDS = ("read", "copy")   # mixed traffic; write-only streams run faster and are kept apart


def sustained(bandwidth: Mapping[str, float]) -> float:
    """The roof: the best of the read and copy figures (no read-bound kernel should pass it)."""
    return max(float(bandwidth[k]) for k in ROOF_KINDS if k in bandwidth)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"{value:g}" if isinstance(value, float) else str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value))   # a TOML basic string: JSON's escapes are TOML's


def _base(device: Mapping[str, Any]) -> Arch | None:
    vendor = "amd" if device.get("hip") else "nvidia" if device.get("cuda") else None
    props = {k: device[k] for k in ("name", "computeMajor", "computeMinor", "numSms", "warpSize",
                                    "totalGlobalMem") if device.get(k) is not None}
    if "computeMajor" not in props:
        return None
    arch, _ = detect((props,), vendor)
    return arch


def _own(device: Mapping[str, Any], peak: float) -> dict[str, Any]:
    """An entry's required fields from what torch reported, for a device the database lacks."""
    hip, cpu = bool(device.get("hip")), device.get("type") == "cpu"
    gfx = str(device.get("gcnArchName") or "").split(":")[0]
    major, minor = device.get("computeMajor", 0), device.get("computeMinor", 0)
    arch = "cpu" if cpu else gfx if hip and gfx else f"sm_{major}{minor}"
    return {"arch": arch, "name": str(device.get("name")),
            "vendor": "cpu" if cpu else "amd" if hip else "nvidia",
            "match_names": [_literal(str(device.get("name")))[1:-1]],
            "wave_size": device.get("warpSize") or (64 if hip else 32),
            "compute_units": device.get("numSms") or 1,
            "num_sms_reported": device.get("numSms") or 1,
            "compute_major": major, "compute_minor": minor, "peak_bw_gbs": peak,
            "unverified": ["peak_bw_gbs"],
            "notes": ("not in attrib's database: peak_bw_gbs is the measured figure, "
                      "not a datasheet's")}


def entry(cal: Mapping[str, Any]) -> tuple[str, str]:
    """(key, TOML text) of the entry for a calibration document (Calibration.to_dict())."""
    dev = cal["device"]
    roof = sustained(cal["bandwidth_gbs"])
    base = _base(dev)
    skip = {"key", "matrix_tflops", "vector_tflops", "maf_tflops", "measured_tflops",
            "measured_bw_gbs", "calibrated", "sustained_bw_gbs", "sustained_source", "user"}
    if base is not None:
        defaults = {f.name: f.default for f in fields(Arch)}
        plain = {f.name: getattr(base, f.name) for f in fields(Arch) if f.name not in skip}
        vals = {k: v for k, v in plain.items() if k not in defaults or v != defaults[k]}
        key = base.key
    else:
        vals, key = _own(dev, roof), _key(str(dev.get("name") or ""))
    bw = cal["bandwidth_gbs"]
    vals["sustained_bw_gbs"] = roof
    vals["sustained_source"] = (f"attrib calibrate {cal['date_utc'][:10]} on {dev.get('name')}: "
                                f"read {bw.get('read'):g}, copy {bw.get('copy'):g}, "
                                f"write {bw.get('write'):g} GB/s; "
                                "the roof is the best of read and copy")
    runtime = (f", HIP {dev['hip']}" if dev.get("hip") else
               f", CUDA {dev['cuda']}" if dev.get("cuda") and dev.get("type") != "cpu" else "")
    where = f"torch {dev.get('torch')}{runtime}"
    calibrated = {"device": str(dev.get("name")), "date_utc": cal["date_utc"], "torch": where,
                  "driver": dev.get("driver") or "unknown", "method": cal["method"]}
    lines = [f"# attrib calibrate, {cal['date_utc']}: measured on {dev.get('name')} ({where});",
             "# pass it with: attrib analyze TRACE --arch-file THIS_FILE", f"[{key}]"]
    lines += [f"{k} = {_toml(v)}" for k, v in vals.items() if v is not None]
    tables = (("matrix_tflops", dict(base.matrix_tflops) if base is not None else {}),
              ("vector_tflops", dict(base.vector_tflops) if base is not None else {}),
              ("measured_bw_gbs", dict(bw)), ("measured_tflops", dict(cal["matrix_tflops"])),
              ("calibrated", calibrated))
    for name, table in tables:
        if table:
            lines.append(f"[{key}.{name}]")
            lines += [f"{k} = {_toml(v)}" for k, v in table.items()]
    return key, "\n".join(lines) + "\n"
