"""Run a command under rocprofv3 and find the files it wrote.

`build_argv` is the pure part (tested on its own); `run` executes it. rocprofv3 writes one set of
files per process at `<out_dir>/<output_file>_<kind>.<ext>`; the default name `%hostname%/%pid%`
puts them in a per-host sub-directory, so discovery walks `out_dir` for files that are new or
changed since the start. rocprofv3 can exit non-zero after writing complete output (a crash in
its post-processing), so success is judged by the files, and the exit status is reported.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from attrib.errors import TraceError

OUTPUT_FORMATS = ("rocpd", "csv", "json", "pftrace", "otf2")
DEFAULT_OUTPUT_FILE = "%hostname%/%pid%"
# File endings a reader loads (one per process and format); the rest are companions.
TRACE_SUFFIXES = ("_results.db", "_results.json", "_kernel_trace.csv", "_results.pftrace")


@dataclass(frozen=True)
class RunResult:
    """What a profiled run left: argv, exit status, every file written, the loadable traces."""

    argv: tuple[str, ...]
    returncode: int
    out_dir: Path
    files: tuple[Path, ...]

    @property
    def warning(self) -> str | None:
        """A note when rocprofv3 failed after writing output (its files are still used)."""
        if self.returncode == 0:
            return None
        return (f"rocprofv3 exited with status {self.returncode} after writing "
                f"{len(self.files)} files; using them (rocprofv3 can fail in post-processing)")

    @property
    def traces(self) -> tuple[Path, ...]:
        """The files to load: each process's rocpd db / JSON / kernel-trace CSV / pftrace."""
        return tuple(p for p in self.files if p.name.endswith(TRACE_SUFFIXES))


def _formats(fmt: str | Sequence[str]) -> list[str]:
    fmts = [fmt] if isinstance(fmt, str) else list(fmt)
    bad = [f for f in fmts if f not in OUTPUT_FORMATS]
    if not fmts or bad:
        raise ValueError(f"output format must be among {', '.join(OUTPUT_FORMATS)}; got {fmts}")
    return fmts


def build_argv(cmd: Sequence[str], out_dir: str | Path, *, kernel_trace: bool = True,
               marker_trace: bool = True, hip_trace: bool = False,
               memory_copy_trace: bool = False, fmt: str | Sequence[str] = "rocpd",
               output_file: str = DEFAULT_OUTPUT_FILE, rocprofv3: str = "rocprofv3",
               extra_args: Sequence[str] = ()) -> list[str]:
    """The rocprofv3 command line: tracing flags, explicit `--output-format`, `-d`, `-o`, `--`."""
    if not cmd:
        raise ValueError("no command to profile")
    argv = [str(rocprofv3)]
    argv += ["--kernel-trace"] if kernel_trace else []
    argv += ["--marker-trace"] if marker_trace else []
    argv += ["--hip-trace"] if hip_trace else []
    argv += ["--memory-copy-trace"] if memory_copy_trace else []
    argv += ["--output-format", *_formats(fmt), "-d", str(out_dir), "-o", output_file]
    return argv + [str(a) for a in extra_args] + ["--", *[str(c) for c in cmd]]


def expand_name(template: str, *, pid: int, hostname: str | None = None,
                ppid: int | None = None) -> str:
    """The common rocprofv3 output-name placeholders filled in (%hostname%, %pid%, %ppid%,
    {..})."""
    values = {"hostname": hostname or socket.gethostname(), "pid": str(pid),
              "ppid": str(ppid if ppid is not None else os.getppid())}
    for key, value in values.items():
        template = template.replace(f"%{key}%", value).replace(f"{{{key}}}", value)
    return template


def _resolve(rocprofv3: str) -> str:
    found = shutil.which(rocprofv3)
    if found is None:
        raise TraceError(rocprofv3, "rocprofv3 not found: install ROCm's rocprofiler-sdk "
                                    "(it provides /opt/rocm/bin/rocprofv3) "
                                    "or pass --rocprofv3 PATH")
    return found


def _snapshot(out_dir: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in out_dir.rglob("*") if p.is_file()}


def run(cmd: Sequence[str], out_dir: str | Path = "rocprof-out", *, hip_trace: bool = False,
        memory_copy_trace: bool = False, fmt: str | Sequence[str] = "rocpd",
        rocprofv3: str = "rocprofv3", extra_args: Sequence[str] = (),
        output_file: str = DEFAULT_OUTPUT_FILE, env: dict[str, str] | None = None,
        timeout: float | None = None) -> RunResult:
    """Run `cmd` under rocprofv3 (kernel + marker trace) and return what it wrote.

    Raises TraceError when rocprofv3 is missing, or when it wrote nothing (with its exit status).
    """
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    exe = _resolve(rocprofv3)
    argv = build_argv(cmd, out, hip_trace=hip_trace, memory_copy_trace=memory_copy_trace, fmt=fmt,
                      output_file=output_file, rocprofv3=exe, extra_args=extra_args)
    before = _snapshot(out)
    started = time.time_ns()
    try:
        proc = subprocess.run(argv, env={**os.environ, **(env or {})}, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise TraceError(exe, f"profiled command still running after {timeout} s; "
                              "stopped") from None
    except OSError as exc:
        raise TraceError(exe, f"cannot run rocprofv3 ({exc.strerror or exc})") from None
    after = _snapshot(out)
    files = tuple(sorted(p for p, m in after.items() if before.get(p) != m or m >= started))
    if not files:
        status = f"exited with status {proc.returncode}" if proc.returncode else "exited normally"
        raise TraceError(out, f"rocprofv3 {status} but wrote no output here; check its messages "
                              "above (is the command right, and did it use the GPU?)")
    return RunResult(argv=tuple(argv), returncode=proc.returncode, out_dir=out, files=files)
