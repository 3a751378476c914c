"""The Rule catalog entry and helpers the rules share (the Finding record is attrib.analysis's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import msgspec
from msgspec.structs import replace
import polars as pl

from attrib.analysis.finding import OPPORTUNITIES, SEVERITIES, Finding
from attrib.analysis.model import Analysis
from attrib.pipeline import Attribution
from attrib.reads import Reads
from attrib.trace import SMALL_ROWS, as_text, engine
from attrib.steps.excluded import counted
from attrib.steps.phases import TOKEN_PHASES
from rules.thresholds import Thresholds

__all__ = ["OPPORTUNITIES", "SEVERITIES", "Finding", "PairRule", "Rule", "RuleFn", "DECODE_LIKE", "RDNA",
           "graded"]

DECODE_LIKE = TOKEN_PHASES


RuleFn = Callable[[Attribution, Analysis, Thresholds], list[Finding]]


def _applies(archs: tuple[str, ...], arch_name: str | None) -> bool:
    """Whether a rule gated to `archs` (prefixes; empty = every device) applies to `arch_name`."""
    return not archs or (arch_name is not None and arch_name.startswith(archs))


class Rule(msgspec.Struct, frozen=True):
    """A catalog entry: id, the function, the archs it applies to (prefixes; empty = every device),
    what it needs from a trace, its references, and the ops, calls and frames it reads by name
    (the chunked read of a huge trace keeps those: attrib.chunked)."""

    id: str
    fn: RuleFn
    needs: str
    archs: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    reads: Reads = Reads()  # what it reads by name beyond the kernels' own ops (attrib.reads)

    def applies(self, arch_name: str | None) -> bool:
        return _applies(self.archs, arch_name)


PairFn = Callable[[Analysis, Analysis, Thresholds], list[Finding]]


class PairRule(msgspec.Struct, frozen=True):
    """A catalog entry over two analyses (a baseline and a candidate: `attrib compare`)."""

    id: str
    fn: PairFn
    needs: str
    archs: tuple[str, ...] = ()
    references: tuple[str, ...] = ()

    def applies(self, arch_name: str | None) -> bool:
        return _applies(self.archs, arch_name)


def steps_in(a: Attribution, phase: str | None = None) -> pl.DataFrame:
    """The steps the phase figures count (not those the steps stage left
    out: compile, warm-up), of `phase`."""
    keep = _counted(a, phase)
    return a.steps.filter(*keep) if keep else a.steps  # one query, none where it keeps every step


def _counted(a: Attribution, phase: str | None) -> list[pl.Expr]:
    """steps_in's filters (none where it keeps every step)."""
    return counted(a.steps) + ([] if phase is None else [pl.col("phase") == phase])


def counted_steps(a: Attribution, phase: str | None = None) -> pl.LazyFrame:
    """steps_in, lazy: a rule's query goes on from it (a query of the kernels joins it: one
    query, not two)."""
    keep = _counted(a, phase)
    return a.steps.lazy().filter(*keep) if keep else a.steps.lazy()


def _in(lf: pl.LazyFrame, steps: pl.LazyFrame | None) -> pl.LazyFrame:
    """The rows of `lf` in `steps` (a semi join keeps their order); every row where None."""
    return lf if steps is None else lf.join(steps.select("step"), on="step", how="semi",
                                            maintain_order="left")


def _rows(k: pl.DataFrame, steps: pl.LazyFrame | None, where: pl.Expr | None,
          columns: list[str]) -> pl.DataFrame:
    """`columns` of the rows of `k` in `steps` (every row where None) that `where` holds for,
    copied once. `where` reads text views of only its text columns, of the rows in `steps`;
    on one text column (a test of each row's text), its distinct values."""
    read = [] if where is None else list(dict.fromkeys(where.meta.root_names()))
    text = [c for c in read if k.schema[c] == pl.Categorical]
    if where is not None and k.height < SMALL_ROWS:  # small: the rows as text, one query
        cols = list(dict.fromkeys([*columns, *read]))
        cats = [c for c in cols if k.schema[c] == pl.Categorical]
        return (_in(k.lazy(), steps).select(cols).with_columns(pl.col(cats).cast(pl.String))
                .filter(where).select(columns).collect(engine="in-memory"))
    if where is not None and read == text and len(text) == 1:
        values = k.select(pl.col(text[0]).unique())
        hits = values.filter(as_text(values).select(where).to_series()).to_series()
        where, text = pl.col(text[0]).is_in(hits.implode()), []
    if where is None or not text:
        kept = _in(k.lazy(), steps)
        kept = kept if where is None else kept.filter(where)
        return kept.select(columns).collect(engine=engine(k.height))
    at = (_in(k.lazy().with_row_index("_at"), steps).select(list(dict.fromkeys(["_at", *read])))
          .collect(engine="in-memory"))
    return k.select(columns)[at.filter(as_text(at.select(read)).select(where).to_series())["_at"]]


def kernels_in(a: Attribution, phase: str | None = None, where: pl.Expr | None = None,
               columns: tuple[str, ...] | None = None) -> pl.DataFrame:
    """The kernels of those steps (of `phase`, else of every phase), those `where` holds for if
    given; only `columns` (and step) where given. The filter copies no other row or column;
    the categories of the attribution's text are text again (`as_text`)."""
    out = a.kernels.columns if columns is None else list(dict.fromkeys(["step", *columns]))
    return as_text(_rows(a.kernels, counted_steps(a, phase), where, out))


def kernels_where(a: Attribution, where: pl.Expr,
                  columns: tuple[str, ...] | None = None) -> pl.DataFrame:
    """Every kernel `where` holds for, in a step or not, as `kernels_in` gives them."""
    out = a.kernels.columns if columns is None else list(columns)
    return as_text(_rows(a.kernels, None, where, out))


def distinct(a: Attribution, column: str) -> pl.Series:
    """The distinct values of one of the kernels' columns, text as text (a test of every
    kernel's name runs once a name)."""
    return as_text(a.kernels.select(pl.col(column).unique()))[column]


def kernel_ns(a: Attribution, phase: str | None = None) -> float:
    """The summed `dur_ns` of kernels_in(a, phase), without copying them."""
    kept = kernels_lazy(a, phase).select(pl.col("dur_ns").sum())
    return num(kept.collect(engine="in-memory").item())


def kernels_lazy(a: Attribution, phase: str | None = None) -> pl.LazyFrame:
    """The kernels of kernels_in's steps, lazy and as the attribution holds them (text as
    categories): a rule's query goes on from them."""
    return _in(a.kernels.lazy(), counted_steps(a, phase))


def is_rdna(arch_name: str | None) -> bool:
    """gfx11xx / gfx12xx (RDNA3, 3.5, 4)."""
    return arch_name is not None and arch_name.startswith(RDNA)


HIGH_SHARE, MEDIUM_SHARE = 0.5, 0.2  # of the step: a finding's severity from the time it explains


def severity_of(share: float) -> str:
    """high above half the step, medium above a fifth, else info."""
    return "high" if share > HIGH_SHARE else "medium" if share > MEDIUM_SHARE else "info"


CAVEATS = ("ledger-profiler",)  # about the measurement, not time to recover: info whatever its ms


def graded(f: Finding, an: Analysis) -> Finding:
    """`f` with its severity from the share of its phase's mean step its ms explains
    (severity_of): no [high] for a sliver. A finding without an estimate, or about no phase the
    analysis holds, keeps the rule's; one naming no phase is about the token phase (decode). A
    caveat or an opportunity keeps the rule's."""
    if f.ms_per_step is None or f.rule in CAVEATS or f.rule in OPPORTUNITIES:
        return f
    names = (f.phase,) if f.phase else DECODE_LIKE
    ph = next((p for n in names if (p := an.phase(n)) is not None), None)
    if ph is None and not f.phase and len(an.phases) == 1:
        ph = an.phases[0]
    step = ph.step_ms.mean if ph is not None else None
    if not step:
        return f
    return replace(f, severity=severity_of(float(f.ms_per_step) / step))


def num(x: object) -> float:
    """A polars scalar (typed as any of its dtypes' values) as the number it is here; null as 0."""
    return float(cast(float, x or 0))


def ns(df: pl.DataFrame) -> float:
    """The summed `dur_ns` of a table of kernels, copies or calls."""
    return num(df["dur_ns"].sum())


def r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


def first_names(df: pl.DataFrame, n: int, width: int = 100) -> list[str]:
    """The first `n` distinct names of `df` (sorted), each cut to `width` characters."""
    names = df["name"].unique().sort().head(n).str.slice(0, width)
    return cast(list[str], names.to_list())


RDNA = ("gfx11", "gfx12")
