"""Issue 39: numbers outside their domain at the boundary, each derived here from a real file (a
Kineto trace's distributedInfo, a model config, the device database as an --arch-file, a capture
stamp) or given as an option or an API argument. Each is one line naming the file (or option), the
field and the value, exit 2 (the API: attrib.errors' TraceError or UsageError with the same
message), never an internal error and never a figure computed from it; a stamp's bad numbers are
a warning and the stamp is left out (a stamp never stops the analysis)."""

from __future__ import annotations

import gzip
import json
import pickle
import shutil
import sys
from pathlib import Path

import pytest

import attrib
from attrib.bounds import toml_text
from attrib.cli import main
from attrib.errors import TraceError, UsageError

from conftest import FIXTURES, ROOT

sys.path.insert(0, str(Path(__file__).resolve().parent / "hostile"))
from corpus import NUMBER_VARIANTS  # noqa: E402
from runner import check, run  # noqa: E402

RANK0 = FIXTURES / "captured" / "tp2_decode_rank0.pt.trace.json.gz"  # distributedInfo: nccl, world 2
RANK1 = FIXTURES / "captured" / "tp2_decode_rank1.pt.trace.json.gz"
MODEL = FIXTURES / "captured" / "tp2_decode_rank0.model.json"  # {"config": the HF config, ...}
# the smallest real eager trace with bytes priced (HF Qwen1.5-0.5B-Chat on an H100)
H100 = FIXTURES / "torch" / "h100_hf_qwen1.5-0.5b-chat.json.gz"
ARCHS = ROOT / "attrib" / "data" / "archs.toml"


def _error(capsys, *args: object) -> str:
    """The one stderr line of `attrib ARGS`, which must exit 2."""
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in out.err, (code, out.err)
    return lines[0]


def _trace(tmp_path: Path, edit, source: Path = RANK0) -> Path:
    """The real trace with its top-level document edited by `edit(doc)`."""
    doc = json.loads(gzip.decompress(source.read_bytes()))
    edit(doc)
    out = tmp_path / "rank.json"
    out.write_text(json.dumps(doc))
    return out


def _config(tmp_path: Path, **changes) -> Path:
    """The real HF config of the TP=2 capture with `changes` (None: the key removed)."""
    cfg = json.loads(MODEL.read_text())["config"]
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    out = tmp_path / "config.json"
    out.write_text(json.dumps(cfg))
    return out


def _deep_archs(tmp_path: Path, depth: int = 5000) -> Path:
    """The real device database with one entry's list of name patterns nested `depth` deep."""
    text = ARCHS.read_text()
    at = text.index("match_names = [") + len("match_names = ")
    out = tmp_path / "archs.toml"
    out.write_text(text[:at] + "[" * depth + '"x"' + "]" * depth + text[text.index("\n", at):])
    return out


# ------------------------------------------------------------------ Kineto metadata


@pytest.mark.parametrize("field, value, want", [
    ("world_size", 2**70, "1180591620717411303424: must be a whole number in 1..65536"),  # was exit 70
    ("world_size", 0, "0: must be a whole number in 1..65536"),
    ("world_size", -2, "-2: must be a whole number in 1..65536"),
    ("world_size", 65537, "65537: must be a whole number in 1..65536"),
    ("world_size", "two", "'two': must be a whole number in 1..65536"),
    ("rank", 2, "2: must be a whole number in 0..1"),  # a rank of a world of 2
    ("rank", -1, "-1: must be a whole number in 0..1"),
])
def test_distributed_info_out_of_domain(capsys, tmp_path, field, value, want):
    bad = _trace(tmp_path, lambda d: d["distributedInfo"].update({field: value}))
    line = _error(capsys, "analyze", bad, "--format", "json")
    assert line == f"attrib: error: {bad}: distributedInfo.{field} = {want}"
    # the API: the same message, the project's error (a ValueError)
    with pytest.raises(TraceError) as exc:
        attrib.analyze(bad)
    assert str(exc.value) == f"{bad}: distributedInfo.{field} = {want}"
    assert isinstance(exc.value, ValueError)


def test_base_time_out_of_domain(capsys, tmp_path):
    bad = _trace(tmp_path, lambda d: d.update(baseTimeNanoseconds=2**70))
    line = _error(capsys, "ranks", bad, RANK1)
    assert line == (f"attrib: error: {bad}: baseTimeNanoseconds = 1180591620717411303424: "
                    "must be a whole number in 0..4611686018427387904")


def test_real_distributed_traces_unchanged():
    # both ranks of the real TP=2 capture read as before: world size 2, ranks 0 and 1
    for path, rank in ((RANK0, 0), (RANK1, 1)):
        dist = attrib.analyze(path).to_dict()["distributed"]
        assert (dist["world_size"], dist["rank"], dist["backend"]) == (2, rank, "nccl")


# ------------------------------------------------------------------ model config


@pytest.mark.parametrize("changes, want", [
    ({"num_attention_heads": 0},  # was ZeroDivisionError, exit 70
     "num_attention_heads = 0: must be a whole number in 1..2048 (at most hidden_size)"),
    ({"hidden_size": -2048},  # was exit 0, negative bytes
     "hidden_size = -2048: must be a whole number in 1..16777216"),
    ({"num_hidden_layers": -4}, "num_hidden_layers = -4: must be a whole number in 1..65536"),
    ({"num_hidden_layers": 0}, "num_hidden_layers = 0: must be a whole number in 1..65536"),
    ({"head_dim": None, "num_attention_heads": 3, "num_key_value_heads": 1},
     "num_attention_heads = 3: must be a divisor of hidden_size 2048 (no head_dim given)"),
    ({"num_key_value_heads": 32},
     "num_key_value_heads = 32: must be a whole number in 1..16 (at most num_attention_heads)"),
    ({"vocab_size": 1.5e21}, "vocab_size = 1.5e+21: must be a whole number in 1..16777216"),
    ({"intermediate_size": 5632.5},
     "intermediate_size = 5632.5: must be a whole number in 0..16777216"),
    ({"sliding_window": -1}, "sliding_window = -1: must be a whole number in 0..16777216"),
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [0, 128]}},
     "quantization_config.weight_block_size = 0: must be a whole number in 1..16777216"),
    ({"quantization_config": {"quant_method": "gptq", "bits": 0}},
     "quantization_config.bits = 0: must be a whole number in 1..32"),
])
def test_model_config_out_of_domain(capsys, tmp_path, changes, want):
    cfg = _config(tmp_path, **changes)
    line = _error(capsys, "analyze", RANK0, "--model", cfg, "--context", "8", "--format", "json")
    assert line == f"attrib: error: {cfg}: {want}"
    with pytest.raises(TraceError) as exc:
        attrib.analyze(RANK0, model=cfg, context=8)
    assert str(exc.value) == f"{cfg}: {want}"
    # a config given as a mapping: the same message, named "model config"
    with pytest.raises(TraceError) as exc:
        attrib.analyze(RANK0, model=json.loads(cfg.read_text()), context=8)
    assert str(exc.value) == f"model config: {want}"


def test_model_config_real_one_still_budgets(tmp_path):
    # the unedited config: a TP=2 rank's shard of 4 layers, K/V read at context 8
    doc = attrib.analyze(RANK0, model=_config(tmp_path), context=8).to_dict()
    assumed = doc["summary"]["assumed"]
    assert "--model config.json: bytes of ops the trace has no shapes for, at context 8" \
        in assumed, assumed


# ------------------------------------------------------------------ TOML depth


def test_arch_file_nested_5000_deep(capsys, tmp_path):
    deep = _deep_archs(tmp_path)
    want = f"{deep}: arrays or tables nested more than 32 deep (line "
    for args in (("analyze", H100, "--arch-file", deep), ("archs", "--arch-file", deep)):
        line = _error(capsys, *args)  # was RecursionError, exit 70
        assert line.startswith(f"attrib: error: {want}") and line.endswith("): not a device file")
    with pytest.raises(TraceError, match="nested more than 32 deep"):
        attrib.analyze(H100, arch_file=deep)
    # the check passes the real database and anything up to 32 deep to the parser
    assert toml_text(ARCHS.read_text(), ARCHS) is None
    ok = _deep_archs(tmp_path, 32)
    assert toml_text(ok.read_text(), ok) is None
    with pytest.raises(TraceError, match=r"nested more than 32 deep \(line \d+\)"):
        toml_text(_deep_archs(tmp_path, 33).read_text(), ok)


# ------------------------------------------------------------------ options


@pytest.mark.parametrize("args, line", [
    (["analyze", RANK0, "--model", MODEL, "--context", "99999999999999999999"],  # was 2.5e24 bytes
     "--context = 99999999999999999999: must be a whole number in 1..16777216"),
    (["analyze", RANK0, "--context", "0"], "--context = 0: must be a whole number in 1..16777216"),
    (["export", RANK0, "-o", "x.json", "--context", "-5"],
     "--context = -5: must be a whole number in 1..16777216"),
    (["analyze", RANK0, "--capture-batch", "-1"],  # was accepted
     "--capture-batch = -1: must be a whole number in 1..1048576"),
    (["analyze", RANK0, "--top", "-1"], "--top = -1: must be a whole number >= 1"),
    (["analyze", RANK0, "--weight-bits", "inf"],  # was accepted
     "--weight-bits: weight bits = inf: must be a finite number in 1..32"),
    (["analyze", RANK0, "--weight-bits", "experts=nan"],
     "--weight-bits: weight bits = nan: must be a finite number in 1..32"),
    (["analyze", RANK0, "--weight-bits", "64"],
     "--weight-bits: weight bits = 64: must be a finite number in 1..32"),
    (["compare", RANK0, RANK1, "--gate", "nan"],  # was a gate that never fires
     "--gate = nan: must be a finite number in 0..1000"),
    (["compare", RANK0, RANK1, "--gate", "inf"], "--gate = inf: must be a finite number in 0..1000"),
    (["compare", RANK0, RANK1, "--min-effect", "nan"],
     "--min-effect = nan: must be a finite number in 0..1000"),
    (["compare", RANK0, RANK1, "--min-effect", "inf"],
     "--min-effect = inf: must be a finite number in 0..1000"),
    (["trend", FIXTURES / "captured" / "rolling_h200", "--min-effect", "-1"],
     "--min-effect = -1: must be a finite number in 0..1000"),
    (["ranks", RANK0, RANK1, "--link-gbs", "nan"],  # was accepted
     "--link-gbs = nan: must be a finite number > 0 and <= 100000"),
    (["ranks", RANK0, RANK1, "--link-gbs", "0"],
     "--link-gbs = 0: must be a finite number > 0 and <= 100000"),
])
def test_option_out_of_domain(capsys, tmp_path, monkeypatch, args, line):
    monkeypatch.chdir(tmp_path)
    assert _error(capsys, *args) == f"attrib: error: {line}"
    assert list(tmp_path.iterdir()) == []


def test_option_help_shows_the_range(capsys):
    for cmd, shown in ((["compare"], ("--gate PCT", "[0<=x<=1000]")),
                       (["ranks"], ("--link-gbs GB/S", "[0<x<=100000]")),
                       (["analyze"], ("--context INTEGER RANGE", "[1<=x<=16777216]"))):
        assert main([*cmd, "--help"]) == 0
        text = " ".join(capsys.readouterr().out.split())
        assert all(s in text for s in shown), (cmd, text)


def test_gate_in_range_still_gates(capsys):
    # a real trace against itself at the largest gate: the gate ran and passed (exit 0)
    assert main(["compare", str(RANK0), str(RANK0), "--gate", "1000", "--format", "json"]) == 0
    gate = json.loads(capsys.readouterr().out)["gate"]
    assert (gate["pct"], gate["exit_code"], gate["failed_phases"]) == (1000.0, 0, [])


# ------------------------------------------------------------------ the Python API


@pytest.mark.parametrize("kwargs, message", [
    ({"top": -1}, "top = -1: must be a whole number >= 1"),
    ({"top": 0}, "top = 0: must be a whole number >= 1"),
    ({"top": 2.5}, "top = 2.5: must be a whole number >= 1"),
    ({"top": True}, "top = True: must be a whole number >= 1"),
    ({"capture_batch": -1}, "capture_batch = -1: must be a whole number in 1..1048576"),
    ({"context": 10**20, "model": MODEL},
     "context = 100000000000000000000: must be a whole number in 1..16777216"),
    ({"weight_bits": {"bogus": 4}, "model": MODEL},
     "weight_bits class 'bogus': expected one of attention, mlp, experts, shared_experts, "
     "router, embedding, lm_head, default"),
    ({"weight_bits": {"experts": float("inf")}, "model": MODEL},
     "weight bits of experts = inf: must be a finite number in 1..32"),
    ({"weight_bits": float("nan"), "model": MODEL}, "weight bits = nan: must be a finite number in 1..32"),
    ({"weight_bits": "bogus=4", "model": MODEL},
     "--weight-bits: 'bogus=4': expected CLASS=BITS with CLASS one of attention, mlp, experts, "
     "shared_experts, router, embedding, lm_head, default"),
])
def test_api_arguments_out_of_domain(tmp_path, kwargs, message):
    if "model" in kwargs:
        kwargs = {**kwargs, "model": _config(tmp_path)}
    with pytest.raises(UsageError) as exc:
        attrib.analyze(H100, **kwargs)
    assert str(exc.value) == message and isinstance(exc.value, ValueError)


def test_errors_are_value_errors_and_pickle():
    err = TraceError("x.json", "distributedInfo.world_size = 0: must be a whole number in 1..65536")
    assert isinstance(err, ValueError) and issubclass(UsageError, ValueError)
    back = pickle.loads(pickle.dumps(err))  # a sweep worker's error reaches its parent whole
    assert (type(back), back.path, back.problem, str(back)) == (TraceError, err.path, err.problem, str(err))


# ------------------------------------------------------------------ capture stamps


@pytest.mark.parametrize("field, value, want", [
    ("context_length", 2**70, "context_length = 1180591620717411303424: must be a whole number in "
                              "0..16777216"),
    ("batch", -8, "batch = -8: must be a whole number in 0..1048576"),
    ("correctness_gate", float("nan"), "stamp.correctness_gate = nan: must be a finite number"),
])
def test_stamp_out_of_domain_is_left_out_with_a_warning(capsys, tmp_path, field, value, want):
    # the real trace and its real stamp, the stamp's field edited: the trace is analysed without the
    # stamp and one warning names the stamp, the field and the value (before: exit 70 at the JSON
    # output, or the figure used)
    trace = tmp_path / RANK0.name
    shutil.copy(RANK0, trace)
    stamp = json.loads(Path(f"{RANK0}.attrib.json").read_text())
    stamp[field] = value
    Path(f"{trace}.attrib.json").write_text(json.dumps(stamp))  # json writes NaN as the bare literal
    assert main(["analyze", str(trace), "--format", "json"]) == 0
    out = capsys.readouterr()
    assert out.err.strip() == (f"attrib: warning: {trace}: {trace}.attrib.json: provenance sidecar "
                               f"ignored: {want}")
    # the trace's own embedded stamp stands in for the sidecar left out
    embedded = json.loads(gzip.decompress(RANK0.read_bytes()))["attrib"]
    assert json.loads(out.out)["provenance"] == embedded


def test_embedded_stamp_out_of_domain_is_left_out_with_a_warning(capsys, tmp_path):
    # the stamp the capture embedded in the trace itself (no sidecar beside the copy): its context
    # 2**70 (an int no JSON output holds) leaves it out, one warning
    bad = _trace(tmp_path, lambda d: d["attrib"].update(context_length=2**70))
    assert main(["analyze", str(bad), "--format", "json"]) == 0
    out = capsys.readouterr()
    assert out.err.strip() == (f"attrib: warning: {bad}: {bad}: embedded provenance stamp ignored: "
                               "attrib.context_length = 1180591620717411303424: must be a whole "
                               "number in 0..16777216")
    assert json.loads(out.out)["provenance"] == {}


def test_api_merge_ranks_link_gbs():
    from attrib.app import merge_ranks

    for gbs in (float("nan"), float("inf"), 0.0, -5.0):
        with pytest.raises(UsageError) as exc:
            merge_ranks([RANK0, RANK1], link_gbs=gbs)
        assert str(exc.value) == f"link_gbs = {gbs:g}: must be a finite number > 0 and <= 100000"


# ------------------------------------------------------------------ the hostile corpus' variants


def test_corpus_number_variants(tmp_path):
    # the corpus' issue-39 variants, each run as `attrib analyze` in its own bounded process
    results = run(tmp_path, variants=NUMBER_VARIANTS)
    failures = {r.variant.name: check(r) for r in results if check(r)}
    assert not failures, failures
    assert len(results) >= 4 and all(r.rc == 2 for r in results)
