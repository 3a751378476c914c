"""What the user's own GPU sustains, measured with torch (`attrib calibrate`; CUDA or ROCm).

Bandwidth: read (`x.sum()`), write (`x.fill_()`) and copy (`dst.copy_(src)`, read + write bytes)
over buffers well above the last-level cache (1, 2, 4 GiB by default; H200 L2 50 MiB, MI300X
MALL 256 MiB); each size timed `reps` times with device events after warmup, its figure the
median repetition; the figure of a kind is the median over sizes. Matrix: square matmuls per
dtype the device runs (fp16, bf16, fp32 with TF32 off, tf32, fp8 via `torch._scaled_mm`), the
median repetition. `device="cpu"` is a dry run of the same code (host memory, no events).
torch is imported only when measuring.

Stopping: `measure(stop=event)` checks the event before every timed call and raises Stopped once
it is set (for a caller that runs it in a thread of its own); `measure_in_child` (what `attrib
calibrate` runs) measures in a child process that it kills on SIGTERM or Ctrl-C, at once, even
while one torch op runs for minutes (an 8192^3 fp16 matmul on a CPU).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import select
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

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
# fp32 alone on the CPU: fp16 matmuls have no fast CPU kernel (512^3 0.1 s, 1024^3 2 s on 2 cores,
# 2.5 GFLOP/s against fp32's 200), and a dry run needs one dtype to exercise the code
CPU_DTYPES = ("fp32",)
METHOD = ("bandwidth: read x.sum(), write x.fill_(), copy dst.copy_(src) counting read+write "
          "bytes; per size the median of {reps} timed repetitions after {warmup} warmup, per kind "
          "the median over sizes {sizes} MiB; matrix: {n}x{n}x{n} matmul, the median of {reps} "
          "repetitions (fp32 with TF32 off; fp8 e4m3 via torch._scaled_mm, bf16 out)")

Progress = Callable[[str], None]


class Stopped(Exception):
    """`measure` was told to stop (its `stop` event set) and did, before its next timed call."""


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

    def __init__(self, torch: Any, dev: Any, stop: threading.Event | None = None) -> None:
        self.torch, self.gpu, self.stop = torch, dev.type != "cpu", stop

    def check(self) -> None:
        """Raise Stopped once the stop event is set."""
        if self.stop is not None and self.stop.is_set():
            raise Stopped("calibration stopped")

    def median_s(self, fn: Callable[[], Any], reps: int, warmup: int) -> float:
        for _ in range(warmup):
            self.check()
            fn()
        if not self.gpu:
            times = []
            for _ in range(reps):
                self.check()
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return statistics.median(times)
        cuda = self.torch.cuda
        ev = [(cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)) for _ in range(reps)]
        cuda.synchronize()
        for a, b in ev:
            self.check()
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
        except Stopped:
            raise
        except Exception as exc:   # a dtype this device or build lacks
            first = str(exc).splitlines()[0][:160] if str(exc) else ""
            skipped[name] = f"{type(exc).__name__}: {first}"
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32
    return tflops, skipped


def measure(device: str = "cuda", sizes_mib: tuple[int, ...] = SIZES_MIB, matmul_n: int = MATMUL_N,
            dtypes: tuple[str, ...] = DTYPES, reps: int = REPS, warmup: int = WARMUP,
            tick: Progress = lambda label: None,
            stop: threading.Event | None = None) -> Calibration:
    """Measure the device (see the module docstring); `tick(label)` before each measurement.

    Raises UsageError when torch is missing or sees no such GPU (use device="cpu" for a dry run),
    Stopped when `stop` is set (checked before every timed call).

    >>> measure("cpu", sizes_mib=(64,), matmul_n=512, dtypes=("fp32",), reps=5).bandwidth  # doctest: +SKIP
    {'read': 49.4, 'write': 37.1, 'copy': 42.9}
    """
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
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown or not dtypes:
        raise UsageError(f"--dtypes {','.join(dtypes)}: expected some of {', '.join(DTYPES)}")
    timer = _Timer(torch, dev, stop)
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


def measure_in_child(tick: Progress = lambda label: None, **kwargs: Any) -> dict[str, Any]:
    """`measure(**kwargs).to_dict()`, measured in a child process (`python -m collectors.calibrate`)
    whose progress comes back as `tick(label)` calls. Stopping it is immediate and safe: a signal's
    Python handler runs in this process within `_messages`' 50 ms poll (where a thread that sat in
    a long torch op would hold it for minutes), and whatever ends the wait here (SIGTERM's
    exception, Ctrl-C's KeyboardInterrupt) kills the child, whose GPU context the driver frees (a
    daemon thread cut off at exit inside torch aborts the process instead: 'terminate called without
    an active exception', seen on the H200). The child ignores SIGINT (a terminal's Ctrl-C reaches
    the whole process group: this process stops it) and exits when this one is gone (its stdin
    closes).

    Raises UsageError as `measure` does, RuntimeError when the child ends without a result (its
    stderr is the user's).

    >>> measure_in_child(device="cpu", sizes_mib=(64,), matmul_n=512, dtypes=("fp32",))  # doctest: +SKIP
    """
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])   # where `collectors` is importable from
    env["PYTHONPATH"] = os.pathsep.join(x for x in (root, env.get("PYTHONPATH")) if x)
    args = {k: list(v) if isinstance(v, tuple) else v for k, v in kwargs.items()}
    proc = subprocess.Popen([sys.executable, "-m", "collectors.calibrate", json.dumps(args)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    result: dict[str, Any] | None = None
    try:
        for msg in _messages(proc):
            if "tick" in msg:
                tick(str(msg["tick"]))
            elif "usage_error" in msg:
                raise UsageError(str(msg["usage_error"]))
            elif "result" in msg:
                result = msg["result"]
        status = proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
    if result is None:
        raise RuntimeError(f"the calibration process ended with status {status} and no result")
    return result


def _messages(proc: subprocess.Popen[bytes], poll_s: float = 0.05) -> Iterator[dict[str, Any]]:
    """The child's JSON lines as they come, this thread back in Python every `poll_s`: a signal
    may be delivered to any thread of the process (polars' and BLAS' workers too), and its Python
    handler runs only when the main thread next runs bytecode; a read blocked on the pipe (the
    child inside one long op) would keep it waiting for minutes."""
    assert proc.stdout is not None
    fd, buf = proc.stdout.fileno(), b""
    while True:
        ready, _, _ = select.select([fd], [], [], poll_s)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return
        *lines, buf = (buf + chunk).split(b"\n")
        for line in lines:
            yield json.loads(line)


def _child(argv: list[str]) -> int:
    """The child of `measure_in_child`: JSON lines on the original stdout ({"tick": label}, then
    {"result": ...} or {"usage_error": ...}); anything else written to stdout goes to stderr."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the parent stops this process
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def orphaned() -> None:   # the parent is gone (its end of stdin closed): stop at once
        sys.stdin.read()
        os._exit(1)
    threading.Thread(target=orphaned, name="attrib-calibrate-parent", daemon=True).start()

    def emit(msg: dict[str, Any]) -> None:
        proto.write(json.dumps(msg) + "\n")
        proto.flush()
    kwargs: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                              for k, v in json.loads(argv[0]).items()}
    try:
        cal = measure(tick=lambda label: emit({"tick": label}), **kwargs)
    except UsageError as exc:
        emit({"usage_error": str(exc)})
        return 2
    emit({"result": cal.to_dict()})
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
