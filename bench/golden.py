"""The JSON of `attrib analyze --format json` on every trace fixture, to check a speed change
changes no figure.

    python bench/golden.py write DIR [TRACE ...] [-- ARG ...]   # one DIR/<name>.json per trace
    python bench/golden.py diff DIR_A DIR_B        # names whose output differs; exit 1 if any

Without TRACE it runs every file under tests/fixtures that is not a README, licence, log, stamp
(.attrib.json), model config (.model.json, config.json) or truth file; ARGs after `--` go to
analyze (`-- --chunk-steps 2`).
Each output file holds the exit status, the stderr and the stdout of `attrib.cli.main` in this
one process, the checkout's path written ROOT.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = (".attrib.json", ".model.json", ".truth.json", ".md", ".log", ".txt", "execution_details.json",
        "config.json")


def traces() -> list[Path]:
    """The fixture files `analyze` may read."""
    files = (ROOT / "tests" / "fixtures").rglob("*")
    return sorted(p for p in files if p.is_file() and not p.name.startswith("LICENSE")
                  and not p.name.endswith(SKIP))


def run(trace: Path, extra: tuple[str, ...] = ()) -> str:
    """Exit status, stderr and stdout of `attrib analyze TRACE --format json EXTRA`."""
    from attrib.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["analyze", str(trace), "--format", "json", *extra])
    text = f"rc {rc}\n{err.getvalue()}\n{out.getvalue()}"
    return text.replace(str(ROOT), "ROOT")  # the same outputs from two checkouts compare equal


def name(trace: Path) -> str:
    fixtures = ROOT / "tests" / "fixtures"
    inside = trace.resolve().is_relative_to(fixtures)
    return str(trace.resolve().relative_to(fixtures) if inside else trace.name).replace("/", "__")


def write(where: Path, given: list[Path], extra: tuple[str, ...] = ()) -> None:
    where.mkdir(parents=True, exist_ok=True)
    for t in given or traces():
        (where / f"{name(t)}.json").write_text(run(t, extra))


def diff(a: Path, b: Path) -> int:
    names = sorted({p.name for p in a.glob("*.json")} | {p.name for p in b.glob("*.json")})
    bad = 0
    for n in names:
        pa, pb = a / n, b / n
        ta = pa.read_text() if pa.exists() else "(missing)"
        tb = pb.read_text() if pb.exists() else "(missing)"
        if ta != tb:
            bad += 1
            lines = difflib.unified_diff(ta.splitlines(), tb.splitlines(), n, n, lineterm="", n=0)
            print("\n".join(list(lines)[:20]))
    print(f"{len(names)} outputs, {bad} differ")
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "write":
        cut = argv.index("--") if "--" in argv else len(argv)
        write(Path(argv[1]), [Path(p) for p in argv[2:cut]], tuple(argv[cut + 1:]))
        return 0
    if len(argv) == 3 and argv[0] == "diff":
        return diff(Path(argv[1]), Path(argv[2]))
    print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
