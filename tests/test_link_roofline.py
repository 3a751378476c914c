"""Collectives are held to the interconnect, not to memory: a `communication` row's floor is its
bus bytes at the device's link bandwidth (one direction, nccl-tests' convention), its bound
"link", and its bytes stay out of GB/token (memory traffic). Checked on the H200 TP=2 decode
captures (tests/fixtures/captured/tp2_decode_rank*, NVLink 4: 450 GB/s a direction)."""

from __future__ import annotations

import pytest

from attrib.app import analyze

from conftest import FIXTURES

RANK1 = FIXTURES / "captured" / "tp2_decode_rank1.pt.trace.json.gz"


@pytest.fixture(scope="module")
def an():
    return analyze(RANK1)


def test_communication_floor_is_its_bus_bytes_over_the_link(an):
    assert an.device.known and an.device.key == "h200-sxm"
    for ph in an.phases:
        comm = ph.component("communication")
        assert comm is not None and comm.bound == "link" and comm.bytes
        assert comm.roofline_ms == pytest.approx(comm.bytes / 450e9 * 1e3, abs=1e-4)


def test_communication_bytes_are_not_memory_traffic(an):
    for ph in an.phases:
        memory = sum(c.bytes or 0 for c in ph.component_rows
                     if c.component != "communication" and c.over_peak is None)
        assert ph.bytes_per_step == pytest.approx(memory, rel=1e-6)


def test_the_action_says_one_rank_cannot_split_waiting_from_transfer(an):
    dec = next(p for p in an.summary.phases if p.phase == "decode")
    comm = [a for a in dec.actions if a.what == "bring communication to its link time"]
    assert comm and "attrib ranks" in comm[0].evidence


def test_assumed_says_how_collectives_are_priced(an):
    """The bus bytes are a convention, not a model config or Inductor estimate: "assumed" says
    which (it said "bytes mostly estimated (Inductor or model config) for communication")."""
    said = " ".join(an.summary.assumed)
    assert "collectives priced at their bus bytes" in said and "Inductor" not in said
