"""Capture a torch-profiler trace of marked inference steps, with a provenance stamp.

    with collectors.capture("traces/", warmup=2, steps=8,
                            provenance={"model": "Qwen/Qwen3-8B"}) as cap:
        with cap.phase("prefill", tokens=batch * prompt):
            model(...)
        for _ in range(n):
            with cap.phase("decode", tokens=batch):
                model(...)

Each step is a `record_function` span `"{phase} (tokens={N})"` (or `"{phase}"`), then `prof.step()`;
on ROCm also a roctx range. `warmup` steps are skipped, recording stops after `steps` steps, and the
trace is exported as `<out_dir>/<name>.pt.trace.json.gz` + stamp `<trace>.attrib.json`.
`wrap(fn, phase=...)` does the same around calls of an existing step function. Fail open: profiler
or export failures are `CaptureWarning`s; step results and exceptions are untouched. Disabled
(`enabled=False`, `ATTRIB_PROFILE=0`) imports nothing; torch is imported only when a capture starts.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import gzip
import itertools
import json
import os
import shutil
import socket
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from attrib.output import commit, staged
from attrib.trace import step_name
from collectors import provenance as _prov
from collectors import outputs as _outputs
from collectors.rocprof import roctx

TRACE_SUFFIX = ".pt.trace.json.gz"
FULL_BYTES = 1 << 20   # less free space than this where torch wrote no trace: the disk was full


class CaptureWarning(UserWarning):
    """A capture could not start, record or export; the profiled program is unaffected."""


@dataclass
class CaptureResult:
    """What a capture produced; `path`/`sidecar` are None when nothing was written."""

    enabled: bool
    path: Path | None = None
    sidecar: Path | None = None
    steps: list[tuple[str, int | None]] = field(default_factory=list)
    warmup_skipped: int = 0
    start_s: float | None = None    # starting the profiler (Kineto's prepare, CUPTI)
    stop_s: float | None = None     # stopping the profiler (with_stack makes it slow)
    save_s: float | None = None     # torch's JSON of the window (holds the GIL)
    export_s: float | None = None   # writing + gzip of the trace
    bytes: int | None = None
    error: str | None = None


def profiling_enabled(enabled: bool | None = None) -> bool:
    """False when `enabled` is False or env ATTRIB_PROFILE is 0/false/no/off (a kill switch)."""
    env = os.environ.get("ATTRIB_PROFILE", "1").strip().lower()
    return enabled is not False and env not in ("0", "false", "no", "off")


def _warn(msg: str) -> None:
    warnings.warn(f"attrib capture: {msg}", CaptureWarning, stacklevel=4)


class _NullCapture:
    """A disabled capture: phases are plain null contexts; nothing is imported or written."""

    active = False

    def __init__(self) -> None:
        self.result = CaptureResult(enabled=False)

    def __enter__(self) -> "_NullCapture":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    start = __enter__

    def close(self) -> CaptureResult:
        return self.result

    def phase(self, name: str, tokens: int | None = None) -> contextlib.nullcontext:
        return contextlib.nullcontext()

    def outputs(self, token_ids: Any, how: str = "greedy token ids") -> None:
        """Nothing to stamp: the capture is off."""
        return None


def _span_ops(torch: Any) -> tuple[Any, Any]:
    """The two ops `torch.profiler.record_function` calls to open and close a span (the same
    `user_annotation` event in the trace), as their C++ functions (`OpOverload._op`), called
    directly: the wrapper class costs ~25 Python calls per span, the ops' Python `__call__`s 11
    more (the exit, a TorchBind op, scans its argument for fake script objects), each one
    recorded by the Python tracer under with_stack. The exit is called, as record_function does,
    under `DisableTorchFunctionSubclass`, without which it is several times slower (~80 us more
    per decode step on the H200, bench/capture_overhead.py). (None, None) -- use
    record_function -- when they are missing or when torch's CUPTI monitor, which
    record_function also notifies, is on."""
    try:
        from torch.autograd import profiler as ap

        monitor = getattr(ap, "_maybe_cupti_monitor", None)
        if monitor is not None and getattr(monitor(), "_monitor_singleton", None) is not None:
            return None, None
        enter = torch.ops.profiler._record_function_enter_new.default
        leave = torch.ops.profiler._record_function_exit._RecordFunction
        enter, leave = getattr(enter, "_op", enter), getattr(leave, "_op", leave)
        leave(enter("attrib.capture.probe", None))   # both callable here, or fall back
        return enter, leave
    except Exception:
        return None, None


class _Step:
    """One marked step (what `Capture.phase` returns): a plain context manager, no generator.

    Kept to a few Python calls on purpose: under with_stack the profiler's Python tracer records
    every call made while a step runs, so each one the capture adds costs time in every step."""

    __slots__ = ("cap", "name", "tokens", "label", "span")

    def __init__(self, cap: "Capture", name: str, tokens: int | None, label: str) -> None:
        self.cap, self.name, self.tokens, self.label, self.span = cap, name, tokens, label, False

    def __enter__(self) -> None:
        cap = self.cap
        if cap._state != "running":
            return None   # span stays False: not a step of this capture
        try:
            if cap._roctx is not None:
                cap._roctx.range_push(self.label)
            if cap._span_enter is not None:   # the record_function ops, without its wrapper
                self.span = cap._span_enter(self.label, None)
            else:
                span = cap._record_function(self.label)
                span.__enter__()
                self.span = span
        except Exception as exc:
            self.span = None
            _warn(f"could not open step span {self.label!r}: {exc}")
        return None

    def __exit__(self, *exc: Any) -> bool:
        if self.span is not False:
            self.cap._end_step(self.span, self.name, self.tokens)
        return False


class Capture:
    """A live capture; build it with `capture(...)`. A context manager, or start()/close()."""

    def __init__(self, out_dir: str | Path, *, warmup: int = 0, steps: int | None = None,
                 provenance: dict[str, Any] | None = None, record_shapes: bool = True,
                 with_stack: bool = True, name: str | None = None, profile_memory: bool = False,
                 with_flops: bool = False, activities: list[str] | None = None,
                 gzip_level: int = 6, embed_provenance: bool = True) -> None:
        if warmup < 0 or (steps is not None and steps < 1):
            raise ValueError(f"need warmup >= 0 and steps >= 1 or None, got {warmup}, {steps}")
        self.out_dir, self.warmup, self.steps = Path(out_dir), int(warmup), steps
        self.provenance = dict(provenance or {})
        self.options = {"record_shapes": record_shapes, "with_stack": with_stack,
                        "profile_memory": profile_memory, "with_flops": with_flops}
        self.activities, self.gzip_level, self.embed = activities, gzip_level, embed_provenance
        self.name = name or f"{socket.gethostname()}_{os.getpid()}.{time.time_ns()}"
        self.result = CaptureResult(enabled=True)
        self._prof: Any = None    # torch.profiler.profile while the window is open
        self._torch: Any = None
        self._roctx: Any = None   # collectors.rocprof.roctx on ROCm, when present
        self._acts: list[str] = []
        self._t_stop: float | None = None
        self._t_export = 0.0
        self._seen, self._state = 0, "new"   # steps run (warmup included); new -> running -> done
        self._lock = threading.RLock()
        self._labels: dict[tuple[str, Any], str] = {}   # (phase, tokens) -> span name
        self._record_function: Any = None   # torch.profiler.record_function once started
        self._span_enter: Any = None   # its enter/exit ops, when they can be called directly
        self._span_exit: Any = None
        self._no_tf: Any = contextlib.nullcontext   # torch._C.DisableTorchFunctionSubclass
        self._machine: dict[str, Any] | None = None   # provenance.machine_fields, before start
        self._made: list[Path] = []   # the folders start() created, deepest first

    def __enter__(self) -> "Capture":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    active = property(lambda self: self._state == "running")
    trace_path = property(lambda self: self.out_dir / f"{self.name}{TRACE_SUFFIX}")

    def start(self) -> "Capture":
        """Build and start the profiler; on any failure warn and run unprofiled."""
        with self._lock:
            if self._state != "new":
                return self
            self._state = "running"
            try:
                self._made = _missing_folders(self.out_dir)
                self.out_dir.mkdir(parents=True, exist_ok=True)
                if not os.access(self.out_dir, os.W_OK):
                    raise PermissionError("not writable")
            except OSError as exc:
                return self._not_started(f"output directory {self.out_dir} unusable: {exc}")
            try:
                import torch
                from torch import profiler as tp

                self._torch, running = torch, getattr(torch._C._autograd, "_profiler_enabled", None)
                if running is not None and running():   # a second profiler would clobber it
                    return self._not_started("another torch profiler is already running; not "
                                             "starting a second one")
                acts = self._activities(tp)
                self._acts = [str(a).rsplit(".", 1)[-1] for a in acts]
                self._prof = tp.profile(activities=acts, schedule=self._schedule(tp),
                                        on_trace_ready=self._on_ready, **self.options)
                self._record_function = torch.profiler.record_function
                self._span_enter, self._span_exit = _span_ops(torch)   # probed before start
                self._no_tf = getattr(torch._C, "DisableTorchFunctionSubclass",
                                      contextlib.nullcontext)
                if self._machine is None:   # a sampler hands over the fields of its first sample
                    # the stamp's slow part, outside the window
                    with contextlib.suppress(Exception):
                        self._machine = _prov.machine_fields(torch)
                t0 = time.perf_counter()
                self._prof.start()
                self.result.start_s = time.perf_counter() - t0
            except Exception as exc:
                self._prof = None
                return self._not_started(f"profiler failed to start: {type(exc).__name__}: {exc}")
            # roctx ranges too (no-ops without a ROCTx library)
            if getattr(torch.version, "hip", None):
                self._roctx = roctx
        return self

    def close(self) -> CaptureResult:
        """Stop recording, export what was recorded (once), and return the result."""
        with self._lock:
            prof, self._prof = self._prof, None
            if self._state != "running" or prof is None:
                self._state = "done"
                return self.result
            self._embed(prof)
            self._t_stop = time.perf_counter()
            try:
                prof.stop()   # fires _on_ready (the export) when the window held steps
            except Exception as exc:
                self._fail(f"profiler failed to stop: {type(exc).__name__}: {exc}")
            self._state = "done"
            if not self.result.steps and not self.result.error:
                self._fail(f"no steps recorded ({self._seen} run, warmup {self.warmup}); "
                           "nothing exported")
            if self.result.path is None:
                self._unmake()
            return self.result

    def outputs(self, token_ids: Any, how: str = "greedy token ids") -> None:
        """Record what the run generated (token ids, one list per request, in order) as the
        stamp's correctness_gate (collectors.outputs.digest); `compare` checks it. Call it before
        or after the window closes: a stamp already written is updated. A failure warns."""
        try:
            gate = _outputs.digest(token_ids, how)
            self.provenance["correctness_gate"] = gate
            if self.result.path is not None:
                _outputs.stamp(self.result.path, gate)
        except (ValueError, OSError) as exc:
            _warn(f"outputs not recorded: {exc}")

    def phase(self, name: str, tokens: int | None = None) -> "_Step":
        """Mark one step. The body's result and exceptions pass through untouched."""
        key = (name, tokens)
        label = self._labels.get(key) if type(tokens) is not bool else None
        if label is None:
            try:
                label = step_name(name, tokens)
            except (TypeError, ValueError) as exc:
                _warn(f"step {name!r}: {exc}; recorded without a token count")
                tokens, label = None, step_name(name)
            else:
                tokens = None if tokens is None else int(tokens)
                if len(self._labels) < 4096:
                    self._labels[key] = label
        else:
            tokens = None if tokens is None else int(tokens)
        return _Step(self, name, tokens, label)

    def _end_step(self, span: Any, name: str, tokens: int | None) -> None:
        with self._lock:
            try:
                if span is not None:
                    if self._span_exit is not None:
                        with self._no_tf():   # as record_function does: without it the exit
                            self._span_exit(span)   # took ~80 us more per decode step
                    else:
                        span.__exit__(None, None, None)
                if self._roctx is not None:
                    self._roctx.range_pop()
            except Exception as exc:
                _warn(f"could not close step span: {exc}")
            if self._prof is None:
                return
            recording = self._seen >= self.warmup
            self._seen += 1
            if recording:
                self.result.steps.append((name, tokens))
            else:
                self.result.warmup_skipped += 1
            last = recording and self.steps is not None and len(self.result.steps) >= self.steps
            if last:
                self._embed(self._prof)
                self._t_stop = time.perf_counter()
            try:
                self._prof.step()   # after the last recorded step: stops and fires _on_ready
            except Exception as exc:
                self._fail(f"profiler step failed: {type(exc).__name__}: {exc}")
                prof, self._prof, self._state = self._prof, None, "done"
                with contextlib.suppress(Exception):
                    prof.on_trace_ready = None
                    prof.stop()
                return
            if last:
                self._prof, self._state = None, "done"

    def _activities(self, tp: Any) -> list[Any]:
        if self.activities is not None:
            return [getattr(tp.ProfilerActivity, a.upper()) for a in self.activities]
        acts, torch, xpu = [tp.ProfilerActivity.CPU], self._torch, getattr(self._torch, "xpu", None)
        if torch.cuda.is_available():   # ROCm builds report as CUDA too
            acts.append(tp.ProfilerActivity.CUDA)
        if xpu is not None and hasattr(tp.ProfilerActivity, "XPU") and xpu.is_available():
            acts.append(tp.ProfilerActivity.XPU)
        return acts

    def _schedule(self, tp: Any) -> Callable[[int], Any]:
        """Skip `warmup` steps (the last one warms the profiler), record `steps`, then stop."""
        act, warmup, steps = tp.ProfilerAction, self.warmup, self.steps

        def schedule(step: int) -> Any:
            if step < warmup:
                return act.WARMUP if step == warmup - 1 else act.NONE
            k = step - warmup
            if steps is None or k < steps - 1:
                return act.RECORD
            return act.RECORD_AND_SAVE if k == steps - 1 else act.NONE

        return schedule

    def _embed(self, prof: Any) -> None:
        """Put the stamp (without export timings) in the trace too, in case the sidecar is lost."""
        if self.embed and self.result.steps:
            with contextlib.suppress(Exception):   # a convenience; the sidecar is the contract
                prof.add_metadata_json("attrib", json.dumps(self._stamp(self.trace_path.name)))

    def _on_ready(self, prof: Any) -> None:
        """Export the closed window, then write the sidecar. Never raises."""
        raw = self._dump(prof)
        if raw is not None:
            self._finish(raw)

    def _dump(self, prof: Any) -> Path | None:
        """torch's JSON of the window beside the trace's place; None when there is none."""
        res = self.result
        if self._t_stop is not None:
            res.stop_s = time.perf_counter() - self._t_stop
        if not res.steps:
            return None
        raw = self.trace_path.with_name(f".{self.name}.partial.json")
        self._t_export = time.perf_counter()
        try:
            self._export_json(prof, raw)
        except Exception as exc:
            _unlink_raw(raw)
            self._fail(f"trace export to {self.trace_path} failed: {type(exc).__name__}: {exc}")
            return None
        res.save_s = time.perf_counter() - self._t_export
        return raw

    def _finish(self, raw: Path) -> None:
        """`raw` gzipped into place, then the sidecar; `raw` removed. Never raises."""
        res, dest = self.result, self.trace_path
        try:
            res.bytes = self._compress(raw, dest)
        except Exception as exc:
            res.bytes = None
            self._fail(f"trace export to {dest} failed: {type(exc).__name__}: {exc}")
            return
        finally:
            _unlink_raw(raw)
        res.export_s, res.path = time.perf_counter() - self._t_export, dest
        try:
            res.sidecar = _prov.write_sidecar(dest, self._stamp(dest.name))
        except Exception as exc:
            self._fail(f"provenance sidecar for {dest} not written: {type(exc).__name__}: {exc}")

    @staticmethod
    def _export_json(prof: Any, raw: Path) -> None:
        """torch's JSON of the window (it holds the GIL throughout)."""
        prof.export_chrome_trace(str(raw))
        if not raw.is_file():   # torch logs its write errors and returns
            raise _no_trace(raw.parent)

    def _compress(self, raw: Path, dest: Path) -> int:
        """`raw` gzipped into place whole (zlib lets other threads run); the gzip's size."""
        with open(raw, "rb") as fin, staged(dest) as (fh, tmp):
            with gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=self.gzip_level) as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
        size = tmp.stat().st_size
        commit(tmp, dest, force=True)
        return size

    def _stamp(self, trace_name: str) -> dict[str, Any]:
        res = self.result
        cap = {"tool": "collectors.capture", "warmup": self.warmup, "steps_limit": self.steps,
               "steps_recorded": len(res.steps), "warmup_skipped": res.warmup_skipped,
               "activities": self._acts, "stop_s": res.stop_s, "export_s": res.export_s,
               **self.options}
        return _prov.collect(self._torch, self.provenance, cap, res.steps, trace_name,
                             machine=self._machine)

    def _not_started(self, msg: str) -> "Capture":
        self._unmake()
        return self._fail(msg, stop=True)

    def _unmake(self) -> None:
        """Remove the folders start() created, if still empty: a capture that wrote nothing
        leaves nothing."""
        for folder in self._made:
            with contextlib.suppress(OSError):
                folder.rmdir()
        self._made = []

    def _fail(self, msg: str, stop: bool = False) -> "Capture":
        self._state = "done" if stop else self._state
        self.result.error = self.result.error or msg
        _warn(msg)
        return self


def _unlink_raw(raw: Path) -> None:
    """The raw JSON and torch's own temporary file (renamed to raw only when all was written)."""
    for p in (raw, raw.with_name(raw.name + ".tmp")):
        with contextlib.suppress(OSError):
            p.unlink()


def _no_trace(folder: Path) -> OSError:
    """Why torch wrote no trace file: a full disk (its usual cause), else unknown."""
    with contextlib.suppress(OSError):
        st = os.statvfs(folder)
        if st.f_bavail * st.f_frsize < FULL_BYTES:
            return OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} in {folder}")
    return OSError(errno.EIO, "torch wrote no trace file (its log above says why)")


def _missing_folders(folder: Path) -> list[Path]:
    """`folder` and its ancestors that do not exist yet, deepest first."""
    return list(itertools.takewhile(lambda p: not os.path.lexists(p), (folder, *folder.parents)))


def capture(out_dir: str | Path, warmup: int = 0, steps: int | None = None,
            provenance: dict[str, Any] | None = None, record_shapes: bool = True,
            with_stack: bool = True, enabled: bool | None = None,
            **options: Any) -> Capture | _NullCapture:
    """A torch-profiler capture of marked steps into `out_dir` (see the module docstring).

    warmup: steps run but not recorded. steps: steps recorded, then the window closes and the
    trace is exported at once (None: at close) -- keep it small when profiling a server.
    provenance: the stamp's user fields (collectors.provenance.USER_FIELDS; others go to "extra").
    record_shapes: input shapes and dtypes, which the byte/FLOP cost model needs.
    with_stack: Python frames incl. nn.Module scopes, which give module attribution; it makes
    stop and export much slower (seconds to minutes on a busy server).
    enabled: False disables; so does env ATTRIB_PROFILE=0, whatever `enabled` says.
    options: name (file stem), profile_memory, with_flops, activities (["cpu", "cuda", "xpu"]),
    gzip_level, embed_provenance (also put the stamp in the trace's top-level "attrib" key).
    """
    if not profiling_enabled(enabled):
        return _NullCapture()
    return Capture(out_dir, warmup=warmup, steps=steps, provenance=provenance,
                   record_shapes=record_shapes, with_stack=with_stack, **options)


def wrap(fn: Callable[..., Any] | None = None, *, phase: Callable[..., Any], out_dir: str | Path,
         **capture_options: Any) -> Callable[..., Any]:
    """Profile calls of an existing step function; also a decorator (`@wrap(phase=..., ...)`).

    `phase(*args, **kwargs)` returns `(name, tokens)`, `name`, or None (that call is not a step).
    The capture starts at the first step and exports when `steps` steps were recorded, at
    `wrapped.finish()`, or at interpreter exit. `wrapped.capture.result` says what was written.
    """
    if fn is None:
        return lambda f: wrap(f, phase=phase, out_dir=out_dir, **capture_options)
    cap = capture(out_dir, **capture_options)
    if isinstance(cap, _NullCapture):
        @functools.wraps(fn)
        def passthrough(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        passthrough.capture, passthrough.finish = cap, cap.close
        return passthrough

    def finish() -> CaptureResult:
        atexit.unregister(finish)
        return cap.close()

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if cap._state == "done":
            return fn(*args, **kwargs)
        try:
            got = phase(*args, **kwargs)
            name, tokens = (got, None) if got is None or isinstance(got, str) else got
        except Exception as exc:
            _warn(f"phase callable failed ({type(exc).__name__}: {exc}); call not recorded")
            name = None
        if name is None:
            return fn(*args, **kwargs)
        if cap._state == "new":
            cap.start()
            atexit.register(finish)
        try:
            with cap.phase(str(name), tokens):
                return fn(*args, **kwargs)
        finally:
            if cap._state == "done":
                atexit.unregister(finish)

    wrapped.capture, wrapped.finish = cap, finish
    return wrapped
