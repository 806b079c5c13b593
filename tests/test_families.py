"""Every family against transformers and PEFT, to the parameter.

``FAMILY_CONFIGS`` holds one small config.json per supported ``model_type`` (and per variant worth
checking: dense layers in a MoE model, shared experts, sliding windows). The torch-marked tests build
each with transformers 5.24 on the meta device and compare:

* the parameter count with trainmem's inventory;
* the trainable count under LoRA (PEFT 0.21 ``get_peft_model``) for "all-linear" and for the family's
  default targets (where PEFT has one), with trainmem's;
* the defaults of the configuration class with what trainmem's reader assumes for missing fields.

The plain tests check that every registered family has a config here, and the multimodal fallback.
"""

from __future__ import annotations

import pytest

from trainmem.errors import FieldError
from trainmem.inventory import build_inventory
from trainmem.lora_targets import resolve_lora_targets
from trainmem.models import FAMILIES, architecture_from_hf_config, family_for
from trainmem.plan import Plan
from trainmem.setup import LoRAConfig, Setup

SMALL = dict(
    vocab_size=512, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
    pad_token_id=0, bos_token_id=1, eos_token_id=2,
)

FAMILY_CONFIGS: dict[str, dict] = {
    "llama": {"model_type": "llama", **SMALL, "intermediate_size": 96},
    "llama-bias": {"model_type": "llama", **SMALL, "intermediate_size": 96, "attention_bias": True, "mlp_bias": True},
    "mistral": {"model_type": "mistral", **SMALL, "intermediate_size": 96},
    "mixtral": {"model_type": "mixtral", **SMALL, "intermediate_size": 96, "num_local_experts": 4, "num_experts_per_tok": 2},
    "ministral3": {"model_type": "ministral3", **SMALL, "head_dim": 32, "intermediate_size": 96},
    "ministral3-window-tied": {
        "model_type": "ministral3", **SMALL, "intermediate_size": 96, "sliding_window": 16, "tie_word_embeddings": True,
    },
    "mistral4": {
        "model_type": "mistral4", **SMALL, "num_key_value_heads": 4, "intermediate_size": 96, "moe_intermediate_size": 32,
        "n_routed_experts": 4, "num_experts_per_tok": 2, "q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8, "v_head_dim": 16, "first_k_dense_replace": 1,
    },
    "mistral4-no-q-lora-groups-bias-tied": {
        "model_type": "mistral4", **SMALL, "num_key_value_heads": 4, "intermediate_size": 96, "moe_intermediate_size": 32,
        "n_routed_experts": 8, "num_experts_per_tok": 2, "q_lora_rank": None, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8, "v_head_dim": 24, "n_group": 2, "topk_group": 1, "n_shared_experts": 2,
        "attention_bias": True, "tie_word_embeddings": True,
    },
    "qwen2": {"model_type": "qwen2", **SMALL, "intermediate_size": 96},
    "qwen2_moe": {
        "model_type": "qwen2_moe", **SMALL, "intermediate_size": 96, "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 48, "num_experts": 4, "num_experts_per_tok": 2,
    },
    "qwen2_moe-dense-layers": {
        "model_type": "qwen2_moe", **SMALL, "intermediate_size": 96, "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 48, "num_experts": 4, "num_experts_per_tok": 2, "mlp_only_layers": [0],
    },
    "qwen3": {"model_type": "qwen3", **SMALL, "intermediate_size": 96, "head_dim": 16},
    "qwen3_moe": {
        "model_type": "qwen3_moe", **SMALL, "intermediate_size": 96, "moe_intermediate_size": 32, "head_dim": 16,
        "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": True,
    },
    "qwen3_moe-sparse-step": {
        "model_type": "qwen3_moe", **SMALL, "intermediate_size": 96, "moe_intermediate_size": 32, "head_dim": 16,
        "num_experts": 4, "num_experts_per_tok": 2, "decoder_sparse_step": 2,
    },
    "gemma2": {"model_type": "gemma2", **SMALL, "intermediate_size": 96, "head_dim": 16},
    "gemma3_text": {"model_type": "gemma3_text", **SMALL, "num_hidden_layers": 7, "intermediate_size": 96, "head_dim": 16},
    "gemma4_text": {
        "model_type": "gemma4_text", **SMALL, "num_hidden_layers": 6, "intermediate_size": 96, "head_dim": 16,
        "global_head_dim": 32, "num_kv_shared_layers": 2, "use_double_wide_mlp": True, "hidden_size_per_layer_input": 0,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention"] * 2,
    },
    "gemma4_text-moe": {
        "model_type": "gemma4_text", **SMALL, "num_hidden_layers": 4, "intermediate_size": 96, "head_dim": 16,
        "global_head_dim": 32, "attention_k_eq_v": True, "num_global_key_value_heads": 1, "hidden_size_per_layer_input": 0,
        "enable_moe_block": True, "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 32,
        "layer_types": ["sliding_attention", "full_attention"] * 2,
    },
    "phi3": {"model_type": "phi3", **SMALL, "intermediate_size": 96},
    "olmo2": {"model_type": "olmo2", **SMALL, "intermediate_size": 96},
    "starcoder2": {"model_type": "starcoder2", **SMALL, "intermediate_size": 96},
    "starcoder2-untied": {"model_type": "starcoder2", **SMALL, "intermediate_size": 96, "tie_word_embeddings": False, "use_bias": False},
    "granite": {
        "model_type": "granite", **SMALL, "intermediate_size": 96, "embedding_multiplier": 12.0,
        "residual_multiplier": 0.22, "attention_multiplier": 0.0078125, "logits_scaling": 8.0,
    },
    "llama4_text": {
        "model_type": "llama4_text", **SMALL, "num_hidden_layers": 4, "intermediate_size": 48,
        "intermediate_size_mlp": 96, "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 2,
    },
    "gpt_neox": {"model_type": "gpt_neox", **SMALL, "num_key_value_heads": 4, "intermediate_size": 256, "rotary_pct": 0.25},
    "gpt_neox-serial": {
        "model_type": "gpt_neox", **SMALL, "num_key_value_heads": 4, "intermediate_size": 256,
        "use_parallel_residual": False, "tie_word_embeddings": True,
    },
    "deepseek_v3": {
        "model_type": "deepseek_v3", **SMALL, "num_key_value_heads": 4, "intermediate_size": 96,
        "moe_intermediate_size": 32, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2,
        "n_shared_experts": 1, "first_k_dense_replace": 1, "q_lora_rank": 24, "kv_lora_rank": 16,
        "qk_nope_head_dim": 12, "qk_rope_head_dim": 8, "v_head_dim": 10,
    },
    "deepseek_v3-plain-q": {
        "model_type": "deepseek_v3", **SMALL, "num_key_value_heads": 4, "intermediate_size": 96,
        "moe_intermediate_size": 32, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1,
        "n_shared_experts": 2, "first_k_dense_replace": 0, "q_lora_rank": None, "kv_lora_rank": 16,
        "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "attention_bias": True,
    },
    "deepseek_v2": {
        "model_type": "deepseek_v2", **SMALL, "num_key_value_heads": 4, "intermediate_size": 96,
        "moe_intermediate_size": 32, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 2,
        "first_k_dense_replace": 1, "q_lora_rank": None, "kv_lora_rank": 16, "qk_nope_head_dim": 12,
        "qk_rope_head_dim": 8, "v_head_dim": 10, "mlp_bias": True,
    },
    "gpt_oss": {
        "model_type": "gpt_oss", **SMALL, "intermediate_size": 48, "head_dim": 16, "num_local_experts": 4,
        "num_experts_per_tok": 2, "sliding_window": 8,
    },
    "qwen3_next": {
        "model_type": "qwen3_next", **SMALL, "num_hidden_layers": 4, "intermediate_size": 96, "head_dim": 16,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 8,
        "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48, "num_experts": 4, "num_experts_per_tok": 2,
    },
    "qwen3_next-layer-types": {
        "model_type": "qwen3_next", **SMALL, "num_hidden_layers": 3, "intermediate_size": 96, "head_dim": 16,
        "linear_num_key_heads": 2, "linear_num_value_heads": 2, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
        "linear_conv_kernel_dim": 3, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
        "num_experts": 4, "num_experts_per_tok": 2, "mlp_only_layers": [1], "attention_bias": True,
        "layer_types": ["full_attention", "linear_attention", "linear_attention"],
    },
    "lfm2": {
        "model_type": "lfm2", **SMALL, "num_hidden_layers": 4, "intermediate_size": 144, "block_multiple_of": 16,
        "layer_types": ["conv", "full_attention", "conv", "conv"],
    },
    "lfm2-idxs-bias": {  # the older names: block_ff_dim, tie_embedding, full_attn_idxs; conv_bias; a multiplier
        "model_type": "lfm2", **SMALL, "block_ff_dim": 100, "block_ffn_dim_multiplier": 1.5, "block_multiple_of": 8, "conv_bias": True,
        "conv_L_cache": 4, "full_attn_idxs": [2], "tie_embedding": False,
    },
    "lfm2-no-adjust": {
        "model_type": "lfm2", **SMALL, "intermediate_size": 80, "block_auto_adjust_ff_dim": False,
        "layer_types": ["conv", "conv", "full_attention"], "head_dim": 32,
    },
    "lfm2_moe": {
        "model_type": "lfm2_moe", **SMALL, "num_hidden_layers": 4, "intermediate_size": 96, "moe_intermediate_size": 32,
        "num_experts": 4, "num_experts_per_tok": 2, "num_dense_layers": 1, "layer_types": ["conv", "full_attention", "conv", "conv"],
    },
    "olmo_hybrid": {
        "model_type": "olmo_hybrid", **SMALL, "num_hidden_layers": 4, "intermediate_size": 96,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 8,
    },
    "olmo_hybrid-layer-types": {  # the class's head dims (0.75·h/heads, twice that), a head_dim, biases
        "model_type": "olmo_hybrid", **SMALL, "intermediate_size": 96, "head_dim": 8, "attention_bias": True,
        "layer_types": ["full_attention", "linear_attention", "linear_attention"], "linear_allow_neg_eigval": False,
    },
    "qwen3_5_text": {
        "model_type": "qwen3_5_text", **SMALL, "num_hidden_layers": 4, "intermediate_size": 96, "head_dim": 16,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 8,
    },
    "qwen3_5_moe_text": {
        "model_type": "qwen3_5_moe_text", **SMALL, "num_hidden_layers": 3, "head_dim": 16, "linear_num_key_heads": 2,
        "linear_num_value_heads": 2, "linear_key_head_dim": 16, "linear_value_head_dim": 16, "linear_conv_kernel_dim": 3,
        "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48, "num_experts": 4, "num_experts_per_tok": 2,
        "attention_bias": True, "layer_types": ["full_attention", "linear_attention", "linear_attention"],
    },
    "qwen4_exp_text": {
        "model_type": "qwen4_exp_text", **SMALL, "num_hidden_layers": 4, "head_dim": 16, "linear_num_key_heads": 2,
        "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 8, "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 48, "num_experts": 4, "num_experts_per_tok": 2, "hc_count": 3, "hc_lowrank": 8,
        "ple_layer_ids": [1, 3], "ple_embed_dim": 32, "heads_per_ngram": 2, "ngram_vocab_size_base": 50,
        "make_ngram_vocab_size_divisible_by": 16, "indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 16,
        "indexer_budget": 8, "indexer_compress_ratio": 4,
        "layer_types": ["linear_attention", "full_attention", "linear_attention", "indexed_attention"],
    },
    "phimoe": {"model_type": "phimoe", **SMALL, "intermediate_size": 96, "num_local_experts": 4, "num_experts_per_tok": 2},
    "phimoe-biases": {
        "model_type": "phimoe", **SMALL, "intermediate_size": 96, "num_local_experts": 4, "attention_bias": True,
        "lm_head_bias": True, "input_jitter_noise": 0.01, "sliding_window": 16,
    },
    "cohere": {"model_type": "cohere", **SMALL, "intermediate_size": 96},
    "cohere-qk-norm": {
        "model_type": "cohere", **SMALL, "intermediate_size": 96, "use_qk_norm": True, "attention_bias": True,
        "tie_word_embeddings": False,
    },
    "falcon": {"model_type": "falcon", **SMALL, "multi_query": True, "parallel_attn": True},
    "falcon-new-architecture": {
        "model_type": "falcon", **SMALL, "num_kv_heads": 2, "new_decoder_architecture": True, "bias": True,
        "tie_word_embeddings": False,
    },
    "falcon-serial": {"model_type": "falcon", **SMALL, "multi_query": False, "parallel_attn": False, "ffn_hidden_size": 96},
    "glm4_moe": {
        "model_type": "glm4_moe", **SMALL, "intermediate_size": 96, "moe_intermediate_size": 32, "n_routed_experts": 4,
        "num_experts_per_tok": 2, "first_k_dense_replace": 1,
    },
    "glm4_moe-qk-norm-bias-groups": {
        "model_type": "glm4_moe", **SMALL, "intermediate_size": 96, "moe_intermediate_size": 32, "n_routed_experts": 4,
        "num_experts_per_tok": 2, "use_qk_norm": True, "attention_bias": True, "head_dim": 32, "n_shared_experts": 2,
        "n_group": 2, "topk_group": 1, "partial_rotary_factor": 0.25,
    },
    "deepseek_v32": {
        "model_type": "deepseek_v32", **SMALL, "num_key_value_heads": 4, "intermediate_size": 96, "moe_intermediate_size": 32,
        "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "q_lora_rank": 48, "kv_lora_rank": 32,
        "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "index_n_heads": 4, "index_head_dim": 16,
        "index_topk": 8, "first_k_dense_replace": 1,
    },
    "deepseek_v32-mlp-layer-types-bias": {
        "model_type": "deepseek_v32", **SMALL, "num_key_value_heads": 4, "intermediate_size": 96, "moe_intermediate_size": 32,
        "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "q_lora_rank": 48, "kv_lora_rank": 32,
        "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 24, "index_n_heads": 2, "index_head_dim": 8,
        "mlp_layer_types": ["sparse", "dense", "sparse"], "attention_bias": True, "n_shared_experts": 2,
    },
    "glm4_moe_lite": {
        "model_type": "glm4_moe_lite", **SMALL, "num_key_value_heads": 4, "intermediate_size": 96, "moe_intermediate_size": 32,
        "n_routed_experts": 4, "num_experts_per_tok": 2, "q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8, "v_head_dim": 16,
    },
    "glm4_moe_lite-mlp-layer-types-no-q-lora": {
        "model_type": "glm4_moe_lite", **SMALL, "num_key_value_heads": 4, "intermediate_size": 96, "moe_intermediate_size": 32,
        "n_routed_experts": 4, "num_experts_per_tok": 2, "q_lora_rank": None, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8, "v_head_dim": 24, "n_shared_experts": 2, "mlp_layer_types": ["sparse", "dense", "sparse"],
        "attention_bias": True,
    },
    "smollm3": {"model_type": "smollm3", **SMALL, "num_hidden_layers": 4, "intermediate_size": 96},
    "smollm3-untied-biases-window": {
        "model_type": "smollm3", **SMALL, "num_hidden_layers": 4, "intermediate_size": 96, "tie_word_embeddings": False,
        "attention_bias": True, "mlp_bias": True, "use_sliding_window": True, "sliding_window": 16,
        "no_rope_layers": [1, 0, 1, 0],
    },
    "olmo3": {"model_type": "olmo3", **SMALL, "num_hidden_layers": 4, "intermediate_size": 96},
    "seed_oss": {"model_type": "seed_oss", **SMALL, "intermediate_size": 96, "head_dim": 32},
    "seed_oss-biases": {
        "model_type": "seed_oss", **SMALL, "intermediate_size": 96, "head_dim": 16, "attention_out_bias": True,
        "mlp_bias": True,
    },
    "exaone4": {"model_type": "exaone4", **SMALL, "num_hidden_layers": 4, "intermediate_size": 96, "sliding_window": 16},
    "exaone4-global-only": {
        "model_type": "exaone4", **SMALL, "intermediate_size": 96, "head_dim": 32, "sliding_window": None,
        "layer_types": ["full_attention"] * 3,
    },
    "ernie4_5": {"model_type": "ernie4_5", **SMALL, "intermediate_size": 96, "head_dim": 32},
    "ernie4_5-biases-untied": {
        "model_type": "ernie4_5", **SMALL, "intermediate_size": 96, "head_dim": None, "use_bias": True,
        "tie_word_embeddings": False,
    },
    "ernie4_5_moe": {
        "model_type": "ernie4_5_moe", **SMALL, "intermediate_size": 96, "moe_intermediate_size": 32, "moe_num_experts": 4,
        "moe_k": 2,
    },
    "ernie4_5_moe-biases-interval-no-shared": {
        "model_type": "ernie4_5_moe", **SMALL, "num_hidden_layers": 4, "intermediate_size": 96, "moe_intermediate_size": 32,
        "moe_num_experts": 4, "moe_k": 2, "use_bias": True, "tie_word_embeddings": False, "moe_layer_interval": 2,
        "moe_num_shared_experts": 0, "head_dim": 32,
    },
    "apertus": {"model_type": "apertus", **SMALL, "intermediate_size": 96},
    "apertus-silu-biases-tied": {
        "model_type": "apertus", **SMALL, "num_key_value_heads": 4, "head_dim": 32, "intermediate_size": 96,
        "attention_bias": True, "tie_word_embeddings": True, "hidden_act": "silu",
    },
    "glm4": {"model_type": "glm4", **SMALL, "intermediate_size": 96, "head_dim": 32},
    "glm4-full-rotary-no-bias-tied": {
        "model_type": "glm4", **SMALL, "num_key_value_heads": 4, "head_dim": 16, "intermediate_size": 96,
        "attention_bias": False, "tie_word_embeddings": True, "partial_rotary_factor": 1.0,
    },
    "falcon_h1": {
        "model_type": "falcon_h1", **SMALL, "intermediate_size": 96, "mamba_d_ssm": 128, "mamba_n_heads": 8,
        "mamba_d_state": 16, "mamba_n_groups": 2, "mamba_chunk_size": 32, "key_multiplier": 0.39, "ssm_in_multiplier": 1.25,
    },
    "falcon_h1-norm-biases-tied": {
        "model_type": "falcon_h1", **SMALL, "num_key_value_heads": 4, "head_dim": 32, "intermediate_size": 96,
        "mamba_d_ssm": None, "mamba_n_heads": 4, "mamba_d_state": 16, "mamba_rms_norm": True, "mamba_proj_bias": True,
        "projectors_bias": True, "attention_bias": True, "mlp_bias": True, "mamba_conv_bias": False,
        "tie_word_embeddings": True,
    },
    "hunyuan_v1_dense": {"model_type": "hunyuan_v1_dense", **SMALL, "intermediate_size": 96, "head_dim": 16},
    "hunyuan_v1_dense-bias-tied": {
        "model_type": "hunyuan_v1_dense", **SMALL, "intermediate_size": 96, "head_dim": 32, "attention_bias": True,
        "tie_word_embeddings": True,
    },
    "hunyuan_v1_moe": {
        "model_type": "hunyuan_v1_moe", **SMALL, "intermediate_size": 32, "head_dim": 16, "num_experts": 4, "moe_topk": 2,
    },
    "hunyuan_v1_moe-topk-list": {
        "model_type": "hunyuan_v1_moe", **SMALL, "intermediate_size": 32, "head_dim": 16, "num_experts": 4,
        "moe_topk": [2, 2, 2], "tie_word_embeddings": True,
    },
    "minimax_m2": {
        "model_type": "minimax_m2", **SMALL, "intermediate_size": 32, "head_dim": 16, "num_local_experts": 4,
        "num_experts_per_tok": 2, "rotary_dim": 8,
    },
    "minimax_m2-full-rotary-tied": {
        "model_type": "minimax_m2", **SMALL, "intermediate_size": 32, "head_dim": 32, "num_local_experts": 4,
        "num_experts_per_tok": 2, "tie_word_embeddings": True, "router_jitter_noise": 0.01,
    },
    "gpt2": {"model_type": "gpt2", "vocab_size": 512, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128},
    "granitemoehybrid": {
        "model_type": "granitemoehybrid", **SMALL, "num_hidden_layers": 4, "intermediate_size": 32,
        "shared_intermediate_size": 48, "num_local_experts": 4, "num_experts_per_tok": 2, "mamba_n_heads": 8,
        "mamba_d_head": 16, "mamba_d_state": 16, "mamba_n_groups": 2, "mamba_chunk_size": 32,
        "layer_types": ["mamba", "attention", "mamba", "mamba"], "embedding_multiplier": 12.0, "residual_multiplier": 0.22,
    },
    "granitemoehybrid-dense-rope": {
        "model_type": "granitemoehybrid", **SMALL, "intermediate_size": 32, "shared_intermediate_size": 48,
        "num_local_experts": 0, "mamba_n_heads": 4, "mamba_d_state": 16, "layer_types": ["mamba", "attention", "mamba"],
        "position_embedding_type": "rope", "mamba_conv_bias": False, "mamba_proj_bias": True, "attention_bias": True,
    },
    "mamba2": {
        "model_type": "mamba2", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 3, "num_heads": 8, "head_dim": 16,
        "state_size": 16, "n_groups": 2, "chunk_size": 32,
    },
    "mamba2-tied": {
        "model_type": "mamba2", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 2, "num_heads": 4, "head_dim": 32,
        "state_size": 16, "n_groups": 1, "tie_word_embeddings": True, "use_bias": True, "use_conv_bias": False,
    },
    "nemotron_h": {
        "model_type": "nemotron_h", **SMALL, "hybrid_override_pattern": "M-M*-M", "head_dim": 16, "intermediate_size": 96,
        "mamba_num_heads": 8, "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 2, "chunk_size": 32,
    },
    "nemotron_h-block-types": {
        "model_type": "nemotron_h", **SMALL, "layers_block_type": ["linear_attention", "full_attention", "mlp"],
        "num_key_value_heads": 4, "head_dim": 16, "intermediate_size": 96, "mamba_num_heads": 4, "mamba_head_dim": 32,
        "ssm_state_size": 16, "n_groups": 1, "use_conv_bias": False, "use_bias": True, "tie_word_embeddings": True,
    },
}


def _base(name: str) -> str:
    return FAMILY_CONFIGS[name]["model_type"]


def test_every_family_has_a_small_config_here():
    decoders = {
        name for name, family in FAMILIES.items()
        if not getattr(family, "tasks", None)  # encoders: test_encoders.py
        and not getattr(family, "is_encoder_decoder", False)  # encoder-decoders: test_encoder_decoders.py
    }
    assert decoders <= {config["model_type"] for config in FAMILY_CONFIGS.values()}


def test_multimodal_config_reads_its_text_config_and_says_what_is_not_counted():
    text = {k: v for k, v in FAMILY_CONFIGS["gemma3_text"].items() if k != "model_type"}
    arch = architecture_from_hf_config({"model_type": "gemma3", "text_config": text, "vision_config": {}})
    assert arch.model_type == "gemma3_text"
    assert arch.not_counted == ()  # trainmem.vision reads Gemma 3's tower and projector (tests/test_vlm.py)
    llama = {k: v for k, v in FAMILY_CONFIGS["llama"].items() if k != "model_type"}
    other = architecture_from_hf_config({"model_type": "llava_next", "text_config": {"model_type": "llama", **llama}})
    assert any("vision tower" in note for note in other.not_counted)


def test_unknown_model_type_names_the_field_and_what_was_tried():
    with pytest.raises(FieldError) as error:
        architecture_from_hf_config({"model_type": "mamba", "architectures": ["MambaForCausalLM"]})
    assert error.value.field == "model_type"
    assert "'mamba'" in str(error.value) and "MambaForCausalLM" in str(error.value) and "llama" in str(error.value)


def test_dense_layers_make_two_layer_kinds():
    arch = architecture_from_hf_config(FAMILY_CONFIGS["qwen2_moe-dense-layers"])
    kinds = arch.layer_kinds()
    assert [kind.indices for kind in kinds] == [(0,), (1, 2)]
    assert not kinds[0].architecture.is_moe and kinds[1].architecture.is_moe


def test_families_without_a_peft_default_ask_for_target_modules():
    setup = {"model": {"hf_config": FAMILY_CONFIGS["qwen3_moe"]}, "finetuning": {"method": "lora"}}
    with pytest.raises(ValueError, match="target_modules"):
        Setup.model_validate(setup)


def trainmem_trainable(config: dict, target_modules) -> int:
    arch = architecture_from_hf_config(config)
    lora = LoRAConfig(r=8, target_modules=target_modules)
    inventory = build_inventory(arch)
    targets = resolve_lora_targets(lora, family_for(arch), inventory)
    groups = [*inventory.layer_groups, inventory.head_group()] if inventory.head_linear_modules() else inventory.layer_groups
    return sum(adapter.numel_per_layer(1, 1) * group.count for group in groups for adapter in targets.adapters_of(group))


def test_plan_counts_lora_parameters_of_every_layer_kind():
    config = FAMILY_CONFIGS["qwen2_moe-dense-layers"]
    plan = Plan(Setup.model_validate({"model": {"hf_config": config}, "finetuning": {"method": "lora", "lora": {"r": 8, "target_modules": "all-linear"}}}))
    assert plan.num_trainable_parameters == trainmem_trainable(config, "all-linear")


# ---------------------------------------------------------------------------- against transformers and PEFT


def _hf_model(config: dict):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from trainmem.measure.causal_lm_classes import register_causal_lms

    register_causal_lms()  # Mistral4ForCausalLM is not in AutoModelForCausalLM's mapping
    fields = dict(config)
    hf_config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(hf_config)


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(FAMILY_CONFIGS))
def test_parameter_count_matches_transformers(name):
    model = _hf_model(FAMILY_CONFIGS[name])
    expected = sum(p.numel() for p in model.parameters())
    assert build_inventory(architecture_from_hf_config(FAMILY_CONFIGS[name])).num_parameters == expected


def _peft_trainable(config: dict, target_modules) -> int:
    peft = pytest.importorskip("peft")
    import warnings

    model = _hf_model(config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peft_model = peft.get_peft_model(model, peft.LoraConfig(r=8, target_modules=target_modules))
    return peft_model.get_nb_trainable_parameters()[0]


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(FAMILY_CONFIGS))
def test_lora_all_linear_trains_what_peft_trains(name):
    config = FAMILY_CONFIGS[name]
    try:
        expected = _peft_trainable(config, "all-linear")
    except ValueError as error:  # PEFT refuses out_proj/conv1d of Mamba-based models: so must trainmem
        assert "incompatible with Mamba-based models" in str(error)
        setup = {"model": {"hf_config": config}, "finetuning": {"method": "lora", "lora": {"target_modules": "all-linear"}}}
        with pytest.raises(ValueError, match="PEFT refuses LoRA on out_proj"):
            Setup.model_validate(setup)
        return
    assert trainmem_trainable(config, "all-linear") == expected


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(n for n in FAMILY_CONFIGS if FAMILIES[_base(n)].lora_default_targets))
def test_lora_default_targets_train_what_peft_trains(name):
    config = FAMILY_CONFIGS[name]
    family = FAMILIES[_base(name)]
    peft = pytest.importorskip("peft")
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT_DEFAULTS

    expected_targets = PEFT_DEFAULTS.get(family.model_type)
    if expected_targets is None:
        pytest.skip(f"PEFT has no default for {family.model_type}; trainmem's default is its own choice")
    assert list(family.lora_default_targets) == list(expected_targets)
    assert trainmem_trainable(config, None) == _peft_trainable(config, None)


@pytest.mark.torch
@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_missing_fields_take_the_transformers_class_defaults(model_type):
    """Reading a config with only ``model_type`` gives the shapes of the transformers class's defaults."""
    transformers = pytest.importorskip("transformers")
    defaults = transformers.AutoConfig.for_model(model_type).to_dict()
    defaults.pop("transformers_version", None)
    try:
        ours = architecture_from_hf_config({"model_type": model_type})
    except FieldError as error:  # the class default holds a block trainmem refuses (Nemotron-H's MoE "E"), or one
        # transformers cannot build (Qwen4-Exp's attention layers without the QSA indexer's sizes)
        assert "not modelled yet" in str(error) or "cannot build" in str(error)
        with pytest.raises(FieldError, match="not modelled yet|cannot build"):
            architecture_from_hf_config({k: v for k, v in defaults.items() if v is not None or k == "model_type"})
        return
    theirs = architecture_from_hf_config({k: v for k, v in defaults.items() if v is not None or k == "model_type"})

    def resolved(arch):  # head_dim None means hidden_size // heads, which transformers writes out
        return arch.model_copy(update={"head_dim": arch.resolved_head_dim})

    assert resolved(ours) == resolved(theirs)
