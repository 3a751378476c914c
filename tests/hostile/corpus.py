"""The hostile corpus: inputs derived from the real fixtures (broken, cut, hand-edited, merged,
adversarial), each a `Variant` that says which outcome `attrib analyze` must have on it.

By reader, each module with its own `VARIANTS`, joined here:
  sources.py   the fixtures they derive from (read once), ROOT, and the `Variant` record
  kineto.py    torch-profiler JSON
  rocprof.py   rocpd SQLite, rocprofv3 JSON and CSV, legacy rocprof v1
  inputs.py    the file rather than its format (FIFOs, links, bombs, random bytes, folders, empty
               files) and option files (model configs, arch files); files.py has its generic builders
runner.py runs each in its own bounded process and checks it (`python tests/hostile/runner.py`
prints every result and the totals).
"""

from __future__ import annotations

import inputs
import kineto
import rocprof
from sources import CSV_DIR, ROOT, TORCH, Variant

__all__ = ["CSV_DIR", "NUMBER_VARIANTS", "ROOT", "TORCH", "VARIANTS", "Variant"]

VARIANTS: list[Variant] = [*kineto.VARIANTS, *rocprof.VARIANTS, *inputs.VARIANTS]
# issue 39's numbers out of their domain (tests/test_hostile_numbers.py runs them alone)
NUMBER_VARIANTS: list[Variant] = [*kineto.NUMBER_VARIANTS, *inputs.NUMBER_VARIANTS]

assert len({v.name for v in VARIANTS}) == len(VARIANTS), "two variants share a name"
