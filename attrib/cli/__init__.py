"""The `attrib` command line: the group (attrib.cli.common), its commands by what they read
(attrib.cli.single: one trace; attrib.cli.runs: several; attrib.cli.device: the device and
the catalog), and `main`, the console entry point.

A fast start: the group imports a command's module when that command runs
(attrib.cli.common.Commands), and each command imports the engine it needs inside its body
(`attrib --version` loads click alone; `analyze` no other command's module, neither scipy,
matplotlib nor the compare/slope/export modules).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import click

from attrib.errors import TraceError, UsageError
from attrib.report.printable import printable

from attrib.cli.common import check_output, cli, every_command

__all__ = ["check_output", "cli", "every_command", "main"]


class Signalled(BaseException):
    """SIGTERM or SIGHUP, raised in the main thread as Ctrl-C is, so every cleanup runs (temporary
    copies of inputs, half-written outputs); not an Exception, so no `except Exception` swallows
    it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


# exit statuses: 0 done, 1 a --gate failed, 2 bad input or usage, 3 compare: not comparable,
# 70 an internal error (sysexits' EX_SOFTWARE), 128+N a signal
INTERNAL_ERROR = 70


def _raise_signal(signum: int, frame: object) -> None:
    raise Signalled(signum)


def _on_signals() -> dict[signal.Signals, Any]:
    """Raise Signalled on SIGTERM/SIGHUP where they would kill (left alone under nohup or a parent's
    own handler); the handlers replaced, to restore."""
    old: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None and signal.getsignal(sig) is signal.SIG_DFL:
            try:
                old[sig] = signal.signal(sig, _raise_signal)
            except ValueError:  # not the main thread: leave signals to the host program
                break
    return old


# Settings of this process read once, when the module named loads: (variable, value, module).
# A setting of the user's own (the variable already set) is kept.
LEAN = (
    # polars' allocator (jemalloc): one arena, freed pages back to the system after 0.1 s
    # instead of 10 s. `attrib analyze` of a 0.5 GB trace: peak RSS 562 -> 518 MB, CPU +3%.
    ("_RJEM_MALLOC_CONF", "narenas:1,dirty_decay_ms:100,muzzy_decay_ms:0", "polars"),
    # numpy's OpenBLAS: no worker threads. attrib calls no BLAS routine, yet each worker spins
    # at start, on the CPUs polars' threads need: `attrib analyze` of a 1 MB trace on 2 cores,
    # 0.78 -> 0.67 s CPU (wall -1%).
    ("OPENBLAS_NUM_THREADS", "1", "numpy"),
)


def _lean_process(argv: list[str] | None) -> None:
    """Set LEAN for this process (and its workers), not for `capture -- CMD` (the user's command
    inherits the environment, and its own allocator and BLAS settings are its business)."""
    args = sys.argv[1:] if argv is None else argv
    command = next((a for a in args if not a.startswith("-")), None)
    if command == "capture":
        return
    for name, value, module in LEAN:
        if module not in sys.modules:
            os.environ.setdefault(name, value)
    _few_arenas()


M_ARENA_MAX = -8  # glibc's mallopt parameter


def _few_arenas() -> None:
    """Under an address-space limit (`ulimit -v`), at most 2 glibc malloc arenas: each thread that
    allocates may otherwise reserve its own 64 MB arena (up to 8 a core), address space the limit
    counts. A 1 M-row rocprofv3 CSV under 3 GB aborted inside polars now and then (a failed Rust
    allocation cannot be caught); with 2 arenas it reads under 2.5 GB and, at 2 GB, stops with the
    out-of-memory line. Without a limit, or without glibc, nothing changes."""
    import resource

    if resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY:
        return
    import ctypes  # only under a limit: a fast start otherwise

    try:
        ctypes.CDLL(None).mallopt(M_ARENA_MAX, 2)
    except (OSError, AttributeError):  # not glibc
        pass


def main(argv: list[str] | None = None) -> int:
    """Console entry point: bad input is one line on stderr and exit code 2, never a traceback.
    Run as the console script (argv None), the process ends here (`_leave`)."""
    rc = _run(argv)
    if argv is None:
        _leave(rc)
    return rc


def _leave(rc: int) -> None:
    """End the process with `rc` once its output is flushed and atexit's handlers ran, without
    the interpreter's teardown: freeing polars', numpy's and attrib's ~650 modules one by one
    took ~8 ms of a 0.35 s `attrib analyze`; the system frees the process at once. Left to the
    interpreter where a thread still runs or a flush fails (it reports that as it would)."""
    import atexit
    import threading

    if threading.active_count() > 1:
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # none under pythonw
                stream.flush()
    except (OSError, ValueError):
        return
    atexit._run_exitfuncs()
    os._exit(rc)


def _run(argv: list[str] | None) -> int:
    """main's work: the command's exit status."""
    _lean_process(argv)
    old = _on_signals()
    try:
        return _main(argv)
    except Signalled as exc:
        name = signal.Signals(exc.signum).name
        click.echo(f"attrib: stopped by {name}; nothing was left half-written", err=True)
        return 128 + exc.signum
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _main(argv: list[str] | None) -> int:
    try:
        rv = cli.main(args=argv, prog_name="attrib", standalone_mode=False)
    except (TraceError, UsageError) as exc:
        click.echo(printable(f"attrib: error: {exc}"), err=True)
        return 2
    except click.exceptions.Abort:
        click.echo("attrib: aborted", err=True)
        return 130
    except click.UsageError as exc:  # a bad argument or path: one line, not click's usage text
        click.echo(printable(f"attrib: error: {exc.format_message()}"), err=True)
        return 2
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    # input larger than this machine (or its memory limit) allows: a fact, not a bug
    except MemoryError:
        click.echo("attrib: error: out of memory: the input needs more memory than this "
                   "process may use", err=True)
        return 2
    except Exception as exc:  # a bug, not bad input: still one line unless asked for the traceback
        if os.environ.get("ATTRIB_DEBUG"):
            raise
        click.echo(printable(f"attrib: internal error: {type(exc).__name__}: {exc} "
                             "(set ATTRIB_DEBUG=1 for a traceback)"), err=True)
        return INTERNAL_ERROR
    except BaseException as exc:  # polars' PanicException (pyo3's, not an Exception)
        if type(exc).__name__ != "PanicException" or os.environ.get("ATTRIB_DEBUG"):
            raise
        return _panicked(exc)
    return rv if isinstance(rv, int) else 0


def _panicked(exc: BaseException) -> int:
    """A panic inside polars: under a memory limit, an allocation that failed (exit 2, as a
    MemoryError); else a bug (exit 70). One line either way."""
    import resource

    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit != resource.RLIM_INFINITY:
        click.echo(f"attrib: error: out of memory: the input needs more than this process's "
                   f"{limit / 2**30:.1f} GiB address-space limit (polars stopped: "
                   f"{printable(str(exc))[:120]})", err=True)
        return 2
    click.echo(printable(f"attrib: internal error: polars panicked: {exc} "
                         "(set ATTRIB_DEBUG=1 for a traceback)"), err=True)
    return INTERNAL_ERROR
