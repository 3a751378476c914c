"""Every command's terminal output fits the terminal (issue 38 item 1): each command that prints to
the terminal, run through click's CliRunner on real traces (tests/fixtures/captured, the rolling
H200 folder, the sweep grid, the TP=2 ranks) with COLUMNS=80 and COLUMNS=100, prints no line wider
than COLUMNS. COLUMNS wins over the tty (attrib.report.table.terminal_width); a table that does not
fit drops columns in its declared order and says so in a footer line. Markdown (`report` on stdout)
is a file format and is not cut.

Each command runs once per width; the analyses are the slow part (~1 s per trace)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from attrib.cli import cli

from conftest import FIXTURES, ROOT

CAP = FIXTURES / "captured"
WIDTHS = (80, 100)


def _config(tmp: Path) -> Path:
    """sdpa_attn_a's HF config (the sidecar holds it under "config"), for --model/--what-if."""
    cfg = tmp / "config.json"
    cfg.write_text(json.dumps(json.loads((CAP / "sdpa_attn_a.model.json").read_text())["config"]))
    return cfg


def _commands(tmp: Path) -> dict[str, list[str]]:
    t = lambda name: str(CAP / f"{name}.pt.trace.json.gz")  # noqa: E731
    return {
        "analyze": ["analyze", t("qwen3next_decode")],
        "analyze -v": ["analyze", "-v", t("sdpa_attn_a")],
        "analyze (rocprof)": ["analyze",
                              str(FIXTURES / "rocprof" / "gfx1201_llamacpp_rocpd_rocm7.2")],
        "what-if": ["analyze", t("sdpa_attn_a"), "--phase", "decode", "--model",
                    str(_config(tmp)), "--what-if", "weights=int4,kv=fp8"],
        "compare": ["compare", t("sdpa_attn_a"), t("eager_attn")],
        "compare -b/-c": ["compare", "-b", t("slope_ctx1024"), "-b", t("slope_ctx4096"),
                          "-c", t("slope_ctx16384"), "--gate", "5"],
        "sweep": ["sweep", str(CAP / "sweep"), "-j", "1"],
        "slope": ["slope", t("slope_ctx1024"), t("slope_ctx4096"), t("slope_ctx16384")],
        "ranks": ["ranks", t("tp2_decode_rank0"), t("tp2_decode_rank1")],
        "archs": ["archs"],
        "trend": ["trend", str(CAP / "rolling_h200")],
        "rules": ["rules"],
        "rules --arch": ["rules", "--arch", "gfx1151"],
        "help": ["--help"],
        **{f"{c} --help": [c, "--help"] for c in
           ("analyze", "report", "compare", "sweep", "slope", "ranks", "trend", "archs", "rules",
            "export", "calibrate", "capture")},
    }


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[tuple[str, int], str]:
    tmp = tmp_path_factory.mktemp("widths")
    runner = CliRunner()
    out = {}
    for width in WIDTHS:
        for name, args in _commands(tmp).items():
            r = runner.invoke(cli, args, env={"COLUMNS": str(width)}, catch_exceptions=False)
            assert r.exit_code in (0, 1), (name, r.exit_code, r.output[-2000:])
            out[name, width] = r.stdout
    return out


@pytest.mark.parametrize("width", WIDTHS)
def test_every_line_fits(outputs, width):
    over = {}
    for (name, w), text in outputs.items():
        if w != width:
            continue
        assert text.strip(), name
        wide = [line for line in text.splitlines() if len(line) > width]
        if wide:
            over[name] = (max(len(x) for x in wide), wide[0])
    assert not over, "\n".join(f"{n}: {w} columns: {line!r}" for n, (w, line) in over.items())
