"""A case-insensitive pattern matched in its folded form (attrib.components.patterns.contains)
finds what the pattern finds, over the names of real traces: kernels, ops, annotations, module
paths."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from attrib.app import attribution
from attrib.components import classify, patterns
from attrib.components.patterns import component_patterns, contains, folded
from attrib.link.launches import KERNEL_LAUNCH

ROOT = Path(__file__).resolve().parents[1]
# between them, names every pattern below finds but one (no fixture runs a rejection sampler)
TRACES = [ROOT / "tests/fixtures" / n for n in (
    "captured/blocking_copy_decode.pt.trace.json.gz", "captured/compile_decode.pt.trace.json.gz",
    "captured/issue36/cb_generate_batch.pt.trace.json.gz",
    "captured/qwen3next_decode.pt.trace.json.gz", "captured/deepseekv3_decode.pt.trace.json.gz",
    "captured/fp8_w8a8_decode.pt.trace.json.gz", "captured/eager_attn.pt.trace.json.gz",
    "torch/b200_vllm_tp8_gptoss120b/eager_trace.json.gz", "torch/mi300_bert_small.json.gz")]
NOT_IN_FIXTURES = {r"(?i)rejection_(greedy|random)_sample|sample_recovered_tokens|eagle_"}


def _names() -> pl.Series:
    """Every distinct name the traces hold (kernels, launches, ops, annotations, Python frames,
    copies) and the kernels' module paths (what the module-class patterns read), each also
    written all upper-case (what a case-insensitive pattern must still find)."""
    got: list[pl.Series] = []
    for path in TRACES:
        a = attribution(path)
        t = a.trace
        for df in (t.kernels, t.launches, t.ops, t.markers, t.frames, t.copies):
            got.append(df["name"].cast(pl.Utf8))
        got.append(a.kernels["module_path"].cast(pl.Utf8))
    names = pl.concat(got).drop_nulls().unique()
    return pl.concat([names, names.str.to_uppercase()]).unique().sort()


NAMES = _names()
# every case-insensitive pattern matched through `contains` (classify's, over distinct names)
FOLDED = [*component_patterns()["pattern"].to_list(),
          *(p for p, _ in classify.HINT_ANNOTATIONS),
          classify._LINEAR_ATTN, classify._LINEAR_ATTN_SEG, classify._MOE_BLOCK, classify._MLP,
          r"(?i)shared_?expert", r"(?i)Experts|FusedMoE", r"(?i)attn|attention",
          # and some matched as written, folded here for a wider check of `folded`
          r"(?i)linear", r"(?i)soft_?max", KERNEL_LAUNCH, patterns.SPLIT_KV,
          patterns.FUSED_ATTENTION]


def test_the_names_are_many_and_varied():
    assert NAMES.len() > 5_000
    assert NAMES.str.contains("void ").any() and NAMES.str.contains("aten::").any()
    assert NAMES.str.contains("ForCausalLM_0/").any()  # module paths


@pytest.mark.parametrize("pattern", FOLDED)
def test_a_folded_pattern_finds_what_the_pattern_finds(pattern: str):
    assert folded(pattern) is not None, pattern  # each of these is matched folded
    frame = pl.DataFrame({"name": NAMES})
    want = frame.select(pl.col("name").str.contains(pattern)).to_series()
    got = frame.select(contains(pl.col("name"), pattern)).to_series()
    assert want.any() or pattern in NOT_IN_FIXTURES, pattern  # it finds names in these traces
    assert got.equals(want), NAMES.filter(got != want).to_list()[:5]


def test_what_lower_casing_would_change_is_not_folded():
    # an escape whose meaning changes with its case, a code point, a named group, an inner
    # flag, a pattern that is not case-insensitive: matched as written
    for pattern in (r"(?i)a\Wb", r"(?i)\x41", r"(?i)(?P<Name>a)", r"(?i)a(?-i:B)", r"a|b",
                    "(?i)a\\"):
        assert folded(pattern) is None, pattern
    assert folded(r"(?i)^Cijk_\w+(?:MT)\b") == r"^cijk_[0-9a-z_]+(?:mt)\b"
