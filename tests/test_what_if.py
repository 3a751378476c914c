"""--what-if formats on a dense decode capture (sdpa_attn_a: L4, batch 8, prompt 2048; derivations in
tests/fixtures/captured/README.md): the weight and K/V bytes re-priced match figures derived by hand
from the model config, and the JSON / report carry them labelled as a projection."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import jsonschema
import msgspec
import orjson
import pytest

from attrib.analysis.model import Analysis
from attrib.analysis.reprice import project
from attrib.analysis.whatif import WhatIf
from attrib.app import analyze, model_budget, with_what_if
from attrib.cli import main
from attrib.report import html, markdown, table
from attrib.cost.dtypes import INT4_GROUP, WHAT_IF_BITS
from attrib.cost.weights import parse_formats

from conftest import FIXTURES, ROOT

TRACE = FIXTURES / "captured" / "sdpa_attn_a.pt.trace.json.gz"
CONFIG = json.loads((FIXTURES / "captured" / "sdpa_attn_a.model.json").read_text())["config"]
BATCH = 8


def _by_hand() -> dict[str, int]:
    """Weight bytes per decode step at bf16 from the config: every GEMM weight once, the gathered
    embedding rows (norms are not re-priced: they stay in the model dtype)."""
    h, layers = CONFIG["hidden_size"], CONFIG["num_hidden_layers"]
    q = CONFIG["num_attention_heads"] * CONFIG["head_dim"]
    kv = CONFIG["num_key_value_heads"] * CONFIG["head_dim"]
    inter, vocab = CONFIG["intermediate_size"], CONFIG["vocab_size"]
    return {"attention": layers * h * (q + 2 * kv + q) * 2,   # q, k, v, o
            "mlp": layers * 3 * h * inter * 2,
            "lm_head": vocab * h * 2,
            "embedding": BATCH * h * 2}


@cache
def _base() -> Analysis:
    return analyze(TRACE, phase="decode", model=CONFIG)


def _wi(what_if: str) -> WhatIf | None:
    """The projection of the one analysis (what `analyze(..., what_if=)` attaches)."""
    an, budget = _base(), model_budget(CONFIG)
    assert budget is not None
    ph = an.phase("decode")
    assert ph is not None
    return project(ph, budget, parse_formats(what_if), an.device)


def test_formats_bytes_per_weight():
    """int4: 0.5 B + one fp16 scale per 128 weights; mxfp4: 0.5 B + one E8M0 byte per 32; fp8 and
    int8 one byte."""
    assert INT4_GROUP == 128
    assert WHAT_IF_BITS["int4"] / 8 == 0.5 + 2 / 128
    assert WHAT_IF_BITS["mxfp4"] / 8 == 0.5 + 1 / 32
    assert WHAT_IF_BITS["fp8"] / 8 == WHAT_IF_BITS["int8"] / 8 == 1
    f = parse_formats("experts=mxfp4, attention=fp8, default=int8, kv=fp8")
    assert (f.bits("experts"), f.bits("attention"), f.bits("mlp"), f.kv_bytes) == (4.25, 8, 8, 1)
    for bad in ("weights=int3", "kv=int4", "norm=int4", "weights", ""):
        with pytest.raises(ValueError):
            parse_formats(bad)


def test_int4_weights_match_hand_derivation():
    """weights=int4: the README's L4 weights (attention 100,663,296 + MLP 276,824,064 + lm_head
    131,072,000 + 8 embedding rows 32,768 = 508,592,128 B per step) re-priced at 4.125/16 of their
    bf16 bytes; everything else as measured."""
    hand = _by_hand()
    assert hand == {"attention": 100_663_296, "mlp": 276_824_064, "lm_head": 131_072_000,
                    "embedding": 32_768}
    w = _wi("weights=int4")
    assert w is not None and w.label == "projection" and w.phase == "decode"
    per = {c: sum(r.repriced_bytes for r in w.rows if r.repriced == c) for c in hand}
    assert per == pytest.approx(hand, rel=1e-12)
    weights = sum(hand.values())
    saved = weights * (1 - (0.5 + 2 / 128) / 2)
    assert w.projected_bytes_per_step == pytest.approx(w.bytes_per_step - saved, rel=1e-12)
    ph = _base().phase("decode")
    assert ph is not None and w.bytes_per_step == pytest.approx(ph.bytes_per_step, rel=1e-9)
    assert w.gb_per_token == pytest.approx(ph.gb_per_token, rel=1e-4)
    assert w.projected_gb_per_token == pytest.approx((w.bytes_per_step - saved) / BATCH / 1e9)
    assert w.weight_bits_to == {c: 4.125 for c in sorted(hand)}
    # memory-bound rows: the floor follows the bytes at the device's sustained 4,272 GB/s
    qkv = next(r for r in w.rows if r.component == "qkv_proj")
    assert qkv.bound == "memory"
    assert qkv.projected_floor_ms == pytest.approx(qkv.projected_bytes / 4272e6, rel=1e-9)
    assert w.ceiling_tok_s is not None and w.projected_ceiling_tok_s is not None
    assert w.projected_ceiling_tok_s > w.ceiling_tok_s


def test_fp8_kv_halves_the_cache_traffic():
    """kv=fp8: attention reads K/V of T = 2048 + (8 + 1) / 2 = 2052.5 keys on average, 131,072 B
    per key (4 layers x K,V x 8 seqs x 8 KV heads x 128 x 2 B): 269,025,280 B, halved; the cache's
    torch.cat (kv_cache_write: reads and writes the whole cache) halves too. Weights kept."""
    w = _wi("kv=fp8")
    assert w is not None and w.kv_bytes_from == 2 and w.kv_bytes_to == 1
    att = next(r for r in w.rows if r.component == "attention")
    assert att.repriced == "kv"
    assert att.repriced_bytes == pytest.approx(131_072 * 2052.5, rel=1e-3)
    assert att.projected_bytes == pytest.approx(att.bytes - att.repriced_bytes / 2)
    cat = next(r for r in w.rows if r.component == "kv_cache_write")
    assert cat.repriced_bytes == pytest.approx(2 * 131_072 * 2052.5, rel=0.01)
    assert all(r.projected_bytes == r.bytes for r in w.rows if r.repriced not in ("kv",))


def test_per_class_attention_only():
    """attention=fp8 re-prices only q/k/v/o: 100,663,296 B at half."""
    w = _wi("attention=fp8")
    assert w is not None
    assert {r.repriced for r in w.rows if r.repriced} == {"attention"}
    saved = w.bytes_per_step - w.projected_bytes_per_step
    assert saved == pytest.approx(100_663_296 / 2, rel=1e-12)


def test_cli_json_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """The JSON's what_if validates against the schema and equals the projection; the table and
    markdown say projection; without --model or with a bad format: one line, exit 2."""
    cfg = tmp_path / "config.json"
    cfg.write_bytes(orjson.dumps(CONFIG))
    args = ["analyze", str(TRACE), "--phase", "decode", "--model", str(cfg),
            "--what-if", "weights=int4,kv=fp8"]
    assert main([*args, "--format", "json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    schema = json.loads((ROOT / "attrib" / "data" / "attrib.analysis-1.schema.json").read_text())
    jsonschema.validate(doc, schema)
    w = _wi("weights=int4,kv=fp8")
    assert w is not None and doc["what_if"] == orjson.loads(msgspec.json.encode(w))
    assert doc["what_if"]["formats"] == "weights=int4,kv=fp8"
    an = with_what_if(_base(), model_budget(CONFIG), parse_formats("weights=int4,kv=fp8"))
    assert "what-if weights=int4,kv=fp8 (projection)" in table.render(an)
    assert "## What-if (projection)" in markdown.render(an)
    assert "<h2>What-if (projection)</h2>" in html.render(an)
    assert main(["analyze", str(TRACE), "--what-if", "weights=int4"]) == 2
    assert "needs --model" in capsys.readouterr().err
    assert main([*args[:-1], "weights=int2"]) == 2
