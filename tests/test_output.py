"""Issue 19, items 1-3: outputs are written whole or not at all, concurrent runs cannot lose one, and
inputs are never modified or joined by files the reader left (signals, full disks, WAL databases).

Every case runs the real CLI on a real fixture; signals are sent by the process to itself at the
moment named (the temporary file written, the database copy opened) so the timing is exact."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from attrib.cli import check_output
from attrib.errors import TraceError
from attrib.output import APPEARED, write_file, write_files
from collectors import load

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests/fixtures/torch/h200_dense_prefill_cudagraph_decode.json.gz"
ROCPD = ROOT / "tests/fixtures/rocprof/gfx1201_llamacpp_rocpd_rocm7.2/32432_results.db.gz"
SIGNALS = {"SIGTERM": 143, "SIGHUP": 129, "SIGINT": 130}

# Run the CLI with a hook: `{hook}` names a module attribute to wrap; the wrapper prints the listing of
# `{folder}` (proof of the moment: the temporary file is there) and sends `{sig}` to this process.
_KILL_AT = """
import os, signal, sys, {module}
_real = {module}.{attr}
def _hook(*a, **k):
    print(sorted(os.listdir({folder!r})), flush=True)
    os.kill(os.getpid(), signal.{sig})
    return _real(*a, **k)
{module}.{attr} = _hook
"""
_MAIN = "\nimport sys\nfrom attrib.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def _attrib(args: list[str], prelude: str = "", env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", prelude + _MAIN, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        **kw,
    )


def _first_line(stderr: str) -> str:
    return next((x for x in stderr.splitlines() if x.strip()), "")


@contextlib.contextmanager
def small_disk(folder: Path, kb: int):
    """A tmpfs of `kb` KB mounted at `folder` (root here); None where mounting is not allowed."""
    folder.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kb}k", "tmpfs", str(folder)], check=True,
                       capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        yield None
        return
    try:
        yield folder
    finally:  # lazily where busy (torch keeps its failed write's file open)
        if subprocess.run(["umount", str(folder)], capture_output=True, timeout=10).returncode:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=10)


def _old_analysis(folder: Path) -> bytes:
    """A valid analysis JSON of TRACE (131 KB) as a user's earlier output, written to `folder`."""
    old = folder / "old.json"
    r = _attrib(["analyze", TRACE, "--format", "json", "-o", old])
    assert r.returncode == 0, r.stderr
    return old.read_bytes()


# ------------------------------------------------------------------ item 1: a failed write keeps the old file


def test_force_on_a_full_disk_keeps_the_old_file(tmp_path):
    with small_disk(tmp_path / "disk", 180) as disk:  # room for the old file (131 KB), not for a second copy
        if disk is not None:
            old = _old_analysis(disk)
            r = _attrib(["analyze", TRACE, "--format", "json", "-o", disk / "old.json", "--force"])
            cause = "No space left on device"
        else:  # no mount here: a file-size limit makes the same write fail
            disk = tmp_path
            old = _old_analysis(disk)
            lim = (len(old) // 2,) * 2
            r = _attrib(["analyze", TRACE, "--format", "json", "-o", disk / "old.json", "--force"],
                        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, lim))
            cause = "File too large"
        assert r.returncode == 2
        assert _first_line(r.stderr) == (f"attrib: error: {disk / 'old.json'}: cannot write: {cause}; "
                                         "the old file is unchanged")
        assert (disk / "old.json").read_bytes() == old and json.loads(old)["schema"]
        assert sorted(os.listdir(disk)) == ["old.json"]  # no temporary file left


def test_report_on_a_full_disk_leaves_no_plot_without_its_report(tmp_path):
    with small_disk(tmp_path / "disk", 96) as disk:  # the report and its 3 SVGs need 130 KB
        if disk is None:
            pytest.skip("tmpfs cannot be mounted here")
        r = _attrib(["report", TRACE, "-o", disk / "r.md"])
        assert r.returncode == 2 and _first_line(r.stderr).endswith(
            ": cannot write: No space left on device; " "nothing was written"
        ), r.stderr
        assert os.listdir(disk) == []


# ---------------------------------------------- item 2: the final step is an exclusive create


def test_concurrent_runs_without_force_one_wins(tmp_path):
    out = tmp_path / "same.json"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _MAIN, "analyze", str(TRACE), "--format", "json", "-o", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        for _ in range(6)
    ]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    assert sorted(rc for rc, _ in results) == [0, 2, 2, 2, 2, 2], results
    for rc, err in results:  # a loser says so: the name appeared meanwhile (or already at its start)
        assert rc == 0 or _first_line(err) in (
            f"attrib: error: {out}: {APPEARED}",
            f"attrib: error: {out}: exists; pass --force to overwrite it",
        ), err
    assert json.loads(out.read_bytes())["schema"] and os.listdir(tmp_path) == ["same.json"]


def test_a_file_that_appears_after_the_check_is_not_overwritten(tmp_path):
    out = tmp_path / "a.json"
    check_output(out, force=False)  # passes: nothing there yet
    out.write_text("another run's output\n")
    with pytest.raises(TraceError, match="appeared meanwhile"):
        write_file(out, "{}\n", force=False)
    assert out.read_text() == "another run's output\n" and os.listdir(tmp_path) == ["a.json"]
    write_file(out, "{}\n", force=True)
    assert out.read_text() == "{}\n" and os.listdir(tmp_path) == ["a.json"]


def test_a_batch_is_undone_when_one_name_appeared(tmp_path):
    (tmp_path / "r.md").write_text("the user's report\n")
    with pytest.raises(TraceError, match="r.md: appeared meanwhile"):
        write_files([(tmp_path / "r.timeline.svg", b"<svg/>"), (tmp_path / "r.md", b"# new")], force=False)
    assert os.listdir(tmp_path) == ["r.md"] and (tmp_path / "r.md").read_text() == "the user's report\n"


# ---------------------------------------------- kill tests: signals during a write and a read


@pytest.mark.parametrize("sig", sorted(SIGNALS))
def test_signal_during_a_forced_write_keeps_the_old_file(tmp_path, sig):
    old = b'{"the user\'s": "old analysis"}\n'
    (tmp_path / "out.json").write_bytes(old)
    hook = _KILL_AT.format(module="os", attr="fsync", folder=str(tmp_path), sig=sig)
    r = _attrib(["analyze", TRACE, "--format", "json", "-o", tmp_path / "out.json", "--force"], hook)
    seen = eval(r.stdout.splitlines()[0])  # the folder when the signal was sent
    assert len(seen) == 2 and any(n.startswith(".out.json.") and n.endswith(".tmp") for n in seen), seen
    assert r.returncode == SIGNALS[sig], r.stderr
    assert _first_line(r.stderr) == ("attrib: aborted" if sig == "SIGINT" else
                                     f"attrib: stopped by {sig}; nothing was left half-written")
    assert os.listdir(tmp_path) == ["out.json"] and (tmp_path / "out.json").read_bytes() == old


def test_signal_during_a_new_write_leaves_nothing(tmp_path):
    hook = _KILL_AT.format(module="os", attr="fsync", folder=str(tmp_path), sig="SIGTERM")
    r = _attrib(["export", TRACE, "-o", tmp_path / "t.json.gz"], hook)
    assert r.returncode == 143 and eval(r.stdout.splitlines()[0]) and os.listdir(tmp_path) == []


@pytest.mark.parametrize("sig", sorted(SIGNALS))
def test_signal_while_reading_a_gzipped_database_leaves_no_copy(tmp_path, sig):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    hook = _KILL_AT.format(module="sqlite3", attr="connect", folder=str(tmp), sig=sig)
    r = _attrib(["analyze", ROCPD], hook, env={"TMPDIR": str(tmp)})
    seen = eval(r.stdout.splitlines()[0])
    assert len(seen) == 1 and seen[0].startswith("attrib-rocprof-"), seen  # the private copy existed
    assert r.returncode == SIGNALS[sig], r.stderr
    assert os.listdir(tmp) == []


# ------------------------------------------------------------------ item 3: inputs untouched


def _listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}


def _dispatch_table(con: sqlite3.Connection) -> str:
    return con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE "
                       "'rocpd_kernel_dispatch%'").fetchone()[0]


def test_wal_mode_database_is_read_without_files_beside_it(tmp_path):
    db = tmp_path / "1_results.db"
    db.write_bytes(gzip.decompress(ROCPD.read_bytes()))
    plain = load(db).kernels
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    con.close()
    before = _listing(tmp_path)
    assert load(db).kernels.equals(plain)
    assert _listing(tmp_path) == before  # no -wal, no -shm, the database not touched


def test_a_database_with_a_live_wal_is_read_whole_from_a_private_copy(tmp_path):
    # the state a crashed rocprofv3 leaves: changes in the -wal, not yet in the database
    work, user = tmp_path / "work", tmp_path / "user"
    work.mkdir()
    user.mkdir()
    db = work / "1_results.db"
    db.write_bytes(gzip.decompress(ROCPD.read_bytes()))
    n = load(db).kernels.height
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    table = _dispatch_table(con)
    con.execute(f"DELETE FROM {table} WHERE rowid % 2 = 0")
    con.commit()
    for f in work.iterdir():  # copied while the writer still holds it open
        shutil.copyfile(f, user / f.name)
    con.close()  # the writer's own copy now has the deletion checkpointed into the database
    want = load(db).kernels.height
    before = {p.name: p.read_bytes() for p in user.iterdir()}
    assert set(before) >= {"1_results.db", "1_results.db-wal"} and len(before["1_results.db-wal"]) > 0
    got = load(user / "1_results.db").kernels.height
    assert got == want < n, (got, want, n)  # the deletion held only in the -wal was seen
    assert {p.name: p.read_bytes() for p in user.iterdir()} == before


@contextlib.contextmanager
def read_only_view(folder: Path, view: Path):
    """`folder` bind-mounted read-only at `view` (root here); None where mounting is not allowed."""
    view.mkdir()
    try:
        subprocess.run(
            ["mount", "--bind", str(folder), str(view)], check=True, capture_output=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        yield None
        return
    try:
        subprocess.run(
            ["mount", "-o", "remount,ro,bind", str(view)], check=True, capture_output=True, timeout=10
        )
        yield view
    finally:
        subprocess.run(["umount", str(view)], capture_output=True, timeout=10)


def _journalled(tmp_path: Path, mode: str) -> Path:
    """A copy of the real rocpd database as a crashed writer leaves it: changes held in its journal
    (`mode` WAL: a -wal; DELETE: a hot rollback -journal of an open transaction)."""
    work, user = tmp_path / "work", tmp_path / "user"
    work.mkdir()
    user.mkdir()
    db = work / "1_results.db"
    db.write_bytes(gzip.decompress(ROCPD.read_bytes()))
    con = sqlite3.connect(db, isolation_level=None)
    con.execute(f"PRAGMA journal_mode={mode}")
    con.execute("PRAGMA wal_autocheckpoint=0")
    table = _dispatch_table(con)
    con.execute("BEGIN")
    con.execute(f"DELETE FROM {table} WHERE rowid % 2 = 0")
    if mode == "WAL":
        con.execute("COMMIT")
    else:
        con.execute("PRAGMA cache_size=1")  # spill the change into the database file, journal hot
        con.execute(f"DELETE FROM {table} WHERE rowid % 3 = 0")
    for f in work.iterdir():  # copied while the writer holds it open
        shutil.copyfile(f, user / f.name)
    con.close()
    return user / db.name


@pytest.mark.parametrize("mode, journal", [("WAL", "-wal"), ("DELETE", "-journal")])
def test_a_journalled_database_in_a_read_only_folder_is_read(tmp_path, mode, journal):
    """Issue 19: a WAL database in a read-only folder, or one with a hot journal, read (from a private
    copy) instead of 'attempt to write a readonly database'; the folder is not touched."""
    db = _journalled(tmp_path, mode)
    assert (db.parent / (db.name + journal)).stat().st_size > 0
    with read_only_view(db.parent, tmp_path / "ro") as view:
        if view is None:
            pytest.skip("bind mounts are not allowed here")
        before = _listing(view)
        r = _attrib(["analyze", view / db.name, "--format", "json"])
        assert r.returncode == 0, r.stderr
        assert "readonly" not in r.stderr and _listing(view) == before
        assert orjson.loads(r.stdout)["source"]["kernels"] > 0


# ------------------------------------------------------------------ the capture: full disk, never started


def test_capture_on_a_full_disk_says_so_and_leaves_nothing(tmp_path):
    torch = pytest.importorskip("torch")
    import collectors
    from collectors.torch_capture import CaptureWarning

    with small_disk(tmp_path / "disk", 12) as disk:  # smaller than the raw JSON torch writes
        if disk is None:
            pytest.skip("tmpfs cannot be mounted here")
        with pytest.warns(CaptureWarning, match="No space left on device"):
            with collectors.capture(disk / "traces", name="full", with_stack=False) as cap:
                for i in range(3):
                    with cap.phase("decode", tokens=1):
                        t = torch.full((64, 64), float(i))
                        (t @ t).sum().item()
        assert cap.result.path is None and "FileNotFoundError" not in cap.result.error
        assert os.listdir(disk) == []  # no .partial.json(.tmp), and the folder it made is gone


def test_capture_that_never_starts_creates_no_folder(tmp_path):
    pytest.importorskip("torch")
    import collectors
    from collectors.torch_capture import CaptureWarning
    from torch.profiler import ProfilerActivity, profile

    outer = profile(activities=[ProfilerActivity.CPU])
    outer.start()
    try:
        with pytest.warns(CaptureWarning, match="already running"):
            with collectors.capture(tmp_path / "a" / "b" / "traces") as cap:
                with cap.phase("decode", tokens=1):
                    pass
    finally:
        outer.stop()
    assert cap.result.path is None and os.listdir(tmp_path) == []
