"""What the user's own GPU sustains, measured with torch (`attrib calibrate`; CUDA or ROCm).

Bandwidth: read (`x.sum()`), write (`x.fill_()`) and copy (`dst.copy_(src)`, read + write bytes)
over buffers well above the last-level cache (1, 2, 4 GiB by default; H200 L2 50 MiB, MI300X
MALL 256 MiB); each size timed `reps` times with device events after warmup, its figure the
median repetition; the figure of a kind is the median over sizes. Matrix: square matmuls per
dtype the device runs (fp16, bf16, fp32 with TF32 off, tf32, fp8 via `torch._scaled_mm`), the
median repetition. `device="cpu"` is a dry run of the same code (host memory, no events).
torch is imported only when measuring.
"""

from __future__ import annotations

import contextlib
import platform
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from attrib.errors import UsageError

SIZES_MIB = (1024, 2048, 4096)
MATMUL_N = 8192
REPS, WARMUP = 20, 3
# `--device cpu` (a dry run of the same code on host memory): sizes a CPU does in seconds, not the
# GPU's 8192^3 fp16 matmuls (over 20 minutes on 2 cores)
CPU_SIZES_MIB = (64, 128)
CPU_MATMUL_N = 512
CPU_REPS = 5
KINDS = ("read", "write", "copy")
DTYPES = ("fp16", "bf16", "fp32", "tf32", "fp8")
METHOD = ("bandwidth: read x.sum(), write x.fill_(), copy dst.copy_(src) counting read+write "
          "bytes; per size the median of {reps} timed repetitions after {warmup} warmup, per kind "
          "the median over sizes {sizes} MiB; matrix: {n}x{n}x{n} matmul, the median of {reps} "
          "repetitions (fp32 with TF32 off; fp8 e4m3 via torch._scaled_mm, bf16 out)")

Progress = Callable[[str], None]


@dataclass
class Calibration:
    """The measured figures (GB/s as 1e9 B/s, dense TFLOP/s) and what they were measured on."""

    device: dict[str, Any]
    bandwidth: dict[str, float]                 # kind -> GB/s (median over sizes)
    by_size: dict[str, dict[int, float]]        # kind -> {MiB: GB/s}
    tflops: dict[str, float]                    # dtype -> TFLOP/s
    skipped: dict[str, str] = field(default_factory=dict)   # dtype -> why not measured
    method: str = ""
    date_utc: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "bandwidth_gbs": self.bandwidth,
                "bandwidth_by_size_gbs": {k: {str(s): v for s, v in d.items()}
                                          for k, d in self.by_size.items()},
                "matrix_tflops": self.tflops, "skipped": self.skipped, "method": self.method,
                "date_utc": self.date_utc}


def _sig(x: float) -> float:
    """Four significant digits: a measurement, not a spec."""
    return float(f"{x:.4g}")


def steps(sizes_mib: tuple[int, ...], dtypes: tuple[str, ...] = DTYPES) -> int:
    """How many progress steps `measure` reports."""
    return len(sizes_mib) * len(KINDS) + len(dtypes)


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise UsageError("attrib calibrate needs torch (pip install torch)") from None
    return torch


def _driver(torch: Any) -> str | None:
    """The kernel driver's version (nvidia-smi, amdgpu's sysfs), else the CUDA driver API's."""
    if getattr(torch.version, "hip", None):
        with contextlib.suppress(OSError):
            with open("/sys/module/amdgpu/version", encoding="utf-8") as fh:
                return f"amdgpu {fh.read().strip()}"
        return None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        got = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True)
        return f"nvidia {got.stdout.splitlines()[0].strip()}"
    api = getattr(torch._C, "_cuda_getDriverVersion", None)
    with contextlib.suppress(Exception):
        v = int(api()) if api is not None else 0
        return f"CUDA driver API {v // 1000}.{v % 1000 // 10}" if v else None
    return None


def device_record(torch: Any, dev: Any) -> dict[str, Any]:
    """The device as a torch trace's deviceProperties names it (so the database matches it)."""
    base = {"torch": torch.__version__, "cuda": getattr(torch.version, "cuda", None),
            "hip": getattr(torch.version, "hip", None), "host": platform.node()}
    if dev.type == "cpu":
        return {"name": f"CPU {platform.processor() or platform.machine()} (dry run)", **base,
                "driver": None, "type": "cpu"}
    p = torch.cuda.get_device_properties(dev)
    rec = {"name": p.name, "computeMajor": p.major, "computeMinor": p.minor,
           "numSms": p.multi_processor_count, "totalGlobalMem": p.total_memory,
           "warpSize": getattr(p, "warp_size", None), "type": dev.type}
    arch = getattr(p, "gcnArchName", None)
    if arch and getattr(torch.version, "hip", None):
        rec["gcnArchName"] = arch
    return {**rec, **base, "driver": _driver(torch)}


class _Timer:
    """Time `reps` calls of a function: device events on a GPU, perf_counter on the CPU."""

    def __init__(self, torch: Any, dev: Any) -> None:
        self.torch, self.gpu = torch, dev.type != "cpu"

    def median_s(self, fn: Callable[[], Any], reps: int, warmup: int) -> float:
        for _ in range(warmup):
            fn()
        if not self.gpu:
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return statistics.median(times)
        cuda = self.torch.cuda
        ev = [(cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)) for _ in range(reps)]
        cuda.synchronize()
        for a, b in ev:
            a.record()
            fn()
            b.record()
        cuda.synchronize()
        return statistics.median(a.elapsed_time(b) for a, b in ev) / 1e3


def _bandwidth(torch: Any, dev: Any, timer: _Timer, sizes: tuple[int, ...], reps: int,
               warmup: int, tick: Progress) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {k: {} for k in KINDS}
    for mib in sizes:
        n = mib * 2**20 // 4
        src = torch.ones(n, dtype=torch.float32, device=dev)
        dst = torch.empty_like(src)
        nbytes = n * 4
        jobs = {"read": (lambda: src.sum(), nbytes), "write": (lambda: dst.fill_(2.0), nbytes),
                "copy": (lambda: dst.copy_(src), 2 * nbytes)}
        for kind, (fn, moved) in jobs.items():
            tick(f"{kind} {mib} MiB")
            out[kind][mib] = _sig(moved / timer.median_s(fn, reps, warmup) / 1e9)
        del src, dst
    return out


def _fp8_mm(torch: Any, a: Any, b: Any) -> Callable[[], Any]:
    """A `torch._scaled_mm` of e4m3 (fnuz on MI300) operands; raises where the device has none."""
    fnuz = bool(getattr(torch.version, "hip", None)) and "gfx94" in _arch_name(torch, a.device)
    fp8 = torch.float8_e4m3fnuz if fnuz else torch.float8_e4m3fn
    a8, b8 = a.to(fp8), b.to(fp8).t().contiguous().t()   # the second operand column-major
    one = torch.ones((), device=a.device)

    def fn() -> Any:
        return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    fn()
    return fn


def _arch_name(torch: Any, dev: Any) -> str:
    with contextlib.suppress(Exception):
        return str(torch.cuda.get_device_properties(dev).gcnArchName)
    return ""


def _matmul(torch: Any, dev: Any, timer: _Timer, n: int, dtypes: tuple[str, ...], reps: int,
            warmup: int, tick: Progress) -> tuple[dict[str, float], dict[str, str]]:
    tflops, skipped = {}, {}
    kinds = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32,
             "tf32": torch.float32, "fp8": torch.bfloat16}
    tf32 = torch.backends.cuda.matmul.allow_tf32
    for name in dtypes:
        tick(f"matmul {name} {n}")
        if dev.type == "cpu" and name in ("tf32", "fp8"):
            skipped[name] = "no CPU kernel"
            continue
        try:
            a = torch.randn(n, n, device=dev, dtype=kinds[name])
            b = torch.randn(n, n, device=dev, dtype=kinds[name])
            torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
            fn = _fp8_mm(torch, a, b) if name == "fp8" else (lambda: a @ b)
            tflops[name] = _sig(2 * n**3 / timer.median_s(fn, reps, warmup) / 1e12)
        except Exception as exc:   # a dtype this device or build lacks
            first = str(exc).splitlines()[0][:160] if str(exc) else ""
            skipped[name] = f"{type(exc).__name__}: {first}"
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32
    return tflops, skipped


def measure(device: str = "cuda", sizes_mib: tuple[int, ...] = SIZES_MIB, matmul_n: int = MATMUL_N,
            dtypes: tuple[str, ...] = DTYPES, reps: int = REPS, warmup: int = WARMUP,
            tick: Progress = lambda label: None) -> Calibration:
    """Measure the device (see the module docstring); `tick(label)` before each measurement.

    Raises UsageError when torch is missing or sees no such GPU (use device="cpu" for a dry run)."""
    torch = _torch()
    try:
        dev = torch.device(device)
    except RuntimeError:
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise UsageError(f"--device {device}: calibrate measures a CUDA/ROCm GPU "
                         "('cuda', 'cuda:N') or the CPU as a dry run ('cpu')")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            build = (f"ROCm {torch.version.hip}" if getattr(torch.version, "hip", None) else
                     f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only")
            raise UsageError(f"no GPU: torch {torch.__version__} ({build} build) sees no CUDA/ROCm "
                             "device; `attrib calibrate --device cpu` is a dry run")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UsageError(f"--device {device}: only {torch.cuda.device_count()} GPU(s) visible")
        dev = torch.device("cuda", torch.cuda.current_device() if dev.index is None else dev.index)
        torch.cuda.set_device(dev)
    timer = _Timer(torch, dev)
    record = device_record(torch, dev)
    sizes = _fitting(torch, dev, sizes_mib)
    by_size = _bandwidth(torch, dev, timer, sizes, reps, warmup, tick)
    tflops, skipped = _matmul(torch, dev, timer, matmul_n, dtypes, reps, warmup, tick)
    bw = {k: _sig(statistics.median(v.values())) for k, v in by_size.items() if v}
    for mib in sorted(set(sizes_mib) - set(sizes)):
        skipped[f"{mib} MiB"] = "too large for the free device memory"
    return Calibration(device=record, bandwidth=bw, by_size=by_size, tflops=tflops, skipped=skipped,
                       method=METHOD.format(reps=reps, warmup=warmup, n=matmul_n,
                                            sizes=", ".join(map(str, sizes))),
                       date_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def _fitting(torch: Any, dev: Any, sizes: tuple[int, ...]) -> tuple[int, ...]:
    """The sizes whose two buffers fit in 80% of the free device memory (all of them on the CPU)."""
    if dev.type == "cpu":
        return sizes
    free, _ = torch.cuda.mem_get_info(dev)
    fit = tuple(s for s in sizes if 2 * s * 2**20 <= 0.8 * free)
    if not fit:
        raise UsageError(f"{dev}: {free / 2**30:.1f} GiB free, too little for a {min(sizes)} MiB "
                         "buffer pair")
    return fit

