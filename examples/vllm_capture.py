"""Profile vLLM's model-runner steps with `collectors.wrap`: prefill / decode marked per step.

The lines a vLLM user adds (offline `LLM`, one GPU, engine kept in this process so the patched
class is the one that runs):

    import os
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"     # model runner in this process
    import collectors
    from vllm import LLM, SamplingParams
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    GPUModelRunner.execute_model = collectors.wrap(
        GPUModelRunner.execute_model, phase=vllm_phase, out_dir="traces/",
        warmup=4, steps=32, provenance={"model": MODEL, "dtype": "bfloat16", "batch": 8})
    llm = LLM(MODEL, enforce_eager=True)   # eager: per-kernel attribution (graphs hide ops)
    llm.generate(prompts, SamplingParams(max_tokens=64))
    GPUModelRunner.execute_model.finish()  # if fewer than warmup+steps steps ran

`vllm_phase` (copy it from this file; it takes the runner as first argument, as the class-level
patch passes it) reads the step's SchedulerOutput: only 1 (+ speculative) token per request
is "decode", no such request is "prefill", both is "mixed" (chunked prefill); an empty step is
not recorded. The trace lands in traces/ as `<host>_<pid>.<ns>.pt.trace.json.gz` plus its
`.attrib.json` stamp. For `vllm serve` or TP > 1 the workers are other processes: apply the
same patch there (e.g. from a vLLM general plugin, which every worker loads), one trace per rank.

Do not enable vLLM's own torch profiler (`--profiler-config`) at the same time: a second profiler
clobbers the first, so attrib's capture warns and stays off. In vLLM versions where sampling runs
in a separate `sample_tokens()` call, the sampler's kernels fall just outside the step spans.

What was run: vLLM is not installable where this was written, so nothing here has run against
vLLM. `python examples/vllm_capture.py --selftest` runs `vllm_phase` on stand-in scheduler
outputs and profiles a stand-in runner through the same `collectors.wrap` call on CPU torch.
`python examples/vllm_capture.py --model M` runs the real thing where vLLM is installed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import collectors  # noqa: E402


def vllm_phase(runner, scheduler_output, *args, **kwargs):
    """(phase, tokens) of one `execute_model(scheduler_output)` call; None for an empty step."""
    total = int(getattr(scheduler_output, "total_num_scheduled_tokens", 0) or 0)
    per_req = getattr(scheduler_output, "num_scheduled_tokens", None) or {}
    if total <= 0 or not per_req:
        return None
    spec = getattr(scheduler_output, "scheduled_spec_decode_tokens", None) or {}
    decoding = [n == 1 + len(spec.get(rid, ())) for rid, n in per_req.items()]
    if all(decoding):
        return "decode", total
    return ("prefill" if not any(decoding) else "mixed"), total


def patch_vllm(out_dir: str, **capture_options):
    """Wrap GPUModelRunner.execute_model in this process; returns the wrapped function."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    wrapped = collectors.wrap(GPUModelRunner.execute_model, phase=vllm_phase, out_dir=out_dir,
                              **capture_options)
    GPUModelRunner.execute_model = wrapped
    return wrapped


def run_vllm(args: argparse.Namespace) -> int:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        from vllm import LLM, SamplingParams
    except ImportError:
        print("vLLM is not installed here; try --selftest", file=sys.stderr)
        return 2
    prov = {"model": args.model, "dtype": args.dtype, "batch": args.batch,
            "context_length": args.max_model_len, "kv_cache_dtype": args.kv_cache_dtype,
            "speculative": "none", "concurrency": args.batch}
    step = patch_vllm(args.out, warmup=args.warmup, steps=args.steps, provenance=prov)
    llm = LLM(args.model, dtype=args.dtype, enforce_eager=True, max_model_len=args.max_model_len,
              kv_cache_dtype=args.kv_cache_dtype)
    prompts = [f"Write a long story about the number {i}." for i in range(args.batch)]
    llm.generate(prompts, SamplingParams(max_tokens=args.max_tokens, ignore_eos=True))
    res = step.finish()
    print(f"trace: {res.path}\nstamp: {res.sidecar}\nsteps: {res.steps}\nerror: {res.error}")
    return 0 if res.path else 1


def selftest(out_dir: str) -> int:
    """vllm_phase on stand-in scheduler outputs, and the same wrap() call on a stand-in runner."""
    import torch

    def sched(per_req: dict[str, int], spec: dict[str, list[int]] | None = None):
        return SimpleNamespace(num_scheduled_tokens=per_req, scheduled_spec_decode_tokens=spec or {},
                               total_num_scheduled_tokens=sum(per_req.values()))

    class StandInRunner:
        def execute_model(self, scheduler_output, intermediate_tensors=None):
            n = scheduler_output.total_num_scheduled_tokens
            x = torch.randn(max(n, 1), 64)
            return (x @ torch.randn(64, 64)).sum().item()

    assert vllm_phase(None, sched({"a": 512, "b": 300})) == ("prefill", 812)
    assert vllm_phase(None, sched({"a": 1, "b": 1})) == ("decode", 2)
    assert vllm_phase(None, sched({"a": 4}, {"a": [7, 8, 9]})) == ("decode", 4)
    assert vllm_phase(None, sched({"a": 1, "b": 256})) == ("mixed", 257)
    assert vllm_phase(None, sched({})) is None

    StandInRunner.execute_model = collectors.wrap(StandInRunner.execute_model, phase=vllm_phase,
                                                  out_dir=out_dir, warmup=1, steps=4,
                                                  provenance={"model": "stand-in runner"})
    runner = StandInRunner()
    for per_req in ({"a": 8}, {}, {"a": 16, "b": 16}, {"a": 1, "b": 1}, {"a": 1, "b": 1},
                    {"a": 1, "b": 64}):
        runner.execute_model(sched(per_req))
    res = StandInRunner.execute_model.capture.result
    print(f"trace: {res.path}\nsteps: {res.steps}")
    assert res.steps == [("prefill", 32), ("decode", 2), ("decode", 2), ("mixed", 65)], res.steps
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--selftest", action="store_true", help="no vLLM needed; CPU torch")
    ap.add_argument("--model", default="Qwen/Qwen3-0.6B")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--kv-cache-dtype", default="auto")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--out", default="traces")
    args = ap.parse_args(argv)
    return selftest(args.out) if args.selftest else run_vllm(args)


if __name__ == "__main__":
    raise SystemExit(main())
