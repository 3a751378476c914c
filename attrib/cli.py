"""The `attrib` command line."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

import orjson

from attrib.app import analyze_path, catalog, model_budget, resolve_arch
from attrib.cost.dtypes import KV_BYTES
from attrib.errors import TraceError, UsageError
from attrib.report.printable import printable
from attrib.report.table import render
from attrib.roofline.arch import arch_table
from attrib.roofline.template import template
from collectors import load
from collectors.rocprof.run import run


def _phase_map(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, phase = item.partition("=")
        if not sep or not name or not phase:
            raise click.BadParameter(f"expected NAME=PHASE, got {item!r}", param_hint="--phase-map")
        out[name] = phase
    return out


def check_output(out: Path | None, force: bool) -> None:
    """Refuse an output path before any work: an existing file without --force, a missing folder."""
    if out is None:
        return
    if out.is_dir():
        raise TraceError(out, "is a directory; give a file name")
    if out.exists() and not force:
        raise TraceError(out, "exists; pass --force to overwrite it")
    if not out.parent.is_dir():
        raise TraceError(out, f"folder {out.parent} does not exist (attrib creates no folders)")


def _warn(path: object, message: str) -> None:
    """A reader's warning (what it salvaged or dropped): one line on stderr."""
    click.echo(printable(f"attrib: warning: {path}: {message}"), err=True)


def _write(text: str, out: Path | None) -> None:
    if out is None:
        click.echo(text, nl=False)
        return
    try:
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
@click.option("--arch", "arch_name", metavar="NAME", help="Measure against this device instead of the detected one "
              "(what-if; see `attrib archs`).")
@click.option("--arch-file", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="TOML with your own measured device entries (added to the database).")
@click.option("--model", type=click.Path(path_type=Path), help="HF config.json: budget decode bytes for components "
              "the trace has no shapes for (graph replays, rocprof).")
@click.option("--weight-bits", metavar="BITS|CLASS=BITS,...", help="With --model: bits per weight, one figure "
              "or per class (experts=4.25,attention=16,default=16; classes attention, mlp, experts, shared_experts, "
              "router, embedding, lm_head). Default: the config's quantization_config, else 16.")
@click.option("--kv-dtype", type=click.Choice(sorted(KV_BYTES)), default="bf16", show_default=True,
              help="With --model: KV-cache element type.")
@click.option("--context", type=int, help="With --model: K/V positions each decode step reads.")
@click.option("--capture", "capture", type=click.Path(path_type=Path), help="The graph-capture trace of this "
              "replay trace (vLLM capture_torch_profiler): replayed kernels get their ops, shapes and modules.")
@click.option("--capture-batch", type=int, help="With --capture: the captured batch size to align with.")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write to FILE instead of stdout.")
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
def analyze(trace: Path, fmt: str, phase: str | None, phase_map: tuple[str, ...], arch_name: str | None,
            arch_file: Path | None, model: Path | None, weight_bits: str | None, kv_dtype: str, context: int | None,
            capture: Path | None, capture_batch: int | None, output: Path | None, force: bool) -> None:
    """Attribute TRACE offline: steps, phases, components, bytes, roofline, top kernels."""
    check_output(output, force)
    arch, arch_from = resolve_arch(arch_name, arch_file)
    doc = analyze_path(trace, phase=phase, phase_map=_phase_map(phase_map), arch=arch, arch_from=arch_from,
                       budget=model_budget(model, weight_bits=weight_bits, kv_dtype=kv_dtype, context=context),
                       capture=capture, capture_batch=capture_batch, arch_file=arch_file, warn=_warn)
    text = (orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n") if fmt == "json" else render(doc)
    _write(text, output)


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--rocprof", "use_rocprof", is_flag=True, required=True,
              help="Run CMD under rocprofv3 (the capture this command does; torch capture is the Python API).")
@click.option("--hip-trace", is_flag=True, help="Also trace HIP API calls.")
@click.option("--memory-copy-trace", is_flag=True, help="Also trace memory copies.")
@click.option("--format", "fmt", type=click.Choice(["rocpd", "csv", "json"]), default="rocpd", show_default=True)
@click.option("-d", "--output-dir", "out_dir", type=click.Path(path_type=Path), default=Path("rocprof-out"),
              show_default=True)
@click.option("--rocprofv3", default="rocprofv3", show_default=True, help="Path to rocprofv3 (non-standard installs).")
@click.option("--analyze/--no-analyze", default=True, show_default=True, help="Analyze what was captured.")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def capture(use_rocprof: bool, hip_trace: bool, memory_copy_trace: bool, fmt: str, out_dir: Path, rocprofv3: str,
            analyze: bool, cmd: tuple[str, ...]) -> None:
    """Run CMD under rocprofv3 and analyze its trace: attrib capture --rocprof -- CMD ARGS..."""
    res = run(list(cmd), out_dir, hip_trace=hip_trace, memory_copy_trace=memory_copy_trace, fmt=fmt,
              rocprofv3=rocprofv3)
    if res.warning:
        click.echo(f"attrib: warning: {res.warning}", err=True)
    for path in res.traces:
        click.echo(f"captured: {path}")
        if analyze:
            click.echo(render(analyze_path(path, warn=_warn)))


@cli.command()
@click.option("--arch-file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--template", "show_template", is_flag=True, help="Print an entry to fill in for a device not in "
              "the database (pass it back with --arch-file).")
@click.option("--trace", "trace_path", type=click.Path(path_type=Path), help="With --template: prefill it from "
              "the device this trace recorded.")
def archs(arch_file: Path | None, show_template: bool, trace_path: Path | None) -> None:
    """List the device database: bandwidth (peak, sustained), peak matrix TFLOP/s."""
    if show_template:
        devices = load(trace_path).meta.devices if trace_path is not None else ()
        click.echo(template(devices[0] if devices else None), nl=False)
        return
    t = arch_table(arch_file)
    click.echo(f"{'key':<14}{'arch':<9}{'CUs':>5}{'peak GB/s':>11}{'sust. GB/s':>12}{'bf16 TF':>9}{'fp8 TF':>8}  name")
    for r in t.iter_rows(named=True):
        def f(x, fmt="{:g}"):
            return "-" if x is None else fmt.format(x)
        click.echo(f"{r['key']:<14}{r['arch']:<9}{r['cus']:>5}{f(r['peak_bw_gbs']):>11}{f(r['sustained_bw_gbs']):>12}"
                   f"{f(r['bf16_tflops']):>9}{f(r['fp8_tflops']):>8}  {r['name']}")
    click.echo("derived and unverified figures are listed per entry in attrib/data/archs.toml")


@cli.command("rules")
@click.option("--arch", "arch_name", metavar="NAME", help="Only the rules that apply to this arch (e.g. gfx1151).")
def rules_cmd(arch_name: str | None) -> None:
    """List the pathology rules: id, archs, what each needs from a trace, references."""
    for r in catalog(arch_name):
        click.echo(f"{r['id']}  [archs: {r['archs']}]\n    needs: {r['needs']}")
        for ref in r["references"]:
            click.echo(f"    {ref}")


def main(argv: list[str] | None = None) -> int:
    """Console entry point: bad input is one line on stderr and exit code 2, never a traceback."""
    try:
        cli.main(args=argv, prog_name="attrib", standalone_mode=False)
    except (TraceError, UsageError) as exc:
        click.echo(printable(f"attrib: error: {exc}"), err=True)
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
        click.echo(printable(f"attrib: internal error: {type(exc).__name__}: {exc} (set ATTRIB_DEBUG=1 for a "
                             "traceback)"), err=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
