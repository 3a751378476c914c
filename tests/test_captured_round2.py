"""Issue #20's H200 captures (tests/fixtures/captured/README.md, "Round two"): sliding-window
attention (Mistral-style, every layer; gpt-oss-style, alternating sliding / full), DeepSeek-V3
group-limited routing at batch 1 and 4, a ViT forward. Decode GB/token within 5% of the as-run
bytes derived by hand from the model's shapes; the experts' k from the top-k over E."""

from __future__ import annotations

from functools import cache

import orjson
import polars as pl
import pytest

from attrib.app import analyze
from attrib.cost.ops import moe_top_k, op_costs
from attrib.pipeline import attribute
from collectors import load

from conftest import FIXTURES

CAPTURED = FIXTURES / "captured"
_L4 = 100_663_296 + 276_824_064 + 36_864 + 131_072_000   # Mistral here has the L4 shapes

# Mistral, batch 4, sliding_window 256 on every layer: DynamicSlidingWindowLayer keeps 255 keys,
# attention reads 256. K/V per key: 4 layers x 2 x 4 seqs x 8 heads x 128 x 2 B = 65,536. As run
# per step: the cache's cat reads 255 + 1 and writes 256 keys (2 passes), the GQA expansion before
# cuDNN SDPA (the sliding mask is given, so no enable_gqa) reads K/V and writes them twice over
# (3), SDPA reads the expanded K and V (2): 7 passes over 256 keys.
_M_W, _M_KV = _L4 + 4 * 4096, 65_536 * 256
# gpt-oss-style, batch 1: W = attention 20,992,128 + routers 65,600 + 4 layers x top-4 experts x
# 6,291,456 + norms 18,432 + lm_head 65,536,000 + one embedding row 2,048 = 187,277,504. K/V per key
# per layer 2 x 4 heads x 64 x 2 B = 1,024: 2 full layers at 1,027.5 keys (prompt 1024, steps 1-6),
# 2 sliding layers at 128. As run (eager): cat (2 passes), repeat_kv's copy (read 1, write 4 heads
# per KV head: 5), the two bmm read the expanded K and V (4): 11 passes.
_G_W, _G_KV = 187_277_504, 1_024 * (2 * 1_027.5 + 2 * 128)
# DeepSeek-V3 style, 32 experts top-6 in 8 groups (top-4 groups): W at batch 1 = embedding row 2,048
# + MLA attention 10,620,672 + dense MLP 17,301,504 + norms 14,336 + routers 131,072 + shared
# experts 3,145,728 + 2 layers x 6 x 1,572,864 + lm_head 65,536,000 = 115,625,728. At batch 4 the
# routed experts are the uniform expectation 32 (1 - (26/32)^4) = 18.054 per layer, 3 more rows.
# As run per key per layer 8,896 B (deepseekv3_decode: cat, kv_b_proj, K assembly, SDPA), 258.5 keys.
_EXPERT = 3 * 1024 * 256 * 2
_D_W1 = 115_625_728
_D_W4 = _D_W1 - 12 * _EXPERT + 2 * 32 * (1 - (26 / 32) ** 4) * _EXPERT + 3 * 2048

# name -> (minimal bytes per step, as-run bytes per step, tokens per step)
HAND = {
    "mistral_swa_b4": (_M_W + _M_KV, _M_W + 7 * _M_KV, 4),
    "gptoss_swa_b1": (_G_W + _G_KV, _G_W + 11 * _G_KV, 1),
    "dsv3_group_b1": (_D_W1 + 1_728 * 258.5, _D_W1 + 3 * 8_896 * 258.5, 1),
    "dsv3_group_b4": (_D_W4 + 4 * 1_728 * 258.5, _D_W4 + 4 * 3 * 8_896 * 258.5, 4),
}


@cache
def _decode(name: str) -> dict:
    return analyze(CAPTURED / f"{name}.pt.trace.json.gz", phase="decode").to_dict()["phases"][0]


@pytest.mark.parametrize("name", sorted(HAND))
def test_decode_gb_per_token_within_5_percent_of_the_as_run_count(name):
    minimal, as_run, tokens = HAND[name]
    ph = _decode(name)
    assert ph["tokens_per_step"] == tokens
    assert ph["gb_per_token"] == pytest.approx(as_run / tokens / 1e9, rel=0.05)
    assert ph["gb_per_token"] >= 0.99 * minimal / tokens / 1e9


def test_sliding_layers_attend_the_window_not_the_context():
    """gpt-oss-style: the sliding layers' attention reads 128 keys (their cache holds 127), the full
    layers' the context (1,025-1,030 keys): the bmm shapes say so, and so do their bytes."""
    a = attribute(load(CAPTURED / "gptoss_swa_b1.pt.trace.json.gz"))
    bmm = a.trace.ops.filter(pl.col("name") == "aten::bmm")
    keys = {orjson.loads(d)[1][-1] for d in bmm["input_dims"] if orjson.loads(d)[0][1] == 1}
    assert 128 in keys and {1025, 1030} <= keys and max(keys) == 1030


def _grouped_view_as_one_group(ops: pl.DataFrame) -> pl.DataFrame:
    """The within-group top-2 over [T, 8, 4] recorded as one group would be, [T, 1, 32]: what a
    config with n_group 1 (or the issue's capture) gives the k vote over E = 32."""
    def one_group(d: str | None) -> str | None:
        v = orjson.loads(d) if d else None
        if v and isinstance(v[0], list) and len(v[0]) == 3 and v[0][1:] == [8, 4]:
            v[0] = [v[0][0], 1, 32]
            return orjson.dumps(v).decode()
        return d
    topk = pl.col("name") == "aten::topk"
    fixed = ops.filter(topk).with_columns(pl.col("input_dims").map_elements(one_group, return_dtype=pl.Utf8))
    return pl.concat([ops.filter(~topk), fixed]).sort("id")


@pytest.mark.parametrize("name", ["dsv3_group_b1", "dsv3_group_b4"])
def test_group_limited_routing_takes_the_experts_k_from_the_top_k_over_E(name):
    ops = load(CAPTURED / f"{name}.pt.trace.json.gz").ops
    assert moe_top_k(ops) == {32: 6, 8: 4, 4: 2}   # experts, groups, within a group
    variant = _grouped_view_as_one_group(ops)
    assert moe_top_k(variant)[32] == 6
    router = pl.col("name").is_in(["aten::_grouped_mm", "aten::topk"])

    def expert_bytes(t: pl.DataFrame) -> float:
        sel = t.filter(router)
        ids = sel.filter(pl.col("name") == "aten::_grouped_mm")["id"].implode()
        return op_costs(sel).filter(pl.col("id").is_in(ids))["bytes"].sum()
    assert expert_bytes(variant) == pytest.approx(expert_bytes(ops))
