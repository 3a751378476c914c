"""The analysis document as a terminal table (one renderer per output format).

It opens with the verdict (attrib.analysis.summary): the run's facts and what was assumed, then per
phase its rate against the ceiling, where the step's time goes and the top actions. Every figure is
per step (medians over the phase's steps; the ledger's rows: the mean step) unless labelled a total.

On a terminal every line fits `width` (`terminal_width()`: COLUMNS, else the tty, else 100).
Prose wraps. A table too wide drops columns in this order until it fits:
- components: evidence, TFLOP/s, kernels/step, bytes known, MB/step, bound, GB/s;
- bottlenecks: of step;
- top kernels: TFLOP/s, calls/step, GB/s, component;
then its name or sentence column is shortened in the middle (`fmt.short`). A finding's evidence
is a short phrase, its raw figures whole with `verbose` (`attrib analyze -v`). In a file
(`width=None`) nothing is dropped or shortened.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Sequence

from attrib.analysis.model import Analysis, Phase
from attrib.report import fmt, whatif
from attrib.report import speculative as spec_report
from attrib.report.printable import printable_tree

PIPE_WIDTH = 100  # the width when stdout is no terminal and COLUMNS is unset
MIN_FLEX = 16  # a name or sentence column is not shortened below this before columns are dropped
NOTE_LINES = 3  # lines of a note on a terminal without verbose
COMPONENT_DROP = ("evidence (kernels/step)", "TFLOP/s", "kernels/step", "bytes known", "MB/step",
                  "bound", "GB/s")
BOTTLENECK_DROP = ("of step",)
TOP_DROP = ("TFLOP/s", "calls/step", "GB/s", "component")
Row = tuple[str, ...]


def terminal_width() -> int:
    """The terminal's columns: COLUMNS, else the tty's size, else PIPE_WIDTH."""
    return shutil.get_terminal_size((PIPE_WIDTH, 24)).columns


class Cut:
    """What the terminal tables of one output left out to fit its width: (table, column) pairs and
    the width that shows every column (`footer` says both)."""

    def __init__(self) -> None:
        self.dropped: list[tuple[str, str]] = []
        self.need = 0

    def footer(self, width: int | None, more: str = "") -> list[str]:
        """One line (wrapped) naming the columns left out and how to see them; none when nothing
        was left out. `more`: another way to see them (", or `--format md`")."""
        if not self.dropped or width is None:
            return []
        tables: dict[str, list[str]] = {}
        for table, col in self.dropped:
            cols = tables.setdefault(table, [])
            if col not in cols:
                cols.append(col)
        same: dict[tuple[str, ...], list[str]] = {}  # tables that lost the same columns, together
        for t, cs in tables.items():
            same.setdefault(tuple(cs), []).append(t)
        named = "; ".join(f"{', '.join(ts)}: {', '.join(cs)}" if any(ts) else ", ".join(cs)
                          for cs, ts in same.items())
        return wrap(f"left out to fit {width} columns: {named} (COLUMNS={self.need} shows them"
                    f"{more})", width)


def _need(head: Row, rows: Sequence[Row], cols: Sequence[int], indent: int) -> int:
    widths = sum(max(len(r[i]) for r in [head, *rows]) for i in cols)
    return indent + widths + 2 * (len(cols) - 1)


def _keep(head: Row, rows: Sequence[Row], width: int | None, drop: Sequence[str],
          flex: str | None, indent: int, min_flex: int = MIN_FLEX
          ) -> tuple[list[int], int | None]:
    """The columns to print and the width of the flex column (None: whole)."""
    keep = list(range(len(head)))
    gone = list(drop)
    while True:
        over = _need(head, rows, keep, indent) - width if width is not None else 0
        if over <= 0:
            return keep, None
        fi = head.index(flex) if flex in head else None
        if fi is not None and fi in keep:
            fw = max(len(r[fi]) for r in [head, *rows]) - over
            if fw >= min_flex or not gone:
                return keep, max(fw, len(head[fi]), 4)
        if not gone:
            return keep, None
        name = gone.pop(0)
        if name in head and head.index(name) in keep:
            keep.remove(head.index(name))


def grid(head: Row, rows: Sequence[Row], width: int | None = None, drop: Sequence[str] = (),
         flex: str | None = None, indent: str = "   ", sentence: bool = False,
         cut: Cut | None = None, table: str = "", left: Sequence[str] = (),
         apart: bool = False, min_flex: int = MIN_FLEX) -> list[str]:
    """Columns padded to their widest cell: the first, the last, the flex one and those in `left`
    left-aligned, the others right-aligned; to fit `width`, `drop` columns go in order, then
    `flex` is shortened (in the middle; at its end when it is a `sentence`; with `apart`, keeping
    the part where its cells differ: `fmt.apart`), not below `min_flex` while a column can
    go. The columns dropped are noted in `cut` (as `table`'s)."""
    keep, fw = _keep(head, rows, width, drop, flex, len(indent), min_flex)
    fi = head.index(flex) if flex in head else None
    if cut is not None and len(keep) < len(head):
        cut.dropped += [(table, head[i]) for i in range(len(head)) if i not in keep]
        cut.need = max(cut.need, _need(head, rows, range(len(head)), len(indent)))
    if fi is not None and fw is not None and apart:
        names = fmt.apart([r[fi] for r in rows], fw)
        rows = [r[:fi] + (n,) + r[fi + 1:] for r, n in zip(rows, names)]
    cells = [tuple(fmt.short(r[i], fw, sentence) if i == fi else r[i] for i in keep)
             for r in [head, *rows]]
    widths = [max(len(r[j]) for r in cells) for j in range(len(keep))]
    text = {0, len(head) - 1} | ({fi} if fi is not None else set())
    text |= {head.index(c) for c in left if c in head}
    lefts = {j for j, i in enumerate(keep) if i in text}

    def line(r: Row) -> str:
        out = [c.ljust(w) if j in lefts else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))]
        return (indent + "  ".join(out)).rstrip()
    return [line(r) for r in cells]


def wrap(text: str, width: int | None, indent: str = "", more: str | None = None,
         lines: int | None = None) -> list[str]:
    """`text` as lines of at most `width` (whole when None), the first after `indent`, the rest
    after `more` (indent + two spaces); at most `lines` of them (the last ending in an ellipsis)."""
    if width is None:
        return [indent + text]
    out = textwrap.wrap(text, width=width, initial_indent=indent,
                        subsequent_indent=more if more is not None else indent + "  ",
                        break_on_hyphens=False) or [indent.rstrip()]
    if lines is not None and len(out) > lines:
        # wrapped again one narrower: the ellipsis follows a whole word (it cut "Radeon" to "Radeo…")
        out = textwrap.wrap(text, width=width - 1, initial_indent=indent,
                            subsequent_indent=more if more is not None else indent + "  ",
                            break_on_hyphens=False)[:lines]
        out[-1] += "…"
    return out


def _verdict(an: Analysis, width: int | None) -> list[str]:
    s = an.summary
    if s is None:
        return []
    out = wrap(f"facts: {fmt.facts_line(s)}", width)
    out += wrap(f"assumed: {fmt.assumed_line(s)}", width)
    for ps in s.phases:
        out += wrap(f">> {fmt.verdict_line(ps)}", width)
        tl = fmt.time_line(ps)
        if tl:
            out += wrap(tl, width, "   ", "     ")
        for a in ps.actions:
            out += wrap(fmt.action_head(a), width, "   ", "      ", lines=1)
            out += wrap(a.evidence, width, "      ", "      ", lines=2)
    return out


def _phase(an: Analysis, ph: Phase, top: int | None, width: int | None, cut: Cut) -> list[str]:
    lines = [""] + wrap(f"== {ph.phase}: {fmt.phase_headline(ph)}", width, more="   ")
    rates = fmt.phase_rates(ph, fmt.world_size(an))
    if rates:
        lines += wrap(rates, width, "   ")
    where = fmt.ledger_line(ph)
    if where:
        lines += wrap(where, width, "   ")
    for x in ph.excluded_steps:
        lines += wrap(f"left out: step {x.step} ({x.reason}): {fmt.num(x.step_ms)} ms, {x.kernels} "
                      f"kernels, {fmt.num(x.kernel_ms)} ms of kernels", width, "   ")
    lines += grid(fmt.COMPONENT_HEAD, fmt.component_rows(ph), width, COMPONENT_DROP, "component",
                  cut=cut, table="components")
    ranked = fmt.bottleneck_rows(ph)
    if ranked:
        lines.append("   bottlenecks (recoverable ms/step: roofline gap, GPU idle, findings):")
        total = fmt.total_line(ph, an.findings)
        if total:
            lines += wrap(total, width, "     ", "       ", lines=2)
        lines += grid(fmt.BOTTLENECK_HEAD, ranked[: top or None], width, BOTTLENECK_DROP, "what",
                      "     ", sentence=True, cut=cut, table="bottlenecks")
    lines.append("   top kernels (per step):")
    lines += grid(fmt.TOP_HEAD, fmt.top_rows(ph, top, None), width, TOP_DROP, "kernel", "     ",
                  cut=cut, table="top kernels")
    lines += spec_report.text(
        ph, lambda head, rows, indent: grid(head, rows, width, (), None, indent))
    return lines


def render(an: Analysis, top: int | None = 5, width: int | None = None,
           verbose: bool = False) -> str:
    """The verdict; per phase: headline, component table, ranked bottlenecks, top kernels; then
    coverage, notes, findings. `width`: the terminal's (None: a file, nothing cut).

    Every string of the analysis passes `printable` first (names come from the trace)."""
    an = printable_tree(an)
    src = an.source
    rest = f"  [{src.format}]  {src.kernels} kernels, {src.kernel_ms:.3f} ms kernel time (total)"
    path = fmt.short(str(src.path), max(width - len(rest), 12) if width else None)
    lines = wrap(path + rest, width)
    lines += _verdict(an, width)
    lines += wrap(f"device: {fmt.device_line(an.device)}", width)
    dist = fmt.distributed_line(an)
    if dist:
        lines += wrap(dist, width)
    prov = fmt.provenance(an.provenance)
    if prov:
        lines += wrap(f"run: {prov}", width)
    cut = Cut()
    for ph in an.phases:
        lines += _phase(an, ph, top, width, cut)
    lines += whatif.table_lines(an, width, cut)
    lines += [""] + wrap(fmt.coverage_line(an), width)
    cap = None if verbose else NOTE_LINES
    for n in an.notes:
        lines += wrap(f"note: {n}", width, lines=cap)
    for f in an.findings:
        head, evl, remedy = fmt.finding_lines(f)
        lines += [""] + wrap(head, width)
        words = evl if (verbose and evl) else f.phrase()
        lines += wrap(f"evidence: {words}", width, "   ", "     ")
        if remedy:
            lines += wrap(f"remedy: {remedy}", width, "   ", "     ")
        for ref in f.references[:3]:
            lines += wrap(f"see: {ref}", width, "   ", "     ")
    foot = cut.footer(width, ", or `attrib report` as markdown")
    lines += [""] + foot if foot else []
    return "\n".join(lines) + "\n"
