"""16-bit-gemm-decode (issue 36, the inverse of low-bit-gemm-large-m) on real H200 captures: a bf16
decode whose weights are most of its bytes gets the int4 opportunity, with figures derived here by
hand from the raw events' shapes and the capture's parameter count; an int4/int8/fp8 decode and a
prefill never do; the finding ranks last and is no bottleneck row."""

from __future__ import annotations

import json
import statistics
from functools import cache
from pathlib import Path

import pytest

from attrib.analysis.model import Analysis
from attrib.app import analysis, analyze, attribution
from attrib.cost.dtypes import WHAT_IF_BITS
from rules.decode_weights import RULE

from conftest import FIXTURES, raw_events

CAPTURED = FIXTURES / "captured"
# bf16 Llama-shaped decodes on the H200 (random init, L4, hidden 2048; vocab 32000 / 151936)
BF16 = {"aa2_a": CAPTURED / "issue37" / "aa2_a.pt.trace.json.gz",
        "sampler_b1_v152k": CAPTURED / "sampler_b1_v152k.pt.trace.json.gz"}
LOW_BIT = [CAPTURED / "issue36" / f"{n}.pt.trace.json.gz"
           for n in ("int4_tinygemm_b1", "int4_tinygemm_b8", "int4_triton_awq_b1", "int8_wo_b1",
                     "int8_wo_b8", "bnb_nf4_b1", "bnb_nf4_b8", "bnb_int8_b1")] + [
    CAPTURED / "fp8_w8a8_decode.pt.trace.json.gz"]
GEMMS = {"aten::mm": 1, "aten::linear": 1, "aten::addmm": 2, "aten::matmul": 1}
BF16_BYTES = 2


@cache
def _analysis(path: Path) -> Analysis:
    return analysis(attribution(path))


def _finding(an: Analysis):  # type: ignore[no-untyped-def]
    found = [f for f in an.findings if f.rule == RULE]
    assert len(found) <= 1
    return found[0] if found else None


def _raw_weights(path: Path) -> float:
    """The median over the annotated decode steps of the bf16 weight operands of the innermost
    dense GEMM ops inside each step's CPU annotation (aten::linear > aten::matmul > aten::mm: the
    mm once), from the raw events' Input Dims and Input type."""
    ev = raw_events(path)
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "user_annotation"
                   and e["name"].startswith("decode"))
    ops = [e for e in ev if e.get("cat") == "cpu_op" and e["name"] in GEMMS]
    per_step = []
    for t0, t1 in spans:
        total = 0
        mine = [e for e in ops if t0 <= e["ts"] < t1]
        for e in mine:
            if any(o is not e and o["tid"] == e["tid"] and e["ts"] <= o["ts"] < e["ts"] + e["dur"]
                   for o in mine):
                continue  # an outer op: its inner GEMM op holds the weight
            i = GEMMS[e["name"]]
            dims, types = e["args"]["Input Dims"][i], e["args"]["Input type"][i]
            if len(dims) == 2 and types == "c10::BFloat16":
                total += dims[0] * dims[1] * BF16_BYTES
        per_step.append(total)
    return statistics.median(per_step)


def _model_weights(path: Path) -> int:
    """The capture's own parameter count (its .model.json): attention, dense MLP and lm_head bytes
    (the embedding is gathered, not read whole; norms are not GEMM weights)."""
    parts = json.loads(path.with_name(path.name.replace(".pt.trace.json.gz", ".model.json"))
                       .read_text())["param_bytes"]["bytes_by_part"]
    return int(parts["attention"] + parts["dense_mlp"] + parts["lm_head"])


@pytest.mark.parametrize("name", sorted(BF16))
def test_the_weight_bytes_are_the_raw_shapes_and_the_models_parameters(name: str) -> None:
    path = BF16[name]
    f = _finding(_analysis(path))
    assert f is not None and f.phase == "decode" and f.severity == "info"
    weights = _raw_weights(path)
    assert weights == _model_weights(path) == f.evidence["weight_bytes_per_step"]
    assert f.evidence["weight_format"] == "bf16"
    assert set(f.components) == {"qkv_proj", "o_proj", "mlp_gate_up", "mlp_down", "lm_head"}


@pytest.mark.parametrize("name", sorted(BF16))
def test_the_int4_figures_follow_from_the_weights_by_hand(name: str) -> None:
    """int4 at the what-if's 4.125 bits (0.5 B + an fp16 scale per 128); the step's bytes less the
    weights' saving; the GEMMs memory-bound, so their floor drops by the saved bytes at the
    roofline bandwidth; at their achieved GB/s their time scales with their bytes."""
    an = _analysis(BF16[name])
    f, ph = _finding(an), an.phase("decode")
    assert f is not None and ph is not None
    e, bw = f.evidence, float(an.device.roofline_bw or 0)
    w = _raw_weights(BF16[name])
    to = w * WHAT_IF_BITS["int4"] / 16
    assert e["to_bits"] == 4.125 and e["projected_weight_bytes_per_step"] == pytest.approx(to)
    rows = {c.component: c for c in ph.component_rows}
    gemm_bytes = sum(rows[c].bytes or 0 for c in f.components)
    gemm_ms = sum(rows[c].ms or 0 for c in f.components)
    step_bytes = sum(c.bytes for c in ph.component_rows if c.bytes is not None)
    assert e["bytes_per_step"] == pytest.approx(step_bytes)
    assert e["projected_bytes_per_step"] == pytest.approx(step_bytes - w + to)
    assert e["weight_share"] == pytest.approx(w / step_bytes, abs=1e-4)
    assert e["gemm_gbs"] == pytest.approx(gemm_bytes / gemm_ms / 1e6, abs=0.1)
    assert e["bw_fraction"] >= 0.3 and e["weight_share"] >= 0.5
    # the floors before are the components' rooflines (rounded to 4 places), after the new bytes
    floor = sum(rows[c].roofline_ms or 0 for c in f.components)
    after = (gemm_bytes - w + to) / (bw * 1e6)
    assert f.ms_per_step == pytest.approx(floor - after, abs=3e-4)
    assert f.ms_per_step == pytest.approx((w - to) / (bw * 1e6), abs=3e-4)
    assert e["at_achieved_gbs_ms"] == pytest.approx(gemm_ms * (gemm_bytes - w + to) / gemm_bytes,
                                                    abs=1e-4)


def test_aa2_a_by_hand() -> None:
    """aa2_a (L4, hidden 2048, vocab 32000, batch 4): q 2048x2048, k and v 2048x1024, o 2048x2048,
    gate and up 2048x5632, down 5632x2048 a layer, lm_head 2048x32000, all bf16."""
    layer = (2048 * 2048 + 2 * 2048 * 1024 + 2048 * 2048 + 3 * 2048 * 5632) * 2
    weights = 4 * layer + 2048 * 32000 * 2
    f = _finding(_analysis(BF16["aa2_a"]))
    assert f is not None and weights == 508_559_360 == f.evidence["weight_bytes_per_step"]
    assert "read 0.509 GB of bf16 weights a step (82% of the step's 0.617 GB)" in f.title
    assert "int4 weights (4.125 bits) would read 0.131 GB: 2.6x fewer bytes a step" in f.title
    assert f.ms_per_step == pytest.approx((weights - weights * 4.125 / 16) / 4272e6, abs=3e-4)


def test_it_is_what_if_s_projection(tmp_path: Path) -> None:
    """With the capture's model config, `--what-if weights=int4` re-prices the same GEMM weights
    to the same bytes (one arithmetic: attrib.analysis.reprice)."""
    path = BF16["aa2_a"]
    config = json.loads(path.with_name("aa2_a.model.json").read_text())["config"]
    an = analyze(path, model=config, what_if="weights=int4")
    f = _finding(an)
    assert f is not None and an.what_if is not None
    rows = {r.component: r for r in an.what_if.rows}
    for comp, w in f.evidence["weights"].items():
        assert rows[comp].repriced_bytes == w
    gemm_after = sum(rows[c].projected_bytes for c in f.components)
    gemm = sum(rows[c].bytes for c in f.components)
    assert f.evidence["projected_weight_bytes_per_step"] == pytest.approx(
        sum(f.evidence["weights"].values()) - (gemm - gemm_after))
    floor_drop = sum((rows[c].floor_ms or 0) - (rows[c].projected_floor_ms or 0)
                     for c in f.components)
    assert f.ms_per_step == pytest.approx(floor_drop)


def test_it_ranks_last_and_is_no_bottleneck_row() -> None:
    """An opportunity, not a pathology: after every other finding (caveats included), severity
    info, in no ranked bottleneck row and no summary action."""
    an = _analysis(BF16["aa2_a"])
    f = _finding(an)
    assert an.findings[-1] is f and len(an.findings) > 1
    i = len(an.findings) - 1
    for ph in an.phases:
        assert all(i not in b.findings and b.what != f.title for b in ph.bottlenecks.ranked)
    assert all(a.rule != RULE for ph in an.summary.phases for a in ph.actions)


@pytest.mark.parametrize("path", LOW_BIT, ids=lambda p: p.name.split(".")[0])
def test_quiet_on_low_bit_decodes(path: Path) -> None:
    """int4 tinygemm / Triton AWQ, int8 weight-only, bitsandbytes NF4 / LLM.int8() and fp8 decodes
    are already low-bit (the int4 ones keep a bf16 lm_head, 51% of int4_tinygemm_b1's bytes: a
    choice, not this rule's); a GEMM whose weights are unpriced or in a format of unknown bits
    (bitsandbytes' where no cost model knows it) keeps the rule quiet too."""
    an = _analysis(path)
    assert an.phase("decode") is not None and _finding(an) is None


def test_quiet_on_prefill() -> None:
    """A forward with no decode phase (ViT b8) and the prefill of a bf16 generation: never."""
    assert _finding(_analysis(CAPTURED / "vit_forward_b8.pt.trace.json.gz")) is None
    assert all(f.phase == "decode" for f in _analysis(BF16["aa2_a"]).findings if f.rule == RULE)
