"""Options declared once (issue 40): an option that several commands take is one option, the same
help and the same check in each (attrib.cli.options), and --format with no value is read off -o's
suffix the same way in every command. Real traces where a command runs."""

from __future__ import annotations

import json
from collections import defaultdict

import click

from attrib.cli import every_command, main

from conftest import FIXTURES

TRACE = FIXTURES / "torch" / "h200_dense_prefill_cudagraph_decode.json.gz"


def _uses() -> dict[str, list[tuple[str, click.Option]]]:
    """{flag: [(command, option)]} over every command's options."""
    out = defaultdict(list)
    for name, cmd in sorted(every_command().items()):
        for p in cmd.params:
            if isinstance(p, click.Option):
                out[max(p.opts, key=len)].append((name, p))
    return out


def test_an_option_of_several_commands_is_one_option():
    shared = {flag: uses for flag, uses in _uses().items() if len(uses) > 1}
    assert {"--output", "--force", "--arch", "--arch-file", "--phase", "--phase-map", "--format",
            "--model", "--context", "--capture", "--capture-batch", "--baseline", "--top",
            "--min-effect"} <= set(shared)
    for flag, uses in shared.items():
        # capture's --format is rocprofv3's (what it writes), not one of attrib's outputs
        uses = [(n, p) for n, p in uses if (n, flag) != ("capture", "--format")]
        helps = {p.help for _, p in uses}
        assert len(helps) == 1, (flag, helps)
        checks = {json.dumps(p.type.to_info_dict(), sort_keys=True) for _, p in uses
                  if flag != "--format"}  # --format: each command's own choices
        assert len(checks) <= 1, (flag, checks)
        assert len({(p.metavar, p.multiple, p.is_flag) for _, p in uses}) == 1, flag


def test_format_comes_from_the_suffix_in_every_command(capsys, tmp_path):
    out = tmp_path / "a.json"
    assert main(["analyze", str(TRACE), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["schema"] == "attrib.analysis/1"
    text = tmp_path / "a.txt"  # a suffix no format has: the first listed, the table
    assert main(["analyze", str(TRACE), "-o", str(text)]) == 0
    assert text.read_text().startswith(f"{TRACE}  [torch-json]")
    capsys.readouterr()
    for args, named in ((["analyze", str(TRACE)], "md"), (["slope", str(TRACE), str(TRACE)], "md"),
                        (["trend", str(FIXTURES)], "xlsx"), (["ranks", str(TRACE)], "toml")):
        out = tmp_path / f"x.{named}"
        assert main([*args, "-o", str(out)]) == 2  # before any work: nothing written
        err = capsys.readouterr().err
        assert f"its suffix names {named}, which {args[0]} does not write" in err, err
        assert not out.exists()
