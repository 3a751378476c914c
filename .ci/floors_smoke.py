"""What each floored extra is for, run once at its floor (`make floors`): the HTML report with its
plots (matplotlib), a .json.zst copy of the trace read back (zstandard), the xlsx tables
(xlsxwriter). Exits non-zero with the failing command's output.

    python .ci/floors_smoke.py TRACE OUT_DIR
"""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import zstandard


def run(*args: str) -> None:
    r = subprocess.run([str(Path(sys.executable).parent / "attrib"), *args],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"floors: attrib {' '.join(args)} exited {r.returncode}:\n{r.stderr[-2000:]}")
    print(f"floors: attrib {' '.join(args)}: ok")


def main(trace: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    zst = out / (trace.name.removesuffix(".gz") + ".zst")
    zst.write_bytes(zstandard.ZstdCompressor().compress(gzip.decompress(trace.read_bytes())))
    run("analyze", str(zst), "--format", "json", "-o", str(out / "zst.json"), "--force")
    run("report", str(trace), "-o", str(out / "report.html"), "--force")
    run("report", str(trace), "--format", "xlsx", "-o", str(out / "tables.xlsx"), "--force")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
