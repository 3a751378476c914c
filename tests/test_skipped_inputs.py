"""Issue 39: what a folder holds that attrib does not use is named with the reason, and files that
are not traces get a message that fits them (no UTF-16 advice for NULs or a tar archive). Every
input is derived inside the test from the repo's real traces."""

from __future__ import annotations

import gzip
import shutil
import tarfile

from attrib.cli import main

from conftest import EXAMPLE_TRACE, FIXTURES

KERNEL_CSV = FIXTURES / "rocprof" / "gfx1151_llamacpp_rocprofv3_csv" / "decode_kernel_trace.csv"
ROCPD = FIXTURES / "rocprof" / "gfx1201_llamacpp_rocpd_rocm7.2" / "32432_results.db.gz"


def _error(capsys, *args) -> str:
    code = main([*map(str, args)])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attrib: error: "), err
    return lines[0].removeprefix("attrib: error: ")


def test_nul_bytes_are_not_called_utf16(tmp_path, capsys):
    nul = tmp_path / "trace.json"
    nul.write_bytes(b"\0" * len(gzip.decompress(EXAMPLE_TRACE.read_bytes())[:8192]))
    assert _error(capsys, "analyze", nul) == (
        f"{nul}: holds only NUL bytes in its first 8,192 bytes (a file never written, or a disk "
        "image): not a trace")


def test_a_tar_archive_says_unpack_it(tmp_path, capsys):
    tar = tmp_path / "traces.tar"
    with tarfile.open(tar, "w") as t:
        t.add(EXAMPLE_TRACE, arcname=EXAMPLE_TRACE.name)
    assert _error(capsys, "analyze", tar) == (
        f"{tar}: a tar archive: unpack it (tar -xf) and pass the trace inside")


def test_utf16_text_is_still_named(tmp_path, capsys):
    u16 = tmp_path / "kernel_trace.csv"
    u16.write_bytes(KERNEL_CSV.read_text().encode("utf-16-le"))
    assert _error(capsys, "analyze", u16).startswith(f"{u16}: UTF-16 text; attrib reads UTF-8")


def test_a_folder_of_torch_and_rocprof_output_is_refused(tmp_path, capsys):
    shutil.copy(EXAMPLE_TRACE, tmp_path / EXAMPLE_TRACE.name)
    shutil.copy(ROCPD, tmp_path / ROCPD.name)
    assert _error(capsys, "analyze", tmp_path) == (
        f"{tmp_path}: is a directory holding both torch-profiler traces ({EXAMPLE_TRACE.name}) "
        f"and rocprof output ({ROCPD.name}): pass the file or folder of the run to analyze")


def test_sweep_names_each_file_it_skips(tmp_path, capsys):
    shutil.copy(EXAMPLE_TRACE, tmp_path / "a.json.gz")
    (tmp_path / "cut.json.gz").write_bytes(EXAMPLE_TRACE.read_bytes()[:100])
    (tmp_path / "notes.txt").write_text("the good run: batch 8\n")
    code = main(["sweep", str(tmp_path), "-j", "1", "--format", "json"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    skipped = [ln for ln in cap.err.splitlines() if ln.startswith("attrib: skipped: ")]
    assert skipped == [
        f"attrib: skipped: {tmp_path / 'cut.json.gz'}: corrupt gzip data (not a gzip stream "
        "attrib can read)",
        f"attrib: skipped: {tmp_path / 'notes.txt'}: not a trace attrib can read: text that is "
        "neither JSON nor a CSV with a header (expected torch-profiler JSON or rocprof output)"]
    assert '"a.json.gz"' in cap.out or "a.json.gz" in cap.out


def test_sweep_of_only_unreadable_files_exits_2(tmp_path, capsys):
    (tmp_path / "cut.json.gz").write_bytes(EXAMPLE_TRACE.read_bytes()[:100])
    assert _error(capsys, "sweep", tmp_path) == (
        f"{tmp_path}: is a directory with no trace attrib can read")


def test_ranks_names_the_files_it_leaves_out(tmp_path, capsys):
    shutil.copy(EXAMPLE_TRACE, tmp_path / "rank0.json.gz")
    (tmp_path / "README.txt").write_text("tp=2 run\n")
    main(["ranks", str(tmp_path)])
    err = capsys.readouterr().err
    assert (f"attrib: warning: {tmp_path / 'README.txt'}: not used: a rank is a torch-profiler "
            "trace (*.json, *.json.gz)") in err.splitlines()
