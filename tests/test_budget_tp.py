"""--model on a tensor-parallel rank prices the rank's shard: the world size from the trace's
distributedInfo (tp2_decode_rank0: Megatron-style TP=2 of the L4 Llama, its config beside it)."""

from __future__ import annotations

import json

import polars as pl

from attrib.app import model_budget
from attrib.cost.budget import SHARDING, for_world
from attrib.cost.kernels import world_size
from collectors import load

from conftest import FIXTURES

RANK0 = FIXTURES / "captured" / "tp2_decode_rank0"


def _rows(table: pl.DataFrame) -> dict[str, dict]:
    return {r["component"]: r for r in table.iter_rows(named=True)}


def test_rank_budget_is_the_shard():
    meta = json.loads((RANK0.parent / "tp2_decode_rank0.model.json").read_text())
    world = world_size(load(RANK0.parent / "tp2_decode_rank0.pt.trace.json.gz"))
    assert world == 2 == meta["tp_size"]
    whole = model_budget(meta["config"], context=516)
    rank = for_world(whole, world)
    assert rank.tp == 2 and for_world(whole, 1) is whole
    w, r = _rows(whole.table(8)), _rows(rank.table(8))
    # per rank (README): q/k/v/o 4 layers x 2048 x (1024 + 512 + 512 + 1024) x 2 B = 50,331,648 and
    # gate/up/down 4 x 3 x 2048 x 2816 x 2 B = 138,412,032: half the model's, as the shard holds
    attn = r["qkv_proj"]["weight_bytes"] + r["o_proj"]["weight_bytes"]
    mlp = r["mlp_gate_up"]["weight_bytes"] + r["mlp_down"]["weight_bytes"]
    assert (attn, mlp) == (50_331_648, 138_412_032)
    # the shard as instantiated: those plus norms 36,864 and the replicated embedding table and lm_head
    # (this capture's script replicates them; vLLM splits the vocabulary, as the budget does)
    assert attn + mlp + 36_864 + 2 * 131_072_000 == meta["shard_param_bytes"]
    # K/V: 4 of the 8 KV heads on each rank; the vocabulary split (vLLM's ParallelLMHead)
    assert r["attention"]["kv_bytes"] == w["attention"]["kv_bytes"] / 2
    assert r["lm_head"]["weight_bytes"] == w["lm_head"]["weight_bytes"] / 2
    assert r["norm"]["weight_bytes"] == w["norm"]["weight_bytes"]   # replicated
    assert SHARDING in r["embedding"]["note"]
