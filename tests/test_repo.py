"""The repository itself: no merge-conflict markers left in any tracked text file."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^(<{7} |>{7} |={7}$)", re.M)


def test_no_conflict_markers_in_tracked_files():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    texts = [f for f in files if f.endswith((".py", ".md", ".toml", ".json", ".txt", ".cfg"))
             or f in ("Makefile", ".ci/run")]
    bad = [f for f in texts if MARKER.search((ROOT / f).read_text(errors="replace"))]
    assert bad == []
