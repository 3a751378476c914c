"""The commands over several traces: compare, ladder, slope, ranks, trend, sweep."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from attrib.errors import TraceError, UsageError
from attrib.output import protect, refuse_input, write_file, write_files
from attrib.report.formats import (COMPARE_FORMATS, LADDER_FORMATS, RANKS_FORMATS, SLOPE_FORMATS,
                                   SWEEP_FORMATS, TREND_FORMATS)
from attrib.report.printable import printable
from attrib.report.progress import progress

from attrib.cli import numbers, options
from attrib.cli.common import analyses, check_output, cli, dump, printable_lines, warn, write
from attrib.cli.options import parse_phase_map

if TYPE_CHECKING:
    from attrib.analysis.model import Analysis


@cli.command()
@click.argument("traces", nargs=-1, type=click.Path(path_type=Path))
@click.option("-b", "--base", "bases", multiple=True, type=click.Path(path_type=Path),
              help="A baseline trace (repeat for several runs of the baseline).")
@click.option("-c", "--cand", "cands", multiple=True, type=click.Path(path_type=Path),
              help="A candidate trace (repeat for several runs of the candidate).")
@click.option("--gate", type=numbers.PERCENT, metavar="PCT",
              help="Exit 1 when a phase's per-token time is significantly slower by more than PCT "
                   "percent.")
@options.min_effect()
@click.option("--allow-mismatch", is_flag=True,
              help="With --gate: gate even when the stamps say the two sides are not "
                   "a matched baseline (else exit 3, not comparable).")
@options.formats(COMPARE_FORMATS)
@options.phase_map()
@options.arch()
@options.baseline()
@options.output()
def compare(traces: tuple[Path, ...], bases: tuple[Path, ...], cands: tuple[Path, ...],
            gate: float | None, allow_mismatch: bool, min_effect: float | None,
            fmt: str | None, phase_map: tuple[str, ...], arch_name: str | None,
            baseline: Path | None, arch_file: Path | None, output: Path | None,
            force: bool) -> int:
    """Before/after: attrib compare BASE CAND, or -b BASE1 -b BASE2 -c CAND1 -c CAND2 (runs of
    one stack): per phase and component, the change with statistics over steps and a verdict.
    With --gate: exit 1 on a regression, 3 when the stamps say the sides are not a matched
    baseline.

    \b
    Example: attrib compare before.json.gz after.json.gz --gate 5"""
    from attrib.app import baseline_findings
    from attrib.report import compare_render
    from attrib.report import plots as plots_mod
    from attrib.multi.compare import MIN_EFFECT_PCT
    from attrib.multi.compare import compare as compare_docs

    min_effect = MIN_EFFECT_PCT if min_effect is None else min_effect
    if traces and (bases or cands):
        raise UsageError("give BASE CAND as two arguments, or -b/--base and -c/--cand, not both")
    if traces:
        if len(traces) != 2:
            raise UsageError(f"compare takes two traces (BASE CAND), got {len(traces)}; "
                             "use -b/-c for several per side")
        bases, cands = (traces[0],), (traces[1],)
    if not bases or not cands:
        raise UsageError("compare needs a baseline and a candidate: attrib compare BASE CAND")
    fmt = options.chosen_format(fmt, output, COMPARE_FORMATS)
    check_output(output, force)
    pm = parse_phase_map(phase_map)
    base_docs = analyses(bases, pm, arch_name, arch_file, baseline)
    cand_docs = analyses(cands, pm, arch_name, arch_file, baseline)
    cmp = compare_docs(base_docs, cand_docs, min_effect_pct=min_effect, gate_pct=gate,
                       allow_mismatch=allow_mismatch,
                       findings=tuple(baseline_findings(base_docs[0], cand_docs[0])))
    plots = plots_mod.compare_plots(cmp.phases) if fmt == "html" else {}
    if fmt == "table" and output is None:
        from attrib.report.table import terminal_width

        text = compare_render.render_table(cmp, terminal_width())
    else:
        text = compare_render.FORMATS[fmt](cmp, plots)
    write(printable_lines(text) if fmt == "table" else text, output, force)
    if output is not None and fmt != "table" and cmp.gate:
        click.echo(compare_render.gate_lines(cmp)[-1])
    return cmp.gate.exit_code if cmp.gate else 0


GLOB = "*?["  # a RUN with one of these that names no file is a pattern (quoted in the shell)


def _runs_of(run: Path) -> list[Path]:
    """The trace files of one RUN: a file, a folder's traces, or a pattern's matches."""
    import glob

    from collectors import traces_in

    if run.is_dir():
        found = traces_in(run)
    elif run.exists() or not any(c in str(run) for c in GLOB):
        return [run]
    else:
        found = sorted(Path(x) for x in glob.glob(str(run)))
    if not found:
        raise TraceError(run, "names no trace attrib can read")
    return found


def _step_name(run: Path, docs: list[Analysis]) -> str:
    """A step's name: the stamp's extra step or note, else the folder's or file's name."""
    extra = docs[0].provenance.get("extra") or {}
    for key in ("step", "note"):
        if isinstance(extra.get(key), str) and extra[key].strip():
            return extra[key].strip()
    name = run.name
    return name.split(".pt.trace")[0].split(".json")[0] or str(run)


@cli.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@options.min_effect()
@options.formats(LADDER_FORMATS)
@options.phase_map()
@options.arch()
@options.output()
def ladder(runs: tuple[Path, ...], min_effect: float | None, fmt: str | None,
           phase_map: tuple[str, ...], arch_name: str | None, arch_file: Path | None,
           output: Path | None, force: bool) -> None:
    """A tuning campaign in one view: each RUN (a trace, a folder of repeated runs of one step,
    or a quoted glob of them) against the last promoted step, its multiplier of decode tok/s with
    a CI, promoted or not (faster beyond noise, outputs identical, matched baseline), the ledger
    rows that moved, and the cumulative multiplier.

    \b
    Example: attrib ladder runs/0-eager runs/1-sdpa runs/2-graphs -o ladder.html"""
    from attrib.multi import ladder as ladder_mod
    from attrib.report import ladder_render
    from attrib.multi.compare import MIN_EFFECT_PCT

    fmt = options.chosen_format(fmt, output, LADDER_FORMATS)
    check_output(output, force)
    files = [_runs_of(run) for run in runs]
    if output is not None:  # a pattern's matches are inputs too
        every = [f for fs in files for f in fs]
        protect(every)
        refuse_input(output, every)
    pm = parse_phase_map(phase_map)
    steps = []
    for run, fs in zip(runs, files):
        docs = analyses(tuple(fs), pm, arch_name, arch_file)
        steps.append((_step_name(run, docs), docs))
    lad = ladder_mod.ladder(steps, MIN_EFFECT_PCT if min_effect is None else min_effect)
    if fmt == "table":
        text = printable_lines(ladder_render.render_table(lad, _width(output)))
    else:
        text = ladder_render.FORMATS[fmt](lad)
    write(text, output, force)


@cli.command()
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@options.phase("decode")
@options.formats(SLOPE_FORMATS)
@options.phase_map()
@options.output()
def slope(traces: tuple[Path, ...], phase: str, fmt: str | None, phase_map: tuple[str, ...],
          output: Path | None, force: bool) -> None:
    """Traces of one stack at different context lengths: per component (of --phase), time per
    step against context (us per 1k context tokens, 95% CI) and where attention overtakes the
    weight-bound components.

    \b
    Example: attrib slope ctx1024.json.gz ctx4096.json.gz ctx16384.json.gz"""
    from attrib.report import plots as plots_mod
    from attrib.report import slope_render
    from attrib.multi.slope import slope as slope_fit

    if len(traces) < 2:
        raise UsageError("slope needs traces at two or more context lengths "
                         "(three or more to trust it)")
    fmt = options.chosen_format(fmt, output, SLOPE_FORMATS)
    check_output(output, force)
    docs = analyses(traces, parse_phase_map(phase_map), None, None)
    res = slope_fit(docs, phase)
    if not res.rows:
        raise UsageError(f"no {phase} steps with a known context in two or more traces: "
                         "nothing to fit (" + "; ".join(res.notes) + ")")
    if fmt == "table":
        text = slope_render.render_table(res, _width(output))
    else:
        text = slope_render.FORMATS[fmt](res, plots_mod.slope_plots(res) if fmt == "html" else {})
    write(printable_lines(text) if fmt == "table" else text, output, force)


def _rank_traces(items: tuple[Path, ...]) -> list[Path]:
    """TRACES as given; a folder stands for its trace files (*.json, *.json.gz; stamps and
    .model.json sidecars left out)."""
    out: list[Path] = []
    for p in items:
        if not p.is_dir():
            out.append(p)
            continue
        sidecar = (".attrib.json", ".model.json")
        found = sorted(f for f in p.iterdir() if f.is_file()
                       and f.name.endswith((".json", ".json.gz")) and not f.name.endswith(sidecar))
        if not found:
            raise TraceError(p, "holds no trace files (*.json, *.json.gz)")
        for f in sorted(set(p.iterdir()) - set(found)):
            if not f.name.endswith(sidecar):
                warn(f, "not used: a rank is a torch-profiler trace (*.json, *.json.gz)")
        out += found
    return out


@cli.command("ranks")
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@options.formats(RANKS_FORMATS)
@click.option(
    "--link-gbs",
    type=numbers.LINK_GBS,
    metavar="GB/S",
    help="Interconnect bandwidth per direction (default: the device's, `attrib archs`).",
)
@options.phase_map()
@options.arch()
@options.output()
def ranks_cmd(traces: tuple[Path, ...], fmt: str | None, link_gbs: float | None,
              phase_map: tuple[str, ...], arch_name: str | None, arch_file: Path | None,
              output: Path | None, force: bool) -> None:
    """The ranks of one run merged (a folder of per-rank traces, or the traces): step times side by
    side, the slowest rank, collectives split into wait, transfer and latency, step-start skew.

    \b
    Example: attrib ranks traces/tp2/"""
    from attrib.app import merge_ranks, resolve_arch
    from attrib.options import Options
    from attrib.report import ranks as ranks_render

    fmt = options.chosen_format(fmt, output, RANKS_FORMATS)
    check_output(output, force)
    arch, arch_from = resolve_arch(arch_name, arch_file)
    opts = Options(phase_map=parse_phase_map(phase_map), arch=arch, arch_from=arch_from,
                   arch_file=arch_file)
    paths = _rank_traces(traces)
    with progress(f"analyzing {len(paths)} ranks"):
        doc = merge_ranks(paths, opts, link_gbs, warn=warn)
    text = {"json": dump, "md": ranks_render.render_markdown, "html": ranks_render.render_html,
            "table": lambda d: printable_lines(ranks_render.render_table(d, _width(output)))
            }[fmt](doc)
    write(text, output, force)


@cli.command()
@click.argument("folder", type=click.Path(path_type=Path, exists=True, file_okay=False))
@options.phase("decode")
@click.option(
    "--window",
    type=numbers.WINDOW,
    metavar="N",
    help="Each file is compared with this many files before it (default: "
    "attrib.multi.trend's WINDOW, 3).",
)
@options.min_effect()
@options.formats(TREND_FORMATS)
@options.phase_map()
@options.arch()
@options.output()
def trend(
    folder: Path,
    phase: str,
    window: int | None,
    min_effect: float | None,
    fmt: str | None,
    phase_map: tuple[str, ...],
    arch_name: str | None,
    arch_file: Path | None,
    output: Path | None,
    force: bool,
) -> None:
    """The rolling captures in FOLDER (collectors.capture(..., every=N)) over time: GB/token,
    tok/s and the top step-time cause of --phase per file, each compared with the files before
    it as `compare` does.

    \b
    Example: attrib trend traces/rolling/"""
    from attrib.multi import trend as trend_mod
    from attrib.report import trend_render
    from attrib.multi.compare import MIN_EFFECT_PCT
    from collectors import traces_in

    window = trend_mod.WINDOW if window is None else window
    min_effect = MIN_EFFECT_PCT if min_effect is None else min_effect
    fmt = options.chosen_format(fmt, output, TREND_FORMATS)
    check_output(output, force)
    files = traces_in(folder)
    if not files:
        raise TraceError(folder, "holds no trace attrib can read")
    analysed = analyses(tuple(files), parse_phase_map(phase_map), arch_name, arch_file)
    doc = trend_mod.trend(analysed, phase, window, min_effect)
    if not doc["rows"]:
        raise UsageError(f"{folder}: no {phase!r} phase in any of its {len(files)} traces")
    text = (dump(doc) if fmt == "json" else trend_render.render_html(doc) if fmt == "html"
            else printable_lines(trend_render.render(doc, _width(output))))
    write(text, output, force)




@cli.command()
@click.argument("traces", nargs=-1, type=click.Path(path_type=Path))
@click.option("-j", "--jobs", type=numbers.JOBS, help="Worker processes (default: the CPUs).")
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
@options.formats(SWEEP_FORMATS)
@options.phase_map()
@options.arch()
@options.output()
def sweep(traces: tuple[Path, ...], jobs: int | None, ray_address: str | None, fmt: str | None,
          phase_map: tuple[str, ...], arch_name: str | None, arch_file: Path | None,
          output: Path | None, force: bool) -> int:
    """Analyse many traces (files, folders of traces) in parallel into one table: a row per trace
    and phase, the capture stamp's keys, tok/s achieved and ceiling, GB/token, step ms, the top
    ledger cause; and which configuration wins each workload shape's prefill and decode. -o
    table.parquet|.csv writes the table, report.md|.html a report (with plots), rows.json the rows.

    \b
    Example: attrib sweep traces/grid/ -j 2 -o grid.parquet"""
    from attrib.report.progress import bar
    from attrib.sweep import Spec, run, traces as sweep_traces

    if not traces and not (ray_address and Path(ray_address).exists()):
        raise UsageError("sweep needs one or more traces (files or folders of traces)")
    if ray_address and ":" not in ray_address and Path(ray_address).exists():
        raise UsageError(f"--ray took {ray_address!r} as the Ray address: put --ray after the "
                         "traces, or give --ray=ADDRESS")
    fmt = options.chosen_format(fmt, output, SWEEP_FORMATS)
    if fmt == "parquet" and output is None:
        raise UsageError("--format parquet writes a file: give -o table.parquet")
    check_output(output, force)
    spec = Spec(tuple(parse_phase_map(phase_map).items()), arch_name,
                str(arch_file) if arch_file is not None else None)
    spec.options()  # a bad --arch or --arch-file fails here, once, before any trace
    skipped: list[tuple[Path, str]] = []
    paths = sweep_traces(traces, skipped)
    for path, why in skipped:
        click.echo(printable(f"attrib: skipped: {path}: {why}"), err=True)
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


def _width(out: Path | None) -> int | None:
    """The terminal's width for a table on stdout (None in a file: nothing cut)."""
    from attrib.report.table import terminal_width

    return terminal_width() if out is None else None


def _sweep_write(table: Any, fmt: str, out: Path | None, force: bool) -> None:
    """The sweep table in format FMT on stdout or as OUT (a markdown report's plots beside it)."""
    import io

    from attrib.report import plots as plots_mod
    from attrib.report import sweep_render
    from attrib.multi.sweep import document

    if fmt == "parquet":
        buf = io.BytesIO()
        table.write_parquet(buf)
        return write_file(out, buf.getvalue(), force) if out is not None else None
    text = {"csv": lambda: table.write_csv(), "json": lambda: dump(document(table)),
            "table": lambda: sweep_render.render_table(table, _width(out))}.get(fmt)
    if text is not None:
        return write(text(), out, force)
    note = None if plots_mod.available() else plots_mod.MISSING
    with progress("drawing plots"):
        svgs = sweep_render.plots(table) if out is not None or fmt == "html" else {}
    if fmt == "html":
        return write(sweep_render.render_html(table, svgs, note), out, force)
    if out is None:
        note = note or "plots omitted on stdout: write the report to a file (-o sweep.md)"
        return write(sweep_render.render_markdown(table, None, note), None, force)
    files = [(out.with_name(f"{out.stem}.{name}.svg"), svg.encode()) for name, svg in svgs.items()]
    names = {name: path.name for (name, _), (path, _) in zip(svgs.items(), files)}
    write_files([*files, (out, sweep_render.render_markdown(table, names, note).encode())], force)


