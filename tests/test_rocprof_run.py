"""rocprofv3 runner: argv building, and a run through a stand-in that writes real fixture outputs."""

from __future__ import annotations

import socket
import sys
import textwrap

import pytest

import collectors
from attrib.errors import TraceError
from collectors.rocprof import roctx
from collectors.rocprof.run import build_argv, expand_name, run

ROCPD = "rocprof/gfx1201_llamacpp_rocpd_rocm7.2/32432_results.db.gz"
CSV_DIR = "rocprof/gfx1151_llamacpp_rocprofv3_csv"


def test_build_argv_defaults():
    argv = build_argv(["llama-bench", "-n", "8"], "/tmp/out")
    assert argv[0] == "rocprofv3"
    assert "--kernel-trace" in argv and "--marker-trace" in argv
    assert "--hip-trace" not in argv and "--memory-copy-trace" not in argv
    i = argv.index("--output-format")
    assert argv[i + 1] == "rocpd"
    assert argv[argv.index("-d") + 1] == "/tmp/out"
    assert argv[argv.index("-o") + 1] == "%hostname%/%pid%"
    assert argv[argv.index("--"):] == ["--", "llama-bench", "-n", "8"]


def test_build_argv_options():
    argv = build_argv(["python", "serve.py"], "out", hip_trace=True, memory_copy_trace=True,
                      fmt=["rocpd", "csv"], rocprofv3="/opt/rocm/bin/rocprofv3",
                      extra_args=["--kernel-rename"])
    assert argv[0] == "/opt/rocm/bin/rocprofv3"
    assert "--hip-trace" in argv and "--memory-copy-trace" in argv
    i = argv.index("--output-format")
    assert argv[i + 1: i + 3] == ["rocpd", "csv"]
    assert argv.index("--kernel-rename") < argv.index("--")
    with pytest.raises(ValueError, match="output format"):
        build_argv(["x"], "out", fmt="sqlite")
    with pytest.raises(ValueError, match="no command"):
        build_argv([], "out")


def test_expand_name():
    assert expand_name("%hostname%/%pid%", pid=42, hostname="box") == "box/42"
    assert expand_name("{hostname}_{pid}", pid=7, hostname="h") == "h_7"


def _stand_in(tmp_path, fixtures, exit_code: int = 0, processes: int = 2, write: bool = True):
    """An executable that behaves like rocprofv3: runs the command and writes real outputs."""
    script = tmp_path / "rocprofv3"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import gzip, shutil, socket, subprocess, sys
        from pathlib import Path
        argv = sys.argv[1:]
        cmd = argv[argv.index("--") + 1:]
        out = Path(argv[argv.index("-d") + 1])
        name = argv[argv.index("-o") + 1]
        i = argv.index("--output-format") + 1
        fmts = []
        while not argv[i].startswith("-"):
            fmts.append(argv[i]); i += 1
        fixtures = Path({str(fixtures)!r})
        for _ in range({processes}):
            proc = subprocess.Popen(cmd)
            proc.wait()
            if not {write}:
                continue
            prefix = out / name.replace("%hostname%", socket.gethostname()).replace("%pid%", str(proc.pid))
            prefix.parent.mkdir(parents=True, exist_ok=True)
            if "rocpd" in fmts:
                with gzip.open(fixtures / {ROCPD!r}) as src, open(str(prefix) + "_results.db", "wb") as dst:
                    shutil.copyfileobj(src, dst)
            if "csv" in fmts:
                for kind in ("kernel_trace", "hip_api_trace"):
                    shutil.copy(fixtures / {CSV_DIR!r} / f"decode_{{kind}}.csv", str(prefix) + f"_{{kind}}.csv")
        sys.exit({exit_code})
        """))
    script.chmod(0o755)
    return script


def test_run_finds_every_process_output_and_loads_it(fixtures, tmp_path):
    exe = _stand_in(tmp_path, fixtures)
    out = tmp_path / "out"
    res = run([sys.executable, "-c", "pass"], out, fmt=["rocpd", "csv"], rocprofv3=str(exe))
    assert res.returncode == 0 and res.warning is None
    assert res.argv[0] == str(exe)
    host = out / socket.gethostname()
    assert {p.parent for p in res.files} == {host}
    assert len(res.files) == 6  # two processes x (db, kernel csv, hip csv)
    dbs = [p for p in res.traces if p.name.endswith("_results.db")]
    csvs = [p for p in res.traces if p.name.endswith("_kernel_trace.csv")]
    assert len(dbs) == 2 and len(csvs) == 2
    assert [collectors.load(p).kernels.height for p in dbs] == [5687, 5687]
    t = collectors.load(csvs[0])
    assert t.kernels.height == 144 and t.launches.height == 920
    # the directory: both processes' rocpd files stacked; the stand-in wrote the same real database
    # twice, so the second process's kernels are exact copies of the first's (same device, queue and
    # start ns): dropped with a warning instead of doubling every count (issue 13)
    both = collectors.load(host)
    assert both.meta.format == "rocpd" and both.kernels.height == 5687
    assert any("5687 kernels are exact copies" in w for w in both.meta.warnings), both.meta.warnings


def test_run_nonzero_exit_after_output_is_kept(fixtures, tmp_path):
    exe = _stand_in(tmp_path, fixtures, exit_code=139, processes=1)
    res = run([sys.executable, "-c", "pass"], tmp_path / "out", rocprofv3=str(exe))
    assert res.returncode == 139 and "status 139" in res.warning
    assert len(res.traces) == 1


def test_run_nonzero_exit_without_output(fixtures, tmp_path):
    exe = _stand_in(tmp_path, fixtures, exit_code=3, write=False)
    with pytest.raises(TraceError, match="exited with status 3 but wrote no output"):
        run([sys.executable, "-c", "pass"], tmp_path / "out", rocprofv3=str(exe))


def test_run_without_rocprofv3(tmp_path):
    with pytest.raises(TraceError) as info:
        run(["true"], tmp_path / "out", rocprofv3=str(tmp_path / "no-such-rocprofv3"))
    msg = str(info.value)
    assert "rocprofiler-sdk" in msg and "--rocprofv3 PATH" in msg and "\n" not in msg


class _Roctx:
    """Stands in for librocprofiler-sdk-roctx (no ROCm here): the nesting depth a push returns (0 for the
    outermost range), the depth left after a pop, the names it was given; `fail` makes every call raise."""

    def __init__(self, fail: bool = False):
        self.names: list[bytes] = []
        self.depth, self.fail = 0, fail

    def roctxRangePushA(self, name: bytes) -> int:
        if self.fail:
            raise OSError("roctx call failed")
        self.names.append(name)
        self.depth += 1
        return self.depth - 1

    def roctxRangePop(self) -> int:
        if self.fail:
            raise OSError("roctx call failed")
        self.depth -= 1
        return self.depth

    def roctxMarkA(self, name: bytes) -> None:
        if self.fail:
            raise OSError("roctx call failed")
        self.names.append(b"mark:" + name)


def test_roctx_passes_names_and_depths_through(monkeypatch):
    lib = _Roctx()
    monkeypatch.setattr(roctx, "_lib", lambda: lib)
    assert roctx.available() and roctx.range_push("decode") == 0
    with roctx.region("préfill"):
        assert lib.depth == 2
        roctx.mark("token")
    assert lib.depth == 1 and roctx.range_pop() == 0
    assert lib.names == [b"decode", "préfill".encode(), b"mark:token"]


def test_roctx_never_raises(monkeypatch):
    monkeypatch.setattr(roctx, "_lib", lambda: _Roctx(fail=True))
    assert roctx.range_push("decode") == -1 and roctx.range_pop() == -1
    with roctx.region("prefill"):
        roctx.mark("token")
    monkeypatch.setattr(roctx, "_lib", lambda: None)  # no library at all
    assert not roctx.available() and roctx.range_push("decode") == -1 and roctx.range_pop() == -1
    with roctx.region("prefill"):
        roctx.mark("token")


def test_cli_capture_rocprof_runs_and_analyzes(tmp_path, fixtures, capsys):
    """`attrib capture --rocprof -- CMD` through the stand-in (no AMD GPU here: the stand-in copies
    real rocprofv3 output where rocprofv3 would write it)."""
    from attrib.cli import main

    exe = _stand_in(tmp_path, fixtures, processes=1)
    out = tmp_path / "prof"
    rc = main(["capture", "--rocprof", "--rocprofv3", str(exe), "-d", str(out), "--", sys.executable, "-c", "pass"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "captured: " in text and "_results.db" in text
    assert "== decode: 8 steps" in text and "gfx1201" in text
    missing = main(["capture", "--rocprof", "--rocprofv3", str(tmp_path / "nope"), "--", "true"])
    assert missing == 2


def test_cli_capture_rocprof_stamps_the_outputs_cmd_wrote(tmp_path, fixtures, capsys):
    """--outputs FILE: the ids the command wrote (one request per line) are digested into each
    trace's stamp; a file that is not token ids is one line naming it, exit 2."""
    import hashlib

    from attrib.cli import main
    from collectors.provenance import read_sidecar

    exe = _stand_in(tmp_path, fixtures, processes=1)
    ids = tmp_path / "ids.txt"
    write_ids = f"open({str(ids)!r}, 'w').write('5 6 7\\n8 9\\n')"
    rc = main(["capture", "--rocprof", "--rocprofv3", str(exe), "-d", str(tmp_path / "p"),
               "--no-analyze", "--outputs", str(ids), "--", sys.executable, "-c", write_ids])
    text = capsys.readouterr().out
    assert rc == 0 and "outputs: 5 tokens" in text
    [trace] = [line.split("captured: ")[1] for line in text.splitlines() if "captured: " in line]
    want = hashlib.sha256(b"[[5,6,7],[8,9]]").hexdigest()
    assert read_sidecar(trace)["correctness_gate"]["outputs_sha256"] == want
    ids.write_text("5 six\n")
    rc = main(["capture", "--rocprof", "--rocprofv3", str(exe), "-d", str(tmp_path / "q"),
               "--no-analyze", "--outputs", str(ids), "--", sys.executable, "-c", "pass"])
    assert rc == 2 and "ids.txt: not token ids" in capsys.readouterr().err
