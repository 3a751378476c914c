"""Terminal tables that fit a width: columns padded, dropped by priority or shortened (`grid`),
prose wrapped (`wrap`), what was left out said once (`Cut`); the width itself (`terminal_width`).
Every terminal renderer uses them (the analysis table, compare, slope, sweep, ranks, trend,
what-if, archs, rules)."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Sequence

from attrib.report import fmt

PIPE_WIDTH = 100  # the width when stdout is no terminal and COLUMNS is unset
MIN_FLEX = 16  # a name or sentence column is not shortened below this before columns are dropped
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
