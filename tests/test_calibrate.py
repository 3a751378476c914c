"""attrib calibrate: the CPU dry run, its errors, and the H200 record against a hand benchmark."""

from __future__ import annotations

import io
import json
import statistics
from pathlib import Path

import pytest

from attrib.app import analyze
from attrib.cli import main
from attrib.report.progress import bar
from attrib.roofline.arch import load_archs
from attrib.roofline.calibrated import entry, sustained

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "tests/fixtures/calibrate/h200_calib_check.json"
TRACE = ROOT / "tests/fixtures/captured/hf_llama_cuda_b8_p512.pt.trace.json.gz"
DRY = ["calibrate", "--device", "cpu", "--sizes", "4,8", "--matmul-n", "48", "--reps", "2",
       "--dtypes", "fp16,bf16,fp32,tf32"]


def test_cpu_dry_run_writes_an_arch_file_entry_and_refuses_to_overwrite(tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "mine.toml"
    assert main([*DRY, "-o", str(out)]) == 0
    (key, arch), = load_archs(out).items() - load_archs().items()
    assert (
        "dry run" in arch.name
        and arch.vendor == "cpu"
        and arch.calibrated["method"].startswith("bandwidth")
    )
    assert set(arch.measured_bw_gbs) == {"read", "write", "copy"} and min(arch.measured_bw_gbs.values()) > 0
    assert set(arch.measured_tflops) == {"fp16", "bf16", "fp32"}   # tf32: no CPU kernel
    assert arch.sustained_bw_gbs == max(arch.measured_bw_gbs["read"], arch.measured_bw_gbs["copy"])
    assert "wrote" in capsys.readouterr().err
    before = out.read_bytes()
    assert main([*DRY, "-o", str(out)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err and out.read_bytes() == before
    assert main([*DRY, "--dtypes", "fp16,int4"]) == 2
    assert "--dtypes" in capsys.readouterr().err


def test_a_set_stop_event_stops_the_measurement_before_its_next_timed_call():
    pytest.importorskip("torch")
    import threading

    from collectors.calibrate import Stopped, measure, measure_in_child

    stop = threading.Event()
    seen: list[str] = []

    def tick(label: str) -> None:   # the first measurement has begun: stop it
        seen.append(label)
        stop.set()
    with pytest.raises(Stopped):
        measure("cpu", sizes_mib=(4,), matmul_n=48, dtypes=("fp32",), reps=2, tick=tick, stop=stop)
    assert seen == ["read 4 MiB"]
    # the measuring process's usage error reaches the caller
    with pytest.raises(ValueError, match="calibrate measures a CUDA/ROCm GPU"):
        measure_in_child(device="tpu")


def test_no_gpu_and_bad_sizes_are_one_line_errors(capsys):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        assert main(["calibrate", "--device", "cuda"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no GPU" in err and "--device cpu" in err
    assert main(["calibrate", "--device", "cpu", "--sizes", "4,x"]) == 2
    assert main(["calibrate", "--device", "tpu"]) == 2
    err = capsys.readouterr().err
    assert "--sizes" in err and "calibrate measures a CUDA/ROCm GPU" in err


def test_h200_calibrate_within_5pct_of_the_hand_benchmark():
    """Recorded on the H200 (bench/calibrate_check.py): calibrate's median-of-repetitions figure
    against a loop of plain copy_/sum calls between two CUDA events, per kind, median over sizes."""
    doc = json.loads(H200.read_text())
    cal = doc["calibrate"]
    for kind in ("copy", "read"):
        hand = statistics.median(doc["hand"][kind].values())
        assert abs(cal["bandwidth_gbs"][kind] / hand - 1) < 0.05, kind
        for size, gbs in doc["hand"][kind].items():   # every size too
            assert abs(cal["bandwidth_by_size_gbs"][kind][size] / gbs - 1) < 0.05, (kind, size)
    assert cal["device"]["name"] == "NVIDIA H200" and cal["skipped"] == {}
    assert 4000 < cal["bandwidth_gbs"]["copy"] < 4800   # below the 4,800 GB/s datasheet peak
    assert cal["matrix_tflops"]["bf16"] < 989.4 and cal["matrix_tflops"]["fp8"] < 1978.9


def test_h200_entry_is_the_sustained_roof_of_analyze(tmp_path):
    cal = json.loads(H200.read_text())["calibrate"]
    key, text = entry(cal)
    path = tmp_path / "h200.toml"
    path.write_text(text)
    assert key == "h200-sxm"   # the database's entry, its datasheet fields kept
    dev = analyze(TRACE, arch_file=path).to_dict()
    d = dev["device"]
    assert d["key"] == key and d["peak_bw_gbs"] == 4800
    assert (
        d["roofline_bw_gbs"] == sustained(cal["bandwidth_gbs"]) == 4382
        and d["roofline_bw_basis"] == "sustained"
    )
    assert (
        d["calibrated"]["driver"] == "nvidia 580.159.04"
        and d["calibrated"]["measured_bw_gbs"]["copy"] == 4272
    )
    assert any("4382 GB/s as the sustained roof, measured by attrib calibrate" in n for n in dev["notes"])
    plain = analyze(TRACE).to_dict()
    ph, ph0 = dev["phases"][-1], plain["phases"][-1]
    # the bundled entry's roof is the copy figure of this same calibration (4272): the user's wins
    assert ph0["ceiling_tok_s"] / ph["ceiling_tok_s"] == pytest.approx(4272 / 4382, rel=1e-3)


def test_progress_bar_draws_only_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stream, drawn in ((Tty(), True), (io.StringIO(), False)):
        with bar("calibrating cpu", 2, stream=stream) as tick:
            tick("read 16 MiB")
            tick("copy 16 MiB")
        text = stream.getvalue()
        assert ("1/2 read 16 MiB" in text and "2/2 copy 16 MiB" in text) == drawn and (text == "") != drawn


def test_h200_entry_prices_flops_at_the_measured_matrix_tflops(tmp_path):
    """A compute-bound prefill GEMM's floor is its FLOPs at calibrate's bf16 figure (773.6 TFLOP/s
    on the H200), not the 989.4 datasheet peak; a run without the entry keeps the peak."""
    cal = json.loads(H200.read_text())["calibrate"]
    path = tmp_path / "h200.toml"
    path.write_text(entry(cal)[1])
    measured, plain = analyze(TRACE, arch_file=path).to_dict(), analyze(TRACE).to_dict()
    assert measured["device"]["roofline_tflops_basis"] == "measured"
    assert plain["device"]["roofline_tflops_basis"] == "peak"
    rows = {c["component"]: c for c in measured["phases"][0]["components"]}
    rows0 = {c["component"]: c for c in plain["phases"][0]["components"]}
    up, up0 = rows["mlp_gate_up"], rows0["mlp_gate_up"]
    assert up["bound"] == up0["bound"] == "compute" and up["dtype"] == "bf16"
    assert up["roofline_ms"] == pytest.approx(up["flops"] / 773.6e9, rel=1e-3)
    assert up0["roofline_ms"] == pytest.approx(up0["flops"] / 989.4e9, rel=1e-3)
    assert any("measured matrix TFLOP/s (bf16 773.6" in n for n in measured["notes"])


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _as_in_a_terminal() -> None:
    """A foreground command's signals: SIGINT as Python's default handles it (a runner that ignores
    SIGINT, as a shell's background job does, would pass SIG_IGN on)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_cpu_dry_run_is_quick_shows_progress_on_a_pipe_and_stops_on_signals(tmp_path):
    """Issue 38: `attrib calibrate --device cpu` (what a user without a GPU tries first) takes
    seconds at its CPU defaults (fp32 only, small sizes), prints a line per measurement to a pipe,
    and SIGTERM or Ctrl-C (SIGINT to the process group, as a terminal sends it) stops it within a
    second or two, even in the middle of one long torch op (an fp16 4096^3 matmul: a minute or more
    on 2 cores), leaving no output and no measuring process; a SIGKILLed calibrate's measuring
    process ends too."""
    import os
    import signal
    import subprocess
    import sys
    import time

    attrib_cmd = [str(Path(sys.executable).parent / "attrib"), "calibrate", "--device", "cpu"]
    out = tmp_path / "cpu.toml"
    t0 = time.monotonic()
    done = subprocess.run([*attrib_cmd, "-o", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - t0 < 60
    steps = [ln for ln in done.stderr.splitlines() if ln.startswith("attrib: calibrating cpu ")]
    assert [ln.split()[3] for ln in steps] == [f"{i}/7" for i in range(1, 8)]
    assert steps[-1] == "attrib: calibrating cpu 7/7 matmul fp32 512"
    (key, arch), = load_archs(out).items() - load_archs().items()
    assert key.startswith("cpu-") and set(arch.measured_tflops) == {"fp32"}

    for sig, status, name in ((signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "SIGINT"),
                              (signal.SIGKILL, -9, "SIGKILL")):
        stopped = tmp_path / f"stopped-{name}.toml"
        proc = subprocess.Popen([*attrib_cmd, "--sizes", "4", "--dtypes", "fp16", "--matmul-n",
                                 "4096", "-o", str(stopped)], stderr=subprocess.PIPE, text=True,
                                start_new_session=True, preexec_fn=_as_in_a_terminal)
        assert proc.stderr is not None
        try:
            line = ""
            while "matmul fp16" not in line:   # the long matmul has begun
                line = proc.stderr.readline()
                assert line, "calibrate ended before its matmul"
            time.sleep(0.3)   # inside the op
            child, = (int(x) for x in
                      Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split())
            t1 = time.monotonic()
            os.killpg(proc.pid, sig) if sig == signal.SIGINT else proc.send_signal(sig)
            rest = proc.communicate(timeout=30)[1]
            assert time.monotonic() - t1 < 2, name
            assert proc.returncode == status, rest
            while _alive(child) and time.monotonic() - t1 < 2:
                time.sleep(0.05)
            assert not _alive(child), name
            if sig != signal.SIGKILL:
                assert rest == f"attrib: stopped by {name}; nothing was left half-written\n"
            assert not stopped.exists() and list(tmp_path.iterdir()) == [out]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
