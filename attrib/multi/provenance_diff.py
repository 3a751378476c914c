"""Is the baseline matched? The two sides' provenance stamps and devices, diffed.

A difference in what changes the work or the kernels (model, device arch, dtype, quantization,
batch, context, speculative mode, KV-cache dtype, tokens per step, kernel-relevant environment
variables) makes the comparison "not a matched baseline". Other stamp differences (versions,
runner, attention implementation: often the change under test) are listed, not judged. Where both
stamps carry the model's config (`model_config`, top level or under `extra`), the model is
matched on that config (less private `_` keys and the library version), and a different
free-text `model` label is only listed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from attrib.analysis.model import Analysis

MATCH_KEYS = ("model", "dtype", "quantization", "batch", "context_length", "speculative",
              "kv_cache_dtype")
INFO_SKIP = ("env", "versions", "gpu", "model_config", "capture_name", "created_utc", "host",
             "trace", "steps", "capture", "schema", "param_bytes", "tiny",
             "correctness_gate")  # the outputs: attrib.multi.outputs checks them


# environment variables that say where files live (a cache, a tool), not which kernels run: a
# compiled step sets TRITON_CACHE_DIR itself; never a mismatch
WHERE_ONLY = r"(?:_DIR|_PATH|_HOME)$"
NONE_WORDS = ("none", "null", "")  # a stamp's spelled-out nothing: the same as no value


def norm(v: Any) -> Any:
    """A stamp value as compared: "None", "none", "null" and "" are None."""
    return None if isinstance(v, str) and v.strip().lower() in NONE_WORDS else v


def _values(docs: Sequence[Analysis], get) -> list[Any]:
    return list(dict.fromkeys(repr(norm(get(d))) for d in docs))


def _one(docs: Sequence[Analysis], get) -> Any:
    vals = {repr(norm(get(d))): norm(get(d)) for d in docs}
    return next(iter(vals.values())) if len(vals) == 1 else sorted(vals)


def _config(d: Analysis) -> dict[str, Any] | None:
    p = d.provenance
    cfg = p.get("model_config") or (p.get("extra") or {}).get("model_config")
    if not isinstance(cfg, dict):
        return None
    return {k: v for k, v in sorted(cfg.items())
            if not k.startswith("_") and k != "transformers_version"}


def _fields(docs: Sequence[Analysis]) -> dict[str, Any]:
    """key -> getter over an analysis, for every field the diff looks at."""
    def prov(k):
        return lambda d: d.provenance.get(k)

    def env(k):
        return lambda d: (d.provenance.get("env") or {}).get(k)

    # a speculative loop's decode generates for its sequences (its steps verify 1 + K tokens
    # each: the change, not a mismatch); its draft phase is the loop's own, and its prefill
    # phase holds the first round's verify pass (prompt + K tokens) beside the prompt's
    spec = any(p.speculative is not None for d in docs for p in d.phases)
    skip = ("draft", "prefill") if spec else ()

    def tokens(d):
        return {p.phase: (p.speculative and p.speculative.batch) or p.tokens_per_step
                for p in d.phases if p.phase not in skip}
    fields = {"arch": lambda d: d.device.arch, "tokens_per_step": tokens}
    fields |= {k: prov(k) for k in MATCH_KEYS}
    if all(_config(d) is not None for d in docs):  # the model by its config, key by key
        del fields["model"]
        for k in sorted({k for d in docs for k in _config(d)}):
            fields[f"model_config.{k}"] = lambda d, k=k: _config(d).get(k)
    env_keys = sorted({k for d in docs for k in (d.provenance.get("env") or {})
                       if not re.search(WHERE_ONLY, k)})
    fields |= {f"env {k}": env(k) for k in env_keys}
    return fields


def _flat(d: Analysis) -> dict[str, Any]:
    """Top-level stamp fields and those under `extra`, less bulky or per-run ones."""
    p = dict(d.provenance)
    extra = p.pop("extra", None) or {}
    out = {k: v for k, v in p.items() if k not in INFO_SKIP}
    out |= {k: v for k, v in extra.items() if k not in INFO_SKIP and k not in out}
    return out


def provenance_diff(base: Sequence[Analysis], cand: Sequence[Analysis]) -> dict[str, Any]:
    """{"mismatch": [{key, base, cand}], "other": [...], "within_side": [...],
    "unstamped": [...]}."""
    docs = [*base, *cand]
    mismatch, within = [], []
    for key, get in _fields(docs).items():
        for side, group in (("base", base), ("cand", cand)):
            if len(_values(group, get)) > 1:
                within.append({"side": side, "key": key, "values": _one(group, get)})
        if _values(base, get) != _values(cand, get):
            mismatch.append({"key": key, "base": _one(base, get), "cand": _one(cand, get)})
    matched = {m["key"] for m in mismatch}
    # a model label differing beside a matched config is listed
    skip = (set(MATCH_KEYS) - {"model"}) | set(INFO_SKIP)
    flat = [_flat(d) for d in docs]
    keys = sorted({k for f in flat for k in f if k not in skip and k not in matched})
    other = []
    for k in keys:
        vb = list(dict.fromkeys(repr(norm(f.get(k))) for f in flat[: len(base)]))
        vc = list(dict.fromkeys(repr(norm(f.get(k))) for f in flat[len(base):]))
        if vb != vc:
            other.append({"key": k, "base": _one(base, lambda d, k=k: _flat(d).get(k)),
                          "cand": _one(cand, lambda d, k=k: _flat(d).get(k))})
    for k in ("torch", "cuda", "hip", "vllm", "sglang", "transformers"):
        def get(d, k=k):
            return (d.provenance.get("versions") or {}).get(k)
        if _values(base, get) != _values(cand, get):
            other.append({"key": f"version {k}", "base": _one(base, get), "cand": _one(cand, get)})
    unstamped = [d.source.path for d in docs if not d.provenance]
    return {"mismatch": mismatch, "other": other, "within_side": within, "unstamped": unstamped}
