"""The component taxonomy: the fixed names reports and the JSON use, and the groups rules read."""

TAXONOMY = ("embedding", "conv", "qkv_proj", "attention", "kv_cache_write", "rope", "o_proj", "norm",
            "mlp_gate_up", "activation", "mlp_down", "moe_router", "moe_dispatch", "moe_experts",
            "moe_combine", "moe_shared_expert", "linear_attention", "quantize", "lm_head",
            "sampler", "speculative", "communication", "memcpy", "memset", "other")
# collectives: their bytes cross the interconnect (bus bytes), so their roof is the link's bandwidth,
# not the memory's, and they are not memory traffic per token
LINK_COMPONENTS = ("communication",)
# the GEMMs over weights: their time is set by the weights' bytes in decode, not by the context
GEMM_COMPONENTS = ("qkv_proj", "o_proj", "mlp_gate_up", "mlp_down", "lm_head",
                   "moe_router", "moe_experts", "moe_shared_expert")
