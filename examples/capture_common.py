"""The command line the capture scripts share (h200_captures, lowbit_captures, issue37_captures):
`run NAME...` captures in this process, `all` runs each capture in its own process within a time
budget, `list` prints the captures.

    python examples/SCRIPT.py list
    python examples/SCRIPT.py run NAME --device cuda --out traces/
    python examples/SCRIPT.py all --device cuda --out $OUT --budget 540
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

MIN_LEFT_S = 25  # a capture is skipped when less than this is left of the budget


def run_each(script: str, names: list[str], device: str, out: Path, tiny: bool, budget: float,
             timeouts: dict[str, float], default_timeout: float) -> int:
    """Each capture of `script` in its own process, in order, skipping those that would overrun
    `budget` s; a log per capture and summary.json in `out`."""
    t_end = time.monotonic() + budget
    summary = []
    for name in names:
        limit = min(timeouts.get(name, default_timeout), t_end - time.monotonic())
        if limit < MIN_LEFT_S:
            summary.append({"name": name, "status": "skipped (budget)"})
            print(json.dumps(summary[-1]), flush=True)
            continue
        cmd = [sys.executable, script, "run", name, "--device", device, "--out", str(out)]
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd + (["--tiny"] if tiny else []), timeout=limit,
                               capture_output=True, text=True)
            status = "ok" if p.returncode == 0 else f"failed rc={p.returncode}"
            tail = (p.stdout + p.stderr)[-2500:]
            (out / f"{name}.log").write_text(p.stdout + p.stderr)
        except subprocess.TimeoutExpired as exc:
            status, tail = f"timeout after {limit:.0f}s", str(exc.stdout or "")[-800:]
        trace = out / f"{name}.pt.trace.json.gz"
        row = {"name": name, "status": status, "s": round(time.monotonic() - t0, 1),
               "bytes": trace.stat().st_size if trace.exists() else None}
        summary.append(row)
        print(json.dumps(row), flush=True)
        if status != "ok":
            print(tail, flush=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


def cli(argv: list[str] | None, doc: str, script: str, captures: dict[str, dict],
        run_one: Callable[[str, str, Path, bool], int], order: list[str] | None = None,
        budget: float = 540, timeouts: dict[str, float] | None = None,
        default_timeout: float = 120) -> int:
    """The shared command line: run / all / list over `captures` (name -> its settings), `all`
    in `order` (default: the captures' own)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("cmd", choices=["run", "all", "list"])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="traces")
    ap.add_argument("--tiny", action="store_true", help="toy sizes (CPU smoke test)")
    ap.add_argument("--budget", type=float, default=budget, help="seconds for `all`")
    a = ap.parse_args(argv)
    if a.cmd == "list":
        for name in order or captures:
            print(name, captures[name])
        return 0
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.cmd == "run":
        return max([run_one(n, a.device, out, a.tiny) for n in a.names] or [0])
    return run_each(script, a.names or list(order or captures), a.device, out, a.tiny, a.budget,
                    timeouts or {}, default_timeout)


def greedy_generation(cap, model, ids, steps: int, sync: Callable[[], None],
                      key: str = "past_key_values"):
    """One recorded generation: a `prefill (tokens=B*P)` step over `ids` [B, P], then `steps`
    `decode (tokens=B)` steps of greedy argmax, each ending with `sync()`. Returns (the cache,
    the last tokens)."""
    import torch

    batch, prompt = ids.shape
    with torch.inference_mode():
        with cap.phase("prefill", tokens=batch * prompt):
            o = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            nxt = o.logits[:, -1].argmax(-1, keepdim=True)
            sync()
        cache = o.past_key_values
        for _ in range(steps):
            with cap.phase("decode", tokens=batch):
                o = model(input_ids=nxt, use_cache=True, **{key: cache})
                nxt = o.logits[:, -1].argmax(-1, keepdim=True)
                sync()
    return cache, nxt
