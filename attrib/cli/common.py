"""The command group and what its commands share: option parsing, output, warnings."""

from __future__ import annotations

import contextlib
import functools
import gc
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
        gc.enable()

def parse_phase_map(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, phase = item.partition("=")
        if not sep or not name or not phase:
            raise click.BadParameter(f"expected NAME=PHASE, got {item!r}", param_hint="--phase-map")
        out[name] = phase
    return out


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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="attrib")
def cli() -> None:
    """attrib: where LLM-inference milliseconds and bytes go, per model component."""




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


def phase_map_option():
    """--phase-map NAME=PHASE (repeatable), as every command that finds phases takes it."""
    return click.option("--phase-map", multiple=True, metavar="NAME=PHASE",
                        help="Treat annotation NAME as PHASE (repeatable).")


# what -o does with a name that is already there (attrib.output), said in every -o's help
OUTPUT_RULES = ("A FIFO or device (/dev/stdout) is written through; a symlink's target is "
                "replaced (atomically, the link kept); an input of the command is refused, "
                "--force or not.")
OUTPUT_HELP = f"Write to FILE instead of stdout. {OUTPUT_RULES}"


def output_options() -> list:
    """-o/--output and --force, as every command that writes a file takes them."""
    return [click.option("-o", "--output", type=click.Path(path_type=Path), help=OUTPUT_HELP),
            click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")]


def apply(f, opts: list):
    """f decorated with `opts` (click options), the first listed shown first in the help."""
    for o in reversed(opts):
        f = o(f)
    return f


def file_options(f):
    """-o/--output and --force (compare, ranks)."""
    return apply(f, output_options())


ARCH_HELP = ("NAME: a key, gfx/sm target or product name `attrib archs` lists (with --arch-file, "
             "yours too); an unknown one is an error naming the closest.")
ARCH_FILE_HELP = ("TOML of your own device entries (`attrib archs --template --trace TRACE`, "
                  "`attrib calibrate`): added to the database, and for the device an entry "
                  "describes it wins over the bundled one.")


def arch_options(purpose: str, check: bool = True):
    """--arch NAME (`arch_name`) and --arch-file FILE (`arch_file`), declared once for every
    command that takes them: `purpose` (what --arch does in that command) opens --arch's help.
    With `check`, an unknown NAME or a bad FILE fails before the command's work: one line, exit
    2 (`rules` checks its own: a rule's target is a name there too)."""
    def decorate(f):
        @functools.wraps(f)
        def checked(*args, **kw):
            if check and (kw.get("arch_name") is not None or kw.get("arch_file") is not None):
                with loading():
                    from attrib.app import resolve_arch
                resolve_arch(kw.get("arch_name"), kw.get("arch_file"))
            return f(*args, **kw)
        return apply(checked, [
            click.option("--arch", "arch_name", metavar="NAME", help=f"{purpose} {ARCH_HELP}"),
            click.option("--arch-file", type=click.Path(path_type=Path, exists=True,
                                                        dir_okay=False), help=ARCH_FILE_HELP)])
    return decorate


