"""The command group and what its commands share: option parsing, output, warnings."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import click

import orjson

from attrib.errors import TraceError
from attrib.output import not_regular, protect, refuse_input, write_file
from attrib.report.printable import printable
from attrib.report.progress import progress
from attrib.version import __version__

if TYPE_CHECKING:
    from attrib.analysis.model import Analysis


YOUNG = 10_000  # allocations between two collections of the young generation (`loading`)


@contextlib.contextmanager
def loading() -> Iterator[None]:
    """Pause the cyclic GC while a command first imports the engine, then freeze what loaded (a
    fast start: each collection re-walked the ~80 k containers polars, numpy and attrib make at
    import and freed next to none; ~0.1 s of CPU of `attrib analyze` of a small trace). A no-op
    once the engine is loaded (a second command in one process) or with the GC off."""
    if "attrib.app" in sys.modules or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()  # module objects live as long as the process: no collection need walk them
        # the analysis makes many short-lived containers (rows, records) and next to no cycles:
        # a young collection every 10,000 of them, not 700 (a small trace's analyze: 29 -> 20
        # collections, those of the analysis gone)
        gc.set_threshold(YOUNG, *gc.get_threshold()[1:])
        gc.enable()


NO_PARTITION = "POLARS_NO_PARTITION"


@contextlib.contextmanager
def small_groups(*paths: Path | None) -> Iterator[None]:
    """While a command reads only small files (collectors.limits.small_text), polars groups
    rows without first splitting them by hash over its threads. It splits every group-by of
    1,000 rows or more, which up to 65,536 rows cost more than it spread (on 2 CPUs a 2,000-row
    group-by on text keys took 320 us against 45 us); the small trace's `analyze` took 8 ms less.
    Polars reads the variable at each group-by; it is set here between queries, and a value of
    the user's own is kept."""
    from collectors.limits import small_text

    if NO_PARTITION in os.environ or not small_text(*paths):
        yield
        return
    os.environ[NO_PARTITION] = "1"
    try:
        yield
    finally:
        del os.environ[NO_PARTITION]


def check_output(out: Path | None, force: bool) -> None:
    """Refuse an output path before any work: an input of the command (whatever the spelling, a
    symlink, --force or not), an existing file without --force, a missing folder. A FIFO or a
    device (/dev/stdout, /dev/null) is written through, keeping its type (attrib.output)."""
    if out is None:
        protect(())
        return
    refuse_inputs(out)
    if out.is_dir():
        raise TraceError(out, "is a directory; give a file name")
    if not_regular(out):
        return
    if out.exists() and not force:
        raise TraceError(out, "exists; pass --force to overwrite it")
    if not out.parent.is_dir():
        raise TraceError(out, f"folder {out.parent} does not exist (attrib creates no folders)")


def _paths(value: object) -> list[Path]:
    """The paths a parameter's value names (a Path, or a tuple of them)."""
    items = value if isinstance(value, (tuple, list)) else (value,)
    return [v for v in items if isinstance(v, Path)]


# what attrib writes and never reads as a trace: a report left in a folder of traces (`trend
# captures/ -o captures/trend.html --force`, run again) is not one of the folder's inputs
NEVER_READ = (".html", ".htm", ".md", ".markdown", ".svg", ".xlsx")


def inputs(out: Path) -> list[Path]:
    """The files the running command reads: every path parameter but `out` (a folder stands for
    the files directly inside it, less the reports attrib writes: NEVER_READ)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return []
    given = [p for v in ctx.params.values() for p in _paths(v) if p is not out]
    files = []
    for p in given:
        files.append(p)
        if p.is_dir():
            files.extend(f for f in p.iterdir()
                         if f.is_file() and not f.name.lower().endswith(NEVER_READ))
    return files


def refuse_inputs(out: Path) -> None:
    """A TraceError where `out` is (after symlinks and `..`) one of the command's inputs, which
    attrib.output then protects: no file this command writes (its plots beside a report too)
    replaces one, --force or not (a trace is often the only copy of a capture)."""
    given = inputs(out)
    protect(given)
    refuse_input(out, given)


def warn(path: object, message: str) -> None:
    """A reader's warning (what it salvaged or dropped): one line on stderr."""
    click.echo(printable(f"attrib: warning: {path}: {message}"), err=True)


def write(text: str, out: Path | None, force: bool) -> None:
    """TEXT on stdout, or as the file OUT (whole or not at all; see attrib.output)."""
    if out is None:
        click.echo(text, nl=False)
    else:
        write_file(out, text, force)


def _one_trace() -> None:
    from attrib.cli import single  # noqa: F401  (analyze, report, export)


def _several() -> None:
    from attrib.cli import runs  # noqa: F401  (compare, ladder, slope, ranks, trend, sweep)


def _device() -> None:
    from attrib.cli import device  # noqa: F401  (capture, archs, calibrate, rules)


# the modules that register commands on `cli`, in the order a command is looked for
COMMAND_MODULES = (_one_trace, _several, _device)


class Commands(click.Group):
    """The command group, its commands' modules imported on demand: running one command loads
    the modules up to the one that declares it (`attrib analyze`: attrib.cli.single alone, no
    other command's code); listing them (--help) loads all."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        for load in COMMAND_MODULES:
            if cmd_name in self.commands:
                break
            load()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(every_command())


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="attrib")
def cli() -> None:
    """attrib: where LLM-inference milliseconds and bytes go, per model component."""


def every_command() -> dict[str, click.Command]:
    """{name: command} of every command (their modules imported)."""
    for load in COMMAND_MODULES:
        load()
    return dict(cli.commands)



def analyses(traces: tuple[Path, ...], phase_map: dict[str, str], arch_name: str | None,
          arch_file: Path | None, baseline: Path | None = None) -> list[Analysis]:
    from attrib.analysis.model import Analysis
    from attrib.app import analyze_path, resolve_arch
    from attrib.options import Options

    arch, arch_from = resolve_arch(arch_name, arch_file)
    opts = Options(phase_map=phase_map, arch=arch, arch_from=arch_from, arch_file=arch_file,
                   baseline=baseline)
    out = []
    for t in traces:
        if Analysis.is_document(t):  # a saved analysis (analyze --format json): as it was
            out.append(Analysis.load(t))
            continue
        with progress(f"analyzing {t}"):
            out.append(analyze_path(t, opts, warn=warn))
    return out


def printable_lines(text: str) -> str:
    """A terminal table with every line safe to print (paths and stamp values come from files)."""
    return "".join(printable(line) + "\n" for line in text.splitlines())


def dump(doc: dict) -> str:
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n"
