"""Issue 39, bounded work: a rocpd database whose kernel view never ends (derived inside the test from
the real gfx1201 rocpd fixture) is stopped at the query time limit with one line, and a SIGTERM sent
while SQLite runs that query stops `attrib analyze` within a second or two (the signal's Python
handler cannot run inside SQLite's C code; the progress handler interrupts the query)."""

from __future__ import annotations

import gzip
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attrib.errors import TraceError
from collectors.rocprof import _common, rocpd

from conftest import FIXTURES

ROCPD = FIXTURES / "rocprof" / "gfx1201_llamacpp_rocpd_rocm7.2" / "32432_results.db.gz"
ATTRIB = Path(sys.executable).parent / "attrib"


def _endless(dst: Path) -> Path:
    """The real database with its kernel view crossed with an endless recursive sequence."""
    dst.write_bytes(gzip.decompress(ROCPD.read_bytes()))
    con = sqlite3.connect(dst)
    (table,) = con.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                           "AND name LIKE 'rocpd_kernel_dispatch_%'").fetchone()
    con.executescript(f"""
        DROP VIEW rocpd_kernel_dispatch;
        CREATE VIEW rocpd_kernel_dispatch AS
          WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n)
          SELECT K.* FROM `{table}` K, n;""")
    con.commit()
    con.close()
    return dst


def test_a_query_past_the_limit_is_one_trace_error(tmp_path, monkeypatch):
    db = _endless(tmp_path / "endless.db")
    monkeypatch.setattr(_common, "QUERY_S", 1.0)
    monkeypatch.setattr(_common, "QUERY_S_PER_GB", 0.0)
    t0 = time.monotonic()
    with pytest.raises(TraceError) as info:
        rocpd.read(db)
    assert time.monotonic() - t0 < 10
    assert str(info.value) == (f"{db}: a query ran past 1 s and was stopped (a view that never "
                               "ends, or a pathological join)")


def test_the_limit_grows_with_the_database():
    assert _common.query_limit_s(ROCPD) == pytest.approx(
        _common.QUERY_S + _common.QUERY_S_PER_GB * ROCPD.stat().st_size / 1e9)


def test_sigterm_stops_a_query_that_never_ends(tmp_path):
    db = _endless(tmp_path / "endless.db")
    proc = subprocess.Popen([str(ATTRIB), "analyze", str(db)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(3)  # past the start and into the kernel query
    assert proc.poll() is None, proc.communicate()
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    waited = time.monotonic() - t0
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, err)
    assert "stopped by SIGTERM" in err and out == ""
    assert waited < 2, waited


def test_the_real_database_reads_as_before():
    # the bound costs nothing a real file notices: same kernels, no warning about the limit
    t = rocpd.read(ROCPD)
    assert t.kernels.height == 5687
