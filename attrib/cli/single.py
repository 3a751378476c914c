"""The commands over one trace: analyze, report (and its table files), export."""

from __future__ import annotations

import glob
import re
from pathlib import Path
from typing import TYPE_CHECKING

import click

import orjson

from attrib.cost.dtypes import KV_BYTES
from attrib.errors import TraceError, UsageError
from attrib.output import write_file, write_files
from attrib.report.formats import ANALYZE_FORMATS, FOLDER_FORMATS, REPORT_FORMATS
from attrib.report.progress import progress

if TYPE_CHECKING:
    from attrib.analysis.model import Analysis
    from attrib.options import Options
    from attrib.report.renderers import Renderer

from attrib.cli import numbers, options
from attrib.cli.common import (check_output, cli, loading, refuse_inputs, small_groups, warn,
                               write)


def _analysis_options(f):
    """The options of the commands that analyze one trace (analyze, report)."""
    return options.combined(
        options.phase(),
        options.phase_map(),
        options.arch(),
        options.model(),
        click.option(
            "--weight-bits",
            metavar="BITS|CLASS=BITS,...",
            help="With --model: bits per weight, one figure or per class "
            "(experts=4.25,attention=16,default=16; classes attention, mlp, experts, "
            "shared_experts, router, embedding, lm_head). Default: the config's "
            "quantization_config, else 16.",
        ),
        click.option(
            "--kv-dtype",
            type=click.Choice(sorted(KV_BYTES)),
            default="bf16",
            show_default=True,
            help="With --model: KV-cache element type.",
        ),
        click.option(
            "--what-if",
            "what_if",
            metavar="CLASS=FORMAT,...",
            help="With --model: project decode at other formats: weights=int4|int8|fp8|mxfp4 "
            "(or per class: experts=, attention=, mlp=, lm_head=, default=), kv=fp8|int8 "
            "(int4: 0.5 B + an fp16 scale per 128).",
        ),
        options.capture(),
        options.baseline(),
        options.top(),
        click.option(
            "--chunk-steps",
            type=numbers.STEPS,
            default=None,
            metavar="N",
            help="Read a Kineto trace from disk N annotated steps at a time (memory bounded "
            "by a chunk; the same figures); 0: read it whole. Default: 64 for 1 GiB of JSON "
            "or more.",
        ),
        options.output(),
    )(f)


def _options(o: dict) -> Options:
    """The Options of _analysis_options' flags."""
    from attrib.app import model_budget, parse_what_if, resolve_arch
    from attrib.options import TOP_KERNELS, Options

    arch, arch_from = resolve_arch(o["arch_name"], o["arch_file"])
    budget = model_budget(o["model"], weight_bits=o["weight_bits"], kv_dtype=o["kv_dtype"],
                          context=o["context"])
    phase_map = options.parse_phase_map(o["phase_map"])
    return Options(phase=o["phase"], phase_map=phase_map, arch=arch, arch_from=arch_from,
                   arch_file=o["arch_file"], budget=budget, capture=o["capture"],
                   capture_batch=o["capture_batch"], top=max(o["top"] or TOP_KERNELS, TOP_KERNELS),
                   what_if=parse_what_if(o["what_if"], budget),
                   baseline=o["baseline"], chunk_steps=o["chunk_steps"])


def _analyze(trace: Path, o: dict) -> Analysis:
    """Resolve the options of _analysis_options and analyze TRACE (progress on a terminal)."""
    with loading():
        from attrib.app import analyze_path
    opts = _options(o)
    with progress(f"analyzing {trace}"), small_groups(trace, o["capture"], o["baseline"]):
        return analyze_path(trace, opts, warn=warn)


@cli.command()
@click.argument("trace", type=click.Path(path_type=Path))
@options.formats(ANALYZE_FORMATS)
@click.option("-v", "--verbose", is_flag=True, help="Findings' raw evidence and notes whole.")
@_analysis_options
def analyze(trace: Path, fmt: str | None, verbose: bool, **o) -> None:
    """Attribute TRACE offline: the verdict first, then steps, phases, components, bytes, roofline,
    top kernels and findings. The table fits the terminal (COLUMNS; 100 in a pipe). csv, csv-safe
    and parquet write a folder (-o DIR) of one file per table and index.json (csv writes trace
    names as they are; csv-safe quotes a cell starting with = + - @ for spreadsheets), xlsx one
    workbook (text cells, no formulas).

    \b
    Example: attrib analyze trace.json.gz --model config.json -v"""
    with loading():
        from attrib.options import TOP_KERNELS
        from attrib.report import renderers
        from attrib.report.renderers import View

    fmt = options.chosen_format(fmt, o["output"], ANALYZE_FORMATS, FOLDER_FORMATS)
    r = renderers.by_name(fmt)
    if r.writes_bytes:
        return _tables(r, trace, o)
    check_output(o["output"], o["force"])
    an = _analyze(trace, o)
    terminal = o["output"] is None
    view = View(top=o["top"] or (5 if terminal else TOP_KERNELS),
                width=_terminal_width() if terminal and r.name == "table" else None,
                verbose=verbose)
    write(r.render(an, view), o["output"], o["force"])


def _terminal_width() -> int:
    """The terminal's width, which only the table reads (JSON loads no table module)."""
    from attrib.report.table import terminal_width

    return terminal_width()


def _tables(r: Renderer, trace: Path, o: dict) -> None:
    """Write the analysis' tables: a folder (csv, parquet) or one file (xlsx); -o is required."""
    from attrib.output import check_folder, write_folder

    out = o["output"]
    if out is None:
        raise UsageError(f"--format {r.name} writes files: give -o "
                         + ("FILE.xlsx" if r.binary is not None else "DIR (a new or empty folder)"))
    if r.folder is not None:
        refuse_inputs(out)
        check_folder(out, o["force"])
    else:
        check_output(out, o["force"])
    if r.check is not None:
        r.check()  # an optional extra missing: one clear line (exit 2) before any work
    an = _analyze(trace, o)
    if r.folder is not None:
        return write_folder(out, r.folder(an), o["force"])
    assert r.binary is not None
    write_file(out, r.binary(an), o["force"])


def _plot_files(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f"{glob.escape(out.stem)}.*.svg"))


@cli.command()
@click.argument("trace", type=click.Path(path_type=Path))
@options.formats(REPORT_FORMATS)
@_analysis_options
def report(trace: Path, fmt: str | None, **o) -> None:
    """The bottleneck report of TRACE: -o report.html (one self-contained file) or -o report.md
    (plots as SVG files beside it). csv, csv-safe and parquet write a folder of tables (-o DIR),
    as `analyze` does.

    \b
    Example: attrib report trace.json.gz -o report.html"""
    with loading():
        from attrib.report import plots as plots_mod
        from attrib.report import renderers
        from attrib.report.renderers import View

    out = o["output"]
    r = renderers.by_name(options.chosen_format(fmt, out, REPORT_FORMATS, FOLDER_FORMATS))
    if r.writes_bytes:
        return _tables(r, trace, o)
    check_output(out, o["force"])
    if r.plots == "files" and out is not None and not o["force"]:
        for f in _plot_files(out):
            raise TraceError(f, "exists (a plot of an earlier report); "
                                "pass --force to overwrite it")
    an = _analyze(trace, o)
    if r.plots is None:
        return write(r.render(an, View()), out, o["force"])
    with progress("drawing plots"):
        plots = plots_mod.report_plots(an) if (out is not None or r.plots == "inline") else {}
    note = None if plots_mod.available() else plots_mod.MISSING
    if r.plots == "files" and out is None and plots_mod.available():
        note = ("plots omitted on stdout: write the report to a file (-o report.md) "
                "to get them as SVG files beside it")
    if r.plots != "files" or out is None:
        return write(r.render(an, View(plots=plots, plot_note=note)), out, o["force"])
    files, names = [], {}
    for name, svg in plots.items():
        path = out.with_name(f"{out.stem}.{re.sub(r'[^A-Za-z0-9_-]', '_', name)}.svg")
        files.append((path, svg.encode()))
        names[name] = path.name
    text = r.render(an, View(plots=names, plot_note=note))
    write_files([*files, (out, text.encode())], o["force"])


@cli.command()
@click.argument("trace", type=click.Path(path_type=Path))
@options.output(required=True)
@options.phase_map()
@options.capture()
@options.model()
def export(trace: Path, output: Path, phase_map: tuple[str, ...], force: bool, capture: Path | None,
           capture_batch: int | None, model: Path | None, context: int | None) -> None:
    """TRACE with each kernel's component, phase, bytes and GB/s in its args and a track per
    component: -o annotated.json (or .json.gz) to open in the Perfetto UI.

    \b
    Example: attrib export trace.json.gz -o annotated.json.gz"""
    from attrib.app import export_trace, model_budget
    from attrib.options import Options
    from attrib.report.export import PROCESS

    check_output(output, force)
    budget = model_budget(model, context=context)
    with progress(f"annotating {trace}"):
        opts = Options(phase_map=options.parse_phase_map(phase_map), capture=capture,
                       capture_batch=capture_batch, budget=budget)
        doc = export_trace(trace, opts)
        data = orjson.dumps(doc)
        if output.name.endswith(".gz"):
            import gzip  # this command's alone (a fast start for the rest)

            data = gzip.compress(data, compresslevel=6)
    write_file(output, data, force)
    click.echo(f"wrote {output}: open it in https://ui.perfetto.dev "
               f"(process '{PROCESS}': one track per component)")


