"""The commands about the device and the catalog: capture, archs, calibrate, rules."""

from __future__ import annotations

import signal
from pathlib import Path

import click

from attrib.report.printable import printable

from attrib.cli import numbers, options
from attrib.cli.common import check_output, cli, dump, warn, write
from attrib.report.formats import CALIBRATE_FORMATS


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--rocprof", is_flag=True, required=True, expose_value=False,
              help="Run CMD under rocprofv3 (the capture this command does; torch capture is "
                   "the Python API).")
@click.option("--hip-trace", is_flag=True, help="Also trace HIP API calls.")
@click.option("--memory-copy-trace", is_flag=True, help="Also trace memory copies.")
@click.option("--format", "fmt", type=click.Choice(["rocpd", "csv", "json"]), default="rocpd",
              show_default=True, help="What rocprofv3 writes (its --output-format; not "
                                      "attrib's --format): attrib reads each.")
@click.option("-d", "--output-dir", "out_dir", type=click.Path(path_type=Path),
              default=Path("rocprof-out"), show_default=True,
              help="The folder rocprofv3 writes its traces into.")
@click.option("--rocprofv3", default="rocprofv3", show_default=True,
              help="Path to rocprofv3 (non-standard installs).")
@click.option("--analyze/--no-analyze", default=True, show_default=True,
              help="Analyze what was captured.")
@click.option("--outputs", "outputs_file", type=click.Path(path_type=Path),
              help="A file CMD writes with the token ids it generated (JSON, or one request per "
                   "line): their digest goes in each trace's stamp (correctness_gate), which "
                   "compare and ladder check.")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def capture(hip_trace: bool, memory_copy_trace: bool, fmt: str, out_dir: Path, rocprofv3: str,
            analyze: bool, outputs_file: Path | None, cmd: tuple[str, ...]) -> None:
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
    gate = None
    if outputs_file is not None:
        from collectors import outputs

        gate = outputs.digest(outputs.from_file(outputs_file))
    for path in res.traces:
        click.echo(f"captured: {path}")
        if gate is not None:
            outputs.stamp(path, gate)
            click.echo(f"outputs: {gate['tokens']} tokens, sha256 {gate['outputs_sha256'][:12]} "
                       f"in {path.name}'s stamp")
        if analyze:
            click.echo(render(analyze_path(path, warn=warn), width=terminal_width()))


@cli.command()
@options.arch()
@click.option("--template", "show_template", is_flag=True,
              help="Print an entry to fill in for a device not in the database (pass it back "
                   "with --arch-file).")
@click.option("--trace", "trace_path", type=click.Path(path_type=Path),
              help="With --template: prefill it from the device this trace recorded.")
def archs(arch_name: str | None, arch_file: Path | None, show_template: bool,
          trace_path: Path | None) -> None:
    """List the device database: bandwidth (peak, sustained), peak matrix TFLOP/s (with --arch,
    only the entry its NAME resolves to).

    \b
    Example: attrib archs --template --trace trace.json.gz > mygpu.toml"""
    from attrib.roofline.arch import arch_table, override
    from attrib.roofline.template import template
    from collectors import load

    if show_template:
        devices = load(trace_path).meta.devices if trace_path is not None else ()
        click.echo(template(devices[0] if devices else None), nl=False)
        return
    t = arch_table(arch_file)
    if arch_name is not None:
        t = t.filter(t["key"] == override(arch_name, arch_file).key)
    from attrib.report.table import Cut, grid, terminal_width, wrap

    def f(x: object, fmt: str = "{:g}") -> str:
        return "-" if x is None else fmt.format(x)
    rows = [(r["key"], r["arch"], f(r["cus"]), f(r["peak_bw_gbs"]), f(r["sustained_bw_gbs"]),
             f(r["bf16_tflops"]), f(r["fp8_tflops"]),
             r["name"] + (f" {USER_MARK}" if r["user"] else ""))
            for r in t.iter_rows(named=True)]
    width, cut = terminal_width(), Cut()
    lines = grid(ARCHS_HEAD, rows, width, ARCHS_DROP, "name", "", sentence=True, cut=cut,
                 left=("arch",), min_flex=32)
    if arch_file is not None:  # the file whole, on its own line (a name cell may be cut)
        lines.append(f"{USER_MARK}: {arch_file}")
    lines += wrap("derived and unverified figures are listed per entry in attrib/data/archs.toml",
                  width)
    for line in lines + cut.footer(width):
        click.echo(printable(line))


USER_MARK = "[--arch-file]"  # an entry of the user's --arch-file
ARCHS_HEAD = ("key", "arch", "CUs", "peak GB/s", "sust. GB/s", "bf16 TF", "fp8 TF", "name")
ARCHS_DROP = ("CUs", "fp8 TF", "arch")  # then the name is cut at its end


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise click.BadParameter(
            f"expected MiB figures like 1024,2048, got {text!r}", param_hint="--sizes"
        ) from None
    if not sizes or min(sizes) < 1:
        raise click.BadParameter(f"sizes must be positive MiB figures, got {text!r}",
                                 param_hint="--sizes")
    return sizes


def _dtypes(text: str) -> tuple[str, ...]:
    from collectors.calibrate import DTYPES

    got = tuple(x.strip().lower() for x in text.split(",") if x.strip())
    bad = [x for x in got if x not in DTYPES]
    if bad or not got:
        raise click.BadParameter(f"expected some of {','.join(DTYPES)}, got {text!r}",
                                 param_hint="--dtypes")
    return got


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
    help="Buffer sizes, well above the last-level cache (default 1024,2048,4096; "
    "with --device cpu 64,128).",
)
@click.option(
    "--matmul-n",
    type=numbers.MATMUL_N,
    help="Square matmul size per dtype (default 8192; with --device cpu 512).",
)
@click.option(
    "--reps",
    type=numbers.REPS,
    help="Timed repetitions per measurement, the median kept (default 20; with --device cpu 5).",
)
@click.option(
    "--dtypes",
    metavar="DTYPE,...",
    help="Matmul dtypes to measure, of fp16,bf16,fp32,tf32,fp8 (default all; with --device cpu "
    "fp32: CPU fp16 matmuls are 100x slower).",
)
@options.formats(CALIBRATE_FORMATS)
@options.output()
def calibrate(
    device: str,
    sizes: str | None,
    matmul_n: int | None,
    reps: int | None,
    dtypes: str | None,
    fmt: str | None,
    output: Path | None,
    force: bool,
) -> None:
    """Measure this GPU with torch (read/write/copy GB/s, matrix TFLOP/s per dtype) and write an
    --arch-file entry whose sustained roof `analyze --arch-file` uses (toml; json: every measured
    figure and the entry). `--device cpu` is a quick dry run on the host (seconds). Progress goes
    to stderr (a bar on a terminal, a line per measurement otherwise); SIGTERM or Ctrl-C stops it
    within a second, writing nothing (exit 143 or 130).

    \b
    Example: attrib calibrate -o my_gpu.toml"""
    from attrib.report.progress import bar
    from attrib.roofline.calibrated import entry as calibrated_entry
    from collectors import calibrate as calib

    fmt = options.chosen_format(fmt, output, CALIBRATE_FORMATS)
    check_output(output, force)
    cpu = device.strip().lower() == "cpu"
    mib = _sizes(sizes) if sizes is not None else calib.CPU_SIZES_MIB if cpu else calib.SIZES_MIB
    kinds = _dtypes(dtypes) if dtypes is not None else calib.CPU_DTYPES if cpu else calib.DTYPES
    matmul_n = matmul_n or (calib.CPU_MATMUL_N if cpu else calib.MATMUL_N)
    reps = reps or (calib.CPU_REPS if cpu else calib.REPS)
    try:
        with bar(f"calibrating {device}", calib.steps(mib, kinds), lines=True) as tick:
            # in a child process: this one takes a signal at once (even while the child is inside
            # one long torch op) and kills the child
            cal = calib.measure_in_child(device=device, sizes_mib=mib, matmul_n=matmul_n,
                                         dtypes=kinds, reps=reps, tick=tick)
    except KeyboardInterrupt:  # Ctrl-C (SIGINT): said as SIGTERM is, exit 130
        from attrib.cli import Signalled

        raise Signalled(signal.SIGINT) from None
    key, toml = calibrated_entry(cal)
    bw, tf = cal["bandwidth_gbs"], cal["matrix_tflops"]
    doc = {"schema": "attrib.calibration/1", **cal, "entry_key": key, "entry": toml}
    write(toml if fmt == "toml" else dump(doc), output, force)
    where = f"; wrote {output}" if output is not None else ""
    gbs = ", ".join(f"{k} {v:g}" for k, v in bw.items())
    tflops = ", ".join(f"{k} {v:g}" for k, v in tf.items())
    click.echo(printable(f"attrib: {cal['device']['name']}: {gbs} GB/s; {tflops} TFLOP/s "
                         f"(entry [{key}]{where})"), err=True)




@cli.command("rules")
@options.arch(targets=True)
def rules_cmd(arch_name: str | None, arch_file: Path | None) -> None:
    """List the pathology rules: id, archs, what each needs from a trace, references (with
    --arch, only the rules that apply to that device; NAME may also be a target a rule names,
    e.g. gfx1103).

    \b
    Example: attrib rules --arch gfx1151"""
    from attrib.app import catalog

    from attrib.report.table import terminal_width, wrap

    width = terminal_width()
    for r in catalog(arch_name, arch_file):
        lines = wrap(f"{r['id']}  [archs: {r['archs']}]", width, more="    ")
        lines += wrap(f"needs: {r['needs']}", width, "    ", "      ")
        lines += [x for ref in r["references"] for x in wrap(str(ref), width, "    ", "      ")]
        click.echo("\n".join(lines))


