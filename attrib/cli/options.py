"""Every option that more than one command takes, declared once: its flags, its help (the same
text in every command) and its check (attrib.cli.numbers' ranges as click parses it; --arch's
before the command's work). A command takes an option by decorating itself with it
(`@options.output()`); what the command does with it, its docstring says.

--format is one option whose choices are the command's own (attrib.report.formats): with none
given, `chosen_format` reads the format off -o's suffix, for every command alike."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from attrib.errors import UsageError
from attrib.report.formats import SUFFIXES

from attrib.cli import numbers

F = TypeVar("F", bound=Callable[..., Any])


def combined(*opts: Callable[[Any], Any]) -> Callable[[F], F]:
    """One decorator of several (click options, or the decorators here), the first listed shown
    first in the help."""
    def decorate(f: F) -> F:
        for o in reversed(opts):
            f = o(f)
        return f
    return decorate


# what -o does with a name that is already there (attrib.output)
OUTPUT_RULES = ("A FIFO or device (/dev/stdout) is written through; a symlink's target is "
                "replaced (atomically, the link kept); an input of the command is refused, "
                "--force or not.")
OUTPUT_HELP = f"Write to FILE instead of stdout. {OUTPUT_RULES}"
FORCE_HELP = "Overwrite FILE (and the plots a report writes beside it) if it exists."


def output(required: bool = False) -> Callable[[F], F]:
    """-o/--output FILE and --force (`required`: the command writes only a file)."""
    return combined(
        click.option("-o", "--output", type=click.Path(path_type=Path), metavar="FILE",
                     required=required, help=OUTPUT_HELP),
        click.option("--force", is_flag=True, help=FORCE_HELP))


FORMAT_HELP = "Default: the one -o's suffix names, else the first listed."


def formats(names: tuple[str, ...]) -> Callable[[F], F]:
    """--format (`fmt`): one of `names`, the command's formats, its default first."""
    return click.option("--format", "fmt", type=click.Choice(names), help=FORMAT_HELP)


def chosen_format(fmt: str | None, out: Path | None, names: tuple[str, ...],
                  folders: tuple[str, ...] = ()) -> str:
    """--format as given, else the one -o's suffix names (attrib.report.formats.SUFFIXES),
    else the first of `names`. A suffix that names a format the command does not write (or one
    of `folders`, which it writes as a folder: -o DIR) is a UsageError, not a guess."""
    if fmt is not None:
        return fmt
    named = dict(SUFFIXES).get(out.suffix.lower()) if out is not None else None
    if named is None:
        return names[0]
    if named not in names or named in folders:
        command = click.get_current_context().info_name
        raise UsageError(f"{out}: its suffix names {named}, which {command} does not write to "
                         f"a file; give --format ({', '.join(names)})")
    return named


def phase(default: str | None = None) -> Callable[[F], F]:
    """--phase NAME (`default`: the command's, shown in its help)."""
    return click.option("--phase", metavar="NAME", default=default,
                        show_default=default is not None,
                        help="Only this phase (prefill, decode, or a PHASE of --phase-map).")


def phase_map() -> Callable[[F], F]:
    """--phase-map NAME=PHASE (repeatable)."""
    return click.option("--phase-map", multiple=True, metavar="NAME=PHASE",
                        help="Treat annotation NAME as PHASE (repeatable).")


def parse_phase_map(items: tuple[str, ...]) -> dict[str, str]:
    """--phase-map's values as {NAME: PHASE}; a value without NAME=PHASE is a usage error."""
    out = {}
    for item in items:
        name, sep, phase_name = item.partition("=")
        if not sep or not name or not phase_name:
            raise click.BadParameter(f"expected NAME=PHASE, got {item!r}", param_hint="--phase-map")
        out[name] = phase_name
    return out


ARCH_HELP = ("The device: a key, gfx/sm target or product name `attrib archs` lists (with "
             "--arch-file, yours too); an unknown one is an error naming the closest. A "
             "trace's figures are measured on it where the trace does not say its device, "
             "projected onto it where the trace ran on another (a what-if); `archs` and "
             "`rules` list only its entry and its rules.")
ARCH_FILE_HELP = ("TOML of your own device entries (`attrib archs --template --trace TRACE`, "
                  "`attrib calibrate`): added to the database, and for the device an entry "
                  "describes it wins over the bundled one.")


def arch(targets: bool = False) -> Callable[[F], F]:
    """--arch NAME (`arch_name`) and --arch-file FILE (`arch_file`), checked before the
    command's work: an unknown NAME or a bad FILE is one line, exit 2. `targets`: NAME may also
    be a gfx target a rule names (`attrib rules`, whose NAME picks rules, not a roofline)."""
    def decorate(f: F) -> F:
        @functools.wraps(f)
        def checked(*args: Any, **kw: Any) -> Any:
            _check_arch(kw.get("arch_name"), kw.get("arch_file"), targets)
            return f(*args, **kw)
        return combined(
            click.option("--arch", "arch_name", metavar="NAME", help=ARCH_HELP),
            click.option("--arch-file", type=click.Path(path_type=Path, exists=True,
                                                        dir_okay=False), help=ARCH_FILE_HELP),
        )(checked)  # type: ignore[return-value]
    return decorate


def _check_arch(name: str | None, arch_file: Path | None, targets: bool) -> None:
    if name is None and arch_file is None:
        return
    from attrib.cli.common import loading

    with loading():
        from attrib.app import resolve_arch, rule_target
    resolve_arch(None if targets else name, arch_file)
    if targets and name is not None:
        rule_target(name, arch_file)


def model() -> Callable[[F], F]:
    """--model CONFIG (a HF config.json) and --context N."""
    return combined(
        click.option("--model", type=click.Path(path_type=Path), metavar="CONFIG",
                     help="HF config.json: bytes for the components the trace has no shapes "
                          "for (graph replays, rocprof), budgeted per decode step."),
        click.option("--context", type=numbers.CONTEXT,
                     help="With --model: K/V positions each decode step reads (default: the "
                          "decode steps' median read from the trace)."))


def capture() -> Callable[[F], F]:
    """--capture TRACE (a replay's graph-capture trace) and --capture-batch N."""
    return combined(
        click.option("--capture", type=click.Path(path_type=Path), metavar="TRACE",
                     help="The graph-capture trace of this replay trace (vLLM "
                          "capture_torch_profiler): replayed kernels get their ops, shapes, "
                          "modules and bytes."),
        click.option("--capture-batch", type=numbers.BATCH,
                     help="With --capture: the captured batch size to align with."))


def baseline() -> Callable[[F], F]:
    """--baseline TRACE, a speculative loop's plain decode trace."""
    return click.option("--baseline", type=click.Path(path_type=Path), metavar="TRACE",
                        help="A plain decode trace of the target: a speculative loop's speedup "
                             "(and best K) is measured against its decode step.")


def top() -> Callable[[F], F]:
    """--top N."""
    return click.option("--top", type=numbers.TOP, default=None,
                        help="Top kernels (and bottlenecks) to show (default: 5 on a terminal, "
                             "10 in files).")


def min_effect() -> Callable[[F], F]:
    """--min-effect PCT (None: attrib.multi.compare's MIN_EFFECT_PCT)."""
    return click.option("--min-effect", type=numbers.PERCENT, metavar="PCT",
                        help="Smallest change (percent) called faster or slower (default: "
                             "attrib.multi.compare's MIN_EFFECT_PCT, 3).")
