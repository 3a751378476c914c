"""Kernel -> model component (DESIGN.md taxonomy), with the evidence that decided it.

Evidence, strongest first: the nn.Module scope the kernel was launched from (with_stack traces),
a Python frame that names the work (apply_rotary_pos_emb, cache update, sdpa forward) or a CPU
annotation that does (record_function("per_token_fp8_quant")), the CPU op name and shapes (an
unnamed GEMM whose output a softmax/top-k over its N values follows is the MoE router), the kernel
name (the pattern table in data/kernel_patterns.csv), and last the kernel's position in the layer
(GEMMs between attention kernels: o_proj first, qkv last; without attention, between norms).
Linear layers inside an attention module split at the attention kernel into qkv_proj / o_proj;
inside an MLP the last one is mlp_down.
"""

from __future__ import annotations

import polars as pl

from attrib.components.patterns import GEMM_OPS, component_patterns, contains
from attrib.components.position import gemm_positions
from attrib.components.rope_table import rope_table_casts
from attrib.components.router import routers
from attrib.link.launches import launch_points
from attrib.link.nesting import innermost
from attrib.steps.excluded import compile_spans, inside
from attrib.threads import both
from attrib.trace import Trace, dims_text

_PSEUDO = ("gemm", "copy", "elementwise")

# Python frames that name the work, innermost wins. (regex on the frame name, component)
HINT_FRAMES = (
    (r"(?i)gated_delta_rule|causal_conv1d|fused_recurrent|chunk_gated|selective_scan|"
     r"selective_state_update|mamba_chunk_scan|ssd_combined", "linear_attention"),
    (r"(?i)rotary|rotate_half|_rope\b|rope_forward", "rope"),
    (r"(?i)cache_utils\.py.*: update|reshape_and_cache|kv_cache_update|write_to_kv_cache",
     "kv_cache_write"),
    (r"(?i)attention_forward|sdpa_attention|flash_attention|paged_attention|unified_attention",
     "attention"),
    (r"(?i)grouped_mm|grouped_linear|experts_forward|fused_moe", "moe_experts"),
    (r"(?i)sampler|_sample\b|logits_process|top_k_top_p|sampling", "sampler"),
)
# a frame of a script run directly: a file name without a package path, `sampler_capture.py(12): `;
# its name is the user's, not the work's (library frames, `vllm/.../rotary_embedding.py(..)`,
# keep theirs)
SCRIPT_FRAME = r"^[^/\\]+\.py\([0-9]+\): "
# record_function / roctx annotations (CPU side) that name the work: the frame hints, and
# activation quantization (an annotation wraps only what it names; a Python frame named for
# quantization, such as vLLM's quantization/fp8.py apply, also wraps the GEMM, so "quant" is no
# frame hint)
HINT_ANNOTATIONS = HINT_FRAMES + ((r"(?i)quant", "quantize"),)

# CPU op names (innermost op of the launch). (regex, component)
OP_RULES = (
    (r"^aten::embedding|^aten::embedding_bag", "embedding"),
    # a vision patch embedding or a CNN layer (a linear-attention short conv has its module)
    (r"^aten::(?:_?convolution|conv[123]d|cudnn_convolution|miopen_(?:depthwise_)?convolution"
     r"|_conv_depthwise2d)$", "conv"),
    (r"scaled_dot_product|flash_attention|_efficient_attention|_cudnn_attention|"
     r"unified_attention|paged_attention|::mha_|flash_attn|merge_attn_states|mla_", "attention"),
    (r"reshape_and_cache|kv_cache|store_kvcache|concat_and_cache", "kv_cache_write"),
    (r"rotary|rope", "rope"),
    (r"rms_norm|layer_norm|rmsnorm|group_norm", "norm"),
    (r"silu_and_mul|gelu_and_mul|act_and_mul|swiglu|^aten::silu|^aten::gelu", "activation"),
    (r"topk_softmax|moe_gate|router", "moe_router"),
    (r"moe_align|moe_sort|moe_permute", "moe_dispatch"),
    (r"_grouped_mm|fused_moe|moe_forward|fused_experts|moe_wna16|marlin_gemm_moe", "moe_experts"),
    (r"moe_sum|moe_unpermute", "moe_combine"),
    (r"quant", "quantize"),
    (r"multinomial|argmax|sample", "sampler"),
    (r"nccl|all_reduce|all_gather|reduce_scatter|c10d::", "communication"),
)
# Kernel-name classes that beat every scope: a collective is communication wherever it was
# launched; a kernel named for one job (a KV write, a rotary kernel) keeps that job in any phase
# and module.
NAME_FIRST = ("communication", "linear_attention")
_IN_ATTENTION = ("kv_cache_write", "rope")
# MoE names that beat a coarse op/module "moe_experts" (a router, sort or activation-quantize
# kernel under vllm::moe_forward)
_MOE_PARTS = ("moe_router", "moe_dispatch", "moe_combine", "quantize")
# linear-attention layers (Gated DeltaNet, Mamba mixers, ...) by module class
_LINEAR_ATTN = r"(?i)gated_?delta|deltanet|mixer$|linear_?attention|lightning_?attn|short_?conv"
_LINEAR_ATTN_SEG = (r"(?i)(?:^|/)[^/]*"
                    r"(?:gated_?delta|deltanet|mixer|linear_?attention|lightning_?attn|short_?conv)"
                    r"[^/]*(?:_[0-9]+)?(?:/|$)")
_MOE_BLOCK = r"(?i)sparse_?moe|moe_?block|moe_?layer|^moe$|MoE$|fused_?moe"
_MLP = r"(?i)mlp|feedforward|ffn"


def _first_index(col: pl.Expr, patterns: list[str]) -> pl.Expr:
    """The index of the first of `patterns` that `col` matches (null: none)."""
    hits = [pl.when(contains(col, p)).then(pl.lit(i, pl.Int64)) for i, p in enumerate(patterns)]
    return pl.coalesce(hits) if hits else pl.lit(None, pl.Int64)


def _first_match(col: pl.Expr, rules: list[tuple[str, str]]) -> pl.Expr:
    """The value of the first rule whose pattern `col` matches (null: none)."""
    index = _first_index(col, [pat for pat, _ in rules])
    return index.replace_strict(list(range(len(rules))), [v for _, v in rules], default=None,
                                return_dtype=pl.Utf8)


def by_name(names: pl.Series) -> pl.DataFrame:
    """Unique kernel names -> (name, name_comp, name_family) from the pattern table (the
    patterns run once for both)."""
    table = component_patterns()
    u = pl.DataFrame({"name": names.unique()})
    at = u.select(_first_index(pl.col("name"), table["pattern"].to_list()))
    index = at.to_series()
    return u.with_columns(table["component"].gather(index).alias("name_comp"),
                          table["family"].gather(index).alias("name_family"))


def _innermost_hint(spans: pl.DataFrame, rules: tuple, k: pl.DataFrame,
                    frames: bool = False) -> pl.DataFrame:
    """kernel id -> hint_comp: the component `rules` give the innermost hinted span (id, name,
    start_ns, dur_ns, pid, tid) around the kernel's launch. frames: Python frames, where a
    script's file name never names a component (SCRIPT_FRAME)."""
    if spans.height == 0:
        return pl.DataFrame(schema={"id": pl.Int64, "hint_comp": pl.Utf8})
    # names repeat: the patterns run once per distinct name
    names = spans.select(pl.col("name").unique())
    hinted = names.with_columns(_first_match(pl.col("name"), list(rules)).alias("hint_comp"))
    if frames:   # a script run directly (a bare `file.py(12): func`) is named by its function only
        script = pl.col("name").str.contains(SCRIPT_FRAME)
        func = _first_match(pl.col("name").str.replace(SCRIPT_FRAME, ""), list(rules))
        hinted = hinted.with_columns(
            pl.when(script).then(func).otherwise(pl.col("hint_comp")).alias("hint_comp")
        )
    hinted = hinted.drop_nulls()
    f = spans.join(hinted, on="name", how="inner")
    hinted_spans = f.select("id", "start_ns", "dur_ns", "pid", "tid")
    got = innermost(hinted_spans, launch_points(k), ["pid", "tid"])
    comp_of = f.select(pl.col("id").alias("inner"), "hint_comp")
    return got.join(comp_of, on="inner", how="left").select(pl.col("pid_").alias("id"), "hint_comp")


def _hints(trace: Trace, k: pl.DataFrame) -> pl.DataFrame:
    """kernel id -> component named by the innermost hint frame around its launch, or else by the
    innermost CPU-side annotation that names the work; hint_src: 'frame' | 'annotation'."""
    frames = _innermost_hint(trace.frames, HINT_FRAMES, k, frames=True)
    m = trace.markers
    cpu = m.filter(pl.col("side") == "cpu") if "side" in m.columns else m.clear()
    cpu_spans = cpu.select("id", "name", "start_ns", "dur_ns", "pid", "tid")
    notes = _innermost_hint(cpu_spans, HINT_ANNOTATIONS, k)
    both = frames.join(notes.rename({"hint_comp": "_note"}), on="id", how="full", coalesce=True)
    src = (pl.when(pl.col("hint_comp").is_not_null()).then(pl.lit("frame"))
           .when(pl.col("_note").is_not_null()).then(pl.lit("annotation")))
    return both.select("id", pl.coalesce("hint_comp", "_note").alias("hint_comp"),
                       src.alias("hint_src"))


def _row_gather(ops: pl.DataFrame) -> pl.Expr:
    """'embedding' for kernels of an aten::gather that picks whole rows of a 2-D table
    (self [V, H], dim 0, index [T, H]): an embedding lookup written as gather."""
    widths = dims_text().str.extract_groups(r"^\[\[[0-9]+,([0-9]+)\],\[\],\[[0-9]+,([0-9]+)\]")
    first_int = r'^\[[ \t\n\r]*"[^"]*",[ \t\n\r]*"([0-9]+)"'  # JSON's spaces; ASCII digits
    dim = pl.col("concrete_inputs").str.extract(first_int, 1).alias("dim")
    g = ops.filter(pl.col("name") == "aten::gather").select("id", widths, dim)
    g = g.unnest("input_dims").filter((pl.col("1") == pl.col("2")) & (pl.col("dim") == "0"))
    return pl.when(pl.col("op_id").is_in(g["id"].implode())).then(pl.lit("embedding"))


def _outer_product(ops: pl.DataFrame) -> pl.Expr:
    """'rope' for kernels of a GEMM op with inner dimension 1: the rotary embedding's frequency
    table (inv_freq [d/2, 1] @ positions [1, T]), never a projection (compiled graphs call it as
    aten::mm)."""
    is_mm = pl.col("name").is_in(["aten::mm", "aten::bmm", "aten::matmul"])
    inner_one = dims_text().str.contains(r"^\[\[(?:[0-9]+,)*[0-9]+,1\],\[(?:[0-9]+,)*1,[0-9]+\]")
    g = ops.filter(is_mm).filter(inner_one)  # the text rewritten for the GEMMs alone
    return pl.when(pl.col("op_id").is_in(g["id"].implode())).then(pl.lit("rope"))


def _per_distinct(k: pl.DataFrame, expr: pl.Expr, keys: list[str]) -> pl.DataFrame:
    """`k.with_columns(expr)` for an expr of `keys` only, evaluated once per distinct key row (its
    regexes run over hundreds of rows, not every kernel)."""
    u = k.select(keys).unique().with_columns(expr)
    return k.join(u, on=keys, how="left", nulls_equal=True, maintain_order="left")


def _module_comp() -> pl.Expr:
    """Component from the innermost module class and its path (None: not decided by module)."""
    m, path, op, hint = pl.col("module"), pl.col("module_path"), pl.col("op"), pl.col("hint_comp")
    parent = path.str.extract(r"([^/]+)/[^/]+$").str.replace(r"_[0-9]+$", "")
    in_shared = contains(path, r"(?i)shared_?expert") | pl.col("_shared_cls")
    in_experts = contains(path, r"(?i)Experts|FusedMoE")
    is_linear = m.str.contains(r"Linear$")
    dispatch_op = op.str.contains(r"sort|histc|cumsum|bincount|floor_divide|arange|^aten::index$|"
                                  r"fill_|aten::ge$|clamp|nonzero|one_hot|where")
    expert_op = (pl.when(dispatch_op).then(pl.lit("moe_dispatch"))
                 .when(op.str.contains(r"index_put|index_add|scatter|aten::sum$"))
                 .then(pl.lit("moe_combine"))
                 .otherwise(pl.lit("moe_experts")))
    combine_op = op.str.contains(r"index_add|scatter|aten::sum$|aten::mul|aten::add")
    moe_block_op = (pl.when(op.str.contains(r"topk|softmax|sigmoid")).then(pl.lit("moe_router"))
                    .when(combine_op).then(pl.lit("moe_combine"))
                    .otherwise(pl.lit("moe_dispatch")))
    in_linear_attn = ~is_linear & contains(path, _LINEAR_ATTN_SEG)
    heads_model = parent.str.contains(r"ForCausalLM|ForConditionalGeneration|LMHead")
    kv_copy = pl.when(op.str.contains(r"index_copy|index_put")).then(pl.lit("kv_cache_write"))
    return (
        pl.when(m.is_null()).then(pl.lit(None, pl.Utf8))
        .when(in_shared).then(pl.lit("moe_shared_expert"))
        .when(m.str.contains(r"Embedding$") & ~m.str.contains("Rotary")).then(pl.lit("embedding"))
        .when(m.str.contains(r"Rotary|Rope")).then(pl.lit("rope"))
        .when(m.str.contains(r"Norm$|Norm[0-9]*$|RMSNorm|LayerNorm")).then(pl.lit("norm"))
        .when(in_linear_attn).then(pl.coalesce(hint, pl.lit("linear_attention")))
        .when(m.str.contains(r"Router|TopK|^.*Gate$")).then(pl.lit("moe_router"))
        .when(m.str.contains(r"SiLU|GELU|Activation|AndMul|Tanh|ReLU")).then(pl.lit("activation"))
        .when(m.str.contains(r"Sampler")).then(pl.lit("sampler"))
        .when(m.str.contains(r"LogitsProcessor|LMHead|ParallelLMHead")).then(pl.lit("lm_head"))
        .when(m == "QKVParallelLinear").then(pl.lit("qkv_proj"))
        .when(m == "MergedColumnParallelLinear").then(pl.lit("mlp_gate_up"))
        .when(is_linear & in_experts).then(pl.lit("moe_experts"))
        .when(is_linear & heads_model).then(pl.lit("lm_head"))
        .when(is_linear & contains(parent, _LINEAR_ATTN)).then(pl.lit("@attn_linear"))
        .when(is_linear & contains(parent, r"(?i)attn|attention")).then(pl.lit("@attn_linear"))
        .when(is_linear & contains(parent, _MLP)).then(pl.lit("@mlp_linear"))
        .when(is_linear & contains(parent, _MOE_BLOCK)).then(pl.lit("moe_router"))
        .when(contains(m, r"(?i)attn|attention")).then(
            pl.coalesce(hint, kv_copy, pl.lit("attention")))
        .when(in_experts).then(expert_op)
        .when(contains(m, _MOE_BLOCK)).then(moe_block_op)
        .when(contains(m, _MLP)).then(pl.lit("activation"))
        .otherwise(pl.lit(None, pl.Utf8))
    )


_MOE_MLP = (r"^(.*?(?:^|/)[^/]*(?:(?i:sparse_?moe|moe_?block|moe_?layer)|MoE)(?:_[0-9]+)?)/"
            r"([^/]*(?i:mlp|feed_?forward|ffn)[^/]*)(?:/|$)")


def _shared_by_class(k: pl.DataFrame) -> pl.DataFrame:
    """`_shared_cls`: the kernel runs in an MLP module nested directly in an MoE block that holds
    no other MLP (with_stack paths hold classes: .../DeepseekV3MoE_0/DeepseekV3MLP_1/Linear_13).
    Routed experts written as a list of MLPs give their block many MLP children and are not
    matched. Decided once per distinct (module, module_path), then joined to the kernels."""
    u = k.select("module", "module_path").unique()
    block = pl.col("module_path").str.extract(_MOE_MLP, 1)
    child = pl.col("module_path").str.extract(_MOE_MLP, 2)
    u = u.with_columns(block.alias("_moe_block"), child.alias("_moe_child"))
    n = pl.col("_moe_child").drop_nulls().n_unique().over("_moe_block")
    only_mlp = (pl.col("_moe_block").is_not_null() & (n == 1)).fill_null(False)
    u = u.with_columns(only_mlp.alias("_shared_cls")).drop("_moe_block", "_moe_child")
    # a plain Linear beside a router module in an MoE block is the shared expert's gate
    # (Qwen2/3-Next)
    parent = pl.col("module_path").str.replace(r"/[^/]+$", "")
    is_router = pl.col("module").str.contains(r"Router|TopK").fill_null(False)
    routers = u.filter(is_router).select(parent.unique().alias("_p"))
    gate = (pl.col("module").str.contains(r"Linear$") & parent.is_in(routers["_p"].implode())
            & contains(parent.str.extract(r"([^/]+)$"), _MOE_BLOCK)).fill_null(False)
    u = u.with_columns(pl.col("_shared_cls") | gate)
    keys = ["module", "module_path"]
    return k.join(u, on=keys, how="left", nulls_equal=True, maintain_order="left")


def _quantizing_linears(k: pl.DataFrame) -> pl.DataFrame:
    """A linear module whose call launched a `quantize` kernel (by op, name or annotation:
    bitsandbytes' Linear8bitLt quantizing its input, an fp8 linear's per-token quant) quantizes
    its activations: its kernels that nothing else named and that are no GEMM (the casts around
    the quantization, the outlier test's abs / ge / any) are that quantization."""
    linear = pl.col("module").str.contains(r"(?i)linear").fill_null(False)
    keys = ["step", "module_path", "module_ns"]
    calls = (k.filter(linear & (pl.col("comp") == "quantize")).select(keys).unique()
             .with_columns(pl.lit(True).alias("_quantizes")))
    if calls.height == 0:
        return k
    gemm = ((pl.col("name_comp") == "gemm") | pl.col("op").is_in(list(GEMM_OPS))).fill_null(False)
    k = k.join(calls, on=keys, how="left", nulls_equal=True, maintain_order="left")
    todo = pl.col("comp").is_null() & linear & ~gemm & pl.col("_quantizes").fill_null(False)
    return k.with_columns(*_override(todo, "quantize", "module")).drop("_quantizes")


def _split_linears(k: pl.DataFrame) -> pl.DataFrame:
    """@attn_linear -> qkv_proj before the attention kernel / o_proj after; @mlp_linear -> last
    is mlp_down."""
    scope = pl.col("module_path").str.replace(r"/[^/]+$", "").alias("_scope")
    k = _per_distinct(k, scope, ["module_path"])
    by_scope = ["step", "_scope"]
    is_attn = pl.col("comp").is_in(["attention", "linear_attention"])
    anchor = k.filter(is_attn).group_by(by_scope).agg(pl.col("start_ns").min().alias("_anchor"))
    # the last linear's path and its call: linears that share one path (a quantized linear class
    # made once per layer, each instance `QLinear_0`) are told apart by their module call
    last_path = pl.col("module_path").sort_by("start_ns").last()
    last_call = pl.col("module_ns").sort_by("start_ns").last()
    last_mlp = (k.filter(pl.col("comp") == "@mlp_linear").group_by(by_scope)
                .agg(last_path.alias("_down"), last_call.alias("_down_ns")))
    last_attn = (k.filter(pl.col("comp") == "@attn_linear").group_by(by_scope)
                 .agg(last_path.alias("_last"), last_call.alias("_last_ns")))
    # an MLP-named block that holds routed experts is an MoE block (vLLM gpt-oss MLPBlock): its
    # Linear is the router
    experts = (k.filter(pl.col("comp") == "moe_experts").select(by_scope).unique()
               .with_columns(pl.lit(True).alias("_moe")))
    for table in (anchor, last_mlp, last_attn, experts):
        k = k.join(table, on=by_scope, how="left")
    by_anchor = (pl.when(pl.col("start_ns") < pl.col("_anchor"))
                 .then(pl.lit("qkv_proj")).otherwise(pl.lit("o_proj")))
    def same_call(last: str) -> pl.Expr:
        mine, theirs = pl.col("module_ns"), pl.col(last)
        return (mine.is_null() | theirs.is_null() | (mine == theirs)).fill_null(True)

    by_last = (pl.when((pl.col("module_path") == pl.col("_last")) & same_call("_last_ns"))
               .then(pl.lit("o_proj")).otherwise(pl.lit("qkv_proj")))
    attn = pl.when(pl.col("_anchor").is_not_null()).then(by_anchor).otherwise(by_last)
    mlp = (pl.when(pl.col("_moe").fill_null(False)).then(pl.lit("moe_router"))
           .when((pl.col("module_path") == pl.col("_down")) & same_call("_down_ns"))
           .then(pl.lit("mlp_down"))
           .otherwise(pl.lit("mlp_gate_up")))
    comp = (pl.when(pl.col("comp") == "@attn_linear").then(attn)
            .when(pl.col("comp") == "@mlp_linear").then(mlp).otherwise(pl.col("comp")))
    return k.with_columns(comp.alias("comp")).drop("_scope", "_anchor", "_down", "_last", "_moe",
                                                   "_down_ns", "_last_ns")


# unnamed glue kernels between two named ones: (before, after) -> component
# an unnamed kernel between two named ones -> its component. Between the KV-cache write (or an
# attention kernel) and the output projection is attention, whatever its name: a backend the
# patterns do not know, in a graph replay without per-kernel ops, keeps its component
_BETWEEN = {("qkv_proj", "attention"): "rope",
            ("qkv_proj", "kv_cache_write"): "rope",
            ("kv_cache_write", "o_proj"): "attention",
            ("kv_cache_write", "attention"): "attention",
            ("attention", "attention"): "attention",
            ("attention", "o_proj"): "attention",
            ("mlp_gate_up", "mlp_down"): "activation",
            ("activation", "quantize"): "activation",
            ("activation", "mlp_down"): "activation",
            ("mlp_gate_up", "activation"): "activation",
            ("moe_router", "moe_experts"): "moe_dispatch",
            ("moe_experts", "moe_experts"): "moe_experts"}


def _between(k: pl.DataFrame) -> pl.DataFrame:
    """Name unnamed kernels by the named kernels just before and after them in the step."""
    # each window once, as a column: an eager query does not share repeated subexpressions
    k = k.sort("start_ns").with_columns(
        pl.col("comp").forward_fill().over("step").alias("_prev"),
        pl.col("comp").backward_fill().over("step").alias("_next"))
    prev, nxt = pl.col("_prev"), pl.col("_next")
    rule = pl.lit(None, pl.Utf8)
    for (a, b), comp in _BETWEEN.items():
        rule = pl.when((prev == a) & (nxt == b)).then(pl.lit(comp)).otherwise(rule)
    # a run of unnamed kernels holding an rsqrt op is an RMSNorm written out in aten ops (no
    # module scope): pow, mean, add, rsqrt, mul and the casts around them; the run starts at the
    # residual add
    run = pl.col("comp").is_not_null().cum_sum().over("step")
    k = k.with_columns(run.alias("_run"))
    is_rsqrt = pl.col("op").str.contains(r"^aten::rsqrt").fill_null(False)
    unnamed_rsqrt = pl.col("comp").is_null() & is_rsqrt
    rsqrt = unnamed_rsqrt.any().over("step", "_run")
    k = k.with_columns(pl.when(rsqrt).then(pl.lit("norm")).otherwise(rule).alias("_rule"))
    rule = pl.col("_rule")
    todo = pl.col("comp").is_null() & pl.col("step").is_not_null()
    placed = todo & rule.is_not_null()
    named = pl.when(todo).then(rule).otherwise(pl.col("comp")).alias("comp")
    why = pl.when(placed).then(pl.lit("position")).otherwise(pl.col("evidence")).alias("evidence")
    return k.with_columns(named, why).drop("_run", "_prev", "_next", "_rule")


def _after_lm_head(k: pl.DataFrame) -> pl.DataFrame:
    """Kernels of a step that start after its lm_head (top-k/top-p sorts and scans, softmax,
    penalties, the draw) work on the logits: the sampler, placed by position. That covers unnamed
    kernels and sorts/top-k a name pattern took for MoE routing: no MoE layer runs after the
    lm_head."""
    head = (k.filter(pl.col("comp") == "lm_head").group_by("step")
            .agg(pl.col("start_ns").max().alias("_head")))
    is_routing = pl.col("comp").is_in(["moe_dispatch", "moe_router"])
    routing_by_name = (pl.col("evidence") == "name") & is_routing
    todo = ((pl.col("comp").is_null() | routing_by_name.fill_null(False))
            & (pl.col("start_ns") > pl.col("_head")).fill_null(False))
    k = k.join(head, on="step", how="left")
    return k.with_columns(*_override(todo, "sampler", "position")).drop("_head")


def _override(cond: pl.Expr | pl.Series, comp: str, evidence: str) -> tuple[pl.Expr, pl.Expr]:
    """`comp` and `evidence` columns set to the given values where `cond` holds."""
    return (pl.when(cond).then(pl.lit(comp)).otherwise(pl.col("comp")).alias("comp"),
            pl.when(cond).then(pl.lit(evidence)).otherwise(pl.col("evidence")).alias("evidence"))


def classify(trace: Trace, links: pl.DataFrame, kernel_steps: pl.DataFrame,
             compiling: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per kernel: id, step, component, evidence (module | frame | annotation | op | name |
    position | compile | none). compiling: the trace's compile_spans, where already found."""
    la = trace.launches.select(pl.col("id").alias("launch_id"),
                               pl.col("start_ns").alias("launch_ns"),
                               pl.col("pid").alias("launch_pid"),
                               pl.col("tid").alias("launch_tid"))
    op_names = trace.ops.select(pl.col("id").alias("op_id"), pl.col("name").alias("op"))
    k = (trace.kernels.select("id", "name", "start_ns", "dur_ns")
         .join(links, on="id", how="left").join(la, on="launch_id", how="left")
         .join(kernel_steps, on="id", how="left")
         .join(op_names, on="op_id", how="left")
         .with_columns(pl.col("graph").fill_null(False)))

    def names_and_ops() -> tuple[pl.DataFrame, pl.Expr, pl.Series]:
        """The names' patterns; the component of an op (by its shapes, else its name); the
        rotary table casts."""
        op_comp = pl.coalesce(_row_gather(trace.ops), _outer_product(trace.ops),
                              _first_match(pl.col("op"), list(OP_RULES)))
        return by_name(k["name"]), op_comp, rope_table_casts(trace.ops)

    # those and the hints around the launches share no result: on two threads
    (names, op_comp, casts), hints = both(names_and_ops, lambda: _hints(trace, k),
                                          rows=trace.largest())
    k = k.join(names, on="name", how="left").join(hints, on="id", how="left")
    specific = (pl.when(pl.col("name_comp").is_in(_PSEUDO)).then(pl.lit(None, pl.Utf8))
                .otherwise(pl.col("name_comp")))
    k = _shared_by_class(k)
    module_keys = ["module", "module_path", "op", "hint_comp", "name_comp", "_shared_cls"]
    k = _per_distinct(k, _module_comp().alias("_mod"), module_keys)
    k = k.with_columns(op_comp.alias("_op"), specific.alias("_name"))
    first = pl.when(pl.col("_name").is_in(NAME_FIRST)).then(pl.col("_name"))
    scoped = pl.coalesce("_mod", "hint_comp", "_op")
    moe_part = (scoped == "moe_experts") & pl.col("_name").is_in(_MOE_PARTS)
    # a KV-write or rotary kernel launched inside an attention module or op keeps its job (as it
    # does where it is launched outside one): the same kernel, the same component in prefill and
    # decode
    attn_part = (scoped == "attention") & pl.col("_name").is_in(_IN_ATTENTION)
    name_wins = first.is_not_null() | moe_part.fill_null(False) | attn_part.fill_null(False)
    k = k.with_columns(
        pl.when(name_wins).then(pl.col("_name"))
        .otherwise(pl.coalesce(scoped, "_name")).alias("comp"),
        pl.when(name_wins).then(pl.lit("name"))
        .when(pl.col("_mod").is_not_null()).then(pl.lit("module"))
        .when(pl.col("hint_comp").is_not_null()).then(pl.col("hint_src"))
        .when(pl.col("_op").is_not_null()).then(pl.lit("op"))
        .when(pl.col("_name").is_not_null()).then(pl.lit("name")).alias("evidence"))
    k = _split_linears(_quantizing_linears(k))
    # kernels launched by a compile or autotune (benchmark GEMMs, cache-flush fills): no model
    # component
    spans = compile_spans(trace) if compiling is None else compiling
    k = k.with_columns(*_override(inside(k["launch_ns"], spans), "other", "compile"))
    # an unnamed GEMM whose output is routed over exactly its N values: the MoE router (by op and
    # shapes)
    router = pl.col("id").is_in(routers(trace.ops, k).implode())
    k = k.with_columns(*_override(router, "moe_router", "op"))
    # the rotary cos/sin table cast to 16 bits (a constant recast each step): rope, by op and shapes
    table = pl.col("comp").is_null() & pl.col("op_id").is_in(casts.implode())
    k = k.with_columns(*_override(table, "rope", "op"))
    gemm = (pl.col("comp").is_null() & (pl.col("name_comp") == "gemm")) | (
        pl.col("comp").is_null() & pl.col("op").is_in(list(GEMM_OPS)).fill_null(False))
    # only what the position passes and the output read: _between's sort copies every column
    k = k.select("id", "step", "comp", "evidence", "op_id", "op", "module_path", "name", "start_ns",
                 gemm.alias("_gemm"))
    k = _after_lm_head(_between(gemm_positions(k)))
    final = pl.coalesce("comp", pl.lit("other"))
    ev = pl.coalesce("evidence", pl.lit("none"))
    return k.select("id", "step", final.alias("component"), ev.alias("evidence"),
                    "op_id", "op", "module_path")
