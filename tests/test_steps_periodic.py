"""split_tokens: token steps from the kernel-name sequence of real marker-less llama.cpp traces."""

from __future__ import annotations

import polars as pl

import collectors
from attrib.components.patterns import RUNTIME_HELPERS as HELPERS
from attrib.steps.periodic import split_tokens


def _summary(df: pl.DataFrame) -> pl.DataFrame:
    return (df.filter(pl.col("step").is_not_null())
            .group_by("step").agg(
                loop=(~pl.col("name").str.contains(HELPERS)).sum(), phase=pl.col("phase").first(),
                start=pl.col("start_ns").min(), ms=pl.col("dur_ns").sum() / 1e6,
                first=pl.col("name").sort_by("start_ns").first())
            .sort("step"))


def test_gfx1201_llama_bench_decode(fixtures):
    # llama-bench -p 0 -n 8 -r 1: one warm-up token, then the 8 measured tokens.
    k = collectors.load(fixtures / "rocprof/gfx1201_llamacpp_rocpd_rocm7.2").kernels
    out = split_tokens(k)
    assert out.height == k.height and set(out.columns) >= {"step", "phase"}
    s = _summary(out)
    assert s["step"].to_list() == list(range(9))
    assert s["loop"].to_list() == [615] * 9  # 32 layers x 19 kernels + 7 per token
    assert set(s["phase"]) == {"decode"}
    assert s["first"].str.starts_with("void rms_norm_f32").all()
    assert s["start"].is_sorted()
    assert s["ms"][0] > s["ms"][1:].max()  # the warm-up token is the slowest
    before = out.filter(pl.col("step").is_null())
    # the setup copies/fills: the runtime helper kernels before the first model kernel, in start order
    names = k.sort("start_ns")["name"]
    setup = names.str.contains(HELPERS).arg_min()
    assert before.height == setup > 0 and before["name"].str.contains(HELPERS).all()
    assert before["start_ns"].max() < s["start"][0]


def test_gfx1151_graph_decode_csv(fixtures):
    # Upstream trimmed this trace to the first 24 dispatches of each of 6 decode tokens.
    k = collectors.load(fixtures / "rocprof/gfx1151_llamacpp_rocprofv3_csv").kernels
    s = _summary(split_tokens(k))
    assert s.height == 6 and s["loop"].to_list() == [23] * 6
    assert set(s["phase"]) == {"decode"}
    assert split_tokens(k)["step"].null_count() == 0


def test_no_repetition_gives_no_steps(fixtures):
    k = collectors.load(fixtures / "rocprof/gfx1201_llamacpp_rocpd_rocm7.2").kernels
    distinct = k.unique("name", keep="first").sort("start_ns")
    out = split_tokens(distinct)
    assert out["step"].null_count() == out.height
