"""Corpus cases of Ministral 3, Mistral 4 and DeepSeek-V3.2 (scaled down; tests/test_families_2026c.py).

Each family gets fp32 AdamW, AMP bf16 with full checkpointing, pure bf16 LoRA on every linear layer, and pure bf16
on fake tensors, at micro-batch 2. The shapes are small enough to run for real on the CPU in seconds.
"""

from __future__ import annotations

from typing import Any, Callable

FAMILY_COMMON = {"vocab_size": 32000, "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 3,
                 "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 4096}
IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}

# Ministral 3 scaled down: Mistral's layer, head_dim 32, the query scaled by Llama 4's temperature after RoPE (the
# class's default YaRN rope_parameters, llama_4_scaling_beta 0.1; original_max_position_embeddings 128 so that the
# scale is not 1 over the sequence).
MINISTRAL3_SMALL = {"model_type": "ministral3", **FAMILY_COMMON, **IDS, "head_dim": 32,
                    "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 16.0,
                                        "original_max_position_embeddings": 128, "beta_fast": 32.0, "beta_slow": 1.0,
                                        "mscale_all_dim": 1.0, "mscale": 1.0, "llama_4_scaling_beta": 0.1}}

# Mistral Small 4 scaled down (mistral4): DeepSeek-V3's latent attention (q_lora_rank 96, kv_lora_rank 64, nope 32 +
# rope 16 per query/key head, values 32) with the query temperature after the torch.cat, a dense first layer, a
# softmax router over an nn.Parameter with a group-limited choice (2 groups, 1 kept), 8 fused experts (top 2) and one
# shared expert.
MISTRAL4_SMALL = {"model_type": "mistral4", **{k: v for k, v in FAMILY_COMMON.items() if k != "num_key_value_heads"},
                  **IDS, "moe_intermediate_size": 128, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2,
                  "topk_group": 1, "n_shared_experts": 1, "first_k_dense_replace": 1, "q_lora_rank": 96,
                  "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
                  "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 16.0,
                                      "original_max_position_embeddings": 128, "beta_fast": 32.0, "beta_slow": 1.0,
                                      "mscale_all_dim": 1.0, "mscale": 1.0, "llama_4_scaling_beta": 0.1,
                                      # Mistral4Config.__post_init__ writes it into the dict it is given (rope / qk)
                                      "partial_rotary_factor": 16 / 48}}

# DeepSeek-V3.2-Exp scaled down (deepseek_v32): DeepSeek-V3's latent attention (as GLM-4.7-Flash's small case), the
# first layer dense, the sigmoid group-limited router, one shared expert, and the lightning indexer (8 heads of 32,
# top 64 of the 256 tokens, so that the index mask masks). The -wide variant has 32 indexer heads: its (b, s, H, s)
# scores outweigh the step's saved activations under checkpointing, so the forward's indexer sets the peak.
DEEPSEEK_V32_SMALL = {"model_type": "deepseek_v32", **FAMILY_COMMON, **IDS, "num_key_value_heads": 8,
                      "moe_intermediate_size": 128, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2,
                      "topk_group": 1, "n_shared_experts": 1, "first_k_dense_replace": 1, "q_lora_rank": 96,
                      "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
                      "index_n_heads": 8, "index_head_dim": 32, "index_topk": 64}
DEEPSEEK_V32_WIDE_INDEXER = {**DEEPSEEK_V32_SMALL, "index_n_heads": 32}
# 64 indexer heads at 1024 tokens, a 1024-token vocabulary, checkpointing: the indexer's (1, 1024, 64, 1024) fp32
# scores (256 MiB, twice at the relu) are the step's peak, in the forward.
DEEPSEEK_V32_INDEXER_PEAK = {**DEEPSEEK_V32_SMALL, "vocab_size": 1024, "index_n_heads": 64,
                             "max_position_embeddings": 2048}


def families_2026c_cases(case: Callable[..., dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        # ------------------------------------------------------------ Ministral 3 (ministral3)
        case("ministral3-small-fp32-adamw-b2-s256", MINISTRAL3_SMALL, batch=2, seq=256,
             description="Ministral 3: Mistral's layer with the query times Llama 4's per-position temperature."),
        case("ministral3-small-ampbf16-adamw-ckpt-b2-s256", MINISTRAL3_SMALL, batch=2, seq=256, precision="amp-bf16",
             checkpointing="full"),
        case("ministral3-small-ampbf16-adamw-eager-b2-s256", MINISTRAL3_SMALL, batch=2, seq=256, precision="amp-bf16",
             attention="eager"),
        case("ministral3-small-bf16-lora-all-b2-s256", MINISTRAL3_SMALL, batch=2, seq=256, precision="bf16-pure",
             lora={"r": 8, "target_modules": "all-linear"}),
        case("ministral3-small-bf16-adamw-b2-s256-fake", MINISTRAL3_SMALL, batch=2, seq=256, precision="bf16-pure",
             fake=True),
        # ------------------------------------------------------------ Mistral Small 4 (mistral4)
        case("mistral4-small-fp32-adamw-b2-s256", MISTRAL4_SMALL, batch=2, seq=256,
             description="Mistral 4: latent attention, the query temperature, a softmax group-limited router."),
        case("mistral4-small-ampbf16-adamw-ckpt-b2-s256", MISTRAL4_SMALL, batch=2, seq=256, precision="amp-bf16",
             checkpointing="full"),
        case("mistral4-small-ampbf16-adamw-b2-s256", MISTRAL4_SMALL, batch=2, seq=256, precision="amp-bf16",
             description="The router's F.linear runs in bf16 under autocast (no .float(), unlike DeepSeek's)."),
        case("mistral4-small-bf16-lora-all-b2-s256", MISTRAL4_SMALL, batch=2, seq=256, precision="bf16-pure",
             lora={"r": 8, "target_modules": "all-linear"},
             description="No MoE target conversion for mistral4: all-linear adapts the nn.Linear modules only."),
        case("mistral4-small-bf16-adamw-b2-s256-fake", MISTRAL4_SMALL, batch=2, seq=256, precision="bf16-pure",
             fake=True),
        # ------------------------------------------------------------ DeepSeek-V3.2 (deepseek_v32)
        case("deepseekv32-small-fp32-adamw-b2-s256", DEEPSEEK_V32_SMALL, batch=2, seq=256,
             description="DeepSeek-V3.2: MLA with the lightning indexer (no_grad) and its top-k mask on every layer."),
        case("deepseekv32-small-ampbf16-adamw-ckpt-b2-s256", DEEPSEEK_V32_SMALL, batch=2, seq=256,
             precision="amp-bf16", checkpointing="full"),
        case("deepseekv32-small-bf16-lora-all-b2-s256", DEEPSEEK_V32_SMALL, batch=2, seq=256, precision="bf16-pure",
             lora={"r": 8, "target_modules": "all-linear"},
             description="all-linear adapts the indexer's linears too; they run under no_grad (no gradient)."),
        case("deepseekv32-small-bf16-adamw-b2-s256-fake", DEEPSEEK_V32_SMALL, batch=2, seq=256,
             precision="bf16-pure", fake=True),
        case("deepseekv32-wide-indexer-fp32-adamw-ckpt-b1-s512", DEEPSEEK_V32_WIDE_INDEXER, batch=1, seq=512,
             checkpointing="full", description="32 indexer heads with checkpointing: the causal mask the layers' "
             "recompute needs stays alive (not modelled: about one (s, s) boolean under)."),
        case("deepseekv32-indexer-peak-fp32-adamw-ckpt-b1-s1024", DEEPSEEK_V32_INDEXER_PEAK, batch=1, seq=1024,
             checkpointing="full", description="The indexer's (b, s, H, s) fp32 scores set the peak, in the forward."),
    ]
