"""Achieved vs peak/sustained: per-kernel or per-component roofline, per-phase GB/token and
ceiling.

One memory level (DRAM at the arch's sustained bandwidth, its peak when no sustained figure is
known) and one compute ceiling per dtype; a collective (taxonomy.LINK_COMPONENTS) is held to the
interconnect instead: its bus bytes at the arch's `link_gbs` (one direction, as nccl-tests' bus
bandwidth), no roof where the link is unknown. An achieved figure above the arch's peak is not a result:
it is nulled and the row says why in `inconsistent` (the bytes model is wrong, or the data sat in
L2 / Infinity Cache).
"""

from __future__ import annotations

import polars as pl

from attrib.components.taxonomy import LINK_COMPONENTS
from attrib.roofline.arch import Arch
from attrib.trace import engine

ADDED = {"achieved_gbs": pl.Float64, "achieved_tflops": pl.Float64, "intensity": pl.Float64,
         "bound": pl.Utf8, "roofline_ms": pl.Float64, "gap_ms": pl.Float64, "inconsistent": pl.Utf8,
         "bw_basis": pl.Utf8}


_KEYS = {"dtype": "_dtype_key", "unit": "_unit_key"}


def dtype_peaks(df: pl.DataFrame, arch: Arch | None) -> pl.DataFrame:
    """Per distinct (dtype, `unit` where a column: matrix | vector) of `df`'s rows, as text in
    `_KEYS`' columns: `_peak`, the datasheet TFLOP/s no kernel can pass, and `_roof`, the
    TFLOP/s its FLOPs are priced at (the calibrated figure where measured, else the peak)."""
    uniq = df.lazy().select(_keys(df)).unique().collect(engine="in-memory")
    pairs = [(d, u or "matrix") for d, u in uniq.iter_rows()]
    peaks = [arch.peak_tflops(d, u) if (arch and d) else None for d, u in pairs]
    roofs = [arch.compute_roof(d, u) if (arch and d) else None for d, u in pairs]
    return uniq.hstack([pl.Series("_peak", peaks, dtype=pl.Float64),
                        pl.Series("_roof", roofs, dtype=pl.Float64)])


def _keys(df: pl.DataFrame | pl.LazyFrame) -> list[pl.Expr]:
    """The `_KEYS` columns of `df`'s rows: dtype and unit as text (null where no such column)."""
    names = df.collect_schema().names()
    return [(pl.col(c) if c in names else pl.lit(None)).cast(pl.Utf8).alias(key)
            for c, key in _KEYS.items()]


def kernel_roofline(df: pl.DataFrame, arch: Arch | None, what_if: bool = False) -> pl.DataFrame:
    """Add achieved_gbs, achieved_tflops, intensity (FLOP/byte), bound, roofline_ms, gap_ms,
    inconsistent and bw_basis to rows with `ms` (per step), `bytes`, `flops`, `dtype`.

    roofline_ms = max(bytes / BW, flops / the dtype's compute roof: the TFLOP/s `attrib calibrate`
    measured where the arch has it, else the peak); the compute term is left out when the dtype
    has no peak on this arch. A kernel above the datasheet peak is inconsistent. gap_ms = ms -
    roofline_ms. Without an arch only the achieved figures and the intensity are filled. Rows
    without a positive `ms` get no achieved figures and no gap.
    """
    rows = roofline(df.lazy(), dtype_peaks(df, arch), arch, what_if)
    return rows.collect(engine=engine(df.height))


def roofline(lf: pl.LazyFrame, peaks: pl.DataFrame, arch: Arch | None,
             what_if: bool = False) -> pl.LazyFrame:
    """kernel_roofline's query over `lf`, lazy; `peaks`: `dtype_peaks` of its rows."""
    names = lf.collect_schema().names()
    bw, basis = arch.bandwidth() if arch else (None, None)
    peak_bw = arch.peak_bw_gbs if arch else None
    link = arch.link_gbs if arch else None
    on_link = (pl.col("component").is_in(LINK_COMPONENTS).fill_null(False)
               if "component" in names else pl.lit(False))
    ms, nbytes, flops = (pl.col(c).cast(pl.Float64) for c in ("ms", "bytes", "flops"))
    timed = pl.when(ms > 0)
    dtype = pl.col("dtype") if "dtype" in names else pl.lit(None, pl.Utf8)
    # one lazy query: the eager steps below were a query each
    out = (lf.with_columns(*_keys(lf), dtype.alias("_dtype"))
           .join(peaks.lazy(), on=list(_KEYS.values()), how="left", nulls_equal=True,
                 maintain_order="left")
           .drop(_KEYS.values()))
    out = out.with_columns(
        timed.then(nbytes / ms / 1e6).alias("_gbs"),
        timed.then(flops / ms / 1e9).alias("_tflops"),
        pl.when(nbytes > 0).then(flops / nbytes).alias("intensity"),
        pl.when(on_link).then(nbytes / (link * 1e6) if link else pl.lit(None, pl.Float64))
        .otherwise(nbytes / (bw * 1e6) if bw else pl.lit(None, pl.Float64)).alias("_mem_ms"),
        pl.when(pl.col("_roof") > 0).then(flops / (pl.col("_roof") * 1e9)).alias("_cmp_ms"),
    )
    over_link = (pl.col("_gbs") > link) if link else pl.lit(False)
    over_mem = (pl.col("_gbs") > peak_bw) if peak_bw else pl.lit(False)
    over_bw = pl.when(on_link).then(over_link).otherwise(over_mem)
    limit = pl.when(on_link).then(pl.lit(link)).otherwise(pl.lit(peak_bw))
    over_fl = pl.col("_tflops") > pl.col("_peak")
    bad = (over_bw.fill_null(False) | over_fl.fill_null(False))
    if what_if and arch:
        bw_why = f"measured on a faster device than {arch.name}: projection only"
        fl_why = "measured on a faster device"
    else:
        bw_why, fl_why = "bytes model wrong or data cache-resident", "FLOP model wrong"
    note = (pl.when(over_bw.fill_null(False))
            .then(pl.format("achieved {} GB/s exceeds the {} GB/s peak: {}",
                            pl.col("_gbs").round(1), limit, pl.lit(bw_why)))
            .when(over_fl.fill_null(False))
            .then(pl.format("achieved {} TFLOP/s exceeds the {} peak of {}: {}",
                            pl.col("_tflops").round(1), pl.col("_peak"), pl.col("_dtype"),
                            pl.lit(fl_why))))
    roof = pl.max_horizontal("_mem_ms", "_cmp_ms")
    memory_bound = pl.col("_cmp_ms").is_null() | (pl.col("_mem_ms") >= pl.col("_cmp_ms"))
    gap = pl.when(pl.col("inconsistent").is_null() & (ms > 0)).then(ms - pl.col("roofline_ms"))
    out = out.with_columns(
        pl.when(~bad).then(pl.col("_gbs")).alias("achieved_gbs"),
        pl.when(~bad).then(pl.col("_tflops")).alias("achieved_tflops"),
        pl.when(pl.col("_mem_ms").is_null()).then(None)
        .when(on_link).then(pl.lit("link"))
        .when(memory_bound).then(pl.lit("memory"))
        .otherwise(pl.lit("compute")).alias("bound"),
        pl.when(pl.col("_mem_ms").is_not_null()).then(roof).alias("roofline_ms"),
        note.alias("inconsistent"),
        pl.when(on_link).then(pl.lit("link" if link else None, pl.Utf8))
        .otherwise(pl.lit(basis, pl.Utf8)).alias("bw_basis"),
    ).with_columns(gap.alias("gap_ms"))
    scratch = ("_peak", "_roof", "_dtype", "_gbs", "_tflops", "_mem_ms", "_cmp_ms")
    return out.drop(*scratch).with_columns([pl.col(c).cast(t) for c, t in ADDED.items()])


def priced(k: pl.DataFrame) -> pl.DataFrame:
    """One row for kernel_roofline over a set of kernels: ms, bytes and flops of those whose
    bytes are known."""
    known = k.filter(pl.col("bytes").is_not_null())
    schema = {"ms": pl.Float64, "bytes": pl.Float64, "flops": pl.Float64}
    return pl.DataFrame({"ms": [known["dur_ns"].sum() / 1e6], "bytes": [known["bytes"].sum()],
                         "flops": [known["flops"].sum()]}, schema=schema)


def achieved_gbs(k: pl.DataFrame, peak_bw_gbs: float | None = None) -> float | None:
    """GB/s a set of kernels moves (kernel_roofline's figure over their priced time); None when
    none is priced, or when it exceeds `peak_bw_gbs` (a bytes model that is wrong is not a
    result)."""
    gbs = kernel_roofline(priced(k), None)["achieved_gbs"].item()
    return None if gbs is None or (peak_bw_gbs and gbs > peak_bw_gbs) else float(gbs)


def phase_ceiling(bytes_per_step: float | None, tokens_per_step: int | None, arch: Arch | None,
                  roofline_ms: float | None = None) -> tuple[float | None, float | None]:
    """(GB per token, tokens/s ceiling).

    The ceiling is tokens_per_step / the step's roofline time: `roofline_ms` when given (the sum
    over components of max(memory time, FLOP time at the dtype's compute roof): compute-bound
    prefill is held to its FLOP floor), else bytes_per_step / BW (BW: the arch's sustained
    bandwidth, its peak when none is known; `arch.bandwidth()` says which).
    """
    if not bytes_per_step or not tokens_per_step or bytes_per_step <= 0 or tokens_per_step <= 0:
        return None, None
    gb_per_token = bytes_per_step / tokens_per_step / 1e9
    if arch is None:
        return gb_per_token, None
    bw, _ = arch.bandwidth()
    memory_s = bytes_per_step / (bw * 1e9)
    floor_s = max(roofline_ms / 1e3, memory_s) if roofline_ms else memory_s
    return gb_per_token, tokens_per_step / floor_s
