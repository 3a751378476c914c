"""Attribute a rocprofv3 run of llama.cpp (no torch, no markers) from Python.

    python examples/rocprof_attribute.py RESULTS.db [--model config.json --weight-bits 4.5 --context 8]

With no argument it reads the repo's R9700 fixture in tests/fixtures (llama-bench decode of llama-2-7b Q4_0)
if it is there. Steps come from the repeating kernel loop, tokens per step from llama.cpp's GEMV
template arguments, components from kernel names and their position in the layer; a model config
gives the bytes the trace cannot (rocprof records no shapes).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import attrib  # noqa: E402

DEFAULT = Path(__file__).resolve().parents[1] / "tests/fixtures/rocprof/gfx1201_llamacpp_rocpd_rocm7.2/32432_results.db.gz"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--model", type=Path, help="HF config.json of the model that ran")
    ap.add_argument("--weight-bits", type=float, default=4.5, help="bits per weight incl. scales (Q4_0: 4.5)")
    ap.add_argument("--context", type=int, default=8, help="K/V positions a decode step reads")
    args = ap.parse_args()
    # rocpd / CSV / JSON / legacy: sniffed; steps, phases, components, bytes (with a model config), rules
    doc = attrib.analyze(args.trace, model=args.model, weight_bits=args.weight_bits if args.model else None,
                         context=args.context if args.model else None)
    print(f"{doc['device']['name']} ({doc['device']['arch']}), {doc['source']['kernels']} kernels")
    for ph in doc["phases"]:
        print(f"{ph['phase']}: {ph['steps']} steps, {ph['tokens_per_step']} tokens/step, "
              f"{ph['achieved_tok_s']} tok/s achieved, ceiling {ph['ceiling_tok_s']} tok/s")
        for c in ph["components"][:8]:
            gbs = c["achieved_gbs"]
            print(f"  {c['component']:<14} {c['ms']:7.3f} ms/step  {gbs if gbs is not None else '-':>7} GB/s"
                  f"  ({', '.join(c['evidence'])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
