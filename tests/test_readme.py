"""The README is a guide a newcomer can follow from a clone: every `attrib ...` command in its
fenced code blocks runs here, on files that ship in the repository, and exits 0 with output.

A block that needs a GPU (rocprofv3, torch capture, calibrate on a GPU) is preceded by
`<!-- not run: REASON -->`; only those are skipped, and they are counted. The README stays a guide
(<= 320 lines, no commit ids or dates), and every relative link of the README and docs/ resolves.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MAX_LINES = 320
# the README's commands that are not run here (each in a block marked `<!-- not run: ... -->`)
NOT_RUN = 1
NOT_RUN_MARK = re.compile(r"^<!--\s*not run:\s*(?P<why>.+?)\s*-->$")
FENCE = re.compile(r"^(```+|~~~+)\s*(?P<info>[\w+-]*)")
# what only runs with a GPU or under rocprofv3, and so must be marked
NEEDS_GPU = re.compile(r"^attrib (capture|calibrate)\b(?!.*--device cpu)")
# the paths the commands read, linked into the scratch folder they run in
READS = ("examples", "tests", "docs")


class Block(NamedTuple):
    line: int            # 1-based line of the opening fence
    info: str            # the fence's info string (python, bash, ...)
    lines: list[str]
    not_run: str | None  # the reason of a `<!-- not run: ... -->` right above it


class Command(NamedTuple):
    line: int
    text: str
    not_run: str | None
    shows: tuple[str, ...] = ()  # the output lines a `$ ` block shows under it ("..." left out)


def blocks(text: str) -> list[Block]:
    """The fenced code blocks of a markdown text, with the not-run mark above each, if any."""
    out: list[Block] = []
    lines = text.split("\n")
    i = 0
    last_text = ""  # the last non-blank line outside a block
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if lines[i].strip():
                last_text = lines[i].strip()
            i += 1
            continue
        fence, start = m.group(1), i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        mark = NOT_RUN_MARK.match(last_text)
        out.append(Block(start + 1, m.group("info"), body, mark.group("why") if mark else None))
        last_text = ""
        i += 1
    return out


def commands(block: Block) -> list[Command]:
    """The `attrib ...` command lines of a shell block: with `$ ` prompts, the prompted lines
    (the rest is output); else every line. Backslash continuations are joined."""
    if block.info not in ("", "bash", "sh", "shell", "console"):
        return []
    prompted = any(ln.startswith("$ ") for ln in block.lines)
    out: list[Command] = []
    pending, first, showing = "", 0, False
    for n, ln in enumerate(block.lines):
        if prompted and not pending:
            if not ln.startswith("$ "):
                if showing and ln.strip() not in ("", "..."):
                    out[-1] = out[-1]._replace(shows=(*out[-1].shows, ln))
                continue
            ln = ln[2:]
        if not pending:
            first = block.line + 1 + n
        if ln.rstrip().endswith("\\"):
            pending += ln.rstrip()[:-1] + " "
            continue
        cmd = (pending + ln).strip()
        pending = ""
        if cmd.startswith("attrib "):
            out.append(Command(first, cmd, block.not_run))
            showing = True
        else:  # another program's output is not an attrib command's
            showing = False
    return out


def readme_commands() -> list[Command]:
    return [c for b in blocks(README.read_text()) for c in commands(b)]


def _attrib() -> Path:
    here = Path(sys.executable).parent / "attrib"
    found = here if here.exists() else shutil.which("attrib")
    assert found, "the attrib console script is not installed (pip install -e .)"
    return Path(found)


RUN = [c for c in readme_commands() if c.not_run is None]


def test_readme_is_a_guide():
    text = README.read_text()
    n = len(text.splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines; keep it a guide (<= {MAX_LINES})"
    hashes = re.findall(r"(?<![\w/.-])[0-9a-f]{7,40}(?![\w-])", text)
    assert not hashes, f"README.md names commit ids: {hashes}"
    dates = re.findall(r"\b\d{4}-\d{2}-\d{2}\b", text)
    assert not dates, f"README.md has dates: {dates} (history goes to CHANGELOG.md)"
    lab = re.findall(r"(?i)\b(this session|this branch|today)\b", text)
    assert not lab, f"README.md has lab-notes language: {lab}"


def test_the_commands_found_and_the_skipped_ones_counted():
    cmds = readme_commands()
    skipped = [c for c in cmds if c.not_run is not None]
    assert len(RUN) >= 8, [c.text for c in RUN]
    assert len(skipped) == NOT_RUN, (
        f"{len(skipped)} README commands are marked not run, expected {NOT_RUN}: "
        f"{[c.text for c in skipped]}")
    for c in skipped:  # only what needs a GPU may be skipped
        assert NEEDS_GPU.match(c.text), f"README.md:{c.line}: {c.text!r} is marked not run " \
            f"({c.not_run}) but needs no GPU: let the test run it"
    for c in RUN:
        assert not NEEDS_GPU.match(c.text), f"README.md:{c.line}: {c.text!r} needs a GPU: " \
            "precede its block with <!-- not run: needs a GPU -->"


def test_blocks_and_marks_are_parsed():
    text = "x\n<!-- not run: needs a GPU -->\n```\nattrib capture --rocprof -- a \\\n  b\n```\n" \
           "```console\n$ attrib analyze T\nout: attrib line\n...\n$ echo $?\n0\n```\n" \
           "```python\nattrib = 1\n```\n"
    got = [c for b in blocks(text) for c in commands(b)]
    assert got == [Command(4, "attrib capture --rocprof -- a    b", "needs a GPU"),
                   Command(8, "attrib analyze T", None, ("out: attrib line",))]


@pytest.mark.parametrize("cmd", RUN, ids=[f"README:{c.line}" for c in RUN])
def test_readme_command_runs(cmd: Command, tmp_path: Path):
    """Run in a scratch folder that links the repo's data folders, so `-o FILE` lands there."""
    for name in READS:
        (tmp_path / name).symlink_to(REPO / name, target_is_directory=True)
    attrib = _attrib()
    argv = shlex.split(cmd.text, comments=True)
    env = {**os.environ, "PATH": f"{attrib.parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "COLUMNS": "100"}
    res = subprocess.run([str(attrib), *argv[1:]], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, f"README.md:{cmd.line}: {cmd.text}\n{res.stderr[-2000:]}"
    if "-o" in argv:  # the output is the file it names
        out = tmp_path / argv[argv.index("-o") + 1]
        assert out.is_file() and out.stat().st_size > 0, f"{cmd.text}: wrote no {out.name}"
        assert out.resolve().parent == tmp_path.resolve(), f"{cmd.text}: writes outside its folder"
    else:
        assert res.stdout.strip(), f"README.md:{cmd.line}: {cmd.text}: no output"
    printed = {" ".join(ln.split()) for ln in res.stdout.splitlines()}
    stale = [ln for ln in cmd.shows if " ".join(ln.split()) not in printed]
    assert not stale, f"README.md:{cmd.line}: the output shown is not what {cmd.text!r} prints " \
        f"now (update the README): {stale}"


# ---- links between the README and the docs ----------------------------------------------------

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    text = re.sub(r"`|\*\*?", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _prose(text: str) -> str:
    """The text outside code blocks and inline code (a link there is not a link)."""
    out, inside = [], False
    for ln in text.split("\n"):
        if FENCE.match(ln):
            inside = not inside
            continue
        if not inside:
            out.append(re.sub(r"`[^`]*`", "", ln))
    return "\n".join(out)


def _anchors(md: Path) -> set[str]:
    return {_slug(ln.lstrip("#")) for ln in _prose(md.read_text()).split("\n")
            if ln.startswith("#")}


DOCS = [README, REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md")),
        REPO / "examples" / "configs" / "README.md"]


@pytest.mark.parametrize("md", DOCS, ids=[str(p.relative_to(REPO)) for p in DOCS])
def test_relative_links_resolve(md: Path):
    assert md.is_file(), md
    broken = []
    for target in LINK.findall(_prose(md.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (md.parent / path).resolve() if path else md
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{md.relative_to(REPO)}: broken links {broken}"


def test_readme_links_every_doc():
    text = README.read_text()
    for doc in sorted((REPO / "docs").glob("*.md")):
        assert f"docs/{doc.name}" in text, f"README.md does not link docs/{doc.name}"
    assert "CHANGELOG.md" in text
