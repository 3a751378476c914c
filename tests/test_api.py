"""Issue 38, an API that helps itself: help() works on the public classes, reprs are one short line,
an unknown phase name raises with the choices, `python -m attrib` is the command."""

from __future__ import annotations

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


def test_help_renders_the_public_classes():
    for obj in (attrib.Analysis, Phase, attrib.analyze):
        text = pydoc.render_doc(obj)
        assert obj.__doc__.split("\n")[0].strip() in text


def test_reprs_are_one_short_line(an):
    for obj in (an, *an.phases):
        text = repr(obj)
        assert "\n" not in text and len(text) < 300, text
    assert repr(an).startswith(f"<Analysis {EXAMPLE_TRACE.name} on ")
    assert repr(an.phase("decode")).startswith("<Phase decode: 6 steps, median ")


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
