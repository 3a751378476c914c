"""The renderers of an Analysis, chosen by name (`--format`, or the one -o's suffix names:
attrib.report.formats.SUFFIXES).

A renderer is one module with a `render` function plus one entry here. `plots` says what it does
with the report's plots: "inline" (SVG inside the text), "files" (SVG files beside the output,
referenced by name), or None (no plots). A table renderer writes bytes instead of text: `folder`
(file name -> bytes, written as the folder -o DIR) or `binary` (one file's bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import msgspec
from msgspec import field

from attrib.analysis.model import Analysis
from attrib.errors import UsageError


class View(msgspec.Struct, frozen=True):
    """What a renderer may be asked for beyond the analysis: top kernels and the terminal's width
    (None: all, whole), the plots (name -> SVG text, or -> file name for "files"), and why there
    are none."""

    top: int | None = None
    width: int | None = None
    plots: Mapping[str, str] = field(default_factory=dict)
    plot_note: str | None = None
    verbose: bool = False  # the table: findings' raw evidence whole, notes whole


class Renderer(msgspec.Struct, frozen=True):
    name: str
    render: Callable[[Analysis, View], str]
    plots: str | None = None
    folder: Callable[[Analysis], dict[str, bytes]] | None = None
    binary: Callable[[Analysis], bytes] | None = None
    check: Callable[[], None] | None = None  # raises UsageError when an optional extra is missing

    @property
    def writes_bytes(self) -> bool:
        return self.folder is not None or self.binary is not None


def _json(an: Analysis, view: View) -> str:
    return an.to_json()


# the formats other than JSON import their module when they render (a fast start: `attrib
# analyze` loads only the one it prints)
def _table(an: Analysis, view: View) -> str:
    from attrib.report import table

    return table.render(an, top=view.top, width=view.width, verbose=view.verbose)


def _markdown(an: Analysis, view: View) -> str:
    from attrib.report import markdown

    return markdown.render(an, dict(view.plots), view.plot_note)


def _html(an: Analysis, view: View) -> str:
    from attrib.report import html

    return html.render(an, dict(view.plots), view.plot_note)


def _csv(an: Analysis) -> dict[str, bytes]:
    from attrib.report import csv_tables

    return csv_tables.render(an)


def _csv_safe(an: Analysis) -> dict[str, bytes]:
    from attrib.report import csv_tables

    return csv_tables.render_safe(an)


def _parquet(an: Analysis) -> dict[str, bytes]:
    from attrib.report import parquet_tables

    return parquet_tables.render(an)


def _xlsx(an: Analysis) -> bytes:
    from attrib.report import xlsx_tables

    return xlsx_tables.render(an)


def _xlsx_check() -> None:
    from attrib.report import xlsx_tables

    xlsx_tables.check()


def _needs_output(an: Analysis, view: View) -> str:
    raise UsageError("this format writes files: "
                     "give -o (a folder for csv and parquet, FILE.xlsx for xlsx)")


RENDERERS: tuple[Renderer, ...] = (
    Renderer("table", _table),  # the terminal's
    Renderer("json", _json),
    Renderer("md", _markdown, plots="files"),
    Renderer("html", _html, plots="inline"),
    Renderer("csv", _needs_output, folder=_csv),
    Renderer("csv-safe", _needs_output, folder=_csv_safe),  # for spreadsheets: no formulas
    Renderer("parquet", _needs_output, folder=_parquet),
    Renderer("xlsx", _needs_output, binary=_xlsx, check=_xlsx_check),
)

TABLE_FORMATS = tuple(r.name for r in RENDERERS if r.writes_bytes)


def names() -> list[str]:
    return [r.name for r in RENDERERS]


def by_name(name: str) -> Renderer:
    for r in RENDERERS:
        if r.name == name:
            return r
    raise UsageError(f"unknown format {name!r}; known: {', '.join(names())}")
