"""The readers, asked in this order: the first whose `sniff` claims a file reads it; a folder is
read by the first reader that claims files in it. Adding a format: its module and one line here.

Order settles overlaps: rocprofv3 JSON and rocprof v1's quoted-`ts` Chrome trace before the torch
profiler's; v1 and v2 CSV columns before the rocprofv3 CSV that shares some of them.
"""

from __future__ import annotations

from collectors import kineto
from collectors.reader import Reader
from collectors.rocprof import legacy, pftrace, rocpd, v3csv, v3json
from collectors.rocprof._common import merging

_ROC = (".db", ".csv", ".json", ".pftrace", ".perfetto-trace", ".gz")
_TORCH = (".json", ".json.gz", ".json.xz", ".json.zst")

READERS: tuple[Reader, ...] = (
    Reader("rocpd", rocpd.sniff, rocpd.read, _ROC, merging("rocpd", rocpd.read)),
    Reader("rocprofv3-json", v3json.sniff, v3json.read, _ROC,
           merging("rocprofv3-json", v3json.read)),
    Reader("rocprof-v1", legacy.sniff_v1, legacy.read_v1, _ROC, legacy.read_v1_folder),
    Reader(
        "rocprof-v2",
        legacy.sniff_v2,
        legacy.read_v2_csv,
        _ROC,
        merging("rocprof-v2", legacy.read_v2_csv),
    ),
    Reader("rocprofv3-csv", v3csv.sniff, v3csv.read, _ROC, v3csv.read_folder),
    Reader("pftrace", pftrace.sniff, pftrace.read, _ROC, merging("pftrace", pftrace.read)),
    Reader(
        "torch-json",
        kineto.sniff,
        kineto.read,
        _TORCH,
        title="torch-profiler traces",
        cpu_ops=True,
        document=kineto.read_document,
    ),
)
FORMATS = tuple(r.name for r in READERS)


def reader(fmt: str) -> Reader:
    """The reader of format `fmt` (a KeyError names the known ones)."""
    for r in READERS:
        if r.name == fmt:
            return r
    raise KeyError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
