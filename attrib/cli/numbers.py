"""The command line's numeric option types, declared once (attrib.bounds' domains) and reused by
every command: the help shows each range, and a value outside it (NaN, an infinity, a negative
batch, a context of 1e20) is one line, `--OPTION = VALUE: must be ...`, exit 2, as the Python
API's UsageError says it."""

from __future__ import annotations

import math
from typing import Any

import click

from attrib.bounds import (MAX_BATCH, MAX_CONTEXT, MAX_LINK_GBS, MAX_PERCENT, out_of_domain,
                           span)


class OutOfDomain(click.BadParameter):
    """A value outside its option's domain: the message alone (it names the option)."""

    def format_message(self) -> str:
        return self.message


def _name(param: click.Parameter | None) -> str:
    opts = getattr(param, "opts", None) or []
    return max(opts, key=len) if opts else (param.name or "value") if param else "value"


class Count(click.IntRange):
    """A whole number in min..max (max None: no upper bound)."""

    def __init__(self, lo: int, hi: int | None = None):
        super().__init__(lo, hi)
        self.lo, self.hi = lo, hi

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            n = value
        else:
            try:
                n = int(str(value).strip())
            except ValueError:
                n = None
        if n is None or n < self.lo or (self.hi is not None and n > self.hi):
            raise OutOfDomain(out_of_domain(_name(param), n if n is not None else str(value),
                                            f"a whole number {self._want()}"), ctx, param)
        return n

    def _want(self) -> str:
        return f"in {span(self.lo, self.hi)}" if self.hi is not None else f">= {self.lo}"


class Figure(click.FloatRange):
    """A finite number in min..max (min excluded where min_open): NaN and the infinities are
    refused (each compares false to a bound, so a plain FloatRange lets NaN through)."""

    def __init__(self, lo: float, hi: float, min_open: bool = False):
        super().__init__(lo, hi, min_open=min_open)
        self.lo, self.hi = float(lo), float(hi)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            x = float(value)
        except (TypeError, ValueError):
            x = None
        lo, hi = self.lo, self.hi
        if x is None or not math.isfinite(x) or x > hi or x < lo or (self.min_open and x == lo):
            want = span(lo, hi, self.min_open)
            raise OutOfDomain(out_of_domain(_name(param), x if x is not None else str(value),
                                            f"a finite number {want}" if self.min_open
                                            else f"a finite number in {want}"), ctx, param)
        return x


CONTEXT = Count(1, MAX_CONTEXT)  # --context: K/V positions
BATCH = Count(1, MAX_BATCH)  # --capture-batch: sequences per step
TOP = Count(1)  # --top
STEPS = Count(0)  # --chunk-steps (0: read whole)
JOBS = Count(1)  # sweep's -j/--jobs
WINDOW = Count(1)  # trend's --window: files before each
REPS = Count(1)  # calibrate's --reps
MATMUL_N = Count(16)  # calibrate's --matmul-n
PERCENT = Figure(0, MAX_PERCENT)  # --gate, --min-effect
LINK_GBS = Figure(0, MAX_LINK_GBS, min_open=True)  # --link-gbs
