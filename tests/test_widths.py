"""Every command's terminal output fits the terminal (issue 38 item 1): each command that prints to
the terminal, run through click's CliRunner on real traces (tests/fixtures/captured, the rolling
H200 folder, the sweep grid, the TP=2 ranks) with COLUMNS=80 and COLUMNS=100, prints no line wider
than COLUMNS. COLUMNS wins over the tty (attrib.report.table.terminal_width); a table that does not
fit drops columns in its declared order and says so in a footer line. Markdown (`report` on stdout)
is a file format and is not cut.

Each command runs once per width; the analyses, the slow part (~1 s per trace), once in all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from attrib.cli import cli

from conftest import FIXTURES, ROOT, analyses_once

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
    with analyses_once():  # each trace analysed once, rendered at each width
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


def test_a_dropped_column_is_named_in_a_footer(outputs):
    """At 80 columns the sweep, ranks and compare tables leave columns out: the last lines name
    them and the COLUMNS that shows them all; at 100 ranks keeps every column and says nothing."""
    for name in ("sweep", "ranks", "compare", "analyze"):
        text = outputs[name, 80]
        foot = text[text.rindex("left out to fit 80 columns:"):]
        assert "COLUMNS=" in foot, name
    assert "ranks: r1 wait/xfer/lat" not in outputs["ranks", 80]
    assert "r1 wait/xfer/lat" in outputs["ranks", 80].split("left out to fit")[1]
    assert "left out" not in outputs["ranks", 100] and "r1 wait/xfer/lat" in outputs["ranks", 100]
    # the sweep's trace names keep what tells them apart (backend, batch, prompt)
    rows = [x.split()[0] for x in outputs["sweep", 80].splitlines() if x.startswith("…")]
    assert len(rows) == 24 and len(set(rows)) == 12 and "…sdpa_b8_p512…" in rows


def _long_named(tmp: Path, side: str, src: str) -> Path:
    """A real capture (and its stamp) copied under a long folder name that differs from the other
    side's only in its middle: the shape of a run folder of a grid."""
    d = tmp / f"h200-llama-4-layers-batch-8-prompt-2048-{side}-attention-bf16-torch-2.9-cuda-12.8"
    d.mkdir()
    for suffix in ("", ".attrib.json"):
        (d / f"decode.pt.trace.json.gz{suffix}").write_bytes(
            (CAP / f"{src}.pt.trace.json.gz{suffix}").read_bytes())
    return d / "decode.pt.trace.json.gz"


def test_compare_keeps_the_part_of_two_names_that_differs_and_its_verdict_first(tmp_path):
    """Two real captures (SDPA vs eager attention) under long paths that differ in the middle: at
    80 columns each path fits a line and keeps 'sdpa' / 'eager' (a plain middle cut made them the
    same text); the verdict opens the table, the markdown and the HTML."""
    from attrib.report import fmt

    base, cand = _long_named(tmp_path, "sdpa", "sdpa_attn_a"), _long_named(tmp_path, "eager",
                                                                           "eager_attn")
    assert fmt.short(str(base), 74) == fmt.short(str(cand), 74)  # what the issue saw
    runner = CliRunner()
    r = runner.invoke(cli, ["compare", str(base), str(cand)], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert max(map(len, lines)) <= 80
    b = next(x for x in lines if x.startswith("base: "))
    c = next(x for x in lines if x.startswith("cand: "))
    assert "sdpa" in b and "eager" in c and b[6:] != c[6:] and "…" in b
    head = lines[:lines.index(b)]
    assert lines[0].startswith("verdict prefill:")
    assert any(x.startswith("verdict decode: slower") for x in head)
    for suffix in ("md", "html"):
        out = tmp_path / f"cmp.{suffix}"
        assert runner.invoke(cli, ["compare", str(base), str(cand), "-o", str(out)]).exit_code == 0
        text = out.read_text()
        verdict = text.index("verdict decode: slower")
        assert verdict < text.index("base: ") < text.index("prefill</h2>" if suffix == "html"
                                                           else "## prefill")
        assert str(base) in text and str(cand) in text  # files keep the paths whole
