"""--arch and --arch-file: declared once (attrib.cli.options.arch) for every command that
takes them, help included; an unknown --arch is one line naming the closest and the known names,
exit 2, in every command (issue 38, item 1). Real fixtures as the commands' inputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest

from attrib.cli import every_command, main

from conftest import EXAMPLE_TRACE, FIXTURES

CAPTURED = FIXTURES / "captured"
ROLLING = CAPTURED / "rolling_h200"
TP0, TP1 = (CAPTURED / f"tp2_decode_rank{r}.pt.trace.json.gz" for r in (0, 1))
GFX1151_CSV = FIXTURES / "rocprof" / "gfx1151_llamacpp_rocprofv3_csv" / "decode_kernel_trace.csv"

# each command that takes --arch, with inputs it would otherwise analyze
ARGS: dict[str, tuple[object, ...]] = {
    "analyze": (EXAMPLE_TRACE,),
    "report": (EXAMPLE_TRACE,),
    "compare": (EXAMPLE_TRACE, EXAMPLE_TRACE),
    "ladder": (EXAMPLE_TRACE, EXAMPLE_TRACE),
    "sweep": (CAPTURED / "sweep",),
    "ranks": (TP0, TP1),
    "trend": (ROLLING,),
    "archs": (),
    "rules": (),
}


def fill(template: str, **values: str) -> str:
    """An `attrib archs --template` entry with its <...> blanks filled (by field name), as a user
    fills it in."""
    def one(m: re.Match) -> str:
        return f"{m[1]} = {values[m[1]]}"
    out = re.sub(r"^(\w+) = .*<[^>]*>.*$", one, template, flags=re.M)
    assert not [line for line in out.splitlines() if "<" in line and not line.startswith("#")]
    return out


def _options(name: str) -> dict[str, click.Option]:
    cmd = every_command()[name]
    return {o: p for p in cmd.params if isinstance(p, click.Option) for o in p.opts}


def test_every_command_with_arch_has_arch_file_and_help():
    with_arch = {n for n in every_command() if "--arch" in _options(n)}
    assert with_arch == set(ARGS)   # a new command with --arch gets a row in ARGS
    for name in every_command():
        opts = _options(name)
        assert ("--arch" in opts) == ("--arch-file" in opts), name
        if "--arch" in opts:
            assert opts["--arch"].help and "attrib archs" in opts["--arch"].help, name
            assert opts["--arch-file"].help and "TOML" in opts["--arch-file"].help, name
            assert opts["--arch-file"].help == _options("analyze")["--arch-file"].help, name


@pytest.mark.parametrize("name", sorted(ARGS))
def test_help_mentions_arch_file(name, capsys):
    assert main([name, "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())   # the help wrapped to the terminal
    assert "--arch NAME" in out and "--arch-file FILE" in out and "wins over the bundled" in out


@pytest.mark.parametrize("name", sorted(ARGS))
def test_unknown_arch_is_one_line_exit_2(name, capsys, tmp_path):
    out = tmp_path / "never-written"
    extra = () if name in ("archs", "rules") else ("-o", str(out))
    assert main([name, *map(str, ARGS[name]), *extra, "--arch", "gfx9999"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("attrib: error: unknown arch 'gfx9999' (closest: gfx950, gfx942")
    assert "known: radeon-8060s (gfx1151), r9700 (gfx1201)" in err and "h200-sxm (sm_90)" in err
    assert not out.exists()


def test_close_matches_and_known_names(capsys):
    assert main(["analyze", str(EXAMPLE_TRACE), "--arch", "h20-sxm"]) == 2
    assert "(closest: h200-sxm" in capsys.readouterr().err
    assert main(["archs", "--arch", "gfx1150"]) == 2      # a target no database entry has
    assert "(closest: gfx1151" in capsys.readouterr().err


def test_rules_arch_checked_and_arch_file(capsys, tmp_path):
    assert main(["rules", "--arch", "gfx1103"]) == 0      # a target a rule names (P03)
    assert "P03-rocblas-tensile-fallback" in capsys.readouterr().out
    assert main(["rules", "--arch", "gfx1151"]) == 0
    listed = capsys.readouterr().out
    assert "P01-skinny-gemm-gfx1151" in listed and "P22-r9700-bimodal-decode" not in listed
    # a user's entry (the template of a real MI300X trace, its blanks filled) names a device
    entry = tmp_path / "mine.toml"
    assert main(["archs", "--template", "--trace",
                 str(FIXTURES / "torch" / "mi300_vllm_prefilldecode_piecewise"
                     / "graph_capture_rank_0.pt.trace.json.gz")]) == 0
    text = capsys.readouterr().out
    assert "[my-gpu]" in text    # ROCm 7.0 wrote an empty device name: the key is the fallback
    filled = fill(text, arch='"gfx942"', name='"lab box"', vendor='"amd"', compute_units="304",
                  match_names="['lab box']", peak_bw_gbs="5300", sources='["ours"]', bf16="1307",
                  fp16="1307", fp32="163.4")
    entry.write_text(filled)
    assert main(["rules", "--arch", "my-gpu", "--arch-file", str(entry)]) == 0
    assert "P01-skinny-gemm-gfx1151" not in capsys.readouterr().out
    assert main(["rules", "--arch", "my-gpu"]) == 2       # without the file: unknown
    assert "unknown arch 'my-gpu'" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text(filled.replace("[my-gpu]", "[my-gpu"))
    assert main(["rules", "--arch-file", str(bad)]) == 2  # a bad file fails without --arch too
    assert "bad.toml: not valid TOML" in capsys.readouterr().err


def test_archs_arch_shows_the_entry_it_resolves_to(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # every column: no footer naming those left out
    assert main(["archs", "--arch", "R9700"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines()[1:-1]]
    assert len(rows) == 1 and rows[0].startswith("r9700 ") and "gfx1201" in rows[0]


def test_trend_takes_arch(tmp_path):
    out = tmp_path / "t.json"
    assert main(["trend", str(ROLLING), "--arch", "h200-sxm", "--format", "json", "-o", str(out)]) == 0
    assert out.read_text().count('"path"') == 7


def _h200_entry(capsys, tmp_path: Path) -> Path:
    """The user's entry for the H200 of the example trace: `attrib archs --template --trace`,
    its blanks filled and its commented sustained figure given, as the template says."""
    assert main(["archs", "--template", "--trace", str(EXAMPLE_TRACE)]) == 0
    text = capsys.readouterr().out
    assert "[nvidia-h200]" in text and "match_names = ['NVIDIA H200']" in text
    text = (text.replace("# sustained_bw_gbs = <measured copy GB/s (rocm_bandwidth_test, nvbandwidth)>",
                         "sustained_bw_gbs = 4100")
            .replace('# sustained_source = "<how it was measured>"', 'sustained_source = "our own copy loop"'))
    path = tmp_path / "nvidia-h200.toml"
    path.write_text(fill(text, peak_bw_gbs="4800", sources='["NVIDIA H200 datasheet"]', bf16="989.4",
                         fp16="989.4", fp32="66.9"))
    return path


def test_the_users_entry_wins_over_the_bundled_one_for_its_device(capsys, tmp_path):
    """Issue 38 item 3: the bundled `h200-sxm` (match_names 'H200(?! NVL)') won over the user's
    `nvidia-h200` made from the same trace; the user's entry now describes the device."""
    mine = _h200_entry(capsys, tmp_path)
    out = tmp_path / "a.json"
    assert main(["analyze", str(EXAMPLE_TRACE), "--arch-file", str(mine), "--format", "json", "-o", str(out)]) == 0
    dev = json.loads(out.read_text())["device"]
    assert (dev["key"], dev["detected_from"]) == ("nvidia-h200", "deviceProperties")
    assert (dev["roofline_bw_gbs"], dev["roofline_bw_basis"], dev["peak_bw_gbs"]) == (4100, "sustained", 4800)
    assert dev["sustained_source"] == "our own copy loop"
    # without the file: the bundled entry, at its measured sustained figure
    assert main(["analyze", str(EXAMPLE_TRACE), "--format", "json", "-o", str(out), "--force"]) == 0
    dev = json.loads(out.read_text())["device"]
    assert (dev["key"], dev["roofline_bw_gbs"], dev["roofline_bw_basis"]) == ("h200-sxm", 4272.0, "sustained")
    # --arch of the target picks the user's entry too; naming it is measuring on the traced device
    assert main(["analyze", str(EXAMPLE_TRACE), "--arch-file", str(mine), "--arch", "sm_90",
                 "--format", "json", "-o", str(out), "--force"]) == 0
    dev = json.loads(out.read_text())["device"]
    assert (dev["key"], dev["detected_from"]) == ("nvidia-h200", "deviceProperties")
    # `attrib archs` lists the user's entry first, marked with its file
    assert main(["archs", "--arch-file", str(mine)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[1].startswith("nvidia-h200 ") and rows[1].endswith("[--arch-file]")
    assert not any(r.endswith("[--arch-file]") for r in rows[2:]) and f"[--arch-file]: {mine}" in rows
