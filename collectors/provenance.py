"""The provenance stamp: a sidecar JSON next to each captured trace.

`foo.pt.trace.json.gz` gets `foo.pt.trace.json.gz.attrib.json`, schema `attrib.provenance/1`. It
records what the trace alone cannot say: the model, quantization, dtypes, KV-cache and speculative
settings, the baseline it is compared to, the steps recorded, the software versions, the GPU, and
the environment variables that change which kernels run. Fields nobody told us are null.

Writing needs the live process (`collect`, called by the capture with torch already imported);
reading (`read_sidecar`) is a pure function for offline analysis and never imports torch.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from attrib.bounds import MAX_BATCH, MAX_CONTEXT, out_of_domain, unrepresentable, whole
from attrib.errors import TraceError
from attrib.output import commit, staged
from attrib.version import __version__
from collectors import limits

SCHEMA = "attrib.provenance/1"
SUFFIX = ".attrib.json"

# What a user can (and should) tell the capture; each is null unless given.
USER_FIELDS = (
    "model",             # model id, e.g. "Qwen/Qwen3-30B-A3B"
    "quantization",      # e.g. "fp8", "awq-int4", "gguf-q4_k_m", "none"
    "dtype",             # activation / compute dtype
    "context_length",    # max model length or the prompt+decode length profiled
    "batch",             # sequences per step
    "concurrency",       # concurrent requests driving a server
    "kv_cache_dtype",    # e.g. "auto", "fp8_e4m3"
    "kv_cache_state",    # e.g. "cold", "warm", "prefix-cached"
    "speculative",       # speculative decoding mode, e.g. "eagle3 k=3", "none"
    "correctness_gate",  # how outputs were checked, e.g. "gsm8k 0.82 >= 0.80"
    "baseline_id",       # the capture this one is compared against
)

ENV_PREFIXES = (
    "VLLM_", "SGLANG_", "HIP_", "HSA_", "ROCR_", "AMD_", "PYTORCH_TUNABLEOP_",
    "TORCH_ROCM_AOTRITON_", "ROCBLAS_", "HIPBLASLT_", "MIOPEN_", "RCCL_", "NCCL_", "TORCH_CUDNN_",
    "TORCHINDUCTOR_", "TRITON_", "CUBLAS_", "CUBLASLT_", "CUDA_", "ATTRIB_",
)
ENV_NAMES = (
    "CUDA_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF", "TORCH_BLAS_PREFER_HIPBLASLT", "TORCH_COMPILE_DEBUG", "OMP_NUM_THREADS",
)
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")


def sidecar_path(trace_path: str | Path) -> Path:
    """Where the stamp of `trace_path` lives."""
    return Path(str(trace_path) + SUFFIX)


def kernel_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment variables that can change kernels or their timing (secrets redacted)."""
    env = os.environ if environ is None else environ
    out = {}
    for name in sorted(env):
        if name in ENV_NAMES or name.startswith(ENV_PREFIXES):
            secret = any(w in name.upper() for w in _SECRET_WORDS)
            out[name] = "<redacted>" if secret else env[name]
    return out


def _jsonable(value: Any) -> Any:
    """`value` as plain JSON types; anything else (a torch.dtype, a Path) becomes its str."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    return str(value)


def _version(module_name: str) -> str | None:
    """The version of an already-imported module (never imports it)."""
    mod = sys.modules.get(module_name)
    return getattr(mod, "__version__", None) if mod is not None else None


def _attrib_version() -> str | None:
    """The installed distribution's version, else the package's own (a checkout on PYTHONPATH)."""
    try:
        return version("attrib")
    except Exception:
        return __version__


def _host_memory() -> int | None:
    """Physical memory of the host in bytes (an APU's GPU-visible limit is judged against it);
    None if unknown."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def gpu_info(torch: Any) -> dict[str, Any] | None:
    """Name, arch and size of the current accelerator as torch reports them; None without one."""
    try:
        if torch.cuda.is_available():
            idx = torch.cuda.current_device()
            p = torch.cuda.get_device_properties(idx)
            hip = getattr(torch.version, "hip", None)
            arch = getattr(p, "gcnArchName", None) if hip else f"sm_{p.major}{p.minor}"
            return {
                "backend": "rocm" if hip else "cuda",
                "index": idx,
                "count": torch.cuda.device_count(),
                "name": p.name,
                "arch": arch or None,
                "arch_from": "gcnArchName" if hip else "compute_capability",
                "total_memory_bytes": int(p.total_memory),
                "multiprocessor_count": getattr(p, "multi_processor_count", None),
            }
        xpu = getattr(torch, "xpu", None)
        if xpu is not None and xpu.is_available():
            idx = xpu.current_device()
            p = xpu.get_device_properties(idx)
            return {"backend": "xpu", "index": idx, "count": xpu.device_count(), "name": p.name,
                    "arch": None, "arch_from": None,
                    "total_memory_bytes": int(getattr(p, "total_memory", 0)) or None,
                    "multiprocessor_count": None}
    except Exception:
        return None
    return None


def machine_fields(torch: Any) -> dict[str, Any]:
    """The stamp's parts that do not change during a capture: versions, GPU, host, environment.

    The slow part of a stamp (the installed attrib's version, the device properties), so a capture
    collects it before its window opens and hands it to `collect(..., machine=...)`."""
    return {
        "versions": {
            "python": platform.python_version(),
            "torch": getattr(torch, "__version__", None),
            "cuda": getattr(torch.version, "cuda", None),
            "hip": getattr(torch.version, "hip", None),
            "attrib": _attrib_version(),
            "transformers": _version("transformers"),
            "vllm": _version("vllm"),
            "sglang": _version("sglang"),
        },
        "gpu": gpu_info(torch),
        "host": {"hostname": socket.gethostname(), "pid": os.getpid(),
                 "platform": platform.platform(), "memory_bytes": _host_memory()},
        "env": kernel_env(),
    }


def collect(torch: Any, user: dict[str, Any] | None, capture: dict[str, Any],
            steps: list[tuple[str, int | None]], trace_name: str,
            machine: dict[str, Any] | None = None) -> dict[str, Any]:
    """The stamp of one capture. `user` fills USER_FIELDS; its other keys go under "extra".

    machine: `machine_fields(torch)` collected earlier (else collected now); a module imported
    since (transformers after the capture started) still gets its version."""
    user = dict(user or {})
    doc: dict[str, Any] = {"schema": SCHEMA, "trace": trace_name,
                           "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for key in USER_FIELDS:
        doc[key] = _jsonable(user.pop(key, None))
    doc["steps"] = [{"phase": p, "tokens": t} for p, t in steps]
    fixed = machine if machine is not None else machine_fields(torch)
    versions = dict(fixed["versions"])
    for name in ("transformers", "vllm", "sglang"):
        versions[name] = versions.get(name) or _version(name)
    doc["versions"] = versions
    doc["gpu"] = fixed["gpu"]
    doc["host"] = fixed["host"]
    doc["capture"] = _jsonable(capture)
    doc["env"] = fixed["env"]
    doc["extra"] = _jsonable(user)
    return doc


def write_sidecar(trace_path: str | Path, doc: dict[str, Any]) -> Path:
    """Write the stamp next to the trace, whole or not at all (attrib.output); raises OSError."""
    dest = sidecar_path(trace_path)
    with staged(dest) as (fh, tmp):
        fh.write((json.dumps(doc, indent=1, sort_keys=False) + "\n").encode())
    commit(tmp, dest, force=True)
    return dest


def read_sidecar(trace_path: str | Path) -> dict[str, Any]:
    """The stamp of `trace_path`: {} when there is none.

    A sidecar that cannot be used (unreadable, not JSON, not an object, another schema) gives
    `{"warning": "<sidecar>: <problem>"}` instead of raising; a good stamp never has "warning".
    """
    path = sidecar_path(trace_path)
    if not os.path.lexists(path):
        return {}
    try:
        with limits.open_file(path) as fh:  # never blocks on a FIFO; a stamp is a few KB
            raw = fh.read(1 << 20)
    except TraceError as exc:
        return {"warning": f"{path}: cannot read provenance sidecar: {exc.problem}"}
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        return {"warning": f"{path}: corrupt provenance sidecar ({exc})"}
    if not isinstance(doc, dict):
        return {"warning": f"{path}: provenance sidecar is not a JSON object"}
    if doc.get("schema") != SCHEMA:
        return {"warning": f"{path}: provenance sidecar has schema {doc.get('schema')!r}, "
                           f"expected {SCHEMA!r}"}
    bad = stamp_numbers(doc)
    if bad:
        return {"warning": f"{path}: provenance sidecar ignored: {bad}"}
    doc.pop("warning", None)
    return doc


# the stamp's figures the analysis computes with, and their domains
_STAMP_COUNTS = (("context_length", MAX_CONTEXT), ("batch", MAX_BATCH), ("concurrency", MAX_BATCH))


def stamp_numbers(doc: dict[str, Any], root: str = "") -> str | None:
    """What is wrong with a stamp's numbers (`FIELD = VALUE: must be ...`), None when nothing:
    every number fits a JSON output (64-bit integers, finite floats), and the context, batch and
    concurrency whole numbers (0: none, as a ViT's context; null: not known)."""
    for key, hi in _STAMP_COUNTS:
        if doc.get(key) is not None and whole(doc[key], 0, hi) is None:
            return out_of_domain(root + key, doc[key], f"a whole number in 0..{hi}")
    return unrepresentable(doc, root.rstrip(".") or "stamp")
