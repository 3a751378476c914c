"""Output digests that gate every speedup (issue 41, first slice): collectors.outputs digests the
generated token ids into the stamp's correctness_gate; compare says whether both sides generated
the same tokens and `--gate` calls a pair that did not "not comparable" (exit 3). The pairs are the
real H200 A/A captures (sdpa_attn_a/_b) with their stamps copied and given digests inside the test."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from attrib.cli import main
from attrib.errors import TraceError
from collectors import outputs
from collectors.provenance import read_sidecar, sidecar_path

from conftest import FIXTURES

CAP = FIXTURES / "captured"
IDS = [[17, 4, 4, 912], [3, 3, 31999, 0]]  # two requests' generated ids


class _Tensorish:
    """What outputs reads of a tensor: its tolist()."""

    def __init__(self, rows):
        self.rows = rows

    def tolist(self):
        return self.rows


def test_the_digest_is_the_sha256_of_the_ids_per_request():
    want = hashlib.sha256(b"[[17,4,4,912],[3,3,31999,0]]").hexdigest()
    got = outputs.digest(IDS)
    assert got == {"outputs_sha256": want, "tokens": 8, "requests": 2, "how": "greedy token ids"}
    assert outputs.digest(_Tensorish(IDS)) == got
    # a flat list is one request; another order is other outputs
    assert outputs.digest([17, 4, 4, 912])["requests"] == 1
    assert outputs.digest([IDS[1], IDS[0]])["outputs_sha256"] != want
    for bad in ([[1, -2]], [[1.5]], "12 3", [[True]], [[1], "x"]):
        with pytest.raises(ValueError):
            outputs.digest(bad)


def test_token_ids_from_a_file(tmp_path):
    js, txt, bad = tmp_path / "ids.json", tmp_path / "ids.txt", tmp_path / "bad.txt"
    js.write_text(json.dumps(IDS))
    txt.write_text("17 4 4 912\n3 3 31999 0\n")
    bad.write_text("17 four\n")
    assert outputs.from_file(js) == outputs.from_file(txt) == IDS
    with pytest.raises(TraceError, match="bad.txt: not token ids"):
        outputs.from_file(bad)


def _pair(tmp_path, gate_a, gate_b):
    """The real A/A pair under tmp_path, each stamp given `gate_*` (None: left as captured)."""
    out = []
    for name, gate in (("sdpa_attn_a", gate_a), ("sdpa_attn_b", gate_b)):
        src = CAP / f"{name}.pt.trace.json.gz"
        dst = tmp_path / src.name
        shutil.copy(src, dst)
        shutil.copy(sidecar_path(src), sidecar_path(dst))
        if gate is not None:
            outputs.stamp(dst, gate)
        out.append(str(dst))
    return out


def _compare(capsys, paths, *args):
    rc = main(["compare", *paths, "--gate", "5", *args])
    text = " ".join(capsys.readouterr().out.split())
    return rc, text


def test_identical_outputs_are_said_and_the_gate_passes(tmp_path, capsys):
    same = outputs.digest(IDS)
    paths = _pair(tmp_path, same, same)
    assert read_sidecar(paths[0])["correctness_gate"] == same
    assert read_sidecar(paths[0])["model"] is not None  # the rest of the stamp kept
    rc, text = _compare(capsys, paths)
    assert rc == 0 and "verdict: outputs identical (8 tokens, greedy token ids)" in text


def test_other_outputs_are_not_comparable(tmp_path, capsys, analysed_once):
    """The pair compared three ways (each side analysed once)."""
    paths = _pair(tmp_path, outputs.digest(IDS), outputs.digest([IDS[0], [3, 3, 31999, 1]]))
    rc, text = _compare(capsys, paths)
    assert rc == 3 and "verdict: OUTPUTS DIFFER: sha256" in text
    assert "NOT COMPARABLE (exit 3): outputs differ" in text
    # overridden: gated on the numbers (the A/A pair passes) and the page says why
    rc, text = _compare(capsys, paths, "--allow-mismatch")
    assert rc == 0 and "gated with --allow-mismatch although outputs differ" in text
    out = tmp_path / "c.json"
    main(["compare", *paths, "--format", "json", "-o", str(out)])
    assert json.loads(out.read_text())["outputs"]["status"] == "differ"


def test_a_failed_check_differs_and_one_side_is_said(tmp_path, capsys):
    ok = outputs.check(True, "logits max abs diff <= 1e-3", 4e-4)
    paths = _pair(tmp_path, ok, outputs.check(False, "logits max abs diff <= 1e-3", 0.2))
    rc, text = _compare(capsys, paths)
    assert rc == 3 and "a check failed: logits max abs diff <= 1e-3 (0.2)" in text
    paths = _pair(tmp_path, ok, ok)
    rc, text = _compare(capsys, paths)
    assert rc == 0 and "outputs checked on both sides: logits max abs diff <= 1e-3: passed" in text
    paths = _pair(tmp_path, outputs.digest(IDS), None)
    rc, text = _compare(capsys, paths)
    assert rc == 0 and "outputs recorded on one side only: only the base stamp" in text


def test_a_live_capture_stamps_its_outputs(tmp_path):
    torch = pytest.importorskip("torch")
    import collectors

    ids = torch.tensor(IDS)
    with collectors.capture(tmp_path, steps=1, name="run", with_stack=False) as cap:
        with cap.phase("decode", tokens=2):
            torch.ones(4) + 1
    res = cap.close()
    cap.outputs(ids)  # after the window closed: the written stamp is updated
    assert read_sidecar(res.path)["correctness_gate"] == outputs.digest(IDS)
