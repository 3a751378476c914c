"""Regression pins: figures copied from attrib's own output on the real fixtures, with no independent
derivation. They prove nothing about correctness; they flag a change. When one moves, find out why,
and if the new figure is right, update the pin in the same commit and say so.

Every other test derives its expected numbers (from raw events, shapes, or by hand).
"""

from __future__ import annotations

import pytest

from attrib.cost.budget import budget_totals, decode_budget
from test_budget import QWEN3_MOE


def test_pin_qwen3_moe_decode_budget_total():
    """Weights (2,576,965,632 B) are derived in test_budget.py; the total adds activations and K/V."""
    tot = budget_totals(decode_budget(QWEN3_MOE, batch=4, context=513, qkv_fused=False), 4)
    assert tot["bytes"] == 2_620_519_456
    assert tot["gb_per_token"] == pytest.approx(0.655129864)
