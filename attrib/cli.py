"""The `attrib` command line."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from attrib.errors import TraceError


def _phase_map(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, phase = item.partition("=")
        if not sep or not name or not phase:
            raise click.BadParameter(f"expected NAME=PHASE, got {item!r}", param_hint="--phase-map")
        out[name] = phase
    return out


def _write(text: str, out: Path | None, force: bool) -> None:
    if out is None:
        click.echo(text, nl=False)
        return
    if out.exists() and not force:
        raise TraceError(out, "exists; pass --force to overwrite it")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    except OSError as exc:
        raise TraceError(out, f"cannot write: {exc.strerror or exc}") from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="attrib")
def cli() -> None:
    """attrib: where LLM-inference milliseconds and bytes go, per model component."""


@cli.command()
@click.argument("trace", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--phase", help="Only this phase (prefill, decode, ...).")
@click.option("--phase-map", multiple=True, metavar="NAME=PHASE", help="Treat annotation NAME as PHASE (repeatable).")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write to FILE instead of stdout.")
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
def analyze(trace: Path, fmt: str, phase: str | None, phase_map: tuple[str, ...], output: Path | None,
            force: bool) -> None:
    """Attribute TRACE offline: steps, phases, components, top kernels."""
    import orjson

    from attrib.analysis import analyze_path
    from attrib.render_table import render

    doc = analyze_path(trace, phase=phase, phase_map=_phase_map(phase_map))
    for w in doc["notes"]:
        if "truncated" in w or "invalid JSON" in w:
            click.echo(f"attrib: warning: {trace}: {w}", err=True)
    text = (orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n") if fmt == "json" else render(doc)
    _write(text, output, force)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: bad input is one line on stderr and exit code 2, never a traceback."""
    try:
        cli.main(args=argv, prog_name="attrib", standalone_mode=False)
    except TraceError as exc:
        click.echo(f"attrib: error: {exc}", err=True)
        return 2
    except click.exceptions.Abort:
        click.echo("attrib: aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug, not bad input: still one line unless asked for the traceback
        if os.environ.get("ATTRIB_DEBUG"):
            raise
        click.echo(f"attrib: internal error: {type(exc).__name__}: {exc} (set ATTRIB_DEBUG=1 for a traceback)", err=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
