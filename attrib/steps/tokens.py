"""Tokens per step and the phase of unannotated steps, from shapes and kernel names."""

from __future__ import annotations

import polars as pl

from attrib.trace import input_dims

COMPILED_PIECE = " (compiled call)"  # the marker's end of a forward piece (attrib.steps.phases)


def fill_tokens_and_phase(spans: pl.DataFrame, shapes: pl.DataFrame,
                          notes: list[str]) -> pl.DataFrame:
    joined = spans.lazy().join(shapes.lazy().rename({"tokens": "shape_tokens"}), on="step",
                               how="left")
    from_shape = pl.col("tokens").is_null() & pl.col("shape_tokens").is_not_null()
    shape_source = (pl.when(pl.col("per_seq").is_not_null()).then(pl.lit("embedding input shape"))
                    .otherwise(pl.lit("projection GEMM input shape")))
    guessed = (pl.col("phase") == "unknown") & pl.col("per_seq").is_not_null()
    by_shape = (pl.when(pl.col("per_seq") == 1).then(pl.lit("decode"))
                .otherwise(pl.lit("prefill")))
    s = joined.with_columns(
        pl.when(from_shape).then(shape_source).otherwise(pl.col("tokens_from"))
        .alias("tokens_from"),
        pl.coalesce("tokens", "shape_tokens").alias("tokens"),
        pl.when(guessed).then(by_shape).otherwise(pl.col("phase")).alias("phase"),
        guessed.alias("_guessed")).collect(engine="in-memory")
    # decode steps replayed from a graph have no embedding op: one token per sequence of the
    # prefill batch
    prefill = ((pl.col("phase") == "prefill") & pl.col("per_seq").is_not_null()
               & (pl.col("per_seq") > 0))
    batch = (pl.col("shape_tokens") // pl.col("per_seq")).filter(prefill)
    any_guessed, n_batch, b = s.select(pl.col("_guessed").any(), batch.len().alias("n"),
                                       batch.first().alias("b")).row(0)
    if any_guessed:
        notes.append("phase of steps without a phase annotation decided from shapes "
                     "(1 new token per sequence = decode)")
    # a compiled forward call after a prefill (a piece of one generate() span: prefill, then
    # one token per sequence) with no embedding op: decode, if its GEMM rows (when recorded: a
    # graph replay records none) equal the prefill's sequences
    one_each = ((pl.col("phase") == "unknown") & pl.col("per_seq").is_null()
                & pl.col("marker").str.ends_with(COMPILED_PIECE)
                & (pl.col("tokens").is_null() | (pl.col("tokens") == pl.lit(b or 0))))
    n_each = s.select(one_each.sum()).item() if b is not None else 0
    if n_each:
        notes.append(f"{n_each} compiled forward calls after the prefill "
                     f"taken as decode, 1 new token for each of its {int(b)} sequences (their "
                     "GEMM rows where recorded; a graph replay records none)")
        s = s.with_columns(pl.when(one_each).then(pl.lit("decode"))
                           .otherwise(pl.col("phase")).alias("phase"))
    untokened = (pl.col("phase") == "decode") & pl.col("tokens").is_null()
    out = s.lazy()
    if n_batch and s.select(untokened.any()).item():
        b = int(b)
        notes.append(f"decode tokens per step taken as the prefill batch ({b} sequences x 1 "
                     "token): no shapes in decode")
        out = out.with_columns(
            pl.when(untokened).then(pl.lit("prefill batch"))
            .otherwise(pl.col("tokens_from")).alias("tokens_from"),
            pl.when(untokened).then(pl.lit(b))
            .otherwise(pl.col("tokens")).alias("tokens"))
    return out.drop("shape_tokens", "per_seq", "_guessed").collect(engine="in-memory")


def tokens_from_names(steps: pl.DataFrame, named: pl.DataFrame) -> pl.DataFrame:
    """Steps still without a token count take it from llama.cpp kernels (GEMV names, norm rows)."""
    s = steps.lazy().join(named.lazy(), on="step", how="left")
    use = pl.col("tokens").is_null() & pl.col("name_tokens").is_not_null()
    s = s.with_columns(
        pl.when(use).then(pl.col("name_tokens_from")).otherwise(pl.col("tokens_from"))
        .alias("tokens_from"),
        pl.when(use).then(pl.col("name_tokens")).otherwise(pl.col("tokens")).alias("tokens"))
    return s.drop("name_tokens", "name_tokens_from").collect(engine="in-memory")


CONVOLUTIONS = ("aten::convolution", "aten::conv2d", "aten::conv3d", "aten::_convolution")
LLM_PHASES = ("prefill", "decode")


def _image_batch(dim_text: str | None) -> int | None:
    """B of a convolution's input [B, C, H, W] (or [B, C, T, H, W]), else None."""
    dims = input_dims(dim_text)
    x = dims[0] if isinstance(dims, list) and dims and isinstance(dims[0], list) else None
    if x is None or len(x) not in (4, 5) or not all(isinstance(v, int) for v in x):
        return None
    return int(x[0])


def _lm_head_times(ops: pl.DataFrame) -> pl.Series:
    """Start times of the LM heads: `aten::linear` ops whose weight [V, H] has as many rows as an
    `aten::embedding` table [V, H] of the trace (tied or not, the head scores the vocabulary)."""
    vocab = set()
    for text in ops.filter(pl.col("name") == "aten::embedding")["input_dims"].to_list():
        dims = input_dims(text)
        if dims and isinstance(dims[0], list) and len(dims[0]) == 2:
            vocab.add(dims[0][0])
    linear = ops.filter(pl.col("name") == "aten::linear").select("start_ns", "input_dims")
    hits = []
    for t, text in linear.iter_rows() if vocab else ():
        dims = input_dims(text)
        w = dims[1] if dims and len(dims) > 1 else None
        if isinstance(w, list) and len(w) == 2 and w[0] in vocab:
            hits.append(t)
    return pl.Series("t", hits, dtype=pl.Int64)


def _scores_vocabulary(spans: pl.LazyFrame, ops: pl.DataFrame) -> set[int]:
    """The steps holding an LM head."""
    heads = _lm_head_times(ops)
    if not heads.len():
        return set()
    hit = (spans.sort("cpu_start")
           .join_asof(heads.sort().to_frame().lazy(), left_on="cpu_start", right_on="t",
                      strategy="forward")
           .filter(pl.col("t") <= pl.col("cpu_end")).collect(engine="in-memory"))
    return set(hit["step"].to_list())


def with_units(steps: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """Add `unit` ("tokens" or "samples") and `samples` per step.

    A step whose first convolution reads images [B, C, H, W] (a vision or diffusion forward: ViT
    patch embedding, a UNet, a ResNet) is a forward pass of B samples: its figures are per sample,
    and no token figure applies (the token count taken from its GEMM shapes is patches, not
    tokens). So is a step taken for prefill by its text inputs when it scores no vocabulary (no
    LM head: OWLv2's text queries ride along a detector); a multimodal LLM's prefill, which ends
    in its LM head, stays in tokens."""
    conv = (ops.lazy().filter(pl.col("name").is_in(CONVOLUTIONS))
            .select(pl.col("start_ns").alias("t"), "input_dims").sort("t")
            .collect(engine="in-memory"))
    spans = steps.lazy().select("step", "phase", "cpu_start", "cpu_end").drop_nulls("cpu_start")
    schema = {"step": pl.Int64, "samples": pl.Int64}
    rows = []
    if conv.height:  # (no spans: no hit)
        hit = (spans.sort("cpu_start")
               .join_asof(conv.lazy(), left_on="cpu_start", right_on="t", strategy="forward")
               .filter(pl.col("t") <= pl.col("cpu_end")).select("step", "phase", "input_dims")
               .collect(engine="in-memory"))
        images = [(step, phase, _image_batch(dims)) for step, phase, dims in hit.iter_rows()]
        text = [step for step, phase, b in images if b and phase in LLM_PHASES]
        llm = _scores_vocabulary(spans.filter(pl.col("step").is_in(text)), ops) if text else set()
        rows = [(step, b) for step, phase, b in images if b and step not in llm]
    per = pl.DataFrame(rows, schema=schema, orient="row")
    out = steps.lazy().join(per.lazy(), on="step", how="left")
    unit = (pl.when(pl.col("samples").is_not_null()).then(pl.lit("samples"))
            .otherwise(pl.lit("tokens")))
    return out.with_columns(unit.alias("unit")).collect(engine="in-memory")
