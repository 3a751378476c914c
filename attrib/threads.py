"""Independent stages on two threads.

A small polars query spends most of its time in polars (planning it, handing it to polars'
pool and back), with the GIL released: two stages that share no result overlap on a machine
with a CPU to spare (on 2 CPUs, 800 queries of 300 rows each took 0.5-0.7x their serial time
on two threads). `both` and `each` return what the serial calls return, in their
order, whatever thread ran them; the stages they run are pure functions of their arguments.
They run in the calling thread on one CPU, under ATTRIB_THREADS=1 (a sweep's busy worker
processes), and over tables of more than SMALL_ROWS rows: there polars spreads each query over
the CPUs itself, and two stages at once would hold both stages' transients.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

from attrib.trace import SMALL_ROWS

A = TypeVar("A")
B = TypeVar("B")

ENV = "ATTRIB_THREADS"  # "1": every stage in the calling thread


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def second_cpu() -> bool:
    """Whether this process may keep a second CPU busy: it has one, and ATTRIB_THREADS is not 1."""
    return os.environ.get(ENV) != "1" and _cpus() >= 2


def spare(rows: int) -> bool:
    """Whether a second thread is worth it over tables of `rows` rows: it has a CPU to run on,
    is not turned off, and the tables are small."""
    return rows <= SMALL_ROWS and second_cpu()


def serial() -> None:
    """Every stage of this process in its calling thread from now on (a pool's worker, when the
    pool's workers already take every CPU)."""
    os.environ[ENV] = "1"


def both(f: Callable[[], A], g: Callable[[], B], *, rows: int) -> tuple[A, B]:
    """(f(), g()): g on a second thread while f runs on this one, where `spare(rows)` (rows: of
    the largest table they read). An exception of either is raised here, once both ended."""
    if not spare(rows):
        return f(), g()
    with ThreadPoolExecutor(1, thread_name_prefix="attrib") as pool:
        later = pool.submit(g)
        first = f()
        return first, later.result()


def each(fn: Callable[[A], B], items: Iterable[A], *, rows: int) -> list[B]:
    """[fn(x) for x in items], two at a time where `spare(rows)`, in the items' order."""
    todo = list(items)
    if len(todo) < 2 or not spare(rows):
        return [fn(x) for x in todo]
    with ThreadPoolExecutor(2, thread_name_prefix="attrib") as pool:
        return list(pool.map(fn, todo))
