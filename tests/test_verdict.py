"""The verdict that opens every report (attrib.analysis.summary), a terminal table that fits its
width, findings graded by the share of the step they explain, notes that know what was given.

Each fixture is analysed once for the module; the CLI renders it at 80, 100 and 160 columns."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from click.testing import CliRunner
from conftest import EXAMPLE_TRACE, FIXTURES, ROOT

import attrib.app
import attrib.cli
from attrib.analysis.model import Analysis
from attrib.analysis.notes import Given, phase_notes
from attrib.app import analyze
from attrib.cli import cli, every_command, main
from attrib.report import html, markdown
from attrib.report.table import COMPONENT_DROP, render
from rules.finding import CAVEATS, severity_of

# the fixtures test_attribution reads (gfx950's 12 s and the capture-only trace left out), a
# decode-only captured trace, a vision forward and SGLang's decode
FITS = [
    EXAMPLE_TRACE,
    *(
        FIXTURES / "torch" / n
        for n in (
            "h100_hf_qwen1.5-0.5b-chat.json.gz",
            "h200_dense_prefill_cudagraph_decode.json.gz",
            "mi300_hf_qwen1.5-0.5b-chat.json.gz",
            "mi300_vllm_prefilldecode_piecewise/graph_execution.json.gz",
            "mi300_sglang_qwen3-8b_decode/sglang_Qwen3-8B_decode.json.gz",
        )
    ),
    *(
        FIXTURES / "rocprof" / n
        for n in (
            "gfx1201_llamacpp_rocpd_rocm7.2/32432_results.db.gz",
            "gfx1151_llamacpp_rocprofv3_csv",
            "gfx1201_llamacpp_legacy_rocprof_v1/results.csv.gz",
        )
    ),
    FIXTURES / "captured" / "blocking_copy_decode.pt.trace.json.gz",
    FIXTURES / "captured" / "vit_forward_b8.pt.trace.json.gz",
]
WIDTHS = (80, 100, 160)
SCHEMA = json.loads((ROOT / "attrib" / "data" / "attrib.analysis-1.schema.json").read_text())


@pytest.fixture(scope="module")
def analyses() -> dict[str, Analysis]:
    return {str(p): analyze(p) for p in FITS}


@pytest.fixture()
def cached(analyses, monkeypatch):
    """The CLI's analyze reads the module's analyses (each trace analysed once)."""
    monkeypatch.setattr(attrib.app, "analyze_path", lambda path, opts, warn=None: analyses[str(path)])
    return analyses


@pytest.mark.parametrize("path", FITS, ids=[p.name for p in FITS])
def test_analyze_fits_80_100_160_columns(cached, path):
    runner = CliRunner()
    for width in WIDTHS:
        r = runner.invoke(cli, ["analyze", str(path)], env={"COLUMNS": str(width)})
        assert r.exit_code == 0, r.output
        lines = r.output.splitlines()
        over = [ln for ln in lines if len(ln) > width]
        assert not over, (width, over[:3])
        assert any(ln.startswith("facts: ") for ln in lines[1:3])
        assert any(ln.startswith("assumed: ") for ln in lines[2:10])
        an = cached[str(path)]
        assert sum(ln.startswith(">> ") for ln in lines) == len(an.phases)
        if an.phases and an.phases[0].component_rows:
            head = next(ln for ln in lines if ln.split()[:1] == ["component"])
            # the first column to go is the evidence; at 160 the demo's whole table fits
            if width == 80 or (width == 160 and path == EXAMPLE_TRACE):
                assert (COMPONENT_DROP[0] in head) == (width == 160), head


def test_demo_table_at_80_drops_columns_in_order_and_shortens_names_in_the_middle(analyses):
    an = analyses[str(EXAMPLE_TRACE)]
    text = render(an, 5, 80)
    head = next(ln for ln in text.splitlines() if ln.split()[:1] == ["component"])
    assert "evidence" not in head and "TFLOP/s" not in head and "gap ms/step" in head
    name = an.phases[1].kernel_rows[0].name  # the cutlass MoE GEMM: start and end kept
    row = next(ln for ln in text.splitlines() if name[:12] in ln)
    assert "…" in row and row.rstrip().endswith(name[-4:])
    assert name in render(an, 5, None)  # whole in a file


def test_summary_top_action_is_the_ledgers_largest_recoverable_row(analyses):
    an = analyses[str(EXAMPLE_TRACE)]
    s = an.summary
    assert s is not None
    dec = next(p for p in s.phases if p.phase == "decode")
    ph = an.phase("decode")
    assert ph is not None
    idle = [r for r in ph.ledger_rows if r.cause not in ("kernels", "profiler")]
    largest = max(idle, key=lambda r: r.ms_per_step)
    assert (largest.cause, largest.what) == ("host", "aten::_cudnn_attention_forward")
    top = dec.actions[0]
    assert top.rule == "ledger-host" and largest.what in top.what and top.finding is not None
    f = an.findings[top.finding]
    assert f.evidence["rows"][0]["what"] == largest.what and top.ms_per_step == round(f.ms_per_step, 4)
    assert top.evidence == f.phrase() and "median 210.0 us" in top.evidence
    # ranked, at most three, no caveat and not the step's total distance from its floor
    ms = [a.ms_per_step for a in dec.actions]
    assert ms == sorted(ms, reverse=True) and len(ms) == 3 and [a.rank for a in dec.actions] == [1, 2, 3]
    assert all(a.rule not in (*CAVEATS, "decode-below-bandwidth-ceiling") for a in dec.actions)
    total = ph.bottlenecks.total
    assert total is not None and dec.above_floor_ms == total.ms_per_step
    assert dec.achieved == ph.achieved_tok_s and dec.ceiling == ph.ceiling_tok_s
    assert dec.of_ceiling == pytest.approx(ph.achieved_tok_s / ph.ceiling_tok_s, abs=1e-4)
    shown = [r for r in ph.ledger_rows if r.cause != "profiler"]  # the profiler: a caveat, once
    assert [(t.cause, t.what) for t in dec.time] == [(r.cause, r.what) for r in shown[:4]]
    assert dec.mean_step_ms == pytest.approx(sum(r.ms_per_step for r in ph.ledger_rows), abs=1e-3)
    # fixture README: batch 4, prompt 512, six decode steps read 513..518 positions
    facts = {f.name: f.value for f in s.facts}
    assert facts["batch"] == "4" and facts["context"] == "515" and facts["dtype"] == "bf16"
    # the numbers of the document are as before: the prefill's action 3 is its roofline gap
    pre = next(p for p in s.phases if p.phase == "prefill")
    gap = an.phase("prefill").component("moe_experts").gap_ms
    assert pre.actions[2].what == "bring moe_experts to its roofline" and pre.actions[2].ms_per_step == gap


def test_json_md_html_open_with_the_summary(analyses):
    an = analyses[str(EXAMPLE_TRACE)]
    doc = json.loads(an.to_json())
    jsonschema.validate(doc, SCHEMA)
    assert doc["summary"]["phases"][1]["actions"][0]["rule"] == "ledger-host"
    assert all(isinstance(f["summary"], str) and f["summary"] for f in doc["findings"])
    md = markdown.render(an).splitlines()
    assert md[0].startswith("# attrib report") and md[2] == "## Verdict"
    assert md.index("## Verdict") < min(i for i, ln in enumerate(md) if ln.startswith("## prefill"))
    page = html.render(an)
    body = page.split("<body>", 1)[1]
    assert re.match(r'<main><section id="summary"><h1>', body)
    section = body.split("</section>", 1)[0]
    assert "<h2>" not in section and section.count("<li>") == 6  # three actions per phase
    assert 'href="#finding-1"' in section  # the top decode action links to its finding


def test_findings_read_as_words_with_figures_and_links(analyses):
    an = analyses[str(EXAMPLE_TRACE)]
    kv = next(f for f in an.findings if f.rule == "kv-cache-recopied")
    md = markdown.render(an)
    assert "[huggingface.co/docs/transformers/main/en/kv_cache](https://huggingface.co/docs/" in md
    assert "<details><summary>figures</summary>" in md and "| cat_mb_per_step | 67.57 |" in md
    page = html.render(an)
    assert "<details><summary>figures</summary>" in page and f"<b>evidence</b>: {kv.phrase()}" in page
    short, whole = render(an, 5, 100), render(an, 5, 100, verbose=True)
    assert "achieved_tok_s=" in whole and "achieved_tok_s=" not in short
    assert "evidence: 815 gaps a step, median 19.9 us" in short
    # fixture README: the HF dynamic cache cats K and V of 8 layers each step
    assert kv.phrase() == "16 cat kernels a step copy 67.6 MB while attention reads 34.3 MB"


def test_severity_follows_the_share_of_the_step(analyses):
    graded = 0
    for an in analyses.values():
        for f in an.findings:
            ph = an.phase(f.phase) if f.phase else (an.phase("decode") or
                                                    (an.phases[0] if len(an.phases) == 1 else None))
            step = ph.step_ms.mean if ph is not None else None
            if f.ms_per_step is None or not step:
                continue
            share = f.ms_per_step / step
            want = "info" if f.rule in CAVEATS else severity_of(share)
            assert f.severity == want, (f.rule, f.severity, share)
            graded += 1
    assert graded >= 20
    demo = analyses[str(EXAMPLE_TRACE)]
    gap = next(f for f in demo.findings if f.rule == "roofline-memory-bound-gap")
    assert gap.severity == "info"  # 0.893 of a 97.6 ms step: no longer [medium]


def test_notes_name_only_what_was_not_given(analyses):
    an = analyses[str(FITS[6])]  # rocpd: no shapes, bytes known for 0% of the kernel time
    ph = an.phases
    told = [n for n in phase_notes(ph, None, False) if "too little for GB/token" in n]
    # no graph replayed: a graph-capture trace would not help (issue 36)
    assert told and "--capture" not in told[0] and "--model" in told[0]
    graphs = [n for n in phase_notes(ph, None, False, Given(graphs=True))
              if "too little for GB/token" in n]
    assert "--capture" in graphs[0] and "--model" in graphs[0]
    model = " ".join(phase_notes(ph, None, False, Given(model=True, graphs=True)))
    assert "give --capture" in model and "--model CONFIG" not in model
    both = " ".join(phase_notes(ph, None, False, Given(model=True, capture=True, graphs=True)))
    assert "too little for GB/token" in both and "give" not in both
    assert "== decode: 8 steps" in render(an) and "1 step," in render(analyses[str(EXAMPLE_TRACE)])


def test_model_without_context_uses_the_derived_context(tmp_path):
    from test_budget import QWEN3_MOE  # the demo's config (fixture README)

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(QWEN3_MOE))
    derived, given = analyze(EXAMPLE_TRACE, model=cfg), analyze(EXAMPLE_TRACE, model=cfg, context=515)
    assert any("decode K/V priced at context 515" in n for n in derived.notes)
    assert derived.phases == given.phases
    assert derived.summary is not None and "at context 515" in derived.summary.assumed[0]


def test_context_without_model_is_one_line_and_exit_2(capsys):
    assert main(["analyze", str(EXAMPLE_TRACE), "--context", "512"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--context" in err[0] and "--model" in err[0]


def test_every_subcommand_help_has_one_example():
    runner = CliRunner()
    for name in every_command():
        r = runner.invoke(cli, [name, "--help"])
        assert r.exit_code == 0 and r.output.count(f"Example: attrib {name}") == 1, name


def test_dtype_fact_is_the_weights_and_never_read_off_a_sliver():
    """SGLang's MI300 decode replays a graph: without its capture trace only 0.8% of kernel time
    is priced (the sampler's fp32, int32 in `other`) and no GEMM has a dtype, so the verdict
    states none (it said int32); with the capture trace the GEMMs are priced in bf16."""
    sglang = FIXTURES / "torch/mi300_sglang_qwen3-8b_decode"
    bare = analyze(sglang / "sglang_Qwen3-8B_decode.json.gz")
    comps = {c.component: c for c in bare.phases[0].component_rows}
    assert comps["other"].dtype == "int32" and comps["mlp_gate_up"].dtype is None
    assert "dtype" not in {f.name for f in bare.summary.facts}
    full = analyze(sglang / "sglang_Qwen3-8B_decode.json.gz",
                   capture=sglang / "capture_bs_32_rank0.json.gz")
    gemm = [c for c in full.phases[0].component_rows if c.component.endswith("proj")]
    assert gemm and all(c.dtype == "bf16" and c.bytes_known_share == 1.0 for c in gemm)
    assert ("dtype", "bf16") in {(f.name, f.value) for f in full.summary.facts}


def test_the_profilers_cost_is_a_caveat_said_once_not_a_ranked_finding() -> None:
    """Issue 37 item 6: on a speculative capture the profiler's estimate is ~half of each step. It
    is said once near the top (what the step would take without it), not among the step's time
    rows or the actions, and its finding comes after every finding with time to recover."""
    from attrib import analyze

    an = analyze(str(FIXTURES / "captured" / "spec_random.json.gz"))
    s = an.summary
    assert s is not None
    for ph, ps in zip(an.phases, s.phases):
        prof = sum(r.ms_per_step for r in ph.ledger_rows if r.cause == "profiler")
        step = sum(r.ms_per_step for r in ph.ledger_rows)
        said = [c for c in s.caveats if c.startswith(f"{ph.phase}: ")]
        if prof / step >= 0.05:
            assert said == [f"{ph.phase}: the profiler's own host cost is an estimated {prof:.3f} "
                            f"ms of each {step:.3f} ms step ({prof / step:.0%}); unprofiled, the "
                            f"step would take about {step - prof:.3f} ms. The step time, tok/s and "
                            "GPU idle include it; the host and launch rows do not (it is carved "
                            "out of them)"]
        assert all(t.cause != "profiler" for t in ps.time)
        assert all(a.rule != "ledger-profiler" for a in ps.actions)
    assert len(s.caveats) >= 2
    rules = [f.rule for f in an.findings]
    first_caveat = rules.index("ledger-profiler")
    assert all(r == "ledger-profiler" for r in rules[first_caveat:])
