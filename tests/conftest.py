"""Shared test helpers: where the real fixtures live.

The fixtures are the project's shared real traces (../shared/fixtures beside the checkout, as laid
out for sessions and CI); ATTRIB_FIXTURES overrides the location.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(os.environ.get("ATTRIB_FIXTURES", ROOT.parent / "shared" / "fixtures"))
EXAMPLE_TRACE = ROOT / "examples" / "traces" / "h200_qwen3moe_eager_prefill_decode.json.gz"


@pytest.fixture(scope="session")
def fixtures() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"fixtures not found at {FIXTURES} (set ATTRIB_FIXTURES)")
    return FIXTURES
