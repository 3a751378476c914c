"""Compressed traces: .json.xz (stdlib lzma) and .json.zst (zstandard, optional) read like .json.gz,
with the same bound on what they may expand to; each variant made from a real fixture here."""

from __future__ import annotations

import gzip
import lzma

import pytest

from attrib.cli import main
from attrib.errors import TraceError
from collectors import limits, load

from conftest import FIXTURES

TORCH = FIXTURES / "torch" / "h200_dense_prefill_cudagraph_decode.json.gz"


def _text() -> bytes:
    return gzip.decompress(TORCH.read_bytes())


def _zstd():
    return pytest.importorskip("zstandard")


@pytest.mark.parametrize("suffix", [".json.xz", ".json.zst"])
def test_xz_and_zstd_read_as_the_gzip(tmp_path, suffix):
    pack = lzma.compress if suffix.endswith("xz") else _zstd().ZstdCompressor().compress
    path = tmp_path / f"t{suffix}"
    path.write_bytes(pack(_text()))
    want, got = load(TORCH), load(path)
    assert got.meta.format == "torch-json" and not got.meta.warnings
    assert got.kernels.equals(want.kernels) and got.ops.equals(want.ops)
    (tmp_path / "d").mkdir()  # a folder holding it is read as the one trace in it
    path.rename(tmp_path / "d" / path.name)
    assert load(tmp_path / "d").kernels.height == want.kernels.height


@pytest.mark.parametrize("kind", ["xz", "zstd"])
def test_xz_and_zstd_bombs_are_refused_like_gzip(tmp_path, kind):
    # the real trace's event list with 80 MB of whitespace inside it: a few kB compressed
    text = _text()
    at = text.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    pad = b" " * (80 << 20)
    if kind == "xz":
        data = lzma.compress(text[:at] + pad + text[at:], preset=1)
    else:
        data = _zstd().ZstdCompressor(level=1).compress(text[:at] + pad + text[at:])
    path = tmp_path / f"bomb.json.{'xz' if kind == 'xz' else 'zst'}"
    path.write_bytes(data)
    assert len(data) * limits.RATIO_LIMIT < limits.INFLATE_FLOOR < len(text) + len(pad)
    with pytest.raises(TraceError, match=f"{kind} expands past 64 MB .*decompression bomb"):
        load(path)


def test_a_cut_xz_is_salvaged_and_corrupt_xz_named(tmp_path, capsys):
    data = lzma.compress(_text())
    cut = tmp_path / "cut.json.xz"
    cut.write_bytes(data[: len(data) * 3 // 4])
    t = load(cut)
    assert t.kernels.height and any("xz stream is truncated" in w for w in t.meta.warnings)
    bad = tmp_path / "bad.json.xz"
    bad.write_bytes(data[:6] + bytes(200))
    assert main(["analyze", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "corrupt xz data" in err[0] and "bad.json.xz" in err[0]
