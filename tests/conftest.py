"""Shared test helpers: where the real fixtures live (tests/fixtures, inside the checkout)."""

from __future__ import annotations

import copy
import gc
import gzip
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLE_TRACE = ROOT / "examples" / "traces" / "h200_qwen3moe_eager_prefill_decode.json.gz"


@cache
def raw_events(path: Path) -> tuple[dict, ...]:
    """The `traceEvents` of a Kineto fixture read with gzip + json alone: the independent view that
    tests derive expected figures from (never through attrib's reader)."""
    return tuple(json.loads(gzip.decompress(Path(path).read_bytes()))["traceEvents"])


def raw_steps(path: Path, phase: str) -> list[tuple[int, float, float]]:
    """Per annotated step of `phase` (cpu `user_annotation` paired in order with its `gpu_user_annotation`),
    from the raw events alone: (kernels starting in the GPU span, idle fraction, idle ms). The window spans
    both annotations and the step's kernels; busy is the union of GPU work (kernels, copies, fills) in it."""
    ev = raw_events(path)
    spans = {c: sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == c and e["name"].split(" ")[0] == phase)
             for c in ("user_annotation", "gpu_user_annotation")}
    kernels = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "kernel")
    gpu = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    out = []
    for (c0, c1), (g0, g1) in zip(spans["user_annotation"], spans["gpu_user_annotation"]):
        mine = [(a, b) for a, b in kernels if g0 <= a < g1]
        w0, w1 = min(c0, g0, mine[0][0]), max(c1, g1, max(b for _, b in mine))
        busy, end = 0.0, w0
        for a, b in gpu:  # sorted by start: add what each interval covers inside the window past `end`
            a, b = max(a, end), min(b, w1)
            if b > a:
                busy, end = busy + b - a, b
        out.append((len(mine), 1 - busy / (w1 - w0), (w1 - w0 - busy) / 1e3))
    return out


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return FIXTURES


def pytest_configure(config):
    """A young collection every YOUNG allocations, not 700: what attrib's CLI runs its analyses
    with (cli.common.loading); the tests make parsed traces of millions of containers."""
    from attrib.cli.common import YOUNG

    gc.set_threshold(YOUNG, *gc.get_threshold()[1:])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After each test and its fixtures: collect the cycles it left, then freeze what outlives it
    (the modules' caches of parsed traces and analyses: millions of containers) so that no later
    collection walks it again. Without these two a worker spent a quarter of its time in the GC,
    re-walking those caches; attrib's CLI freezes what its imports make (cli.loading)."""
    yield
    gc.collect()
    gc.freeze()


def _state(path: object) -> tuple:
    """What a file's analysis reads, as it stands: the file, and every file beside it (the stamp,
    a rocprof run's other tables) or in it (a folder), by inode, size, mtime and ctime (a rewrite
    after an analysis has a later ctime: a miss takes longer than the clock's tick); () if absent."""
    p = Path(os.fspath(path))
    if not p.exists():
        return ()
    files = p.rglob("*") if p.is_dir() else [p, *p.parent.iterdir()]
    return tuple((f.as_posix(), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                  for f in files if f.is_file() for st in [f.stat()])


@contextmanager
def analyses_once() -> Iterator[None]:
    """Inside the block attrib's analyze_path runs once per (path, files as they stand, Options): a
    repeat gets a deep copy of the first analysis and its reader warnings again. For tests that
    render one analysis several ways (formats, widths, commands); the analysis is deterministic."""
    import attrib.app
    import attrib.sweep
    from attrib.options import Options

    real = attrib.app.analyze_path
    memo: dict[tuple, tuple] = {}

    def once(path, opts=Options(), warn=None):
        given = (path, opts.capture, opts.baseline, opts.arch_file)
        key = (os.fspath(path), repr(opts), *(_state(p) for p in given if p is not None))
        if key not in memo:
            said: list[tuple[object, str]] = []

            def heard(p: object, message: str) -> None:
                said.append((p, message))
                if warn is not None:
                    warn(p, message)

            an = real(path, opts, heard)
            memo[key] = (copy.deepcopy(an), said)
            return an
        an, said = memo[key]
        for p, message in said if warn is not None else ():
            warn(p, message)
        return copy.deepcopy(an)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(attrib.app, "analyze_path", once)
        mp.setattr(attrib.sweep, "analyze_path", once)
        yield


@pytest.fixture
def analysed_once() -> Iterator[None]:
    """analyses_once() around the whole test."""
    with analyses_once():
        yield


@pytest.fixture(scope="module")
def module_analysed_once() -> Iterator[None]:
    """analyses_once() around a whole module (pytestmark = usefixtures("module_analysed_once"))."""
    with analyses_once():
        yield
