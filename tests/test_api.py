"""Issue 38, an API that helps itself: help() works on the public classes, reprs are one short line,
an unknown phase name raises with the choices, `python -m attrib` is the command."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import pydoc
import subprocess
import sys

import pytest

import attrib
from attrib.analysis.model import Phase
from attrib.errors import UsageError

from conftest import EXAMPLE_TRACE


@pytest.fixture(scope="module")
def an():
    return attrib.analyze(str(EXAMPLE_TRACE))


def _records() -> list[type]:
    """Every class the attrib.analysis modules define (the analysis' records)."""
    import attrib.analysis

    out = []
    for info in pkgutil.iter_modules(attrib.analysis.__path__):
        mod = importlib.import_module(f"attrib.analysis.{info.name}")
        out += [o for o in vars(mod).values() if inspect.isclass(o) and o.__module__ == mod.__name__]
    return out


def test_help_renders_the_public_classes():
    for obj in (attrib.Analysis, Phase, attrib.analyze):
        text = pydoc.render_doc(obj)
        assert obj.__doc__.split("\n")[0].strip() in text


def test_help_works_on_every_public_name_and_every_analysis_record(capsys):
    """help() itself (it raised NameError: Summary on Analysis): each shows its own docstring, and
    a record's help names its fields."""
    public = [getattr(attrib, n) for n in attrib.__all__ if n != "__version__"]
    records = _records()
    assert {"Analysis", "Phase", "Component", "Summary", "Finding", "Speculative"} <= {
        r.__name__ for r in records}
    for obj in (*public, *records):
        assert obj.__doc__ and not obj.__doc__.startswith(f"{obj.__name__}("), obj  # its own
        help(obj)
        text = capsys.readouterr().out.replace(" |", " ")  # a class's help: " |  " margins
        assert " ".join(obj.__doc__.split()[:6]) in " ".join(text.split()), obj
        fields = getattr(obj, "__struct_fields__", ())
        assert all(f in text for f in fields), obj


def test_every_public_name_has_a_short_example():
    for name in attrib.__all__:
        if name == "__version__":
            continue
        doc = getattr(attrib, name).__doc__
        assert doc and doc.count(">>> ") >= 1 and "attrib.analyze(" in doc, name


def test_reprs_are_one_short_line(an):
    for obj in (an, *an.phases):
        text = repr(obj)
        assert "\n" not in text and len(text) < 300, text
    assert repr(an).startswith(f"<Analysis {EXAMPLE_TRACE.name} on ")
    assert repr(an.phase("decode")).startswith("<Phase decode: 6 steps, mean ")
    assert repr(an.phase("prefill")).startswith("<Phase prefill: 1 step, mean ")
    assert "tok/s" in repr(an.phase("decode")) and "; top: " in repr(an)


def test_an_unknown_phase_raises_with_the_choices(an):
    assert an.phase("draft") is None  # a standard phase this trace does not hold
    with pytest.raises(UsageError) as info:
        an.phase("prefil")
    assert str(info.value) == ("no phase 'prefil': this analysis has prefill, decode (standard "
                               "phases: prefill, decode, mixed, draft, verify, unknown)")


def test_python_dash_m_attrib_is_the_command():
    got = subprocess.run([sys.executable, "-m", "attrib", "--version"], capture_output=True,
                         text=True, timeout=60)
    assert got.returncode == 0 and got.stdout.startswith("attrib, version ")
