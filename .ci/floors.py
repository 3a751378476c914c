"""Print a pip constraints file pinning declared dependencies to their floors (`>=X` -> `==X`).

    python .ci/floors.py pyproject.toml [EXTRA,EXTRA...] > floors.txt

Covers [project].dependencies and the named extras (what `make floors` installs); markers are
kept. A requirement with no `>=` floor (an exact pin such as torch==2.13.0) is left to pip.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

_REQ = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*>=\s*([0-9][^,;\s]*)\s*(;.*)?$")


def floors(pyproject: Path, extras: list[str]) -> list[str]:
    """`name==floor[; marker]` for each requirement with a `>=` lower bound."""
    project = tomllib.loads(pyproject.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    reqs = [*project["dependencies"], *(r for e in extras for r in optional[e])]
    out = []
    for req in reqs:
        m = _REQ.match(req)
        if m:
            out.append(f"{m[1]}=={m[2]}{m[3] or ''}")
    return out


if __name__ == "__main__":
    names = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else []
    print("\n".join(floors(Path(sys.argv[1]), names)))
