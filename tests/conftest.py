"""Shared test helpers: where the real fixtures live (tests/fixtures, inside the checkout)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLE_TRACE = ROOT / "examples" / "traces" / "h200_qwen3moe_eager_prefill_decode.json.gz"


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return FIXTURES
