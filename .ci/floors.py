"""Print a pip constraints file pinning every declared dependency to its floor (`>=X` -> `==X`).

    python .ci/floors.py pyproject.toml > floors.txt

Covers [project].dependencies and the `dev` extra (what `make floors` installs); markers are kept.
A requirement with no `>=` floor (an exact pin such as torch==2.13.0) is left to pip.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

_REQ = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*>=\s*([0-9][^,;\s]*)\s*(;.*)?$")


def floors(pyproject: Path) -> list[str]:
    """`name==floor[; marker]` for each requirement with a `>=` lower bound."""
    project = tomllib.loads(pyproject.read_text())["project"]
    reqs = [*project["dependencies"], *project.get("optional-dependencies", {}).get("dev", [])]
    out = []
    for req in reqs:
        m = _REQ.match(req)
        if m:
            out.append(f"{m[1]}=={m[2]}{m[3] or ''}")
    return out


if __name__ == "__main__":
    print("\n".join(floors(Path(sys.argv[1]))))
