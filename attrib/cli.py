"""The `attrib` command line."""

from __future__ import annotations

import glob
import gzip
import os
import re
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

import orjson

from attrib.cost.dtypes import KV_BYTES
from attrib.errors import TraceError, UsageError
from attrib.output import write_file, write_files
from attrib.report.formats import COMPARE_FORMATS, SLOPE_FORMATS, TABLE_FORMATS
from attrib.report.printable import printable
from attrib.report.progress import progress
from attrib.version import __version__

if TYPE_CHECKING:
    from attrib.analysis.model import Analysis
    from attrib.options import Options
    from attrib.report.renderers import Renderer

# Each command imports the engine it needs inside its body (a fast start: `attrib --version`
# loads click alone, `analyze` neither scipy, matplotlib nor the compare/slope/export modules).


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


def _write(text: str, out: Path | None, force: bool) -> None:
    """TEXT on stdout, or as the file OUT (whole or not at all; see attrib.output)."""
    if out is None:
        click.echo(text, nl=False)
    else:
        write_file(out, text, force)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="attrib")
def cli() -> None:
    """attrib: where LLM-inference milliseconds and bytes go, per model component."""


def _analysis_options(f):
    """The options every command that analyzes one trace shares (analyze, report)."""
    opts = [
        click.option("--phase", help="Only this phase (prefill, decode, ...)."),
        click.option(
            "--phase-map",
            multiple=True,
            metavar="NAME=PHASE",
            help="Treat annotation NAME as PHASE (repeatable).",
        ),
        click.option(
            "--arch",
            "arch_name",
            metavar="NAME",
            help="Measure against this device instead of the detected "
            "one (what-if; see `attrib archs`).",
        ),
        click.option(
            "--arch-file",
            type=click.Path(path_type=Path, exists=True, dir_okay=False),
            help="TOML with your own measured device entries (added to the database).",
        ),
        click.option(
            "--model",
            type=click.Path(path_type=Path),
            help="HF config.json: budget decode bytes for "
            "components the trace has no shapes for (graph replays, rocprof).",
        ),
        click.option(
            "--weight-bits",
            metavar="BITS|CLASS=BITS,...",
            help="With --model: bits per weight, one figure "
            "or per class (experts=4.25,attention=16,default=16; classes attention, mlp, experts, shared_experts, "
            "router, embedding, lm_head). Default: the config's quantization_config, else 16.",
        ),
        click.option(
            "--kv-dtype",
            type=click.Choice(sorted(KV_BYTES)),
            default="bf16",
            show_default=True,
            help="With --model: KV-cache element type.",
        ),
        click.option(
            "--context",
            type=int,
            help="With --model: K/V positions each decode step reads "
            "(default: the decode steps' median read from the trace).",
        ),
        click.option(
            "--what-if",
            "what_if",
            metavar="CLASS=FORMAT,...",
            help="With --model: project decode at "
            "other formats: weights=int4|int8|fp8|mxfp4 (or per class: experts=, attention=, mlp=, lm_head=, "
            "default=), kv=fp8|int8 (int4: 0.5 B + an fp16 scale per 128).",
        ),
        click.option(
            "--capture",
            "capture",
            type=click.Path(path_type=Path),
            help="The graph-capture trace of this "
            "replay trace (vLLM capture_torch_profiler): replayed kernels get their ops, shapes and modules.",
        ),
        click.option(
            "--capture-batch",
            type=int,
            help="With --capture: the captured batch size to align with.",
        ),
        click.option(
            "--baseline",
            type=click.Path(path_type=Path),
            help="A plain decode trace of the "
            "target: a speculative loop's speedup is measured against its decode step.",
        ),
        click.option(
            "--top",
            type=click.IntRange(1),
            default=None,
            help="Top kernels (and bottlenecks) to show "
            "(default: 5 on a terminal, 10 in files).",
        ),
        click.option(
            "-o",
            "--output",
            type=click.Path(path_type=Path),
            help="Write to FILE instead of stdout.",
        ),
        click.option("--force", is_flag=True, help="Overwrite FILE if it exists."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _options(o: dict) -> Options:
    """The Options of _analysis_options' flags."""
    from attrib.app import model_budget, parse_what_if, resolve_arch
    from attrib.options import TOP_KERNELS, Options

    arch, arch_from = resolve_arch(o["arch_name"], o["arch_file"])
    budget = model_budget(o["model"], weight_bits=o["weight_bits"], kv_dtype=o["kv_dtype"], context=o["context"])
    return Options(phase=o["phase"], phase_map=_phase_map(o["phase_map"]), arch=arch, arch_from=arch_from,
                   arch_file=o["arch_file"], budget=budget, capture=o["capture"],
                   capture_batch=o["capture_batch"], top=max(o["top"] or TOP_KERNELS, TOP_KERNELS),
                   what_if=parse_what_if(o["what_if"], budget),
                   baseline=o["baseline"])


def _analyze(trace: Path, o: dict) -> Analysis:
    """Resolve the options of _analysis_options and analyze TRACE (progress on a terminal)."""
    from attrib.app import analyze_path

    opts = _options(o)
    with progress(f"analyzing {trace}"):
        return analyze_path(trace, opts, warn=_warn)


@cli.command()
@click.argument("trace", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", *TABLE_FORMATS]),
    default="table",
    show_default=True,
    help="csv/parquet: a folder (-o DIR) of one file per table and index.json; "
    "xlsx: one workbook (-o FILE.xlsx).",
)
@click.option("-v", "--verbose", is_flag=True, help="Findings' raw evidence and notes whole.")
@_analysis_options
def analyze(trace: Path, fmt: str, verbose: bool, **o) -> None:
    """Attribute TRACE offline: the verdict first, then steps, phases, components, bytes, roofline,
    top kernels and findings. The table fits the terminal (COLUMNS; 100 in a pipe).

    \b
    Example: attrib analyze trace.json.gz --model config.json -v"""
    from attrib.options import TOP_KERNELS
    from attrib.report import renderers
    from attrib.report.renderers import View
    from attrib.report.table import terminal_width

    r = renderers.by_name(fmt)
    if r.writes_bytes:
        return _tables(r, trace, o)
    check_output(o["output"], o["force"])
    an = _analyze(trace, o)
    terminal = o["output"] is None
    view = View(top=o["top"] or (5 if terminal else TOP_KERNELS),
                width=terminal_width() if terminal else None, verbose=verbose)
    _write(renderers.by_name(fmt).render(an, view), o["output"], o["force"])


def _tables(r: Renderer, trace: Path, o: dict) -> None:
    """Write the analysis' tables: a folder (csv, parquet) or one file (xlsx); -o is required."""
    from attrib.output import check_folder, write_folder

    out = o["output"]
    if out is None:
        raise UsageError(f"--format {r.name} writes files: give -o "
                         + ("FILE.xlsx" if r.binary is not None else "DIR (a new or empty folder)"))
    if r.folder is not None:
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
@click.option("--format", "fmt", type=click.Choice(["html", "md", "json", *TABLE_FORMATS]),
              help="Default: from the output's suffix. csv/parquet: a folder of tables (-o DIR).")
@_analysis_options
def report(trace: Path, fmt: str | None, **o) -> None:
    """The bottleneck report of TRACE: -o report.html (one self-contained file) or -o report.md (plots as SVG
    files beside it).

    \b
    Example: attrib report trace.json.gz -o report.html"""
    from attrib.report import plots as plots_mod
    from attrib.report import renderers
    from attrib.report.renderers import View

    out = o["output"]
    r = renderers.by_name(fmt) if fmt else renderers.by_suffix(out) if out else renderers.by_name("md")
    if r.writes_bytes:
        return _tables(r, trace, o)
    check_output(out, o["force"])
    if r.plots == "files" and out is not None and not o["force"]:
        for f in _plot_files(out):
            raise TraceError(f, "exists (a plot of an earlier report); pass --force to overwrite it")
    an = _analyze(trace, o)
    if r.plots is None:
        return _write(r.render(an, View()), out, o["force"])
    with progress("drawing plots"):
        plots = plots_mod.report_plots(an) if (out is not None or r.plots == "inline") else {}
    note = None if plots_mod.available() else plots_mod.MISSING
    if r.plots == "files" and out is None and plots_mod.available():
        note = "plots omitted on stdout: write the report to a file (-o report.md) to get them as SVG files beside it"
    if r.plots != "files" or out is None:
        return _write(r.render(an, View(plots=plots, plot_note=note)), out, o["force"])
    files, names = [], {}
    for name, svg in plots.items():
        path = out.with_name(f"{out.stem}.{re.sub(r'[^A-Za-z0-9_-]', '_', name)}.svg")
        files.append((path, svg.encode()))
        names[name] = path.name
    text = r.render(an, View(plots=names, plot_note=note))
    write_files([*files, (out, text.encode())], o["force"])


def _docs(traces: tuple[Path, ...], phase_map: dict[str, str], arch_name: str | None,
          arch_file: Path | None) -> list[Analysis]:
    from attrib.app import analyze_path, resolve_arch
    from attrib.options import Options

    arch, arch_from = resolve_arch(arch_name, arch_file)
    opts = Options(phase_map=phase_map, arch=arch, arch_from=arch_from, arch_file=arch_file)
    out = []
    for t in traces:
        with progress(f"analyzing {t}"):
            out.append(analyze_path(t, opts, warn=_warn))
    return out


def _printable(text: str) -> str:
    """A terminal table with every line safe to print (paths and stamp values come from files)."""
    return "".join(printable(line) + "\n" for line in text.splitlines())


def _dump(doc: dict) -> str:
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n"


def _file_options(f):
    """--arch-file, -o/--output and --force (compare, ranks)."""
    opts = [
        click.option("--arch-file", type=click.Path(path_type=Path, exists=True, dir_okay=False)),
        click.option(
            "-o",
            "--output",
            type=click.Path(path_type=Path),
            help="Write to FILE instead of stdout.",
        ),
        click.option("--force", is_flag=True, help="Overwrite FILE if it exists."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


@cli.command()
@click.argument("traces", nargs=-1, type=click.Path(path_type=Path))
@click.option("-b", "--base", "bases", multiple=True, type=click.Path(path_type=Path),
              help="A baseline trace (repeat for several runs of the baseline).")
@click.option("-c", "--cand", "cands", multiple=True, type=click.Path(path_type=Path),
              help="A candidate trace (repeat for several runs of the candidate).")
@click.option("--gate", type=click.FloatRange(0), metavar="PCT", help="Exit 1 when a phase's per-token time is "
              "significantly slower by more than PCT percent.")
@click.option("--min-effect", type=click.FloatRange(0), metavar="PCT",
              help="Smallest change (percent) called faster/slower (default: attrib.report.compare's "
                   "MIN_EFFECT_PCT, 3).")
@click.option("--allow-mismatch", is_flag=True, help="With --gate: gate even when the stamps say the two "
              "sides are not a matched baseline (else exit 3, not comparable).")
@click.option("--format", "fmt", type=click.Choice(COMPARE_FORMATS), default=None,
              help="Default: from the output's suffix, else table.")
@click.option("--phase-map", multiple=True, metavar="NAME=PHASE", help="Treat annotation NAME as PHASE (repeatable).")
@click.option("--arch", "arch_name", metavar="NAME", help="Measure both sides against this device.")
@_file_options
def compare(traces: tuple[Path, ...], bases: tuple[Path, ...], cands: tuple[Path, ...], gate: float | None,
            allow_mismatch: bool, min_effect: float | None, fmt: str | None, phase_map: tuple[str, ...],
            arch_name: str | None, arch_file: Path | None, output: Path | None, force: bool) -> int:
    """Before/after: attrib compare BASE CAND, or -b BASE1 -b BASE2 -c CAND1 -c CAND2 (runs of one stack):
    per phase and component, the change with statistics over steps and a verdict. With --gate: exit 1 on
    a regression, 3 when the stamps say the sides are not a matched baseline.

    \b
    Example: attrib compare before.json.gz after.json.gz --gate 5"""
    from attrib.app import baseline_findings
    from attrib.report import compare_render, renderers
    from attrib.report import plots as plots_mod
    from attrib.report.compare import MIN_EFFECT_PCT
    from attrib.report.compare import compare as compare_docs

    min_effect = MIN_EFFECT_PCT if min_effect is None else min_effect
    if traces and (bases or cands):
        raise UsageError("give BASE CAND as two arguments, or -b/--base and -c/--cand, not both")
    if traces:
        if len(traces) != 2:
            raise UsageError(f"compare takes two traces (BASE CAND), got {len(traces)}; use -b/-c for several per side")
        bases, cands = (traces[0],), (traces[1],)
    if not bases or not cands:
        raise UsageError("compare needs a baseline and a candidate: attrib compare BASE CAND")
    fmt = fmt or (renderers.by_suffix(output, "table").name if output else "table")
    if fmt not in compare_render.FORMATS:
        raise UsageError(f"compare writes {', '.join(compare_render.FORMATS)}, not {fmt}")
    check_output(output, force)
    pm = _phase_map(phase_map)
    base_docs, cand_docs = _docs(bases, pm, arch_name, arch_file), _docs(cands, pm, arch_name, arch_file)
    cmp = compare_docs([b.to_dict() for b in base_docs], [c.to_dict() for c in cand_docs],
                       min_effect_pct=min_effect, gate_pct=gate, allow_mismatch=allow_mismatch,
                       findings=tuple(baseline_findings(base_docs[0], cand_docs[0])))
    plots = plots_mod.compare_plots(cmp.phases) if fmt == "html" else {}
    if fmt == "table" and output is None:
        from attrib.report.table import terminal_width

        text = compare_render.render_table(cmp, terminal_width())
    else:
        text = compare_render.FORMATS[fmt](cmp, plots)
    _write(_printable(text) if fmt == "table" else text, output, force)
    if output is not None and fmt != "table" and cmp.gate:
        click.echo(compare_render.gate_lines(cmp)[-1])
    return cmp.gate.exit_code if cmp.gate else 0


@cli.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--phase", default="decode", show_default=True, help="The phase whose steps are fitted.")
@click.option("--format", "fmt", type=click.Choice(SLOPE_FORMATS), default=None,
              help="Default: from the output's suffix, else table.")
@click.option("--phase-map", multiple=True, metavar="NAME=PHASE", help="Treat annotation NAME as PHASE (repeatable).")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write to FILE instead of stdout.")
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
def slope(traces: tuple[Path, ...], phase: str, fmt: str | None, phase_map: tuple[str, ...],
          output: Path | None, force: bool) -> None:
    """Traces of one stack at different context lengths: per component, time per step against context
    (us per 1k context tokens, 95% CI) and where attention overtakes the weight-bound components.

    \b
    Example: attrib slope ctx1024.json.gz ctx4096.json.gz ctx16384.json.gz"""
    from attrib.report import plots as plots_mod
    from attrib.report import renderers, slope_render
    from attrib.report.slope import slope as slope_fit

    if len(traces) < 2:
        raise UsageError("slope needs traces at two or more context lengths (three or more to trust it)")
    fmt = fmt or (renderers.by_suffix(output, "table").name if output else "table")
    if fmt not in slope_render.FORMATS:
        raise UsageError(f"slope writes {', '.join(slope_render.FORMATS)}, not {fmt}")
    check_output(output, force)
    res = slope_fit([d.to_dict() for d in _docs(traces, _phase_map(phase_map), None, None)], phase)
    if not res.rows:
        raise UsageError(f"no {phase} steps with a known context in two or more traces: nothing to fit "
                         "(" + "; ".join(res.notes) + ")")
    text = slope_render.FORMATS[fmt](res, plots_mod.slope_plots(res) if fmt == "html" else {})
    _write(_printable(text) if fmt == "table" else text, output, force)


def _rank_traces(items: tuple[Path, ...]) -> list[Path]:
    """TRACES as given; a folder stands for its trace files (*.json, *.json.gz; stamps and
    .model.json sidecars left out)."""
    out: list[Path] = []
    for p in items:
        if not p.is_dir():
            out.append(p)
            continue
        found = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith((".json", ".json.gz"))
                       and not f.name.endswith((".attrib.json", ".model.json")))
        if not found:
            raise TraceError(p, "holds no trace files (*.json, *.json.gz)")
        out += found
    return out


@cli.command("ranks")
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "md"]),
    default=None,
    help="Default: from the output's suffix, else table.",
)
@click.option(
    "--link-gbs",
    type=click.FloatRange(min=0, min_open=True),
    metavar="GB/S",
    help="Interconnect bandwidth per direction (default: the device's, `attrib archs`).",
)
@click.option(
    "--phase-map",
    multiple=True,
    metavar="NAME=PHASE",
    help="Treat annotation NAME as PHASE (repeatable).",
)
@click.option("--arch", "arch_name", metavar="NAME", help="Take the link bandwidth of this device.")
@_file_options
def ranks_cmd(traces: tuple[Path, ...], fmt: str | None, link_gbs: float | None, phase_map: tuple[str, ...],
              arch_name: str | None, arch_file: Path | None, output: Path | None, force: bool) -> None:
    """The ranks of one run merged (a folder of per-rank traces, or the traces): step times side by
    side, the slowest rank, collectives split into wait, transfer and latency, step-start skew.

    \b
    Example: attrib ranks traces/tp2/"""
    from attrib.app import merge_ranks, resolve_arch
    from attrib.options import Options
    from attrib.report import ranks as ranks_render
    from attrib.report import renderers

    fmt = fmt or (renderers.by_suffix(output, "table").name if output else "table")
    check_output(output, force)
    arch, arch_from = resolve_arch(arch_name, arch_file)
    opts = Options(phase_map=_phase_map(phase_map), arch=arch, arch_from=arch_from, arch_file=arch_file)
    paths = _rank_traces(traces)
    with progress(f"analyzing {len(paths)} ranks"):
        doc = merge_ranks(paths, opts, link_gbs, warn=_warn)
    text = {"json": _dump, "md": ranks_render.render_markdown,
            "table": lambda d: _printable(ranks_render.render_table(d))}[fmt](doc)
    _write(text, output, force)


@cli.command()
@click.argument("folder", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--phase", default="decode", show_default=True, help="The phase followed over time.")
@click.option(
    "--window",
    type=click.IntRange(1),
    metavar="N",
    help="Each file is compared with this many files before it (default: "
    "attrib.report.trend's WINDOW, 3).",
)
@click.option(
    "--min-effect",
    type=click.FloatRange(0),
    metavar="PCT",
    help="Smallest change (percent) flagged (default: attrib.report.compare's MIN_EFFECT_PCT, 3).",
)
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@click.option(
    "--phase-map",
    multiple=True,
    metavar="NAME=PHASE",
    help="Treat annotation NAME as PHASE (repeatable).",
)
@click.option("--arch-file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option(
    "-o", "--output", type=click.Path(path_type=Path), help="Write to FILE instead of stdout."
)
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
def trend(
    folder: Path,
    phase: str,
    window: int | None,
    min_effect: float | None,
    fmt: str,
    phase_map: tuple[str, ...],
    arch_file: Path | None,
    output: Path | None,
    force: bool,
) -> None:
    """The rolling captures in FOLDER (collectors.capture(..., every=N)) over time: GB/token, tok/s and
    the top step-time cause per file, each compared with the files before it as `compare` does.

    \b
    Example: attrib trend traces/rolling/"""
    from attrib.report import trend as trend_mod
    from attrib.report.compare import MIN_EFFECT_PCT
    from collectors import traces_in

    window = trend_mod.WINDOW if window is None else window
    min_effect = MIN_EFFECT_PCT if min_effect is None else min_effect
    check_output(output, force)
    files = traces_in(folder)
    if not files:
        raise TraceError(folder, "holds no trace attrib can read")
    docs = [d.to_dict() for d in _docs(tuple(files), _phase_map(phase_map), None, arch_file)]
    doc = trend_mod.trend(docs, phase, window, min_effect)
    if not doc["rows"]:
        raise UsageError(f"{folder}: no {phase!r} phase in any of its {len(files)} traces")
    _write(_dump(doc) if fmt == "json" else _printable(trend_mod.render(doc)), output, force)


@cli.command()
@click.argument("trace", type=click.Path(path_type=Path))
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path),
              help="The annotated trace (.json or .json.gz) to open in the Perfetto UI.")
@click.option("--phase-map", multiple=True, metavar="NAME=PHASE", help="Treat annotation NAME as PHASE (repeatable).")
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
@click.option("--capture", type=click.Path(path_type=Path),
              help="The graph-capture trace of this replay trace: replayed kernels get their ops, shapes "
                   "and bytes.")
@click.option("--capture-batch", type=int, help="With --capture: the captured batch size to align with.")
@click.option("--model", type=click.Path(path_type=Path),
              help="HF config.json: bytes for kernels the trace has no shapes for.")
@click.option("--context", type=int, help="With --model: K/V positions each decode step reads.")
def export(trace: Path, output: Path, phase_map: tuple[str, ...], force: bool, capture: Path | None,
           capture_batch: int | None, model: Path | None, context: int | None) -> None:
    """TRACE with each kernel's component, phase, bytes and GB/s in its args and a track per component.

    \b
    Example: attrib export trace.json.gz -o annotated.json.gz"""
    from attrib.app import export_trace, model_budget
    from attrib.options import Options
    from attrib.report.export import PROCESS

    check_output(output, force)
    budget = model_budget(model, context=context)
    with progress(f"annotating {trace}"):
        opts = Options(phase_map=_phase_map(phase_map), capture=capture, capture_batch=capture_batch,
                       budget=budget)
        doc = export_trace(trace, opts)
        data = orjson.dumps(doc)
        if output.name.endswith(".gz"):
            data = gzip.compress(data, compresslevel=6)
    write_file(output, data, force)
    click.echo(f"wrote {output}: open it in https://ui.perfetto.dev (process '{PROCESS}': one track per component)")


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--rocprof", is_flag=True, required=True, expose_value=False,
              help="Run CMD under rocprofv3 (the capture this command does; torch capture is the Python API).")
@click.option("--hip-trace", is_flag=True, help="Also trace HIP API calls.")
@click.option("--memory-copy-trace", is_flag=True, help="Also trace memory copies.")
@click.option("--format", "fmt", type=click.Choice(["rocpd", "csv", "json"]), default="rocpd", show_default=True)
@click.option("-d", "--output-dir", "out_dir", type=click.Path(path_type=Path), default=Path("rocprof-out"),
              show_default=True)
@click.option("--rocprofv3", default="rocprofv3", show_default=True, help="Path to rocprofv3 (non-standard installs).")
@click.option("--analyze/--no-analyze", default=True, show_default=True, help="Analyze what was captured.")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def capture(hip_trace: bool, memory_copy_trace: bool, fmt: str, out_dir: Path, rocprofv3: str,
            analyze: bool, cmd: tuple[str, ...]) -> None:
    """Run CMD under rocprofv3 and analyze its trace.

    \b
    Example: attrib capture --rocprof -- llama-bench -m model.gguf -n 32"""
    from attrib.app import analyze_path
    from attrib.report.table import render, terminal_width
    from collectors.rocprof.run import run

    res = run(list(cmd), out_dir, hip_trace=hip_trace, memory_copy_trace=memory_copy_trace, fmt=fmt,
              rocprofv3=rocprofv3)
    if res.warning:
        click.echo(f"attrib: warning: {res.warning}", err=True)
    for path in res.traces:
        click.echo(f"captured: {path}")
        if analyze:
            click.echo(render(analyze_path(path, warn=_warn), width=terminal_width()))


@cli.command()
@click.option("--arch-file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--template", "show_template", is_flag=True, help="Print an entry to fill in for a device not in "
              "the database (pass it back with --arch-file).")
@click.option("--trace", "trace_path", type=click.Path(path_type=Path), help="With --template: prefill it from "
              "the device this trace recorded.")
def archs(arch_file: Path | None, show_template: bool, trace_path: Path | None) -> None:
    """List the device database: bandwidth (peak, sustained), peak matrix TFLOP/s.

    \b
    Example: attrib archs --template --trace trace.json.gz > mygpu.toml"""
    from attrib.roofline.arch import arch_table
    from attrib.roofline.template import template
    from collectors import load

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


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise click.BadParameter(
            f"expected MiB figures like 1024,2048, got {text!r}", param_hint="--sizes"
        ) from None
    if not sizes or min(sizes) < 1:
        raise click.BadParameter(f"sizes must be positive MiB figures, got {text!r}", param_hint="--sizes")
    return sizes


@cli.command()
@click.option(
    "--device",
    default="cuda",
    show_default=True,
    help="cuda or cuda:N (ROCm builds too); cpu: a dry run of the same code on host memory.",
)
@click.option(
    "--sizes",
    metavar="MIB,...",
    help="Buffer sizes, well above the last-level cache (small "
    "ones only for a dry run; default: collectors.calibrate's SIZES_MIB, 1024,2048,4096).",
)
@click.option(
    "--matmul-n",
    type=click.IntRange(16),
    help="Square matmul size per dtype (default: collectors.calibrate's MATMUL_N).",
)
@click.option(
    "--reps",
    type=click.IntRange(1),
    help="Timed repetitions per measurement, the median kept (default: collectors.calibrate's REPS).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["toml", "json"]),
    default="toml",
    show_default=True,
    help="toml: the --arch-file entry; json: every measured figure and the entry.",
)
@click.option(
    "-o", "--output", type=click.Path(path_type=Path), help="Write to FILE instead of stdout."
)
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
def calibrate(
    device: str,
    sizes: str | None,
    matmul_n: int | None,
    reps: int | None,
    fmt: str,
    output: Path | None,
    force: bool,
) -> None:
    """Measure this GPU with torch (read/write/copy GB/s, matrix TFLOP/s per dtype) and write an
    --arch-file entry whose sustained roof `analyze --arch-file` uses.

    \b
    Example: attrib calibrate -o my_gpu.toml"""
    from attrib.report.progress import bar
    from attrib.roofline.calibrated import entry as calibrated_entry
    from collectors import calibrate as calib
    from collectors import measure_device

    check_output(output, force)
    mib = _sizes(sizes) if sizes is not None else calib.SIZES_MIB
    matmul_n = calib.MATMUL_N if matmul_n is None else matmul_n
    reps = calib.REPS if reps is None else reps
    with bar(f"calibrating {device}", calib.steps(mib)) as tick:
        cal = measure_device(device, sizes_mib=mib, matmul_n=matmul_n, reps=reps, tick=tick).to_dict()
    key, toml = calibrated_entry(cal)
    bw, tf = cal["bandwidth_gbs"], cal["matrix_tflops"]
    doc = {"schema": "attrib.calibration/1", **cal, "entry_key": key, "entry": toml}
    _write(toml if fmt == "toml" else _dump(doc), output, force)
    where = f"; wrote {output}" if output is not None else ""
    click.echo(printable(f"attrib: {cal['device']['name']}: " + ", ".join(f"{k} {v:g}" for k, v in bw.items())
                         + " GB/s; " + ", ".join(f"{k} {v:g}" for k, v in tf.items())
                         + f" TFLOP/s (entry [{key}]{where})"), err=True)


SWEEP_FORMATS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".md": "md", ".html": "html"}


@cli.command()
@click.argument("traces", nargs=-1, type=click.Path(path_type=Path))
@click.option("-j", "--jobs", type=click.IntRange(1), help="Worker processes (default: the CPUs).")
@click.option(
    "--ray",
    "ray_address",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[ADDRESS]",
    help="Run the analyses as Ray tasks on the cluster at ADDRESS (else RAY_ADDRESS, else a "
    "local Ray); needs the `ray` extra.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "md", "html", "csv", "parquet"]),
    help="Default: from the output's suffix, else table.",
)
@click.option(
    "--phase-map",
    multiple=True,
    metavar="NAME=PHASE",
    help="Treat annotation NAME as PHASE (repeatable).",
)
@click.option(
    "--arch", "arch_name", metavar="NAME", help="Measure every trace against this device."
)
@click.option("--arch-file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="table.parquet|.csv (the table), report.md|.html (with plots), or .json.",
)
@click.option("--force", is_flag=True, help="Overwrite FILE (and a report's plots) if they exist.")
def sweep(traces: tuple[Path, ...], jobs: int | None, ray_address: str | None, fmt: str | None,
          phase_map: tuple[str, ...], arch_name: str | None, arch_file: Path | None,
          output: Path | None, force: bool) -> int:
    """Analyse many traces (files, folders of traces) in parallel into one table: a row per trace
    and phase, the capture stamp's keys, tok/s achieved and ceiling, GB/token, step ms, the top
    ledger cause; and which configuration wins each workload shape's prefill and decode.

    \b
    Example: attrib sweep traces/grid/ -j 2 -o grid.parquet"""
    from attrib.report.progress import bar
    from attrib.sweep import Spec, run, traces as sweep_traces

    if not traces and not (ray_address and Path(ray_address).exists()):
        raise UsageError("sweep needs one or more traces (files or folders of traces)")
    if ray_address and ":" not in ray_address and Path(ray_address).exists():
        raise UsageError(f"--ray took {ray_address!r} as the Ray address: put --ray after the "
                         "traces, or give --ray=ADDRESS")
    fmt = fmt or (SWEEP_FORMATS.get(output.suffix.lower()) if output is not None else "table")
    if fmt is None:
        raise UsageError(f"{output}: give the table as .parquet or .csv, a report as .md or .html, "
                         "or the rows as .json")
    if fmt == "parquet" and output is None:
        raise UsageError("--format parquet writes a file: give -o table.parquet")
    check_output(output, force)
    spec = Spec(tuple(_phase_map(phase_map).items()), arch_name,
                str(arch_file) if arch_file is not None else None)
    spec.options()  # a bad --arch or --arch-file fails here, once, before any trace
    paths = sweep_traces(traces)
    with bar("sweep", len(paths)) as done:
        res = run(paths, spec, jobs=jobs, ray_address=ray_address or None,
                  use_ray=ray_address is not None, done=done)
    for w in res.warnings:
        click.echo(printable(f"attrib: warning: {w}"), err=True)
    for r in res.failed:
        click.echo(printable(f"attrib: skipped: {r.error}"), err=True)
    if not res.table.height:
        raise UsageError(f"no trace of the {len(paths)} could be analysed")
    _sweep_write(res.table, fmt, output, force)
    return 0


def _sweep_write(table: Any, fmt: str, out: Path | None, force: bool) -> None:
    """The sweep table in format FMT on stdout or as OUT (a markdown report's plots beside it)."""
    import io

    from attrib.report import plots as plots_mod
    from attrib.report import sweep_render
    from attrib.report.sweep import document

    if fmt == "parquet":
        buf = io.BytesIO()
        table.write_parquet(buf)
        return write_file(out, buf.getvalue(), force) if out is not None else None
    text = {"csv": lambda: table.write_csv(), "json": lambda: _dump(document(table)),
            "table": lambda: sweep_render.render_table(table)}.get(fmt)
    if text is not None:
        return _write(text(), out, force)
    note = None if plots_mod.available() else plots_mod.MISSING
    with progress("drawing plots"):
        svgs = sweep_render.plots(table) if out is not None or fmt == "html" else {}
    if fmt == "html":
        return _write(sweep_render.render_html(table, svgs, note), out, force)
    if out is None:
        note = note or "plots omitted on stdout: write the report to a file (-o sweep.md)"
        return _write(sweep_render.render_markdown(table, None, note), None, force)
    files = [(out.with_name(f"{out.stem}.{name}.svg"), svg.encode()) for name, svg in svgs.items()]
    names = {name: path.name for (name, _), (path, _) in zip(svgs.items(), files)}
    write_files([*files, (out, sweep_render.render_markdown(table, names, note).encode())], force)


@cli.command("rules")
@click.option("--arch", "arch_name", metavar="NAME", help="Only the rules that apply to this arch (e.g. gfx1151).")
def rules_cmd(arch_name: str | None) -> None:
    """List the pathology rules: id, archs, what each needs from a trace, references.

    \b
    Example: attrib rules --arch gfx1151"""
    from attrib.app import catalog

    for r in catalog(arch_name):
        click.echo(f"{r['id']}  [archs: {r['archs']}]\n    needs: {r['needs']}")
        for ref in r["references"]:
            click.echo(f"    {ref}")


class Signalled(BaseException):
    """SIGTERM or SIGHUP, raised in the main thread as Ctrl-C is, so every cleanup runs (temporary
    copies of inputs, half-written outputs); not an Exception, so no `except Exception` swallows it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


# exit statuses: 0 done, 1 a --gate failed, 2 bad input or usage, 3 compare: not comparable,
# 70 an internal error (sysexits' EX_SOFTWARE), 128+N a signal
INTERNAL_ERROR = 70


def _raise_signal(signum: int, frame: object) -> None:
    raise Signalled(signum)


def _on_signals() -> dict[signal.Signals, Any]:
    """Raise Signalled on SIGTERM/SIGHUP where they would kill (left alone under nohup or a parent's
    own handler); the handlers replaced, to restore."""
    old: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None and signal.getsignal(sig) is signal.SIG_DFL:
            try:
                old[sig] = signal.signal(sig, _raise_signal)
            except ValueError:  # not the main thread: leave signals to the host program
                break
    return old


def main(argv: list[str] | None = None) -> int:
    """Console entry point: bad input is one line on stderr and exit code 2, never a traceback."""
    old = _on_signals()
    try:
        return _main(argv)
    except Signalled as exc:
        click.echo(f"attrib: stopped by {signal.Signals(exc.signum).name}; nothing was left half-written",
                   err=True)
        return 128 + exc.signum
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _main(argv: list[str] | None) -> int:
    try:
        rv = cli.main(args=argv, prog_name="attrib", standalone_mode=False)
    except (TraceError, UsageError) as exc:
        click.echo(printable(f"attrib: error: {exc}"), err=True)
        return 2
    except click.exceptions.Abort:
        click.echo("attrib: aborted", err=True)
        return 130
    except click.UsageError as exc:  # a bad argument or path: one line, not click's usage text
        click.echo(printable(f"attrib: error: {exc.format_message()}"), err=True)
        return 2
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except MemoryError:  # input larger than this machine (or its memory limit) allows: a fact, not a bug
        click.echo("attrib: error: out of memory: the input needs more memory than this process may use", err=True)
        return 2
    except Exception as exc:  # a bug, not bad input: still one line unless asked for the traceback
        if os.environ.get("ATTRIB_DEBUG"):
            raise
        click.echo(printable(f"attrib: internal error: {type(exc).__name__}: {exc} (set ATTRIB_DEBUG=1 for a "
                             "traceback)"), err=True)
        return INTERNAL_ERROR
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
