"""Hostile inputs about the file rather than one reader's format: FIFOs, links, decompression bombs,
sparse and random bytes, folders, empty files; and the files given to options (`--model` configs,
`--arch-file` device databases). The generic builders are in files.py."""

from __future__ import annotations

import gzip
import json
import random
import shutil
import zlib
from pathlib import Path
from typing import Callable

from files import _fifo, _gz, _loop, _mkdir, _random, _sparse, _write
from sources import CSV_DIR, RANK0_MODEL, ROOT, TORCH, Variant, torch_text

# ------------------------------------------------------------------ bombs and bytes


def _bomb(d: Path) -> Path:
    """A real trace's event list with 96 MB of whitespace inside it, gzip'd to ~100 KB."""
    text = torch_text()
    at = text.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [z.compress(text[:at])]
    block = b" " * (1 << 20)
    parts += [z.compress(block) for _ in range(96)]
    parts += [z.compress(text[at:]), z.flush()]
    out = d / "bomb.json.gz"
    out.write_bytes(b"".join(parts))
    return out


def _spaces_gz(d: Path) -> Path:
    """4 GiB of spaces, then the real trace: 256 gzip members of 16 MiB of spaces (one compressed
    once, repeated: ~4 MB on disk, nothing large written), then the trace's own gzip member."""
    member = gzip.compress(b" " * (16 << 20), 9)
    out = d / "spaces.json.gz"
    with out.open("wb") as fh:
        for _ in range(256):
            fh.write(member)
        fh.write(TORCH.read_bytes())
    return out


def _shuffled_gz(d: Path) -> Path:
    data = bytearray(torch_text()[:300_000])
    random.Random(4).shuffle(data)
    (d / "s.json.gz").write_bytes(gzip.compress(bytes(data)))
    return d / "s.json.gz"


# ------------------------------------------------------------------ folders


def _two_torch(d: Path) -> Path:
    shutil.copy(TORCH, d / "rank0.json.gz")
    shutil.copy(TORCH, d / "rank1.json.gz")
    return d


def _dir_with_loop(d: Path) -> Path:
    shutil.copy(CSV_DIR / "decode_kernel_trace.csv", d / "decode_kernel_trace.csv")
    (d / "a_kernel_trace.csv").symlink_to(d / "b_kernel_trace.csv")
    (d / "b_kernel_trace.csv").symlink_to(d / "a_kernel_trace.csv")
    return d


# ------------------------------------------------------------------ option files


def _model_config(**changes) -> Callable[[Path], Path]:
    def build(d: Path) -> Path:
        cfg = {**json.loads(RANK0_MODEL.read_text())["config"], **changes}
        out = d / "config.json"
        out.write_text(json.dumps(cfg))
        return out
    return build


def _deep_arch_file(d: Path) -> Path:
    """The real device database with one entry's match_names nested 5,000 deep."""
    text = (ROOT / "attrib" / "data" / "archs.toml").read_text()
    at = text.index("match_names = [") + len("match_names = ")
    out = d / "archs.toml"
    out.write_text(text[:at] + "[" * 5000 + '"x"' + "]" * 5000 + text[text.index("\n", at):])
    return out


# ------------------------------------------------------------------ variants, by class

# issue 39: numbers out of their domain
NUMBER_VARIANTS = [
    Variant("model-config-heads-0", "crash", _model_config(num_attention_heads=0), "error",
            "num_attention_heads = 0", option="--model"),
    Variant("model-config-negative-hidden", "nonsense", _model_config(hidden_size=-2048), "error",
            "hidden_size = -2048", option="--model"),
    Variant("model-config-negative-layers", "nonsense", _model_config(num_hidden_layers=-4), "error",
            "num_hidden_layers = -4", option="--model"),
    Variant("arch-file-5000-deep", "crash", _deep_arch_file, "error", "nested more than 32 deep",
            option="--arch-file"),
]

VARIANTS = [
    # --- hangs and non-regular paths
    Variant("fifo", "hang", _fifo, "error", "fifo"),
    Variant("model-config-fifo", "hang", _fifo, "error", "fifo", option="--model"),
    Variant("arch-file-fifo", "hang", _fifo, "error", "fifo", option="--arch-file"),
    # --- memory
    Variant("gzip-bomb-whitespace", "memory", _bomb, "error", "bomb"),
    Variant("sparse-3GB-json", "memory", lambda d: _sparse(d, torch_text()[:4096]), "error", "memory"),
    Variant("gzip-4GiB-spaces-before-trace", "memory", _spaces_gz, "error", "bomb"),
    # --- messages
    Variant("symlink-loop", "message", _loop, "error", "loop"),
    Variant("broken-symlink", "message", lambda d: (d / "x.json").symlink_to(d / "gone.json") or d / "x.json",
            "error", "broken"),
    Variant("random-bytes-gzip", "message", _write("r.json.gz", _gz(_random(300_000, 1))), "error"),
    Variant("corrupt-gzip", "message", _write("c.json.gz", lambda: b"\x1f\x8b\x08\x00" + _random(5000, 2)()),
            "error", "gzip"),
    Variant("random-bytes-pftrace", "message", _write("r.pftrace", _random(50_000, 3)), "error", "perfetto"),
    Variant("dir-two-torch-traces", "message", _two_torch, "error", "pass one"),
    Variant("dir-without-traces", "message", _mkdir, "error", "no profiler output"),
    # issue 19: messages that named the wrong cause
    Variant("gzip-of-shuffled-bytes", "message", _shuffled_gz, "error", "not a trace"),
    Variant("dir-with-symlink-loop", "message", _dir_with_loop, "error", "loop"),
    Variant(
        "arch-file-missing",
        "message",
        lambda d: d / "archs.toml",
        "error",
        "does not exist",
        option="--arch-file",
    ),
    # --- other readers and classes
    Variant("empty-file", "reader", _write("e.json", lambda: b""), "error", "empty"),
    *NUMBER_VARIANTS,
]
