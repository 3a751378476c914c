"""A component never comes from the name of the user's script: the Mistral capture's frames with
its script renamed sampler_capture.py (as the issue's capture was named) classify as the original."""

from __future__ import annotations

import msgspec
from msgspec.structs import replace
import polars as pl

from attrib.pipeline import attribute
from collectors import load

from conftest import FIXTURES

TRACE = FIXTURES / "captured" / "mistral_swa_b4.pt.trace.json.gz"


def test_script_file_name_names_no_component():
    t = load(TRACE)
    script = pl.col("name").str.starts_with("bytes_captures.py(")
    assert t.frames.filter(script).height > 0          # frames of the capture script itself
    renamed = replace(t, frames=t.frames.with_columns(
        pl.col("name").str.replace(r"^bytes_captures\.py\(", "sampler_capture.py(")))
    before = attribute(t).kernels.select("id", "component").sort("id")
    after = attribute(renamed).kernels.select("id", "component").sort("id")
    decode = attribute(t).kernels.filter(pl.col("phase") == "decode")
    assert decode.filter(pl.col("component") == "sampler").height == 6   # the argmax per step
    assert after.equals(before)
