"""What names say: the one home of kernel-name patterns and GEMM op names, for every stage and rule.

The kernel -> component patterns are a table (attrib/data/kernel_patterns.csv,
`component_patterns`); the named patterns here are the rest: library kernel families, tile shapes,
ISA tokens, step heuristics. A leaf: it imports nothing of attrib, so every layer may read it
(tests/test_imports.py).
"""

from __future__ import annotations

import csv
import io
from functools import lru_cache
from pathlib import Path

import polars as pl

# CPU ops that are a GEMM -> index of the input holding the activation [.., tokens, K]; None for
# batched GEMMs, whose leading dims are batch x heads, not tokens.
GEMM_OPS: dict[str, int | None] = {
    "aten::linear": 0, "aten::mm": 0, "aten::matmul": 0, "aten::addmm": 1,
    "vllm::rocm_unquantized_gemm": 0,
    "aten::_scaled_mm": 0,
    # weight-only low-bit GEMMs (attrib.cost.lowbit): the activation is the first input
    "aten::_weight_int4pack_mm": 0, "aten::_weight_int4pack_mm_for_cpu": 0,
    "aten::_weight_int8pack_mm": 0,
    # serving stacks' low-bit and skinny GEMMs (attrib.cost.serving_lowbit)
    "_C::awq_gemm": 0, "_C::gptq_gemm": 0, "_C::marlin_gemm": 0, "_C::gptq_marlin_gemm": 0,
    "_C::machete_mm": 0, "_C::cutlass_scaled_mm": 1, "_C::cutlass_scaled_mm_azp": 1,
    "_rocm_C::wvSplitK": 1, "_rocm_C::wvSplitKrc": 1, "_rocm_C::wvSplitKQ": 1,
    "_rocm_C::wvSplitK_int4_g": 1,
    **{f"aiter::{f}": 0 for f in (
        "gemm_a8w8", "gemm_a8w8_bpreshuffle", "gemm_a8w8_blockscale",
        "gemm_a8w8_blockscale_bpreshuffle", "gemm_a8w8_ck", "gemm_a8w8_bpreshuffle_ck",
        "gemm_a8w8_bpreshuffle_cktile", "_gemm_a8w8_asm", "gemm_a8w8_blockscale_ck",
        "gemm_a8w8_blockscale_cktile", "gemm_a8w8_blockscale_bpreshuffle_ck",
        "gemm_a8w8_blockscale_bpreshuffle_cktile", "_flatmm_a8w8_blockscale_asm",
        "_gemm_a8w8_blockscale_bpreshuffle_asm", "gemm_a4w4", "_gemm_a4w4_asm",
        "_mxfp4_gemm_asm", "_nvfp4_gemm_asm", "gemm_a4w4_blockscale")},
    "bitsandbytes::gemv_4bit": 0, "bitsandbytes::gemm_4bit": 0,
    "bitsandbytes::int8_linear_matmul": 0, "bitsandbytes::int8_scaled_mm": 0,
    "aten::bmm": None, "aten::baddbmm": None,
}
# the same 2-D GEMM ops -> (index of the weight input, its layout): "NK" = [N, K] (linear),
# "KN" = [K, N]
GEMM_WEIGHTS: dict[str, tuple[int, str]] = {
    "aten::linear": (1, "NK"), "vllm::rocm_unquantized_gemm": (1, "NK"), "aten::mm": (1, "KN"),
    "aten::matmul": (1, "KN"), "aten::addmm": (2, "KN"), "aten::_scaled_mm": (1, "KN"),
}

# CPU ops that route tokens to experts from router logits [.., E]: softmax / top-k over the experts
ROUTING_OPS = r"^aten::(?:_?softmax|topk)$|topk_softmax|grouped_topk"

# torch.compile (dynamo/inductor) and Triton compile/autotune spans, recorded as ops, annotations or
# Python frames. Not "Torch-Compiled Region": that span wraps every call of compiled code, compiled
# or not; not `compile_fx.py(N): wrapper`, the runtime wrapper that runs a cached compiled graph
# (vLLM).
COMPILE_SPANS = (
    r"entire_frame_compile|inductor_compile|compile_fx_inner|compile_fx\.<locals>"
    r"|compile_fx\.py\([0-9]+\): "
    r"(?:compile_fx|_?compile_fx_inner|fx_codegen_and_compile|fw_compiler)"
    r"|_compile\.compile_inner|CachingAutotuner\.benchmark_all_configs"
    r"|benchmark_all_configs|async_compile|AsyncCompile|autotune_select_algorithm"
    r"|triton/runtime/autotuner\.py"
    r"|do_bench|triton/compiler/compiler\.py\([0-9]+\): (?:compile|_compile)\b"
)

# one call of a torch.compile'd function (dynamo's frame id / its recompile): a CPU op around
# each call, compiled this run or not; frame 0 is the function torch.compile wrapped (a model's
# forward in HF's static-cache generate), others resume after a graph break inside it
COMPILED_CALL = r"^Torch-Compiled Region: (\d+)/\d+$"

# ROCm runtime helper kernels (blits, fills) that are no model work
RUNTIME_HELPERS = r"^__amd_rocclr_|^__amd_|copyBuffer|fillBuffer"
# GEMV-shaped (one token per sequence: decode) and GEMM-shaped (prefill) kernel families
GEMV_NAMES = r"mul_mat_vec|gemv"
GEMM_NAMES = r"mul_mat_q\b|mul_mat_f\b|Cijk_|gemm"
# llama.cpp quantized GEMM (prefill micro-batches): `mul_mat_q<(ggml_type)12, 128, false>(...)`
# demangled, `_Z9mul_mat_qIL9ggml_type12ELi128ELb0EEv...` mangled (not its stream-k fixup)
LLAMACPP_MMQ = r"\bmul_mat_q\b|mul_mat_qIL9ggml_type"
# llama.cpp's RMS norm, which runs one workgroup per row (token)
LLAMACPP_NORM_ROWS = r"\brms_norm_f32\b|rms_norm_f32I"
# llama.cpp MMVQ template argument: columns (tokens) of the right-hand side
LLAMACPP_MMVQ_COLS = (r"mul_mat_vec_q<\(ggml_type\)\d+, (\d+)[,>]"
                      r"|mul_mat_vec_qIL9ggml_type\d+ELi(\d+)E")
# torch's cat kernel names its element size (CatArrayBatchedCopy<OpaqueType<2u>, ...>)
CAT_ELEMENT_BYTES = r"OpaqueType<(\d+)u>"
# Tensile (rocBLAS / hipBLASLt) macro tile MxNxK
TENSILE_TILE = r"^Cijk_\w*?_MT(\d+)x(\d+)x(\d+)_"
# cuBLASLt's nvjet GEMMs (Hopper and later) name their CTA tile: nvjet_sm90_tst_64x8_...,
# nvjet_sm90_qqtst_128x128_...
NVJET_TILE = r"^nvjet_sm\d+_[a-z]*tst_(\d+)x(\d+)_"
# vLLM ROCm skinny-GEMM kernels
SKINNY_GEMM = r"^(?:void )?(?:wvSplitK\w*|wv_int4\w*|LLGemm1\w*|LLMM1\w*)"
# paged decode attention in one pass, and the kernels of a split-KV decode
PAGED_SINGLE_PASS = (r"kernel_paged_attention_2d|chunked_prefill_paged_decode"
                     r"|paged_attention_ll4mi_QKV|kernel_unified_attention_2d")
# (cuDNN: lean attention)
SPLIT_KV = r"(?i)unified_attention_3d|reduce_segments|splitkv|split_kv|combine|lean_reduction"
# plain identifiers are how Triton names its kernels; these prefixes are vendor libraries
TRITON_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
NOT_TRITON = r"^(?:Cijk_|nvjet|_ZN|__amd_rocclr|sm\d+_|ampere_|cutlass|cudnn|ck_)"
# the gfx target a kernel was built for: Tensile `_ISA1201_`, rocPRIM `target_arch)1201`
ISA = r"_ISA([0-9]{2,4}[0-9a-f]?)_"
ROCPRIM_ARCH = r"target_arch\)?\s*([0-9]{3,4})\b"

# kernel-name families the rules look for
# vLLM's custom (ll4mi / wmma) paged attention for RDNA
NAVI_PAGED_ATTENTION = (r"paged_attention_ll4mi_QKV|paged_attention_ll4mi_reduce"
                        r"|paged_attention_custom|wmma_paged_attention")
# an FP8 KV cache in vLLM's attention kernel templates
FP8_KV_CACHE = r"Fp8KVCacheDataType\)[12]|fp8_e4m3|fp8_e5m2"
# fused attention kernels (flash, memory-efficient, cuDNN, fmha, vLLM paged/unified)
FUSED_ATTENTION = (r"(?i)flash|_efficient_attention|cudnn_attention|attn_fwd|fmha"
                   r"|unified_attention|paged_attention")
# the ops of unfused attention: eager attention in HF is q@k^T (bmm), softmax, attn@v (bmm);
# SDPA's math fallback is the same in one op (rules.attention; the chunked read keeps the ops'
# parents these name)
MATH_SDPA = r"^aten::_scaled_dot_product_attention_math$"
SOFTMAX_OP = r"^aten::(?:_?softmax|_safe_softmax)$"
BMM_OP = r"^aten::(?:bmm|matmul|baddbmm)$"
# rocBLAS / legacy Tensile kernels: a 4-field MI token (hipBLASLt's TensileLite: 3 fields and
# _UserArgs_)
ROCBLAS_TILE = r"^Cijk_\w*_MI\d+x\d+x\d+x\d+_"
# llama.cpp quantized GEMV (decode)
LLAMACPP_MMVQ = r"mul_mat_vec_q<"
# AITER and Composable Kernel kernels (CDNA-tuned)
AITER_CK = r"(?i)aiter|ck_tile|_ZN5aiter|\bfmoe|Rmsnorm2dFwd|^ck::|_ZN2ck"
# a name that says FP8 (a dtype, a cast, a kernel's template argument)
FP8_NAME = r"(?i)float8|fp8|e4m3|e5m2"
# FP8 kernels: names, scaled-mm, FP8 Tensile data types
FP8_KERNEL = FP8_NAME + r"|(?i:scaled_mm|w8a8|^Cijk_\w*_(?:F8F8S|B8F8HS|F8B8|B8B8|F8H|F8S)_)"
# activation quantize / dequantize kernels
QUANTIZE_KERNEL = (r"(?i)per_token_group_quant|scaled_fp8_quant|dynamic_\w*quant|quantize"
                   r"|dequant|convert_fp8|to_fp8")
# low-bit weight GEMM kernels (int4, MXFP4, AWQ, GPTQ, Marlin)
LOW_BIT_KERNEL = (r"(?i)mxfp4|w4a16|awq|gptq|marlin|q_gemm_rdna3|mxfp4_gemm_rdna3|int4|wvSplitK_int4"
                  r"|int8pack|tinygemm")
# Triton int4 GEMMs launched with no torch op around them (vLLM awq_triton.py, user kernels): their
# shapes come from the launch's allocation and the module's input (attrib.cost.lowbit)
AWQ_TRITON = r"^awq_gemm_kernel$"
# FlashInfer / TensorRT-LLM-gen fused MoE (trtllm_*_block_scale_moe, Blackwell `..._sm100f`):
# the batched GEMMs spell their element types, bmm_<out>_<weights><activations>_<accumulator>_t..
# (bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256..._swiGlu_..: MXFP4 weights, MXFP8 activations);
# the routing, activation block-quantize and finalize kernels beside them
# (attrib.cost.block_scale_moe)
_TRTLLM_TYPE = r"(?:Mx)?(?:E2m1|E4m3|E5m2|E2m3|E3m2|Int4|Int8)|Bfloat16|Fp16|Fp32"
TRTLLM_MOE_GEMM = (rf"^bmm_(?P<out>{_TRTLLM_TYPE})_(?P<weights>{_TRTLLM_TYPE})"
                   rf"(?P<acts>{_TRTLLM_TYPE})_(?P<acc>Fp32|Fp16)_")
TRTLLM_MOE_ROUTING = r"moe::dev::routing::"
TRTLLM_MOE_FINALIZE = r"moe::dev::finalize::"
TRTLLM_MOE_QUANT = r"tensorrt_llm::kernels::quantize_with_block_size"
# GEMM-shaped kernel names (an FP8 name that is a GEMM, not a cast)
GEMM_LIKE = r"(?i)gemm|_mm|matmul|Cijk_|nvjet|cutlass|qqtst"
# a row lookup that may be a forward pass's token embedding besides the table's `embedding` patterns:
# torch runs an embedding's index_select as a gather kernel when the index is long (a prefill)
ROW_GATHER = r"(?i)gather|index_?select"
# the kernel that picks a forward pass's next tokens, once at its end: a greedy argmax, or a sampler's
# (torch's and vLLM's random sampling end in an argmax over probabilities / exponential noise;
# FlashInfer's *SamplingFromProb kernels); not the sorts a top-p sampler shares with a MoE router
TOKEN_PICK = r"(?i)argmax|multinomial|sampling"
# torch's sort / scan kernels (the sampler's fallback path)
SORT_SCAN = r"(?i)sort|scan|cumsum|radix"


@lru_cache(maxsize=1)
def component_patterns() -> pl.DataFrame:
    """The kernel-name -> component table (priority, component, pattern, family), by priority.
    Read with the csv module (an empty field null, as polars reads it): polars' CSV reader takes
    ~5 ms to start for these 25 lines."""
    # beside the package (its package data), not through importlib.resources: ~1 ms to start
    text = (Path(__file__).parents[1] / "data" / "kernel_patterns.csv").read_text("utf-8")
    header, *rows = csv.reader(io.StringIO(text))
    cols: dict[str, list[object]] = {h: [r[i] or None for r in rows] for i, h in enumerate(header)}
    cols["priority"] = [None if v is None else int(str(v)) for v in cols["priority"]]
    table = pl.DataFrame(cols, schema={h: pl.Int64 if h == "priority" else pl.Utf8 for h in header})
    return table.sort("priority", maintain_order=True)

# Tensile GEMM kernels (rocBLAS and hipBLASLt); hipBLASLt's TensileLite kernels carry _UserArgs_
TENSILE = r"^Cijk_"
HIPBLASLT_TENSILE = r"_UserArgs_"
# Runtime calls that block the host until GPU work is done: a synchronize, or a copy that is not
# async (cudaMemcpy, hipMemcpyWithStream). And the call that makes a stream wait on an event.
BLOCKING_COPY = r"^(?:cuda|hip|cu)Memcpy(?:2D|3D|Peer|DtoH|HtoD|DtoD|WithStream)?(?:_v2)?$"
SYNC = r"^(?:cuda|hip|cu)(?:Stream|Device|Event|Ctx)Synchronize$"
STREAM_WAIT = r"^(?:cuda|hip|cu)StreamWaitEvent(?:_v2)?$"
# a CUDA/HIP runtime or driver call (what a host stretch held by one is named)
RUNTIME_CALL = r"^(?:cuda|hip|cu|hsa)[A-Z]\w*$"

# Scaled-dot-product attention ops (torch), by name: the layout of q/k/v ("bhld" | "blhd"), the
# index of is_causal in the args, the index of the mask argument (or None)
SDPA_ARGS = {
    "aten::scaled_dot_product_attention": ("bhld", 5, 3),
    "aten::_scaled_dot_product_attention_math": ("bhld", 5, 3),
    "aten::_scaled_dot_product_flash_attention": ("bhld", 4, None),
    "aten::_scaled_dot_product_efficient_attention": ("bhld", 6, 3),
    "aten::_scaled_dot_product_cudnn_attention": ("bhld", 6, 3),
    "aten::_cudnn_attention_forward": ("bhld", 10, 3),
    "aten::_flash_attention_forward": ("blhd", 8, None),
    "aten::_efficient_attention_forward": ("blhd", 9, 3),
}
SDPA = "aten::scaled_dot_product_attention"  # the public op every backend runs under
SDPA_CPU_FLASH = "aten::_scaled_dot_product_flash_attention_for_cpu"  # bhld; not priced

# transformers' reference implementations of linear attention, taken when
# `is_fast_path_available` is false (and the conv1d functions a transformers
# modeling file defines for itself: the fast ones live in `causal_conv1d`)
FALLBACK_FRAME = (
    r"\): torch_(?:chunk|recurrent|fused_recurrent)_gated_delta_rule$"
    r"|\): torch_causal_conv1d_(?:update|fn)$"
    r"|/modeling_\w+\.py\(\d+\): causal_conv1d_(?:update|fn)$"
)


# Matching a case-insensitive pattern. Rust's regex (polars') builds `(?i)` with Unicode case
# folding and `\w` as Unicode's word class: the kernel-name table's 26 patterns took 8.2 ms to
# compile, against 3.5 ms as lower-case patterns over lower-cased names. Polars compiles a pattern
# again on each of its threads (a cache of 32 each), so that cost recurs within one analysis.
# Escapes whose meaning survives lower-casing, the pattern's and the text's: punctuation, and
# \d \s \b \w (\w then spelt [0-9a-z_], the same over lower-cased ASCII text).
_KEPT_ESCAPES = frozenset(r".()[]{}|*+?^$\/-<>:dsbw")


def folded(pattern: str) -> str | None:
    """A `(?i)` pattern as the case-sensitive pattern that matches the lower-cased text where the
    pattern matches the text (ASCII text: kernel, op and frame names); None where the pattern is
    not `(?i)` or holds what lower-casing would change (an escape such as \\W or \\x41, a
    named group, an inner flag)."""
    if not pattern.startswith("(?i)"):
        return None
    body = pattern[4:]
    escapes = body.split("\\")[1:]
    if any(not e or e[0] not in _KEPT_ESCAPES for e in escapes) or "(?" in body.replace("(?:", ""):
        return None
    return body.lower().replace(r"\w", "[0-9a-z_]")


def contains(text: pl.Expr, pattern: str) -> pl.Expr:
    """`text.str.contains(pattern)`, a `(?i)` pattern matched in its `folded` form over the
    lower-cased text. For distinct names (a column of every kernel would be copied lower-cased
    whole: there the pattern's compile is the smaller cost)."""
    low = folded(pattern)
    return text.str.contains(pattern) if low is None else text.str.to_lowercase().str.contains(low)
