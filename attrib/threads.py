"""Stages on polars' thread pool: independent stages side by side, and a whole small analysis
where its queries cost least.

A polars query called from a thread of Python's hands its work to polars' pool and waits for it;
called from a thread of the pool, it runs there (on 2 CPUs, a filter of 2,660 rows took 34 us
against 21 us, a join 107 us against 39 us). So a stage here is called *by polars*: each is a Python
function evaluated as one expression of a query over a one-row frame (`_on_pool`), which polars
evaluates on its pool threads, two at once where it has two. Every query the stage makes then
runs on its own thread. `both` and `each` return what the serial calls return, in their order,
whatever thread ran them; the stages are pure functions of their arguments.

Where stages run side by side (`both`, `each`): on a second CPU, not under ATTRIB_THREADS=1 (a
sweep's busy worker processes), over tables of at most SMALL_ROWS rows (above, polars spreads
each query over the CPUs itself, and two stages at once would hold both stages' transients).
`pooled` runs one stage on the pool where its input is small and its work bounded: a signal
(Ctrl-C) is acted on when the stage ends (within about a second), and code that stops on a signal
(the rocpd reader's queries) must not run there, as handlers run in the main thread only.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any, Callable, Iterable, TypeVar, cast

import polars as pl

from attrib.trace import SMALL_ROWS

A = TypeVar("A")
B = TypeVar("B")

ENV = "ATTRIB_THREADS"  # "1": no two stages at once


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def second_cpu() -> bool:
    """Whether this process may keep a second CPU busy: it has one, and ATTRIB_THREADS is not 1."""
    return os.environ.get(ENV) != "1" and _cpus() >= 2


def spare(rows: int) -> bool:
    """Whether two stages at once are worth it over tables of `rows` rows: a CPU to run on, not
    turned off, and the tables are small."""
    return rows <= SMALL_ROWS and second_cpu()


def serial() -> None:
    """No two stages of this process at once from now on (a pool's worker, when the pool's
    workers already take every CPU)."""
    os.environ[ENV] = "1"


def both(f: Callable[[], A], g: Callable[[], B], *, rows: int) -> tuple[A, B]:
    """(f(), g()): side by side on polars' pool where `spare(rows)` (rows: of the largest table
    they read). An exception of either (f's first) is raised here, once both ended."""
    if not spare(rows):
        return f(), g()
    first, second = _on_pool([f, g])
    return cast(A, first), cast(B, second)


def each(fn: Callable[[A], B], items: Iterable[A], *, rows: int) -> list[B]:
    """[fn(x) for x in items], side by side on polars' pool where `spare(rows)`, in the items'
    order."""
    todo = list(items)
    if len(todo) < 2 or not spare(rows):
        return [fn(x) for x in todo]
    return _on_pool([partial(fn, x) for x in todo])


def pooled(f: Callable[[], A], *, small: bool) -> A:
    """f(), called on a thread of polars' pool where `small` (over tables of at most SMALL_ROWS
    rows; a Kineto file of at most collectors.limits.SMALL_TEXT of text), else here: its queries
    run where they are made (the small fixture's read, attribution and analysis: 0.75-0.85x)."""
    return _on_pool([f])[0] if small else f()


def _on_pool(stages: list[Callable[[], B]]) -> list[B]:
    """[s() for s in stages], each called by polars as an expression of one query; the first
    exception (in the stages' order) raised once all ended. A second, constant expression makes
    polars evaluate them on its pool even for one stage (one expression it evaluates in the
    calling thread); where it has no thread free, a stage runs after another."""
    got: list[Any] = [None] * len(stages)
    failed: list[BaseException | None] = [None] * len(stages)
    called = [False] * len(stages)

    def stage(i: int) -> pl.Expr:
        def call(s: pl.Series) -> pl.Series:
            if not called[i]:  # once, however often polars calls it
                called[i] = True
                try:
                    got[i] = stages[i]()
                except BaseException as exc:  # raised in the caller's thread, below
                    failed[i] = exc
            return s
        return pl.col("x").map_batches(call, return_dtype=pl.Int8).alias(f"s{i}")

    one = pl.LazyFrame({"x": [0]}, schema={"x": pl.Int8})
    query = one.select(*(stage(i) for i in range(len(stages))), pl.lit(0).alias("_"))
    query.collect(engine="in-memory")
    for exc in failed:
        if exc is not None:
            raise exc
    return got
