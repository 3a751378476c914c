"""`attrib ranks` on the TP=2 H200 captures (tests/fixtures/captured/README.md, tp2_decode_rank0/1):
per-rank step times, the collectives' wait / transfer / latency split and the step-start skew,
each checked against figures read by hand from the raw Kineto events of both ranks."""

from __future__ import annotations

import gzip
import shutil
from functools import cache
from pathlib import Path

import orjson
import pytest

from attrib.app import merge_ranks
from attrib.cli import main

from conftest import FIXTURES

RANKS = [FIXTURES / "captured" / f"tp2_decode_rank{r}.pt.trace.json.gz" for r in (0, 1)]
H200_LINK_GBS = 450.0  # NVLink 4: 900 GB/s bidirectional per GPU, 450 each way (archs.toml)


@cache
def _raw(rank: int) -> dict:
    return orjson.loads(gzip.decompress(RANKS[rank].read_bytes()))


def _events(rank: int, cat: str, prefix: str) -> list[dict]:
    ev = [e for e in _raw(rank)["traceEvents"]
          if e.get("cat") == cat and e.get("name", "").startswith(prefix)]
    return sorted(ev, key=lambda e: e["ts"])


def _ns(rank: int, ts_us: float) -> float:
    """An event's time on the shared clock, baseTimeNanoseconds + ts, less the base the two ranks
    share (test_same_clock_and_link; added as a float it would cost 256 ns of precision)."""
    return ts_us * 1000


@cache
def _doc() -> dict:
    return merge_ranks(list(RANKS))


def test_same_clock_and_link():
    """Both ranks ran on one host: the same baseTimeNanoseconds; the H200's NVLink is priced."""
    assert _raw(0)["baseTimeNanoseconds"] == _raw(1)["baseTimeNanoseconds"]
    d = _doc()
    assert d["schema"] == "attrib.ranks/1" and d["world_size"] == 2
    assert d["link"]["gbs"] == H200_LINK_GBS
    assert [r["rank"] for r in d["ranks"]] == [0, 1]
    assert d["collectives"] == {"issued": 56, "matched": 56, "name_mismatch": 0, "priced": 56}


def test_step_times_side_by_side():
    """Per-rank step ms = each rank's step annotation (the window is the host range here), the
    slowest rank per step and the skew of the step starts from the raw annotations."""
    d = _doc()
    ann = [[e for e in _events(r, "user_annotation", "")
            if e["name"].startswith(("prefill (", "decode ("))] for r in (0, 1)]
    assert [len(a) for a in ann] == [7, 7] and len(d["steps"]) == 7
    for i, s in enumerate(d["steps"]):
        durs = [ann[r][i]["dur"] / 1000 for r in (0, 1)]
        assert [x["step_ms"] for x in s["ranks"]] == pytest.approx(durs, abs=1e-3)
        assert s["slowest_rank"] == max((0, 1), key=lambda r: durs[r])
        starts = [_ns(r, ann[r][i]["ts"]) for r in (0, 1)]
        assert s["skew_ms"] == pytest.approx(abs(starts[1] - starts[0]) / 1e6, abs=1e-3)
    # decode step 1: rank 0 entered first (ts 5196225243212.769 vs ...243649.402 us): 0.4366 ms
    assert d["steps"][1]["skew_ms"] == pytest.approx(0.4366, abs=1e-3)
    assert d["steps"][1]["ranks"][1]["skew_ms"] == pytest.approx(0.4366, abs=1e-3)
    assert d["steps"][1]["ranks"][0]["skew_ms"] == 0


def _split(seq: int) -> list[tuple[float, float, float]]:
    """(wait, transfer, latency) ns of the seq-th all-reduce kernel of each rank, by hand: the
    latest start over the ranks, wait = latest - own start (at most the kernel), transfer = bus
    bytes (In msg nelems x 2 B x 2(n-1)/n, n = 2) at 450 GB/s, latency = the rest."""
    ks = [_events(r, "kernel", "ncclDevKernel_AllReduce")[seq] for r in (0, 1)]
    starts = [_ns(r, k["ts"]) for r, k in enumerate(ks)]
    latest = max(starts)
    out = []
    for start, k in zip(starts, ks):
        dur = k["dur"] * 1000
        wait = min(latest, start + dur) - start
        nbytes = k["args"]["In msg nelems"] * 2 * (2 * (2 - 1) / 2)
        transfer = min(nbytes / H200_LINK_GBS, dur - wait)
        out.append((wait, transfer, dur - wait - transfer))
    return out


def test_wait_transfer_split_of_one_all_reduce():
    """The first all-reduce of decode step 1 (the 9th of the run; 8 per step): bytes from the raw
    kernel args (16,384 bf16 elements = batch 8 x hidden 2048: 32,768 bus bytes, 72.8 ns at
    450 GB/s); the rank that started first waits for the other."""
    hand = _split(8)
    k0, k1 = (_events(r, "kernel", "ncclDevKernel_AllReduce")[8] for r in (0, 1))
    assert k0["args"]["In msg nelems"] == k1["args"]["In msg nelems"] == 8 * 2048
    assert hand[0][1] == pytest.approx(32768 / 450, rel=1e-9)
    first = 0 if _ns(0, k0["ts"]) < _ns(1, k1["ts"]) else 1
    assert hand[1 - first][0] == 0 and hand[first][0] > 0
    step = _doc()["steps"][1]
    assert step["phase"] == "decode"
    # the step's figures are sums over its 8 all-reduces: rebuild them by hand from the raw events
    for r in (0, 1):
        rows = [_split(seq)[r] for seq in range(8, 16)]
        got = step["ranks"][r]
        assert got["wait_ms"] == pytest.approx(sum(x[0] for x in rows) / 1e6, abs=2e-6)
        assert got["transfer_ms"] == pytest.approx(sum(x[1] for x in rows) / 1e6, abs=2e-6)
        assert got["latency_ms"] == pytest.approx(sum(x[2] for x in rows) / 1e6, abs=2e-6)
        assert step["ranks"][r]["collectives"] == 8


def test_prefill_transfer_is_its_bus_bytes():
    """Prefill all-reduces carry 8 x 512 x 2048 bf16 (16.8 MB of bus bytes each at n = 2): 8 of
    them at 450 GB/s are 0.298 ms of transfer on each rank, the same on both."""
    p = _doc()["steps"][0]
    want = 8 * 8 * 512 * 2048 * 2 / H200_LINK_GBS / 1e6
    assert [r["transfer_ms"] for r in p["ranks"]] == pytest.approx([want, want], rel=1e-3)


def test_cli_folder_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """`attrib ranks DIR --format json`: a folder of the two rank traces gives the same document."""
    for f in RANKS:
        shutil.copy(f, tmp_path / f.name)
    assert main(["ranks", str(tmp_path), "--format", "json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["phases"] == orjson.loads(orjson.dumps(_doc()["phases"]))
    assert main(["ranks", str(RANKS[0])]) == 2
    assert "two or more ranks" in capsys.readouterr().err
