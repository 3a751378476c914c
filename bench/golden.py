"""The JSON of `attrib analyze --format json` on every fixture, kept or compared byte for byte.

    python bench/golden.py write DIR      # one file per fixture: exit status, stdout, stderr
    python bench/golden.py check DIR      # the same now; names every fixture that differs

For a change that must not move a figure (a table's dtypes, the reader's memory): write before,
check after. Every file under tests/fixtures/{torch,rocprof,captured} is run, in one process
(`attrib.cli.main`); a file that is not a trace gives its exit status and message, kept too.
A file that differs is run again up to RETRIES times and counts as the same where a run matches:
rows of equal time in a ledger come in hash order (a pre-existing tie, not a changed figure).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIRS = ("torch", "rocprof", "captured")
_SKIP = (".md", ".txt", ".log", ".cpp")
RETRIES = 6


def fixtures() -> list[Path]:
    base = ROOT / "tests" / "fixtures"
    files = (p for d in DIRS for p in sorted((base / d).rglob("*")) if p.is_file())
    return [p for p in files if not p.name.endswith(_SKIP)]


def run(path: Path) -> str:
    """`attrib analyze PATH --format json`: exit status, stdout, stderr."""
    from attrib.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(["analyze", str(path), "--format", "json"])
        except SystemExit as exc:
            rc = exc.code
    return f"rc={rc}\n{out.getvalue()}\n--- stderr\n{err.getvalue()}"


def _key(path: Path) -> str:
    rel = str(path.relative_to(ROOT))
    return hashlib.sha1(rel.encode()).hexdigest()[:12] + "_" + path.name + ".txt"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("write", "check"):
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    mode, where = argv[0], Path(argv[1])
    where.mkdir(parents=True, exist_ok=True)
    bad = unstable = 0
    for path in fixtures():
        got, kept = run(path), where / _key(path)
        if mode == "write":
            kept.write_text(got)
            continue
        want = kept.read_text() if kept.exists() else None
        if got == want:
            continue
        if want is not None and any(run(path) == want for _ in range(RETRIES)):
            unstable += 1
            print(f"same on a rerun (tie order): {path.relative_to(ROOT)}")
            continue
        bad += 1
        print(f"DIFFERS: {path.relative_to(ROOT)}")
    print(f"{len(fixtures())} fixtures, {bad} differ, {unstable} matched on a rerun")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
