"""Always-on sampled capture: one step in N (or one asked for) into rolling trace files.

    cap = collectors.capture("traces/", every=20000, keep=8, signal=signal.SIGUSR1)
    for _ in range(n):
        with cap.phase("decode", tokens=batch):
            model(...)
    cap.close()

A step that is not sampled costs a counter and a null context: no profiler runs. A sample costs
about 70-110 ms on the H200 (README), so every=20000 of 8 ms steps is about 0.05%. Before a
sampled step a one-window `Capture` starts (its first step is the profiler's warmup), records
`steps` steps and exports `<stem>.<seq>.pt.trace.json.gz` with its stamp; only the last `keep`
files this sampler wrote are kept (it deletes nothing else). On demand: the signal (its handler
installed from the main thread only) or a trigger file, which is consumed, takes a sample at the
next step. `attrib trend DIR` reads the folder.

Kineto leaves CUPTI set up after a profiler stops unless TEARDOWN_CUPTI=1, and every CUDA launch
after it is then slower (+4.4 us [3.1, 5.6] a launch on the H200, bench/sampled_residual.py):
for a sampler that would tax every step after the first sample, so it sets TEARDOWN_CUPTI=1
where the variable is unset (torch sets 0 itself where CUDA graphs need it; export 0 to keep).
"""

from __future__ import annotations

import contextlib
import os
import signal as signals
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collectors import outputs as _outputs
from collectors.torch_capture import Capture, CaptureResult, _NullCapture, _warn, profiling_enabled
from collectors.torch_capture import capture as one_window

TEARDOWN = ("TEARDOWN_CUPTI", "1")   # CUPTI finalised after each sample (module doc)
TRIGGER_CHECK = 64   # steps between looks for the trigger file (a stat costs ~1 us)
TIMINGS_KEPT = 1024   # the last samples' timings kept in the result
_NULL = contextlib.nullcontext()   # stateless: entered and left by every unsampled step


@dataclass
class SampledResult:
    """What a sampler wrote: the files kept (oldest first), how many samples it took or lost."""

    enabled: bool = True
    paths: list[Path] = field(default_factory=list)
    samples: int = 0
    deleted: int = 0
    skipped: int = 0   # samples due while the last one was still being compressed
    errors: list[str] = field(default_factory=list)
    # per sample written, seconds: start, stop and save on the step, export (save + gzip)
    timings: list[dict[str, float | None]] = field(default_factory=list)
    steps_seen: int = 0


class _Window(Capture):
    """One sample's capture: torch's JSON is written on the step (it holds the GIL), the gzip and
    the stamp later, off the step path (`raw` until then)."""

    raw: Path | None = None

    def _on_ready(self, prof: Any) -> None:
        self.raw = self._dump(prof)


class _SampledStep:
    """A sampled step: the window's own step, then the sampler's bookkeeping once it closed."""

    __slots__ = ("sampler", "inner")

    def __init__(self, sampler: "SampledCapture", inner: Any) -> None:
        self.sampler, self.inner = sampler, inner

    def __enter__(self) -> None:
        self.inner.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.inner.__exit__(*exc)
        self.sampler._after_window_step()


class SampledCapture:
    """The sampler `capture(..., every=N)` returns: `phase()` as Capture's, `close()` at the end."""

    active = True

    def __init__(self, out_dir: str | Path, *, every: int | None = None, keep: int = 8,
                 steps: int = 1, warmup: int = 0, trigger_file: str | Path | None = None,
                 signal: int | None = None, name: str | None = None,
                 provenance: dict[str, Any] | None = None, **options: Any) -> None:
        if every is not None and every < 2:
            raise ValueError(f"every must be >= 2 (a window needs a warmup step), got {every}")
        if every is None and trigger_file is None and signal is None:
            raise ValueError("a sampled capture needs every=N, trigger_file= or signal=")
        if keep < 1 or steps < 1 or warmup < 0:
            raise ValueError("need keep >= 1, steps >= 1, warmup >= 0; "
                             f"got {keep}, {steps}, {warmup}")
        self.out_dir, self.every, self.keep, self.steps = Path(out_dir), every, keep, steps
        self.warmup = warmup
        self.trigger = Path(trigger_file) if trigger_file is not None else None
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        self.stem = name or f"{os.uname().nodename}_{os.getpid()}_{stamp}"
        self.provenance, self.options = dict(provenance or {}), options
        self.result = SampledResult()
        self._n = 0                # steps seen
        self._wake = 0             # steps before this one are null contexts, no look taken
        self._seq = 0              # windows started
        self._asked: str | None = None   # "signal" | "file": a sample asked for
        self._window: _Window | None = None
        self._machine: dict[str, Any] | None = None
        self._files: deque[tuple[Path, Path | None]] = deque()
        self._old_handler: Any = None
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()
        self._signal = signal
        if signal is not None:
            self._install(signal)
        os.environ.setdefault(*TEARDOWN)

    def __enter__(self) -> "SampledCapture":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def start(self) -> "SampledCapture":
        return self

    def _install(self, signum: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            _warn(f"signal {signum} not watched: handlers can only be set in the main thread")
            self._signal = None
            return
        self._old_handler = signals.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._asked, self._wake = "signal", 0

    def outputs(self, token_ids: Any, how: str = "greedy token ids") -> None:
        """What the run generated, for the stamps of the windows to come and of the open one
        (Capture.outputs)."""
        try:
            self.provenance["correctness_gate"] = _outputs.digest(token_ids, how)
        except ValueError as exc:
            _warn(f"outputs not recorded: {exc}")
            return
        if self._window is not None:
            self._window.outputs(token_ids, how)

    def phase(self, name: str, tokens: int | None = None) -> Any:
        """Mark one step; a null context unless this step is in a capture window."""
        n = self._n = self._n + 1
        if n < self._wake:   # the unsampled step: a counter and a null context
            return _NULL
        return self._look(n, name, tokens)

    def _look(self, n: int, name: str, tokens: int | None) -> Any:
        """Step n at a wake: in a window, a sample due or asked for, a trigger-file check."""
        win = self._window
        if win is not None:
            return _SampledStep(self, win.phase(name, tokens))
        if n > self.warmup:
            if self.trigger is not None and n % TRIGGER_CHECK == 0:
                self._look_for_file()
            due = self.every is not None and (n - self.warmup) % self.every == self.every - 1
            if due or self._asked:
                reason, self._asked = ("every" if due else self._asked), None
                win = self._open(n, reason or "every")
                if win is not None:
                    self._wake = 0   # every step looks while the window is open
                    return _SampledStep(self, win.phase(name, tokens))
        self._sleep(n)
        return _NULL

    def _sleep(self, n: int) -> None:
        """Set the next wake after step n: the next due step or trigger check (a pending ask:
        the next step after the warmup)."""
        lo = max(n, self.warmup) + 1
        wakes = [lo] if self._asked else []
        if self.every is not None:
            wakes.append(lo + (self.every - 1 - (lo - self.warmup)) % self.every)
        if self.trigger is not None:
            wakes.append(-(-lo // TRIGGER_CHECK) * TRIGGER_CHECK)
        self._wake = min(wakes, default=sys.maxsize)
        if self._asked:   # a signal between the look and the line above
            self._wake = 0

    def _look_for_file(self) -> None:
        trigger = self.trigger
        if trigger is not None and os.path.lexists(trigger):
            with contextlib.suppress(OSError):
                trigger.unlink()   # consumed: one sample per touch
            self._asked = "file"

    def _open(self, n: int, reason: str) -> _Window | None:
        """Start the window whose first step (step n) is the profiler's warmup; none while the
        last window is still being compressed (a sample is skipped, never queued)."""
        if self._worker is not None and self._worker.is_alive():
            self.result.skipped += 1
            return None
        seq = self._seq
        self._seq += 1
        prov = {**self.provenance, "sample": {"seq": seq, "step": n + 1, "every": self.every,
                                              "reason": reason, "steps": self.steps}}
        win = _Window(self.out_dir, warmup=1, steps=self.steps, provenance=prov,
                      name=f"{self.stem}.{seq:05d}", **self.options)
        win._machine = self._machine
        win.start()
        self._machine = win._machine
        if not win.active:
            self._record(win.result)
            return None
        self._window = win
        return win

    def _after_window_step(self) -> None:
        win = self._window
        if win is not None and not win.active:
            self._window = None
            self._hand_off(win)
            self._sleep(self._n)

    def _hand_off(self, win: _Window) -> None:
        """Compress and stamp the closed window in a thread (zlib lets the steps run)."""
        raw = win.raw
        if raw is None:
            self._record(win.result)
            return

        def finish() -> None:
            win._finish(raw)
            self._record(win.result)

        self._worker = threading.Thread(target=finish, name="attrib-sample", daemon=False)
        self._worker.start()

    def _record(self, res: CaptureResult) -> None:
        with self._lock:
            out = self.result
            if res.error:
                out.errors.append(res.error)
            if res.path is None:
                return
            out.samples += 1
            out.timings.append({"start_s": res.start_s, "stop_s": res.stop_s,
                                "save_s": res.save_s, "export_s": res.export_s})
            del out.timings[:-TIMINGS_KEPT]
            self._files.append((res.path, res.sidecar))
            while len(self._files) > self.keep:
                for p in self._files.popleft():
                    if p is not None:
                        with contextlib.suppress(OSError):
                            p.unlink()
                out.deleted += 1
            out.paths = [p for p, _ in self._files]

    def flush(self) -> None:
        """Wait until the last window's file is written (its gzip runs in a thread)."""
        worker = self._worker
        if worker is not None:
            worker.join()

    def close(self) -> SampledResult:
        """Close an open window (exporting what it recorded) and stop watching the signal."""
        win, self._window = self._window, None
        if win is not None:
            win.close()
            self._hand_off(win)
        self.flush()
        if self._signal is not None:
            with contextlib.suppress(ValueError, TypeError):
                signals.signal(self._signal, self._old_handler)
            self._signal = None
        self.result.steps_seen = self._n
        return self.result


def capture(out_dir: str | Path, warmup: int = 0, steps: int | None = None,
            provenance: dict[str, Any] | None = None, record_shapes: bool = True,
            with_stack: bool = True, enabled: bool | None = None, every: int | None = None,
            keep: int = 8, trigger_file: str | Path | None = None, signal: int | None = None,
            **options: Any) -> Capture | SampledCapture | _NullCapture:
    """`collectors.torch_capture.capture` (one window), or with `every`, `trigger_file` or
    `signal` a SampledCapture: each sample a warmup step and `steps` (default 1) recorded steps,
    the last `keep` files kept; `warmup` steps run before any sample may start."""
    if every is None and trigger_file is None and signal is None:
        return one_window(out_dir, warmup=warmup, steps=steps, provenance=provenance,
                          record_shapes=record_shapes, with_stack=with_stack, enabled=enabled,
                          **options)
    if not profiling_enabled(enabled):
        return _NullCapture()
    return SampledCapture(out_dir, every=every, keep=keep, steps=steps or 1, warmup=warmup,
                          trigger_file=trigger_file, signal=signal, provenance=provenance,
                          record_shapes=record_shapes, with_stack=with_stack, **options)
