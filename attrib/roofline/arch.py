"""Device specs (attrib/data/archs.toml) and arch detection from what a trace recorded.

`load_archs()` reads the bundled database (plus an optional `--arch-file` whose entries override
or add, and come first: the user's entry for a device wins over the bundled one); `detect()` picks
the entry from torch `deviceProperties`, rocprof agent records or, failing both, Tensile
`_ISA<gfx>_` kernel names; `override()` resolves `--arch NAME` (an unknown name: `unknown_arch`'s
one line); `same_device()` says whether `--arch` names the device a trace ran on (measured) or
another (a what-if projection).
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import msgspec
from msgspec import field
import orjson
import polars as pl

from attrib.bounds import toml_text
from attrib.components.patterns import ISA, ROCPRIM_ARCH
from attrib.cost.dtypes import PEAK_KEY
from attrib.errors import TraceError

# the device database, each figure with its source; and it parsed, as JSON: read in 0.1 ms, where
# importing the TOML parser and parsing took ~4 ms of every start. `python -m
# attrib.roofline.arch` writes PARSED again after a change of SOURCE (a test fails when they
# differ); an --arch-file is TOML, parsed when given
SOURCE = Path(__file__).resolve().parents[1] / "data" / "archs.toml"
PARSED = SOURCE.with_suffix(".json")

ARCH_GIVEN = "--arch"   # detected_from of a device --arch named that the trace could not tell apart
_REQUIRED = ("arch", "name", "vendor", "wave_size", "compute_units", "num_sms_reported",
             "compute_major", "compute_minor", "peak_bw_gbs")


class Arch(msgspec.Struct, frozen=True):
    """One device of the database. TFLOP/s tables are keyed by canonical dtype (bf16, fp8, ...)."""

    key: str
    arch: str
    name: str
    vendor: str
    wave_size: int
    compute_units: int
    num_sms_reported: int
    compute_major: int
    compute_minor: int
    peak_bw_gbs: float
    sustained_bw_gbs: float | None = None
    sustained_source: str | None = None
    default: bool = False
    family: str | None = None
    match_names: tuple[str, ...] = ()
    gfx_target_version: int | None = None
    boost_mhz: float | None = None
    memory_type: str | None = None
    bus_bits: int | None = None
    memory_gb: float | None = None
    l2_mib: float | None = None
    mall_mib: float | None = None
    lds_kib: float | None = None
    lds_scope: str | None = None
    # GPU-to-GPU interconnect, GB/s one direction, per GPU (bus bandwidth)
    link_gbs: float | None = None
    link_source: str | None = None
    matrix_tflops: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    vector_tflops: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    maf_tflops: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    measured_tflops: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    measured_bw_gbs: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    calibrated: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    matrix_dtypes: tuple[str, ...] = ()
    derived: tuple[str, ...] = ()
    unverified: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    notes: str | None = None
    user: bool = False  # from an --arch-file (not a TOML field): wins over the bundled entries

    def __hash__(self) -> int:
        return hash(self.key)

    def bandwidth(self) -> tuple[float, str]:
        """(GB/s for roofline denominators, "sustained" | "peak"): peak only when no sustained
        figure."""
        if self.sustained_bw_gbs:
            return float(self.sustained_bw_gbs), "sustained"
        return float(self.peak_bw_gbs), "peak"

    def peak_tflops(self, dtype: str | None, unit: str = "matrix") -> float | None:
        """Peak TFLOP/s of `dtype` on the matrix (default) or vector unit; falls back to the
        other unit."""
        if dtype is None:
            return None
        dtype = PEAK_KEY.get(dtype, dtype)
        first, second = (self.matrix_tflops, self.vector_tflops) if unit == "matrix" else (
            self.vector_tflops, self.matrix_tflops)
        value = first.get(dtype, second.get(dtype))
        return float(value) if value is not None else None

    def compute_roof(self, dtype: str | None, unit: str = "matrix") -> float | None:
        """TFLOP/s a `dtype` FLOP is priced at: the matrix figure `attrib calibrate` measured
        (a large square GEMM) where there is one, else the datasheet peak (`peak_tflops`)."""
        measured = self.measured_tflops.get(PEAK_KEY.get(dtype, dtype)) if dtype else None
        if unit == "matrix" and measured:
            return float(measured)
        return self.peak_tflops(dtype, unit)

    def compute_basis(self) -> str:
        """"measured" when compute_roof reads calibrated matrix figures, else "peak"."""
        return "measured" if self.measured_tflops else "peak"


def _entry(key: str, raw: Mapping[str, Any], origin: object) -> Arch:
    missing = [f for f in _REQUIRED if f not in raw]
    if missing:
        raise TraceError(origin, f"arch entry [{key}] lacks {', '.join(missing)}")
    known = set(Arch.__struct_fields__) - {"key", "user"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise TraceError(origin, f"arch entry [{key}] has unknown fields {', '.join(unknown)}")
    for name in ("peak_bw_gbs", "sustained_bw_gbs", "link_gbs", "wave_size", "compute_units",
                 "num_sms_reported"):
        v = raw.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0):
            raise TraceError(origin, f"arch entry [{key}] field {name} must be a positive number, "
                                     f"got {v!r}")
    for pattern in raw.get("match_names", ()):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise TraceError(origin, f"arch entry [{key}] match_names {pattern!r}: {exc}") from None
    vals: dict[str, Any] = {}
    for name, value in raw.items():
        if name == "calibrated":   # attrib calibrate's record: device, date, versions, method
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                why = "calibrated must be a table of strings"
                raise TraceError(origin, f"arch entry [{key}] {why}")
            value = MappingProxyType(dict(value))
        elif name.endswith("_tflops") or name == "measured_bw_gbs":
            numbers = isinstance(value, dict) and all(isinstance(v, (int, float))
                                                      for v in value.values())
            if not numbers:
                raise TraceError(origin, f"arch entry [{key}] {name} must be a table of numbers")
            value = MappingProxyType({str(k): float(v) for k, v in value.items()})
        elif isinstance(value, list):
            value = tuple(str(v) for v in value)
        vals[name] = value
    return Arch(key=key, **vals)


def _toml() -> Any:
    """The TOML parser (tomllib; tomli before Python 3.11)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    return tomllib


def _parse(text: str, origin: object) -> dict[str, Arch]:
    toml_text(text, origin)  # too large or too deeply nested: refused before the parser recurses
    toml = _toml()
    try:
        doc = toml.loads(text)
    except toml.TOMLDecodeError as exc:
        raise TraceError(origin, f"not valid TOML ({exc})") from None
    return _entries(doc, origin)


def _entries(doc: dict[str, Any], origin: object) -> dict[str, Arch]:
    """The Arch of each top-level table of a parsed database."""
    out = {}
    for key, raw in doc.items():
        if not isinstance(raw, dict):
            raise TraceError(origin, f"top-level key {key!r} is not a table")
        out[key] = _entry(key, raw, origin)
    return out


def load_archs(extra: Path | None = None) -> dict[str, Arch]:
    """The bundled device database with `extra` (an --arch-file) overriding same keys and adding
    new ones. The file's entries come first and are marked `user`: where one describes the same
    device as a bundled entry (`attrib archs --template --trace` names it after the device,
    `nvidia-h200` beside the bundled `h200-sxm`), detection and `--arch gfxNNNN` pick the user's."""
    # beside the package (its package data), not through importlib.resources: ~1 ms to start
    archs = _entries(orjson.loads(PARSED.read_bytes()), "attrib/data/archs.toml")
    if extra is not None:
        path = Path(extra)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise TraceError(path, f"cannot read arch file ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise TraceError(path, "not a TOML text file (not UTF-8)") from None
        mine = {k: msgspec.structs.replace(a, user=True) for k, a in _parse(text, path).items()}
        archs = {**mine, **{k: a for k, a in archs.items() if k not in mine}}
    return archs


def _preferred(cands: list[Arch]) -> Arch:
    """Of entries that fit equally: the user's own (an --arch-file), else the default, else the
    first."""
    return next((a for a in cands if a.user), next((a for a in cands if a.default), cands[0]))


def _default_for(arch: str, archs: Mapping[str, Arch]) -> Arch | None:
    same = [a for a in archs.values() if a.arch == arch]
    return _preferred(same) if same else None


def _by_name(name: str, archs: Iterable[Arch]) -> Arch | None:
    for a in archs:
        if any(re.search(p, name, re.IGNORECASE) for p in a.match_names):
            return a
    return None


def _nearest_memory(cands: list[Arch], total_bytes: Any) -> Arch:
    """Among candidates, the one whose stated capacity is closest (in ratio) to totalGlobalMem
    in GiB."""
    if len(cands) == 1 or not isinstance(total_bytes, (int, float)) or total_bytes <= 0:
        return _preferred(cands)
    gib = total_bytes / 2**30
    return min(cands, key=lambda a: abs((a.memory_gb or 0) / gib - 1.0) if a.memory_gb else 1e9)


def _from_torch(dev: Mapping[str, Any], archs: list[Arch]) -> Arch | None:
    name = str(dev.get("name") or "")
    if name:
        hit = _by_name(name, archs)
        if hit:
            return hit
    version = (dev.get("computeMajor"), dev.get("computeMinor"))
    cands = [a for a in archs if (a.compute_major, a.compute_minor) == version]
    if dev.get("warpSize"):
        cands = [a for a in cands if a.wave_size == dev["warpSize"]]
    if dev.get("numSms"):
        cands = [a for a in cands if a.num_sms_reported == dev["numSms"]]
    return _nearest_memory(cands, dev.get("totalGlobalMem")) if cands else None


def _from_agent(dev: Mapping[str, Any], archs: list[Arch]) -> Arch | None:
    gfx = str(dev.get("name") or "")
    if not gfx.startswith("gfx"):
        return None
    same = [a for a in archs if a.arch == gfx]
    if not same:
        return None
    product = str(dev.get("product_name") or dev.get("marketing_name") or "")
    hit = _by_name(product, same) if product else None
    if hit:
        return hit
    cus = dev.get("cu_count")
    if cus:
        same = [a for a in same if a.compute_units == cus] or same
    return _preferred(same)


def _from_kernels(names: Iterable[str], archs: Mapping[str, Arch]) -> Arch | None:
    votes: Counter[str] = Counter()
    for n in set(names):
        m = re.search(ISA, n) or re.search(ROCPRIM_ARCH, n)
        if m:
            votes["gfx" + m.group(1)] += 1
    for gfx, _ in votes.most_common():
        hit = _default_for(gfx, archs)
        if hit:
            return hit
    return None


def detect(devices: tuple[dict, ...], vendor: str | None,
           kernel_names: Iterable[str] = (), extra: Path | None = None) -> tuple[Arch | None, str]:
    """(entry, detected_from) with detected_from "deviceProperties" | "agent_info" |
    "kernel_names" | "unknown".

    torch deviceProperties: name patterns, else (computeMajor.minor, warpSize, numSms) narrowed by
    totalGlobalMem (ROCm 7.0 writes an empty name: 9.4 / 304 / wave64 still gives MI300X).
    rocprof agents: `name` gfxNNNN, then `product_name`. Kernel names: `_ISA942_`-style tokens (and
    rocPRIM's `target_arch)942`), the most frequent among the distinct names.
    """
    db = load_archs(extra)
    pool = [a for a in db.values() if vendor is None or a.vendor == vendor]
    for dev in devices:
        if "computeMajor" in dev:
            hit = _from_torch(dev, pool)
            if hit:
                return hit, "deviceProperties"
    for dev in devices:
        if "computeMajor" not in dev:
            hit = _from_agent(dev, pool)
            if hit:
                return hit, "agent_info"
    hit = _from_kernels(kernel_names, {k: a for k, a in db.items() if a in pool})
    if hit:
        return hit, "kernel_names"
    return None, "unknown"


def override(name: str, extra: Path | None = None) -> Arch:
    """Resolve `--arch NAME`: a database key, a gfx/sm arch (its default entry, or the user's) or
    a product-name match. An unknown name: KeyError with `unknown_arch`'s line."""
    db = load_archs(extra)
    hit = find(name, db)
    if hit is None:
        raise KeyError(unknown_arch(name, db))
    return hit


def find(name: str, db: Mapping[str, Arch]) -> Arch | None:
    """The entry `--arch NAME` names in `db`, None when none."""
    wanted = name.strip()
    if not wanted:
        return None
    if wanted.lower() in db:
        return db[wanted.lower()]
    hit = _default_for(wanted.lower(), db) or _by_name(wanted, db.values())
    return hit or next((a for a in db.values() if a.name.lower() == wanted.lower()), None)


def unknown_arch(name: str, db: Mapping[str, Arch], also: Iterable[str] = ()) -> str:
    """One line for an --arch NAME that names no entry: the closest names, then every key with
    its target (what --arch takes: a key, a gfx/sm target, a product name)."""
    import difflib  # an error's hint: not at the top (a fast start)

    whole = (a for a in also if any(c.isdigit() for c in a))  # not a bare prefix ("gfx")
    names = [*db, *sorted({a.arch for a in db.values()}), *whole]
    close = difflib.get_close_matches(name.strip().lower(), list(dict.fromkeys(names)), n=3,
                                      cutoff=0.6)
    hint = f" (closest: {', '.join(close)})" if close else ""
    known = ", ".join(f"{k} ({a.arch})" for k, a in db.items())
    return (f"unknown arch {name!r}{hint}; known: {known} (`attrib archs` lists them; "
            "`attrib archs --template` prints an entry to add yours with --arch-file)")


def same_device(given: Arch, traced: Arch | None, how: str, vendor: str | None = None) -> bool:
    """Whether `--arch` (`given`) names the device the trace ran on (`traced`, detected from
    `how`), so that its figures are measured on it, not projected: the same entry; the same gfx/sm
    target when only kernel names told it (they carry the target, not the product); or, when the
    trace does not say which it ran on, any device of the trace's `vendor` (the user's word is all
    there is; a rocprof trace did not run on an NVIDIA part)."""
    if traced is None:
        return vendor is None or given.vendor == vendor
    if how == "kernel_names":
        return traced.arch == given.arch
    return traced.key == given.key


def arch_table(extra: Path | None = None) -> pl.DataFrame:
    """One row per database entry, for `attrib archs`."""
    rows = [{
        "key": a.key, "arch": a.arch, "name": a.name, "vendor": a.vendor, "cus": a.compute_units,
        "peak_bw_gbs": a.peak_bw_gbs, "sustained_bw_gbs": a.sustained_bw_gbs,
        "bf16_tflops": a.peak_tflops("bf16"), "fp8_tflops": a.matrix_tflops.get("fp8"),
        "derived": ", ".join(a.derived), "user": a.user,
    } for a in load_archs(extra).values()]
    return pl.DataFrame(rows, schema={
        "key": pl.Utf8, "arch": pl.Utf8, "name": pl.Utf8, "vendor": pl.Utf8, "cus": pl.Int64,
        "peak_bw_gbs": pl.Float64, "sustained_bw_gbs": pl.Float64, "bf16_tflops": pl.Float64,
        "fp8_tflops": pl.Float64, "derived": pl.Utf8, "user": pl.Boolean})


def parsed_text() -> str:
    """SOURCE parsed, as PARSED holds it."""
    doc = _toml().loads(SOURCE.read_text(encoding="utf-8"))
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n"


if __name__ == "__main__":  # write PARSED again
    PARSED.write_text(parsed_text(), encoding="utf-8")
    print(f"wrote {PARSED}")
