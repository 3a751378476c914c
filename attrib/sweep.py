"""`attrib sweep`: analyse many traces in parallel into one table (attrib.multi.sweep).

A process pool by default (`jobs` workers, spawned: the parent's polars threads are running), the
caller's process for one job, or Ray tasks on a cluster (`ray_address`; the `ray` extra). Each
task analyses one trace where it runs and returns its rows, or the one line that says why not;
the table is built in the order the traces were given, so every way gives the same table.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from attrib import threads
from attrib.app import analyze_path, resolve_arch, trace_files
from attrib.errors import TraceError, UsageError
from attrib.options import Options
from attrib.multi import sweep as table_mod

Done = Callable[[str], None]


class Spec(msgspec.Struct, frozen=True):
    """What every task needs to analyse its trace, in plain values a process or a Ray task can
    receive (a resolved Arch holds mapping proxies, which do not pickle)."""

    phase_map: tuple[tuple[str, str], ...] = ()
    arch: str | None = None
    arch_file: str | None = None

    def options(self) -> Options:
        path = Path(self.arch_file) if self.arch_file is not None else None
        arch, arch_from = resolve_arch(self.arch, path)
        return Options(phase_map=dict(self.phase_map), arch=arch, arch_from=arch_from,
                       arch_file=path)


class Result(msgspec.Struct, frozen=True):
    """One trace's outcome: its rows, or the line that says why it was skipped."""

    trace: str
    rows: tuple[dict[str, Any], ...] = ()
    error: str | None = None
    warnings: tuple[str, ...] = ()


class Sweep(msgspec.Struct, frozen=True):
    table: pl.DataFrame
    failed: tuple[Result, ...]
    warnings: tuple[str, ...]


def traces(paths: Iterable[str | Path],
           skipped: list[tuple[Path, str]] | None = None) -> list[Path]:
    """The traces of `paths`: files as given, folders as the traces directly inside them; the
    folders' other files go to `skipped` with the reason no reader took them."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = trace_files(p, skipped)
            if not found:
                raise TraceError(p, "is a directory with no trace attrib can read")
            out.extend(found)
        else:
            out.append(p)
    return out


def analyze_one(trace: str, spec: Spec) -> Result:
    """Analyse one trace into its sweep rows; bad input (or a bug) is a Result with an error."""
    seen: list[str] = []

    def warn(path: object, message: str) -> None:
        seen.append(f"{path}: {message}")

    try:
        an = analyze_path(trace, spec.options(), warn=warn)
    except (TraceError, UsageError) as exc:
        return Result(trace, error=str(exc), warnings=tuple(seen))
    except MemoryError:
        return Result(trace, error=f"{trace}: out of memory", warnings=tuple(seen))
    except Exception as exc:  # a bug: the sweep goes on, the line says it is one
        return Result(trace, error=f"{trace}: internal error: {type(exc).__name__}: {exc}",
                      warnings=tuple(seen))
    return Result(trace, tuple(table_mod.rows(an, trace)), warnings=tuple(seen))


def _outcome(name: str, get: Callable[[], Result]) -> Result:
    """A task's Result; a worker that died (killed, out of memory) skips its trace, not the
    sweep."""
    try:
        return get()
    except Exception as exc:
        return Result(name, error=f"{name}: the worker analysing it failed: "
                                  f"{type(exc).__name__}: {exc}")


def _serial(names: Sequence[str], spec: Spec, done: Done) -> list[Result]:
    out = []
    for name in names:
        out.append(analyze_one(name, spec))
        done(name)
    return out


def _pool(names: Sequence[str], spec: Spec, jobs: int, done: Done) -> list[Result]:
    ctx = multiprocessing.get_context("spawn")
    found: dict[int, Result] = {}
    # workers that take every CPU: each runs its stages in one thread (attrib.threads)
    init = threads.serial if jobs >= (os.cpu_count() or 1) else None
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=init) as pool:
        futures = {pool.submit(analyze_one, n, spec): i for i, n in enumerate(names)}
        for fut in as_completed(futures):
            i = futures[fut]
            found[i] = _outcome(names[i], fut.result)
            done(names[i])
    return [found[i] for i in range(len(names))]


def _ray(names: Sequence[str], spec: Spec, address: str | None, done: Done) -> list[Result]:
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs Ray: pip install 'attrib[ray]'") from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address or None, include_dashboard=False, log_to_driver=False)
    try:
        task = ray.remote(analyze_one)
        refs = [task.remote(n, spec) for n in names]
        index = {ref: i for i, ref in enumerate(refs)}
        found: dict[int, Result] = {}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            i = index[ready[0]]
            found[i] = _outcome(names[i], lambda: ray.get(ready[0]))
            done(names[i])
        return [found[i] for i in range(len(names))]
    finally:
        if started:
            ray.shutdown()


def run(paths: Iterable[str | Path], spec: Spec = Spec(), jobs: int | None = None,
        ray_address: str | None = None, use_ray: bool = False,
        done: Done | None = None) -> Sweep:
    """Analyse every trace of `paths` (files, folders of traces) into one sweep table.

    spec: the analysis options; jobs: pool workers (default: the CPUs, at most one per trace;
    1 runs here); use_ray: Ray tasks instead, on the cluster at `ray_address` (else
    RAY_ADDRESS, else a local Ray).
    done(name) is called as each trace finishes (a progress bar)."""
    names = [str(p) for p in traces(paths)]
    if not names:
        raise UsageError("sweep needs one or more traces (files or folders of traces)")
    tick: Done = done or (lambda _name: None)
    if use_ray:
        results = _ray(names, spec, ray_address, tick)
    else:
        n = min(jobs or os.cpu_count() or 1, len(names))
        results = _serial(names, spec, tick) if n <= 1 else _pool(names, spec, n, tick)
    rows = [row for r in results for row in r.rows]
    failed = tuple(r for r in results if r.error is not None)
    warnings = tuple(w for r in results for w in r.warnings)
    return Sweep(table_mod.table(rows), failed, warnings)
