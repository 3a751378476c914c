"""A fast start (#22 item 2): each command imports only what it runs. The import graph is
checked in fresh interpreters, not timed (bench/start.py times it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests/fixtures/captured/sweep/sweep_sdpa_b1_p128.pt.trace.json.gz"
HEAVY = ("scipy", "matplotlib", "jsonschema", "ray")


def loaded(code: str, whole: bool = False) -> set[str]:
    """The top-level packages (whole: the modules) in sys.modules after running `code` in a fresh
    interpreter."""
    names = "sys.modules" if whole else "{m.split('.')[0] for m in sys.modules}"
    probe = code + f"\nimport sys, json\nprint(json.dumps(sorted({names})))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", probe], env=env, check=True,
                         capture_output=True, text=True).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_importing_the_cli_loads_no_engine():
    mods = loaded("import attrib.cli")
    assert not mods & {"polars", "numpy", "rules", "collectors", *HEAVY}


def test_version_imports_no_polars():
    mods = loaded("from attrib.cli import main\ntry:\n    main(['--version'])\n"
                  "except SystemExit:\n    pass")
    assert "click" in mods and not mods & {"polars", "numpy", *HEAVY}


def test_analyze_loads_no_plotting_statistics_or_schema_modules():
    mods = loaded(f"from attrib.cli import main\nassert main(['analyze', {str(TRACE)!r}]) == 0")
    assert {"polars", "rules", "collectors"} <= mods
    assert not mods & set(HEAVY)


def test_analyze_loads_no_chunked_reader_nor_other_formats():
    """What only a huge trace (read in chunks) or another --format needs stays unloaded."""
    mods = loaded(f"from attrib.cli import main\nassert main(['analyze', {str(TRACE)!r}]) == 0",
                  whole=True)
    assert {"attrib.pipeline", "attrib.report.table", "collectors.kineto"} <= mods
    assert not mods & {"collectors.kineto.spill", "attrib.steps.chunks", "attrib.report.html",
                       "attrib.report.markdown", "attrib.report.csv_tables",
                       "attrib.report.parquet_tables", "attrib.report.xlsx_tables", "secrets",
                       "collectors.sampled", "collectors.torch_capture", "collectors.calibrate"}


SMALL = ROOT / "tests/fixtures/torch/h200_dense_prefill_cudagraph_decode.json.gz"
DEMO = ROOT / "examples/traces/h200_qwen3moe_eager_prefill_decode.json.gz"  # `make demo`'s
# what `attrib analyze` has no use for: other commands' modules (the group loads a command's
# module when it runs), the optional writers, statistics and plots, SQLite (a rocpd input's), the
# fuzzy matcher (an unknown --arch's hint, a capture alignment's), polars' map_elements inspector,
# Python's statistics module (~3 ms to import: attrib.analysis.median), the TOML parser (the bundled
# device database is read as JSON, attrib.roofline.arch.PARSED), gzip (an exported trace's writer;
# a .gz input is read through zlib), the chunked mode and the graph-capture merge
NOT_FOR_ANALYZE = {"attrib.cli.runs", "attrib.cli.device", "attrib.report.ranks",
                   "attrib.steps.ranks", "attrib.report.export", "attrib.report.plots", "scipy",
                   "matplotlib", "xlsxwriter", "pyarrow", "fastexcel", "jsonschema", "ray",
                   "sqlite3", "difflib", "polars._utils.udfs", "html", "statistics",
                   "tomllib", "gzip", "attrib.chunked", "attrib.link.graph_capture"}


def test_analyze_loads_only_what_it_uses():
    """The start of `attrib analyze` (issue 40): of a small trace as a table and of the demo trace
    as JSON, no module it has no use for is imported (checked in the process, not timed:
    bench/start.py times it)."""
    for trace, fmt in ((SMALL, "table"), (DEMO, "json")):
        mods = loaded(f"from attrib.cli import main\n"
                      f"assert main(['analyze', {str(trace)!r}, '--format', {fmt!r}]) == 0",
                      whole=True)
        assert "attrib.cli.single" in mods and "attrib.app" in mods
        assert not {m for m in mods for n in NOT_FOR_ANALYZE
                    if m == n or m.startswith(f"{n}.")}, trace


def test_analyze_of_a_trace_with_step_markers_imports_no_numpy():
    """numpy's import took ~45 ms of a 0.32 s start: the analysis is polars' alone (the interval
    arithmetic, attrib.steps.spans), and numpy is imported only by what needs its FFT (the steps
    of a trace without step markers, attrib.steps.periodic) and by other commands."""
    for trace, fmt in ((SMALL, "json"), (DEMO, "table"), (TRACE, "json")):
        mods = loaded(f"from attrib.cli import main\n"
                      f"assert main(['analyze', {str(trace)!r}, '--format', {fmt!r}]) == 0")
        assert "polars" in mods and "numpy" not in mods, trace


def test_analyze_json_loads_no_table_renderer():
    mods = loaded(f"from attrib.cli import main\n"
                  f"assert main(['analyze', {str(TRACE)!r}, '--format', 'json']) == 0", whole=True)
    assert "attrib.analysis.model" in mods and "attrib.report.table" not in mods


def test_analyze_loads_the_engine_with_the_gc_paused_and_leaves_it_on():
    """cli.common.loading: what the imports made is frozen (no collection walks it again); the GC
    is on again for the analysis."""
    probe = (f"import gc\nfrom attrib.cli import main\n"
             f"assert main(['analyze', {str(TRACE)!r}]) == 0\n"
             "print(gc.isenabled(), gc.get_freeze_count())")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", probe], env=env, check=True, capture_output=True,
                         text=True).stdout.split()
    assert out[-2] == "True" and int(out[-1]) > 20_000  # ~80 k: polars, numpy, attrib


def test_lean_settings_are_set_for_analysis_not_for_a_captured_command():
    """attrib's own polars gets one jemalloc arena and numpy's OpenBLAS no worker threads;
    `capture -- CMD` leaves CMD's environment as the user had it (the variables would reach
    the user's command); a value of the user's own is kept."""
    probe = ("import os\nfrom attrib.cli import main\ntry:\n    main([{args}])\n"
             "except SystemExit:\n    pass\nprint(os.environ.get('_RJEM_MALLOC_CONF'), "
             "os.environ.get('OPENBLAS_NUM_THREADS'))")
    lean = ("_RJEM_MALLOC_CONF", "OPENBLAS_NUM_THREADS")
    env = {k: v for k, v in os.environ.items() if k not in lean}
    env["PYTHONPATH"] = str(ROOT)
    def last(args: str, **own: str) -> list[str]:
        out = subprocess.run([sys.executable, "-c", probe.format(args=args)], env={**env, **own},
                             check=True, capture_output=True, text=True).stdout
        return out.splitlines()[-1].split()
    alloc, blas = last("'--version'")
    assert alloc.startswith("narenas:1") and blas == "1"
    assert last("'capture', '--help'") == ["None", "None"]
    assert last("'--version'", OPENBLAS_NUM_THREADS="4")[1] == "4"
