"""The cases of trainmem's measured corpus (``core/trainmem/data/corpus.jsonl``).

Each case is a Setup (JSON, as a user would write it) plus whether it runs on real
tensors or under FakeTensorMode. ``scripts/build_corpus.py`` measures them; the corpus
records the setup as replayed (explicit optimizer implementation, the attention kernel
that ran). Small models (≤ 124M parameters) run for real on the CPU; large ones
(355M to 7B) run on fake tensors, which count the same bytes without allocating them.

Coverage, by design: GPT-2 and Llama families from ~12M to 6.7B parameters, plus one
small model of every other family trainmem reads (qwen2, mistral, phi3, gemma2, qwen3,
mixtral, qwen2_moe, DeepSeek-V2/V3 with multi-head latent attention, gpt-oss with attention sinks)
and Qwen2.5-0.5B; micro-batch
1–8; sequence 128–4096; fp32, AMP bf16 and pure bf16; SGD, SGD with momentum, Adam,
AdamW and Adafactor; for-loop, foreach and fused optimizer steps; no and full activation
checkpointing; eager, fused SDPA and SDPA's math path; LoRA on attention only and on all
linear layers; gradient accumulation 2 and 4.
"""

from __future__ import annotations

from typing import Any

from small_models import LLAMA_14M, LLAMA_14M_MHA  # shared with the tests (scripts/small_models.py)

# Small models defined here (config.json fields); the large ones are trainmem presets.
GPT2_12M = {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 192, "n_layer": 4, "n_head": 6}
GPT2_12M_NO_DROPOUT = {**GPT2_12M, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "resid_pdrop": 0.0}
LLAMA_58M = {
    "model_type": "llama",
    "vocab_size": 32000,
    "hidden_size": 512,
    "intermediate_size": 1376,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}
LLAMA_ARCHITECTURE = {  # trainmem Architecture fields (rope, gated MLP, RMSNorm: built as Llama)
    "model_type": "llama",
    "vocab_size": 32000,
    "hidden_size": 256,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 688,
    "max_position_embeddings": 2048,
}
GPT2_ARCHITECTURE = {  # trainmem Architecture fields (learned positions, plain MLP: built as GPT-2)
    "model_type": "gpt2",
    "vocab_size": 50257,
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 512,
    "mlp": "plain",
    "hidden_act": "gelu_new",
    "norm": "layernorm",
    "attention_qkv_bias": True,
    "attention_output_bias": True,
    "mlp_bias": True,
    "fused_qkv": True,
    "position_embedding": "learned",
    "max_position_embeddings": 1024,
    "tie_word_embeddings": True,
    "embedding_dropout": 0.1,
    "attention_dropout": 0.1,
    "residual_dropout": 0.1,
}
# Other families trainmem reads from config.json, small enough to run for real.
FAMILY_COMMON = {"vocab_size": 32000, "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 3,
                 "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 4096}
QWEN2_SMALL = {"model_type": "qwen2", **FAMILY_COMMON, "tie_word_embeddings": True}
MISTRAL_SMALL = {"model_type": "mistral", **FAMILY_COMMON}
PHI3_SMALL = {"model_type": "phi3", **FAMILY_COMMON, "num_key_value_heads": 8, "pad_token_id": 0,
              "bos_token_id": 1, "eos_token_id": 2}
GEMMA2_SMALL = {"model_type": "gemma2", **FAMILY_COMMON, "head_dim": 32, "pad_token_id": 0, "bos_token_id": 1,
                "eos_token_id": 2}
QWEN3_SMALL = {"model_type": "qwen3", **FAMILY_COMMON, "head_dim": 32}
MIXTRAL_SMALL = {"model_type": "mixtral", **FAMILY_COMMON, "intermediate_size": 256, "num_local_experts": 4,
                 "num_experts_per_tok": 2}
QWEN2_MOE_SMALL = {"model_type": "qwen2_moe", **FAMILY_COMMON, "num_key_value_heads": 8, "moe_intermediate_size": 128,
                   "shared_expert_intermediate_size": 256, "num_experts": 4, "num_experts_per_tok": 2}
IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
OLMO2_SMALL = {"model_type": "olmo2", **FAMILY_COMMON, **IDS}
STARCODER2_SMALL = {"model_type": "starcoder2", **FAMILY_COMMON, **IDS}
STARCODER2_DROPOUT_SMALL = {**STARCODER2_SMALL, "residual_dropout": 0.1, "embedding_dropout": 0.1, "attention_dropout": 0.1}
GEMMA3_SMALL = {"model_type": "gemma3_text", **FAMILY_COMMON, **IDS, "num_hidden_layers": 7, "head_dim": 32,
                "sliding_window": 128}
# Gemma 4 scaled down (gemma4_text): per-layer embeddings (PLE 16), the last two layers KV-shared with a double-wide
# MLP, global layers with head_dim 64; and the 26B-A4B layout: k = v global layers with their own KV heads, a MoE
# block beside the dense MLP.
GEMMA4_SMALL = {"model_type": "gemma4_text", **FAMILY_COMMON, **IDS, "num_hidden_layers": 6, "head_dim": 32,
                "global_head_dim": 64, "num_kv_shared_layers": 2, "hidden_size_per_layer_input": 16,
                "vocab_size_per_layer_input": 32000, "use_double_wide_mlp": True, "sliding_window": 128,
                "final_logit_softcapping": 30.0, "layer_types": ["sliding_attention", "sliding_attention", "full_attention"] * 2}
GEMMA4_MOE_SMALL = {"model_type": "gemma4_text", **FAMILY_COMMON, **IDS, "num_hidden_layers": 4, "head_dim": 32,
                    "global_head_dim": 64, "attention_k_eq_v": True, "num_global_key_value_heads": 2,
                    "hidden_size_per_layer_input": 0, "enable_moe_block": True, "num_experts": 4, "top_k_experts": 2,
                    "moe_intermediate_size": 128, "sliding_window": 128, "final_logit_softcapping": 30.0,
                    "layer_types": ["sliding_attention", "full_attention"] * 2}
QWEN3_MOE_SMALL = {"model_type": "qwen3_moe", **FAMILY_COMMON, **IDS, "moe_intermediate_size": 128, "num_experts": 4,
                   "num_experts_per_tok": 2, "head_dim": 32, "norm_topk_prob": True}
QWEN2_MOE_DENSE_SMALL = {**QWEN2_MOE_SMALL, "mlp_only_layers": [0]}
GRANITE_SMALL = {"model_type": "granite", **FAMILY_COMMON, **IDS, "embedding_multiplier": 12.0,
                 "residual_multiplier": 0.22, "attention_multiplier": 0.0078125, "logits_scaling": 8.0}
MISTRAL_WINDOW_SMALL = {**MISTRAL_SMALL, "sliding_window": 128}
PYTHIA_SMALL = {"model_type": "gpt_neox", **FAMILY_COMMON, "num_key_value_heads": 8, "rotary_pct": 0.25, **IDS}
LLAMA4_SMALL = {"model_type": "llama4_text", **FAMILY_COMMON, **IDS, "num_hidden_layers": 4, "intermediate_size": 256,
                "intermediate_size_mlp": 512, "head_dim": 32, "num_local_experts": 4, "num_experts_per_tok": 1,
                "interleave_moe_layer_step": 2}
# Multi-head latent attention (DeepSeek-V3 and -V2 shapes, scaled down): dense first layer, shared experts.
DEEPSEEK_V3_SMALL = {"model_type": "deepseek_v3", **FAMILY_COMMON, "num_key_value_heads": 8,
                     "moe_intermediate_size": 128, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 4,
                     "topk_group": 2, "n_shared_experts": 1, "first_k_dense_replace": 1, "q_lora_rank": 96,
                     "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32}
DEEPSEEK_V2_SMALL = {"model_type": "deepseek_v2", **FAMILY_COMMON, "num_key_value_heads": 8,
                     "moe_intermediate_size": 128, "n_routed_experts": 8, "num_experts_per_tok": 2,
                     "n_shared_experts": 2, "first_k_dense_replace": 1, "q_lora_rank": None, "kv_lora_rank": 64,
                     "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32}
# gpt-oss scaled down: attention sinks, biases, alternating sliding window (shorter than the sequence), biased
# experts with the clamped SwiGLU on every layer.
GPT_OSS_SMALL = {"model_type": "gpt_oss", **FAMILY_COMMON, "intermediate_size": 256, "head_dim": 32,
                 "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 128}
# Phi-3.5-MoE scaled down: LayerNorm with biases, q/k/v/o and lm_head biases, sparsemixer's top-2 of 4 experts,
# and the instruct checkpoint's input jitter (0.01: two in-place noise products per MoE layer).
PHIMOE_SMALL = {"model_type": "phimoe", **FAMILY_COMMON, "intermediate_size": 256, "num_local_experts": 4,
                "num_experts_per_tok": 2, "attention_bias": True, "lm_head_bias": True, "input_jitter_noise": 0.01,
                "router_jitter_noise": 0.01}
PHIMOE_ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
# LFM2 scaled down: three gated short-convolution layers around one GQA attention layer (per-head q/k norms);
# block_multiple_of 64 makes the MLP int(2 * 688 / 3) = 458 rounded up to 512.
LFM2_SMALL = {"model_type": "lfm2", **FAMILY_COMMON, **IDS, "num_hidden_layers": 4, "num_key_value_heads": 2,
              "layer_types": ["conv", "conv", "full_attention", "conv"], "block_multiple_of": 64}
# LFM2-MoE scaled down: LFM2_SMALL's layers, a dense first layer, then sigmoid-routed experts (top-2 of 4) with the
# expert_bias buffer.
LFM2_MOE_SMALL = {"model_type": "lfm2_moe", **FAMILY_COMMON, **IDS, "num_hidden_layers": 4, "num_key_value_heads": 2,
                  "layer_types": ["conv", "conv", "full_attention", "conv"], "num_dense_layers": 1,
                  "moe_intermediate_size": 128, "num_experts": 4, "num_experts_per_tok": 2}
# OLMo Hybrid scaled down: three pre-norm Gated DeltaNet layers (separate q/k/v/a/b/g projections, beta doubled) and
# one post-norm OLMo 3 attention layer (q/k norms over the projections, fp32 rotary tables).
OLMO_HYBRID_SMALL = {"model_type": "olmo_hybrid", **FAMILY_COMMON, **IDS, "num_hidden_layers": 4,
                     "num_key_value_heads": 2, "linear_num_key_heads": 4, "linear_num_value_heads": 8,
                     "linear_key_head_dim": 32, "linear_value_head_dim": 32}
OLMO_HYBRID_NOPE_SMALL = {**OLMO_HYBRID_SMALL, "rope_parameters": {"rope_theta": None, "rope_type": "default"}}
# Qwen3-Next scaled down: three Gated DeltaNet layers and one gated full-attention layer (layer_types' default),
# grouped value heads (8 value heads over 4 key heads), partial RoPE, routed experts plus a gated shared expert.
QWEN3_NEXT_SMALL = {"model_type": "qwen3_next", **FAMILY_COMMON, **IDS, "num_hidden_layers": 4, "head_dim": 32,
                    "num_key_value_heads": 2, "linear_num_key_heads": 4, "linear_num_value_heads": 8,
                    "linear_key_head_dim": 32, "linear_value_head_dim": 32, "moe_intermediate_size": 128,
                    "shared_expert_intermediate_size": 256, "num_experts": 4, "num_experts_per_tok": 2}
QWEN3_NEXT_DENSE_SMALL = {**QWEN3_NEXT_SMALL, "mlp_only_layers": [0]}
# Qwen3.5 scaled down: the same hybrid as Qwen3-Next with split Gated DeltaNet projections (in_proj_qkv/z/b/a) and
# the interleaved multimodal RoPE; dense SwiGLU MLPs (qwen3_5_text) or a MoE with a gated shared expert in every layer.
QWEN3_5_SMALL = {"model_type": "qwen3_5_text", **FAMILY_COMMON, **IDS, "num_hidden_layers": 4, "head_dim": 32,
                 "num_key_value_heads": 2, "linear_num_key_heads": 4, "linear_num_value_heads": 8,
                 "linear_key_head_dim": 32, "linear_value_head_dim": 32}
QWEN3_5_MOE_SMALL = {"model_type": "qwen3_5_moe_text", **{k: v for k, v in FAMILY_COMMON.items() if k != "intermediate_size"},
                     **IDS, "num_hidden_layers": 4, "head_dim": 32, "num_key_value_heads": 2, "linear_num_key_heads": 4,
                     "linear_num_value_heads": 8, "linear_key_head_dim": 32, "linear_value_head_dim": 32,
                     "moe_intermediate_size": 128, "shared_expert_intermediate_size": 256, "num_experts": 4,
                     "num_experts_per_tok": 2}
# Qwen4-Exp scaled down: Qwen3.5-MoE's hybrid (three Gated DeltaNet layers, one indexed attention layer) with four
# hyper-connection streams, a PLE layer (layer 2, 2..3-grams, 4 hashed tables of ~1000 rows) and the QSA indexer.
QWEN4_EXP_SMALL = {**{k: v for k, v in QWEN3_5_MOE_SMALL.items() if k != "model_type"}, "model_type": "qwen4_exp_text",
                   "hc_count": 4, "hc_lowrank": 32, "ple_layer_ids": [2], "ple_embed_dim": 128, "ngram_size": 3,
                   "heads_per_ngram": 2, "ngram_vocab_size_base": 1000, "make_ngram_vocab_size_divisible_by": 128,
                   "indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 32, "indexer_budget": 64,
                   "indexer_compress_ratio": 4, "output_gate_type": "sigmoid",
                   "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25}}
COHERE_SMALL = {"model_type": "cohere", **FAMILY_COMMON, **IDS}
# Granite 4.0 scaled down: Mamba-2 layers and one attention layer without RoPE ("nope"), each followed by a MoE
# (Granite's top-k router) with a fused shared MLP; Granite's four multipliers. The dense variant (H Micro's layout)
# has the shared MLP alone, grouped B/C (2 groups over 8 heads) and RoPE.
GRANITE4_SMALL = {"model_type": "granitemoehybrid", **FAMILY_COMMON, **IDS, "num_hidden_layers": 4,
                  "layer_types": ["mamba", "mamba", "attention", "mamba"], "intermediate_size": 128,
                  "shared_intermediate_size": 256, "num_local_experts": 4, "num_experts_per_tok": 2,
                  "mamba_n_heads": 8, "mamba_d_head": 64, "mamba_d_state": 64, "mamba_chunk_size": 64,
                  "position_embedding_type": "nope", "embedding_multiplier": 12.0, "residual_multiplier": 0.22,
                  "attention_multiplier": 0.0078125, "logits_scaling": 6.0, "tie_word_embeddings": True}
GRANITE4_DENSE_SMALL = {**GRANITE4_SMALL, "num_local_experts": 0, "shared_intermediate_size": 688, "mamba_n_groups": 2,
                        "position_embedding_type": "rope"}
# Mamba-2 scaled down: Mamba-2 blocks only (norm, mixer, residual), 2 B/C groups, residual_in_fp32 (the default) or
# not (the 16-bit LoRA case: with it the residual stream turns fp32, which trainmem refuses). Mamba2ForCausalLM
# refuses attn_implementation="sdpa" when asked for it (it has no attention): the cases ask for eager.
MAMBA2_SMALL = {"model_type": "mamba2", "vocab_size": 32000, "hidden_size": 256, "num_hidden_layers": 4, "num_heads": 8,
                "head_dim": 64, "state_size": 64, "n_groups": 2, "chunk_size": 64, **IDS}
# Nemotron-H scaled down: blocks of one kind each from hybrid_override_pattern (M Mamba-2 with 2 B/C groups, - a
# relu2 MLP, * attention without position embedding), each a norm, the mixer and a residual add.
NEMOTRON_H_SMALL = {"model_type": "nemotron_h", **{k: v for k, v in FAMILY_COMMON.items() if k != "num_hidden_layers"},
                    "hybrid_override_pattern": "M-M*-M", "head_dim": 32, "mamba_num_heads": 8, "mamba_head_dim": 64,
                    "ssm_state_size": 64, "n_groups": 2, "chunk_size": 64}
# Falcon-H1 scaled down: attention and a Mamba-2 mixer side by side in every layer (mamba_d_ssm 512 in 8 heads, 2 B/C
# groups, chunk 64, no mixer norm as in every published checkpoint), Falcon-H1 0.5B's µP multipliers. The norm variant
# has FalconH1RMSNormGated (norm before the gate) and the projection biases.
FALCON_H1_SMALL = {"model_type": "falcon_h1", **FAMILY_COMMON, **IDS, "head_dim": 32, "mamba_d_ssm": 512,
                   "mamba_n_heads": 8, "mamba_d_head": 64, "mamba_d_state": 64, "mamba_n_groups": 2,
                   "mamba_chunk_size": 64, "attention_out_multiplier": 0.9375, "embedding_multiplier": 5.656854249492381,
                   "key_multiplier": 0.39062499999999994, "lm_head_multiplier": 0.0390625,
                   "mlp_multipliers": [0.8838834764831844, 0.5859375], "ssm_in_multiplier": 1.25,
                   "ssm_multipliers": [0.3535533905932738, 0.25, 0.3535533905932738, 0.5, 0.3535533905932738],
                   "ssm_out_multiplier": 0.23570226039551587, "mamba_rms_norm": False}
FALCON_H1_NORM_SMALL = {**FALCON_H1_SMALL, "mamba_rms_norm": True, "mamba_norm_before_gate": True,
                        "projectors_bias": True, "mamba_proj_bias": True}
# Apertus scaled down: xIELU (two learned scalars per layer) in an un-gated MLP, per-head q/k norms, Llama 3 RoPE.
APERTUS_SMALL = {"model_type": "apertus", **FAMILY_COMMON, **IDS}
# GLM-4 (0414) scaled down: four norms per layer, q/k/v biases, head_dim 32 with half of it rotated (interleaved),
# fused gate_up_proj.
GLM4_SMALL = {"model_type": "glm4", **FAMILY_COMMON, **IDS, "head_dim": 32}
COHERE_QK_NORM_SMALL = {**COHERE_SMALL, "use_qk_norm": True, "tie_word_embeddings": False}
FALCON_SMALL = {"model_type": "falcon", **FAMILY_COMMON, **IDS, "multi_query": True, "parallel_attn": True}
FALCON_NEW_SMALL = {"model_type": "falcon", **FAMILY_COMMON, **IDS, "num_kv_heads": 2,
                    "new_decoder_architecture": True, "parallel_attn": True}
LLAVA_SMALL = {
    "model_type": "llava", "image_token_index": 1000, "image_seq_length": 64, "projector_hidden_act": "gelu",
    "vision_feature_layer": -2, "vision_feature_select_strategy": "default", "tie_word_embeddings": False,
    "text_config": {"model_type": "llama", "vocab_size": 1024, "hidden_size": 256, "intermediate_size": 512,
                    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
                    "max_position_embeddings": 2048, "tie_word_embeddings": False},
    "vision_config": {"model_type": "clip_vision_model", "hidden_size": 128, "intermediate_size": 256,
                      "num_hidden_layers": 3, "num_attention_heads": 4, "image_size": 112, "patch_size": 14,
                      "hidden_act": "quick_gelu"},
}
QWEN2_5_VL_SMALL = {
    "model_type": "qwen2_5_vl", "vocab_size": 1024, "hidden_size": 256, "intermediate_size": 512,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
    "rope_theta": 1000000.0, "tie_word_embeddings": False, "rope_scaling": {"type": "mrope", "mrope_section": [8, 12, 12]},
    "image_token_id": 1000, "video_token_id": 1001, "vision_start_token_id": 1002, "vision_end_token_id": 1003,
    "vision_config": {"depth": 3, "hidden_size": 128, "intermediate_size": 256, "num_heads": 4, "out_hidden_size": 256,
                      "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112,
                      "fullatt_block_indexes": [2], "hidden_act": "silu"},
}
# GLM-4.5 scaled down (glm4_moe): q/k/v biases, per-head q/k norms, partial rotary (half of each head, then a
# torch.cat), DeepSeek-V3's sigmoid group-limited router, a dense first layer, one shared expert.
GLM4_MOE_SMALL = {"model_type": "glm4_moe", **FAMILY_COMMON, **IDS, "head_dim": 32, "moe_intermediate_size": 128,
                  "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
                  "n_shared_experts": 1, "first_k_dense_replace": 1, "use_qk_norm": True, "attention_bias": True,
                  "partial_rotary_factor": 0.5, "routed_scaling_factor": 2.5}
# MiniMax-M2 scaled down (minimax_m2): q/k RMS-normed over the whole projections, partial rotary (rotary_dim 16 of
# head_dim 32, then a torch.cat), a sigmoid router over an nn.Parameter with the score-correction buffer, 8 fused
# experts (top 2), no shared expert, every layer MoE.
MINIMAX_M2_SMALL = {"model_type": "minimax_m2", **FAMILY_COMMON, **IDS, "head_dim": 32, "rotary_dim": 16,
                    "intermediate_size": 128, "num_local_experts": 8, "num_experts_per_tok": 2}
# GLM-4.7-Flash scaled down (glm4_moe_lite): DeepSeek-V3's multi-head latent attention with GLM's MoE, the first
# layer dense (mlp_layer_types' default), sigmoid router with the correction buffer, one shared expert.
GLM4_MOE_LITE_SMALL = {"model_type": "glm4_moe_lite", **FAMILY_COMMON, **IDS, "num_key_value_heads": 8,
                       "moe_intermediate_size": 128, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 1,
                       "topk_group": 1, "n_shared_experts": 1, "q_lora_rank": 96, "kv_lora_rank": 64,
                       "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32}
# Hunyuan-A13B scaled down (hunyuan_v1_moe): RoPE then per-head q/k norms, a shared MLP run before the router, an
# nn.Linear gate (wg) with an fp32 softmax, 8 fused experts (top 2); the dense model (hunyuan_v1_dense) the same
# attention with a Llama MLP.
HUNYUAN_MOE_SMALL = {"model_type": "hunyuan_v1_moe", **FAMILY_COMMON, **IDS, "head_dim": 32, "intermediate_size": 128,
                     "num_experts": 8, "moe_topk": 2}
HUNYUAN_DENSE_SMALL = {"model_type": "hunyuan_v1_dense", **FAMILY_COMMON, **IDS, "head_dim": 32}
# ERNIE 4.5 MoE scaled down (ernie4_5_moe): layer 0 dense (moe_layer_start_index 1), 8 fused experts (top 2) and two
# shared experts, the router run with autocast off, tied embeddings.
ERNIE4_5_MOE_SMALL = {"model_type": "ernie4_5_moe", **FAMILY_COMMON, **IDS, "head_dim": 32, "moe_intermediate_size": 128,
                      "moe_num_experts": 8, "moe_k": 2, "moe_num_shared_experts": 2}
# SmolLM3 scaled down: every 4th layer NoPE (layer 3 of 4), tied embeddings; the window variant sends the NoPE
# layer through a 128-token sliding window (use_sliding_window).
SMOLLM3_SMALL = {"model_type": "smollm3", **FAMILY_COMMON, **IDS, "num_hidden_layers": 4}
SMOLLM3_WINDOW_SMALL = {**SMOLLM3_SMALL, "use_sliding_window": True, "sliding_window": 128}
# OLMo 3 scaled down: OLMo 2's post-norm layer, three sliding-window layers (128 tokens) and one full layer.
OLMO3_SMALL = {"model_type": "olmo3", **FAMILY_COMMON, **IDS, "num_hidden_layers": 4, "sliding_window": 128}
# Seed-OSS scaled down: q/k/v biases, head_dim 32, the class's dropouts (attention 0.1: CPU SDPA's math path; residual
# 0.1 after o_proj and down_proj).
SEED_OSS_SMALL = {"model_type": "seed_oss", **FAMILY_COMMON, **IDS, "head_dim": 32}
# EXAONE 4.0 scaled down: post-norm, per-head q/k norms, three sliding RoPE layers (128 tokens) and a global NoPE layer.
EXAONE4_SMALL = {"model_type": "exaone4", **FAMILY_COMMON, **IDS, "num_hidden_layers": 4, "head_dim": 32,
                 "sliding_window": 128}
# ERNIE 4.5 dense scaled down: head_dim 32, tied embeddings, the fp32 interleaved RoPE of its own.
ERNIE4_5_SMALL = {"model_type": "ernie4_5", **FAMILY_COMMON, **IDS, "head_dim": 32}
GPT2_ATTENTION = ["c_attn"]
LLAMA_ATTENTION = ["q_proj", "v_proj"]


def case(
    case_id: str,
    model: Any,
    *,
    batch: int,
    seq: int,
    precision: str = "fp32",
    optimizer: str = "adamw",
    implementation: str | None = None,
    attention: str = "sdpa",
    checkpointing: str = "none",
    lora: dict[str, Any] | None = None,
    accumulation: int = 1,
    fake: bool = False,
    as_architecture: bool = False,
    description: str = "",
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One corpus case: its id, the setup to replay, real or fake tensors.

    ``model`` is a preset name or config fields, given to the Setup as ``hf_config`` or,
    with ``as_architecture``, as a trainmem ``architecture``.
    """
    if isinstance(model, str):
        model_spec: dict[str, Any] = {"preset": model}
    elif as_architecture:
        model_spec = {"architecture": dict(model)}
    else:
        model_spec = {"hf_config": dict(model)}
    setup: dict[str, Any] = {
        "model": model_spec,
        "micro_batch_size": batch,
        "sequence_length": seq,
        "gradient_accumulation_steps": accumulation,
        "precision": precision,
        "optimizer": {"name": optimizer, "implementation": implementation},
        "activation_checkpointing": checkpointing,
        "attention": attention,
        "runtime": {"device": "cpu"},
    }
    if lora is not None:
        setup["finetuning"] = {"method": "lora", "lora": lora}
    setup.update(extra or {})
    return {"id": case_id, "description": description, "fake": fake, "setup": setup}


def vlm_case(
    case_id: str,
    model: dict[str, Any],
    *,
    images: int,
    tower: str,
    precision: str = "fp32",
    height: int = 448,
    width: int = 448,
    checkpointing: str = "none",
    lora: dict[str, Any] | None = None,
    projector: str | None = None,
    description: str = "",
) -> dict[str, Any]:
    """A vision-language case: batch 2 × 128 text tokens plus the images' tokens, AdamW (for-loop), SDPA."""
    entry = case(case_id, model, batch=2, seq=128, precision=precision, implementation="for-loop",
                 checkpointing=checkpointing, lora=lora, description=description)
    setup = entry["setup"]
    setup["images"] = {"images_per_sample": images, "image_height": height, "image_width": width}
    setup["finetuning"] = {**setup.get("finetuning", {}), "vision_tower": tower}
    if projector is not None:
        setup["finetuning"]["projector"] = projector
    return entry


# fmt: off
CASES: list[dict[str, Any]] = [
    # ---------------------------------------------------------------- GPT-2 12M (real)
    case("gpt2-12m-fp32-adamw-b1-s128", GPT2_12M, batch=1, seq=128,
         description="Smallest case; GPT-2's attention dropout 0.1 sends CPU SDPA to its math path."),
    case("gpt2-12m-fp32-sgd-eager-b4-s256", GPT2_12M, batch=4, seq=256, optimizer="sgd", attention="eager"),
    case("gpt2-12m-fp32-momentum-b2-s512", GPT2_12M, batch=2, seq=512, optimizer="sgd-momentum"),
    case("gpt2-12m-fp32-adam-fused-b2-s256", GPT2_12M, batch=2, seq=256, optimizer="adam", implementation="fused"),
    case("gpt2-12m-fp32-adamw-foreach-b2-s256", GPT2_12M, batch=2, seq=256, implementation="foreach"),
    case("gpt2-12m-fp32-adafactor-b2-s256", GPT2_12M, batch=2, seq=256, optimizer="adafactor"),
    case("gpt2-12m-fp32-adamw-ga4-b2-s256", GPT2_12M, batch=2, seq=256, accumulation=4),
    case("gpt2-12m-ampbf16-adamw-b2-s256", GPT2_12M, batch=2, seq=256, precision="amp-bf16"),
    case("gpt2-12m-ampbf16-adamw-eager-ckpt-b2-s256", GPT2_12M, batch=2, seq=256, precision="amp-bf16",
         attention="eager", checkpointing="full"),
    case("gpt2-12m-bf16-adamw-b8-s128", GPT2_12M, batch=8, seq=128, precision="bf16-pure"),
    case("gpt2-12m-nodropout-fp32-adamw-sdpa-b2-s256", GPT2_12M_NO_DROPOUT, batch=2, seq=256,
         description="Without dropout CPU SDPA runs its fused flash kernel."),
    case("gpt2-12m-nodropout-fp32-adamw-eager-b2-s256", GPT2_12M_NO_DROPOUT, batch=2, seq=256, attention="eager"),
    case("gpt2-12m-ampbf16-lora-attn-b2-s256", GPT2_12M, batch=2, seq=256, precision="amp-bf16",
         lora={"r": 8}, description="LoRA with PEFT's default target for GPT-2 (c_attn)."),
    case("gpt2-12m-fp32-lora-all-ckpt-b4-s128", GPT2_12M, batch=4, seq=128,
         lora={"r": 16, "target_modules": "all-linear"}, checkpointing="full"),
    # ---------------------------------------------------------------- Llama 14M (real)
    case("llama-14m-fp32-adamw-b1-s128", LLAMA_14M, batch=1, seq=128),
    case("llama-14m-fp32-adamw-eager-b2-s512", LLAMA_14M, batch=2, seq=512, attention="eager"),
    case("llama-14m-fp32-adamw-math-b2-s512", LLAMA_14M, batch=2, seq=512, attention="sdpa-math"),
    case("llama-14m-ampbf16-adamw-b4-s256", LLAMA_14M, batch=4, seq=256, precision="amp-bf16"),
    case("llama-14m-ampbf16-adamw-eager-b4-s256", LLAMA_14M, batch=4, seq=256, precision="amp-bf16", attention="eager"),
    case("llama-14m-bf16-adamw-b2-s1024", LLAMA_14M, batch=2, seq=1024, precision="bf16-pure"),
    case("llama-14m-bf16-sgd-b8-s256", LLAMA_14M, batch=8, seq=256, precision="bf16-pure", optimizer="sgd"),
    case("llama-14m-fp32-momentum-foreach-b2-s256", LLAMA_14M, batch=2, seq=256, optimizer="sgd-momentum",
         implementation="foreach"),
    case("llama-14m-fp32-adamw-foreach-b2-s256", LLAMA_14M, batch=2, seq=256, implementation="foreach"),
    case("llama-14m-fp32-adamw-fused-b2-s256", LLAMA_14M, batch=2, seq=256, implementation="fused"),
    case("llama-14m-ampbf16-adafactor-b2-s512", LLAMA_14M, batch=2, seq=512, precision="amp-bf16", optimizer="adafactor"),
    case("llama-14m-ampbf16-adamw-ckpt-b4-s512", LLAMA_14M, batch=4, seq=512, precision="amp-bf16", checkpointing="full"),
    case("llama-14m-fp32-adamw-eager-ckpt-b2-s256", LLAMA_14M, batch=2, seq=256, attention="eager", checkpointing="full"),
    case("llama-14m-ampbf16-lora-attn-b2-s256", LLAMA_14M, batch=2, seq=256, precision="amp-bf16",
         lora={"r": 8, "target_modules": LLAMA_ATTENTION}),
    case("llama-14m-bf16-lora-all-b2-s512", LLAMA_14M, batch=2, seq=512, precision="bf16-pure",
         lora={"r": 16, "target_modules": "all-linear"}),
    case("llama-14m-ampbf16-adamw-ga2-b2-s256", LLAMA_14M, batch=2, seq=256, precision="amp-bf16", accumulation=2),
    case("llama-14m-ampbf16-lora-all-ckpt-ga2-b4-s256", LLAMA_14M, batch=4, seq=256, precision="amp-bf16",
         lora={"r": 16, "target_modules": "all-linear"}, checkpointing="full", accumulation=2),
    case("llama-14m-fp32-adamw-b1-s4096", LLAMA_14M, batch=1, seq=4096,
         description="Long sequence: the fp32 logits and their log-softmax dominate."),
    case("llama-26m-arch-ampbf16-adamw-b2-s256", LLAMA_ARCHITECTURE, batch=2, seq=256, precision="amp-bf16",
         as_architecture=True, description="Model given as a trainmem architecture, built as an equivalent Llama config."),
    case("gpt2-7m-arch-fp32-adamw-b2-s128", GPT2_ARCHITECTURE, batch=2, seq=128, as_architecture=True,
         description="Model given as a trainmem architecture, built as an equivalent GPT-2 config."),
    # ---------------------------------------------------------------- Llama 58M and GPT-2 124M (real)
    case("llama-58m-ampbf16-adamw-b4-s512", LLAMA_58M, batch=4, seq=512, precision="amp-bf16"),
    case("llama-58m-fp32-adamw-b1-s2048", LLAMA_58M, batch=1, seq=2048),
    case("llama-58m-bf16-adafactor-eager-b2-s256", LLAMA_58M, batch=2, seq=256, precision="bf16-pure",
         optimizer="adafactor", attention="eager"),
    case("gpt2-fp32-adamw-b1-s512", "gpt2", batch=1, seq=512),
    case("gpt2-ampbf16-adamw-b2-s256", "gpt2", batch=2, seq=256, precision="amp-bf16"),
    case("gpt2-ampbf16-lora-attn-b2-s512", "gpt2", batch=2, seq=512, precision="amp-bf16",
         lora={"r": 16, "target_modules": GPT2_ATTENTION}),
    # ---------------------------------------------------------------- large models (fake tensors)
    case("gpt2-fp32-adamw-b8-s1024-fake", "gpt2", batch=8, seq=1024, fake=True),
    case("gpt2-medium-ampbf16-adamw-b4-s1024-fake", "gpt2-medium", batch=4, seq=1024, precision="amp-bf16", fake=True),
    case("gpt2-xl-ampbf16-adamw-ckpt-b8-s1024-fake", "gpt2-xl", batch=8, seq=1024, precision="amp-bf16",
         checkpointing="full", fake=True),
    case("gpt2-xl-bf16-momentum-b2-s512-fake", "gpt2-xl", batch=2, seq=512, precision="bf16-pure",
         optimizer="sgd-momentum", fake=True),
    case("tinyllama-ampbf16-adamw-foreach-b4-s2048-fake", "tinyllama-1.1b", batch=4, seq=2048, precision="amp-bf16",
         implementation="foreach", fake=True),
    case("tinyllama-bf16-adamw-ckpt-b8-s1024-fake", "tinyllama-1.1b", batch=8, seq=1024, precision="bf16-pure",
         checkpointing="full", fake=True),
    case("tinyllama-ampbf16-adafactor-ckpt-ga4-b2-s2048-fake", "tinyllama-1.1b", batch=2, seq=2048,
         precision="amp-bf16", optimizer="adafactor", checkpointing="full", accumulation=4, fake=True),
    case("llama32-1b-ampbf16-adamw-b2-s4096-fake", "llama-3.2-1b", batch=2, seq=4096, precision="amp-bf16", fake=True,
         description="128k vocabulary, tied embeddings: the loss head dominates."),
    case("llama32-1b-fp32-adamw-eager-b1-s2048-fake", "llama-3.2-1b", batch=1, seq=2048, attention="eager", fake=True),
    case("llama2-7b-ampbf16-lora-attn-b1-s4096-fake", "llama-2-7b", batch=1, seq=4096, precision="amp-bf16",
         lora={"r": 16}, fake=True, description="LoRA with PEFT's default targets for Llama (q_proj, v_proj)."),
    case("llama2-7b-ampbf16-lora-all-ckpt-b4-s4096-fake", "llama-2-7b", batch=4, seq=4096, precision="amp-bf16",
         lora={"r": 16, "target_modules": "all-linear"}, checkpointing="full", fake=True),
    case("llama2-7b-bf16-lora-attn-ckpt-b8-s2048-fake", "llama-2-7b", batch=8, seq=2048, precision="bf16-pure",
         lora={"r": 64, "target_modules": LLAMA_ATTENTION}, checkpointing="full", fake=True),
    case("llama2-7b-bf16-adamw-foreach-ckpt-b1-s2048-fake", "llama-2-7b", batch=1, seq=2048, precision="bf16-pure",
         implementation="foreach", checkpointing="full", fake=True,
         description="foreach AdamW: the step's temporaries span all parameters at once."),
    case("llama2-7b-bf16-sgd-b2-s2048-fake", "llama-2-7b", batch=2, seq=2048, precision="bf16-pure", optimizer="sgd",
         fake=True),
    case("llama2-7b-ampbf16-adamw-ckpt-b1-s1024-fake", "llama-2-7b", batch=1, seq=1024, precision="amp-bf16",
         checkpointing="full", fake=True),
    # ---------------------------------------------------------------- the other families (beyond GPT-2 and Llama)
    case("qwen2-small-ampbf16-adamw-b2-s256", QWEN2_SMALL, batch=2, seq=256, precision="amp-bf16",
         description="q/k/v biases, tied embeddings."),
    case("mistral-small-bf16-lora-all-b2-s256", MISTRAL_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"}),
    case("phi3-small-fp32-adamw-b2-s256", PHI3_SMALL, batch=2, seq=256,
         description="Fused qkv_proj and gate_up_proj; RoPE ends with a cat."),
    case("gemma2-small-ampbf16-adamw-eager-b2-s256", GEMMA2_SMALL, batch=2, seq=256, precision="amp-bf16",
         attention="eager", description="Four norms per layer, soft-capped attention and logits, scaled embeddings."),
    case("qwen3-small-bf16-adamw-ckpt-b2-s512", QWEN3_SMALL, batch=2, seq=512, precision="bf16-pure",
         checkpointing="full", description="RMSNorm on every query and key head."),
    case("mixtral-small-ampbf16-adamw-b2-s256", MIXTRAL_SMALL, batch=2, seq=256, precision="amp-bf16",
         description="Routed experts (top-2 of 4), run as grouped matmuls."),
    case("qwen2moe-small-fp32-adamw-b2-s256", QWEN2_MOE_SMALL, batch=2, seq=256,
         description="Routed experts plus a gated shared expert."),
    case("qwen25-05b-ampbf16-adamw-b2-s1024-fake", "qwen2.5-0.5b", batch=2, seq=1024, precision="amp-bf16", fake=True),
    # ---------------------------------------------------------------- families of 2025-2026 and MoE fine-tuning
    case("olmo2-small-ampbf16-adamw-b2-s256", OLMO2_SMALL, batch=2, seq=256, precision="amp-bf16",
         description="Post-norm layers; q/k RMSNorm over the whole projections."),
    case("olmo2-small-bf16-lora-all-ckpt-b2-s256", OLMO2_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"}, checkpointing="full"),
    case("starcoder2-small-fp32-adamw-b2-s256", STARCODER2_SMALL, batch=2, seq=256,
         description="LayerNorm, plain GELU MLP with biases, tied head."),
    case("starcoder2-small-ampbf16-adamw-eager-dropout-b2-s256", STARCODER2_DROPOUT_SMALL, batch=2, seq=256,
         precision="amp-bf16", attention="eager", description="Residual, embedding and attention dropout."),
    case("gemma3-small-ampbf16-adamw-eager-b2-s256", GEMMA3_SMALL, batch=2, seq=256, precision="amp-bf16",
         attention="eager", description="Sliding window (128) shorter than the sequence; two rotary tables."),
    case("gemma3-small-ampbf16-adamw-b2-s256", GEMMA3_SMALL, batch=2, seq=256, precision="amp-bf16",
         description="SDPA with a sliding-window mask on five of the seven layers."),
    case("gemma4-small-fp32-adamw-b2-s256", GEMMA4_SMALL, batch=2, seq=256,
         description="Gemma 4 E2B layout: per-layer embeddings, KV-shared double-wide last layers, 64-wide global heads."),
    case("gemma4-small-ampbf16-adamw-b2-s256", GEMMA4_SMALL, batch=2, seq=256, precision="amp-bf16"),
    case("gemma4-small-ampbf16-adamw-ckpt-b2-s256", GEMMA4_SMALL, batch=2, seq=256, precision="amp-bf16",
         checkpointing="full"),
    case("gemma4-small-bf16-lora-all-b2-s256", GEMMA4_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"}),
    case("gemma4-small-bf16-adamw-b2-s256-fake", GEMMA4_SMALL, batch=2, seq=256, precision="bf16-pure", fake=True),
    case("gemma4moe-small-fp32-adamw-b2-s256", GEMMA4_MOE_SMALL, batch=2, seq=256,
         description="Gemma 4 26B-A4B layout: k = v global layers, routed experts beside the dense MLP."),
    case("qwen3moe-small-bf16-adamw-b2-s256", QWEN3_MOE_SMALL, batch=2, seq=256, precision="bf16-pure",
         description="Per-head q/k norms, routed experts, no shared expert."),
    case("qwen3moe-small-fp32-lora-all-b2-s256", QWEN3_MOE_SMALL, batch=2, seq=256,
         lora={"r": 8, "target_modules": "all-linear"},
         description="PEFT adapts the router and both fused expert parameters (ParamWrapper)."),
    case("qwen3moe-small-bf16-lora-all-b2-s256", QWEN3_MOE_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"}),
    case("qwen2moe-dense-small-fp32-adamw-b2-s256", QWEN2_MOE_DENSE_SMALL, batch=2, seq=256,
         description="mlp_only_layers: a dense first layer before the MoE layers."),
    case("mixtral-small-ampbf16-lora-all-ckpt-b2-s256", MIXTRAL_SMALL, batch=2, seq=256, precision="amp-bf16",
         lora={"r": 8, "target_modules": "all-linear"}, checkpointing="full"),
    case("granite-small-ampbf16-adamw-b2-s256", GRANITE_SMALL, batch=2, seq=256, precision="amp-bf16",
         description="Embedding, residual and logits multipliers."),
    case("mistral-window-small-ampbf16-adamw-b2-s512", MISTRAL_WINDOW_SMALL, batch=2, seq=512, precision="amp-bf16",
         description="Sliding window (128) shorter than the sequence: SDPA gets a materialised mask."),
    case("mistral-window-small-ampbf16-adamw-eager-b2-s512", MISTRAL_WINDOW_SMALL, batch=2, seq=512,
         precision="amp-bf16", attention="eager"),
    case("mistral-window-small-fp32-adamw-d64-b2-s384",
         {**MISTRAL_WINDOW_SMALL, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64}, batch=2, seq=384,
         description="Sliding window (128) under fp32 with head_dim 64 and seq 384: the SDPA mask (b, 1, s, s) "
         "and the repeated K/V differ in size."),
    case("mistral-small-fp32-adamw-d320-b2-s256",
         {**MISTRAL_SMALL, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 320}, batch=2, seq=256,
         description="Grouped-query heads 320 wide (> 256), no mask: transformers repeats K/V (use_gqa_in_sdpa)."),
    case("mistral-mqa-small-fp32-adamw-d320-b2-s256",
         {**MISTRAL_SMALL, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 320}, batch=2, seq=256,
         description="One key/value head 320 wide, no mask: repeat_kv is a view (no copy)."),
    case("mistral-mqa-small-fp32-adamw-eager-d320-b2-s256",
         {**MISTRAL_SMALL, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 320}, batch=2, seq=256,
         attention="eager",
         description="One key/value head, eager: the matmuls copy repeat_kv's expanded view (aten.clone), unlike SDPA."),
    case("llama4-small-ampbf16-adamw-b2-s256", LLAMA4_SMALL, batch=2, seq=256, precision="amp-bf16",
         description="Llama 4: dense and MoE layers interleaved, every expert on every token, NoPE layer 3."),
    case("llama4-small-fp32-adamw-eager-ckpt-b2-s256", LLAMA4_SMALL, batch=2, seq=256, attention="eager",
         checkpointing="full"),
    case("pythia-small-fp32-adamw-b2-s256", PYTHIA_SMALL, batch=2, seq=256,
         description="GPT-NeoX: per-head fused qkv, partial rotary (0.25) with a cat, parallel residual."),
    case("pythia-small-ampbf16-lora-attn-eager-b2-s256", PYTHIA_SMALL, batch=2, seq=256, precision="amp-bf16",
         attention="eager", lora={"r": 8}, description="LoRA with PEFT's default target for GPT-NeoX (query_key_value)."),
    case("qwen3-30b-a3b-bf16-lora-all-ckpt-b1-s1024-fake", "qwen3-30b-a3b", batch=1, seq=1024, precision="bf16-pure",
         lora={"r": 16, "target_modules": "all-linear"}, checkpointing="full", fake=True,
         description="Qwen3-30B-A3B LoRA on attention, routers and 128 fused experts per layer."),
    # ---------------------------------------------------------------- GLM-4.5 MoE (glm4_moe)
    case("glm4moe-small-fp32-adamw-b2-s256", GLM4_MOE_SMALL, batch=2, seq=256,
         description="GLM-4.5 layout: partial rotary with its torch.cat, q/k norms, sigmoid router, shared expert."),
    case("glm4moe-small-ampbf16-adamw-eager-b2-s256", GLM4_MOE_SMALL, batch=2, seq=256, precision="amp-bf16",
         attention="eager"),
    case("glm4moe-small-ampbf16-adamw-ckpt-b2-s512", GLM4_MOE_SMALL, batch=2, seq=512, precision="amp-bf16",
         checkpointing="full"),
    case("glm4moe-small-bf16-lora-all-b2-s256", GLM4_MOE_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"},
         description="LoRA all-linear with PEFT's Qwen2-MoE conversion: router and fused experts adapted too."),
    case("glm4moe-small-bf16-adamw-b2-s256-fake", GLM4_MOE_SMALL, batch=2, seq=256, precision="bf16-pure", fake=True),
    # ---------------------------------------------------------------- MiniMax-M2 (minimax_m2)
    case("minimaxm2-small-fp32-adamw-b2-s256", MINIMAX_M2_SMALL, batch=2, seq=256,
         description="MiniMax-M2 layout: whole-projection q/k norms, partial rotary with its torch.cat, sigmoid router."),
    case("minimaxm2-small-ampbf16-adamw-eager-b2-s256", MINIMAX_M2_SMALL, batch=2, seq=256, precision="amp-bf16",
         attention="eager"),
    case("minimaxm2-small-ampbf16-adamw-ckpt-b2-s512", MINIMAX_M2_SMALL, batch=2, seq=512, precision="amp-bf16",
         checkpointing="full"),
    case("minimaxm2-small-bf16-lora-all-b2-s256", MINIMAX_M2_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"},
         description="LoRA all-linear with PEFT's Mixtral conversion: the router parameter and fused experts adapted too."),
    case("minimaxm2-small-bf16-adamw-b2-s256-fake", MINIMAX_M2_SMALL, batch=2, seq=256, precision="bf16-pure", fake=True),
    # ---------------------------------------------------------------- GLM-4.7-Flash (glm4_moe_lite)
    case("glm4moelite-small-fp32-adamw-b2-s256", GLM4_MOE_LITE_SMALL, batch=2, seq=256,
         description="GLM-4.7-Flash layout: multi-head latent attention, a dense first layer, sigmoid router, shared expert."),
    case("glm4moelite-small-ampbf16-adamw-ckpt-b2-s512", GLM4_MOE_LITE_SMALL, batch=2, seq=512, precision="amp-bf16",
         checkpointing="full"),
    case("glm4moelite-small-bf16-lora-all-b2-s256", GLM4_MOE_LITE_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"},
         description="LoRA all-linear with PEFT's Qwen2-MoE conversion: router and fused experts adapted too."),
    case("glm4moelite-small-bf16-adamw-b2-s256-fake", GLM4_MOE_LITE_SMALL, batch=2, seq=256, precision="bf16-pure",
         fake=True),
    # ---------------------------------------------------------------- Hunyuan (hunyuan_v1_moe, hunyuan_v1_dense)
    case("hunyuanmoe-small-fp32-adamw-b2-s256", HUNYUAN_MOE_SMALL, batch=2, seq=256,
         description="Hunyuan-A13B layout: RoPE then per-head q/k norms, shared MLP before the nn.Linear gate, fused experts."),
    case("hunyuanmoe-small-ampbf16-adamw-eager-b2-s256", HUNYUAN_MOE_SMALL, batch=2, seq=256, precision="amp-bf16",
         attention="eager"),
    case("hunyuanmoe-small-bf16-lora-all-b2-s256", HUNYUAN_MOE_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"},
         description="LoRA all-linear: the gate's wg as a linear module, the fused experts as parameters, not the shared MLP."),
    case("hunyuanmoe-small-bf16-adamw-b2-s256-fake", HUNYUAN_MOE_SMALL, batch=2, seq=256, precision="bf16-pure", fake=True),
    case("hunyuandense-small-ampbf16-adamw-ckpt-b2-s512", HUNYUAN_DENSE_SMALL, batch=2, seq=512, precision="amp-bf16",
         checkpointing="full", description="Hunyuan dense layout: Llama with RoPE then per-head q/k norms."),
    # ---------------------------------------------------------------- ERNIE 4.5 MoE (ernie4_5_moe)
    case("ernie45moe-small-fp32-adamw-b2-s256", ERNIE4_5_MOE_SMALL, batch=2, seq=256,
         description="ERNIE 4.5 MoE layout: a dense first layer, fused experts, two shared experts, the fp32 router."),
    case("ernie45moe-small-ampbf16-adamw-b2-s256", ERNIE4_5_MOE_SMALL, batch=2, seq=256, precision="amp-bf16",
         description="Under autocast the router still runs in fp32 (maybe_autocast(enabled=False))."),
    case("ernie45moe-small-bf16-lora-all-b2-s256", ERNIE4_5_MOE_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"}),
    case("ernie45moe-small-bf16-adamw-b2-s256-fake", ERNIE4_5_MOE_SMALL, batch=2, seq=256, precision="bf16-pure",
         fake=True),
    # ---------------------------------------------------------------- SmolLM3 (NoPE layers) and OLMo 3 (sliding window)
    case("smollm3-small-fp32-adamw-b2-s256", SMOLLM3_SMALL, batch=2, seq=256,
         description="SmolLM3 layout: a NoPE layer (no rotated q/k) among RoPE layers, tied embeddings."),
    case("smollm3-small-ampbf16-adamw-ckpt-b2-s512", SMOLLM3_WINDOW_SMALL, batch=2, seq=512, precision="amp-bf16",
         checkpointing="full", description="use_sliding_window: the NoPE layer attends through a 128-token window."),
    case("smollm3-small-bf16-lora-all-b2-s256", SMOLLM3_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"}),
    case("smollm3-small-bf16-adamw-b2-s256-fake", SMOLLM3_SMALL, batch=2, seq=256, precision="bf16-pure", fake=True),
    case("olmo3-small-fp32-adamw-b2-s256", OLMO3_SMALL, batch=2, seq=256,
         description="OLMo 3 layout: post-norm, q/k norms over the projections, sliding layers and a full layer."),
    case("olmo3-small-ampbf16-adamw-ckpt-b2-s512", OLMO3_SMALL, batch=2, seq=512, precision="amp-bf16",
         checkpointing="full"),
    case("olmo3-small-bf16-lora-all-b2-s256", OLMO3_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"}),
    case("olmo3-small-bf16-adamw-b2-s256-fake", OLMO3_SMALL, batch=2, seq=256, precision="bf16-pure", fake=True),
    # ---------------------------------------------------------------- Seed-OSS and EXAONE 4.0
    case("seedoss-small-fp32-adamw-b2-s256", SEED_OSS_SMALL, batch=2, seq=256,
         description="Seed-OSS layout with its default dropouts: attention dropout sends CPU SDPA to its math path."),
    case("exaone4-small-fp32-adamw-b2-s256", EXAONE4_SMALL, batch=2, seq=256,
         description="EXAONE 4.0 layout: post-norm, q/k norms, sliding RoPE layers and a global NoPE layer."),
    # ---------------------------------------------------------------- ERNIE 4.5 (dense)
    case("ernie45-small-fp32-adamw-b2-s256", ERNIE4_5_SMALL, batch=2, seq=256,
         description="ERNIE 4.5 layout: fp32 RoPE with per-layer repeat_interleave'd tables and an interleaved rotation."),
    case("ernie45-small-ampbf16-adamw-b2-s256", ERNIE4_5_SMALL, batch=2, seq=256, precision="amp-bf16",
         description="Under autocast q and k are bf16: RoPE makes fp32 copies and casts back."),
    case("ernie45-small-bf16-lora-all-ckpt-b2-s256", ERNIE4_5_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"}, checkpointing="full"),
    case("ernie45-small-bf16-adamw-b2-s256-fake", ERNIE4_5_SMALL, batch=2, seq=256, precision="bf16-pure", fake=True),
    # ---------------------------------------------------------------- multi-head latent attention (DeepSeek)
    case("deepseek3-small-fp32-adamw-b2-s256", DEEPSEEK_V3_SMALL, batch=2, seq=256,
         description="MLA (q and kv latents, different q/k and v head dims: CPU SDPA runs its math path), "
         "sigmoid group-limited router, a dense first layer, a shared expert."),
    case("deepseek3-small-ampbf16-adamw-eager-b2-s256", DEEPSEEK_V3_SMALL, batch=2, seq=256, precision="amp-bf16",
         attention="eager"),
    case("deepseek3-small-ampbf16-adamw-ckpt-b2-s512", DEEPSEEK_V3_SMALL, batch=2, seq=512, precision="amp-bf16",
         checkpointing="full"),
    case("deepseek3-small-bf16-lora-all-b2-s256", DEEPSEEK_V3_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"},
         description="LoRA all-linear: MLA projections, dense and shared MLPs, the router and the fused experts."),
    case("deepseek2-small-fp32-adamw-eager-b2-s256", DEEPSEEK_V2_SMALL, batch=2, seq=256, attention="eager",
         description="DeepSeek-V2: plain q_proj, complex RoPE, softmax router, two shared experts."),
    case("deepseek2-small-ampbf16-lora-attn-b2-s256", DEEPSEEK_V2_SMALL, batch=2, seq=256, precision="amp-bf16",
         lora={"r": 8, "target_modules": ["q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"]}),
    # Fake-tensor cases of the MoE families are pure bf16: under FakeTensorMode torch 2.13's meta kernel of
    # _grouped_mm accepts bf16 inputs only ("Expected inputs of BF16 type"), so fp32 and AMP steps fail.
    case("deepseek-v2-lite-bf16-lora-all-b1-s1024-fake", "deepseek-v2-lite", batch=1, seq=1024,
         precision="bf16-pure", lora={"r": 16, "target_modules": "all-linear"}, fake=True,
         description="DeepSeek-V2-Lite (15.7B) LoRA on everything PEFT adapts: the merged expert stacks are saved."),
    case("gptoss-20b-bf16-lora-attn-eager-b1-s512-fake", "gpt-oss-20b", batch=1, seq=512, precision="bf16-pure",
         attention="eager", lora={"r": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}, fake=True,
         description="gpt-oss-20b, experts dequantised to bf16, LoRA on attention."),
    # ---------------------------------------------------------------- gpt-oss (eager: no SDPA for the sinks)
    case("gptoss-small-fp32-adamw-eager-b2-s256", GPT_OSS_SMALL, batch=2, seq=256, attention="eager",
         description="Attention sinks, q/k/v/o biases, a 128-token window on every other layer, biased experts."),
    case("gptoss-small-ampbf16-adamw-eager-ckpt-b2-s512", GPT_OSS_SMALL, batch=2, seq=512, precision="amp-bf16",
         attention="eager", checkpointing="full"),
    case("gptoss-small-bf16-lora-all-eager-b2-s256", GPT_OSS_SMALL, batch=2, seq=256, precision="bf16-pure",
         attention="eager", lora={"r": 8, "target_modules": "all-linear"},
         description="LoRA all-linear adapts q/k/v/o only: no MoE conversion for gpt_oss in PEFT."),
    # ---------------------------------------------------------------- PhiMoE (sparsemixer router, LayerNorm)
    case("phimoe-small-fp32-adamw-b2-s256", PHIMOE_SMALL, batch=2, seq=256,
         description="Phi-3.5-MoE layout: sparsemixer top-2 router, input jitter, LayerNorm and attention/head biases."),
    case("phimoe-small-ampbf16-adamw-ckpt-b2-s256", PHIMOE_SMALL, batch=2, seq=256, precision="amp-bf16",
         checkpointing="full"),
    case("phimoe-small-ampbf16-adamw-eager-b2-s256", PHIMOE_SMALL, batch=2, seq=256, precision="amp-bf16",
         attention="eager"),
    case("phimoe-small-bf16-lora-attn-b2-s256", PHIMOE_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": PHIMOE_ATTENTION},
         description="LoRA on q/k/v/o (all-linear would wrap the nn.Linear router, whose forward then fails)."),
    case("phimoe-small-bf16-adamw-b2-s256-fake", PHIMOE_SMALL, batch=2, seq=256, precision="bf16-pure", fake=True),
    case("phi35moe-bf16-lora-attn-b1-s1024-fake", "phi-3.5-moe", batch=1, seq=1024, precision="bf16-pure",
         lora={"r": 16, "target_modules": PHIMOE_ATTENTION}, fake=True,
         description="Phi-3.5-MoE (41.9B) LoRA on attention: 16 bf16 expert stacks per layer, the instruct input jitter."),
    # ---------------------------------------------------------------- PEFT modules_to_save and DoRA (issue 10)
    case("llama-14m-ampbf16-lora-attn-mts-embed-head-b2-s256", LLAMA_14M, batch=2, seq=256, precision="amp-bf16",
         implementation="for-loop",
         lora={"r": 8, "target_modules": LLAMA_ATTENTION, "modules_to_save": ["lm_head", "embed_tokens"]},
         description="LoRA on q_proj and v_proj with modules_to_save embed_tokens and lm_head: PEFT's "
         "ModulesToSaveWrapper trains fp32 copies next to the frozen originals"),
    case("llama-14m-bf16-lora-all-mts-head-norms-foreach-b2-s256", LLAMA_14M, batch=2, seq=256,
         precision="bf16-pure", implementation="foreach",
         lora={"r": 16, "target_modules": "all-linear", "modules_to_save": ["lm_head", "norm"]},
         description="LoRA on all linears with modules_to_save lm_head and 'norm' (PEFT's suffix match wraps every "
         "RMSNorm too): bf16 copies, bf16 grads and AdamW states"),
    case("llama2-7b-ampbf16-lora-attn-mts-embed-head-ckpt-b1-s2048-fake", "llama-2-7b", batch=1, seq=2048,
         precision="amp-bf16", implementation="for-loop", checkpointing="full", fake=True,
         lora={"r": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
               "modules_to_save": ["embed_tokens", "lm_head"]},
         description="Llama-2-7B LoRA on attention with modules_to_save embed_tokens and lm_head (trained fp32 "
         "copies next to the frozen originals), full checkpointing"),
    case("llama-14m-ampbf16-lora-attn-dora-b2-s256", LLAMA_14M, batch=2, seq=256, precision="amp-bf16",
         implementation="for-loop", lora={"r": 8, "target_modules": LLAMA_ATTENTION, "use_dora": True},
         description="DoRA (use_dora) on q_proj and v_proj under CPU autocast: magnitude vectors, the materialised "
         "B@A graph and the saved weight norms"),
    case("llama-14m-bf16-lora-all-dora-dropout-b2-s256", LLAMA_14M, batch=2, seq=256, precision="bf16-pure",
         implementation="for-loop",
         lora={"r": 16, "target_modules": "all-linear", "lora_dropout": 0.05, "use_dora": True},
         description="DoRA on all linears of a bf16 model with lora_dropout 0.05: the base output is computed again "
         "on the dropped input from an fp32 copy of the weight"),
    case("llama2-7b-ampbf16-lora-attn-dora-ckpt-b1-s2048-fake", "llama-2-7b", batch=1, seq=2048,
         precision="amp-bf16", implementation="for-loop", checkpointing="full", fake=True,
         lora={"r": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], "use_dora": True},
         description="Llama-2-7B DoRA on attention, full checkpointing, fake tensors"),
    # ---------------------------------------------------------------- packed / padding-free rows (issue 10)
    case("llama-14m-mha-ampbf16-adamw-packed4-b4-s256", LLAMA_14M_MHA, batch=4, seq=256, precision="amp-bf16",
         implementation="for-loop", extra={"batch": "packed", "packed_sequences": 4},
         description="Packed row (padding-free): 4 × 256 tokens in one row, position_ids restarting at 4 sequences; "
         "SDPA on CPU gets transformers' block-diagonal (1, 1, 1024, 1024) mask"),
    case("llama-14m-ampbf16-adamw-packed4-b4-s256", LLAMA_14M, batch=4, seq=256, precision="amp-bf16",
         implementation="for-loop", extra={"batch": "packed", "packed_sequences": 4},
         description="Packed row on a grouped-query model: with transformers' block-diagonal mask SDPA cannot use "
         "enable_gqa, so K and V are repeated to all heads"),
    case("llama-14m-mha-fp32-adamw-eager-packed3-b2-s256", LLAMA_14M_MHA, batch=2, seq=256, attention="eager",
         implementation="for-loop", extra={"batch": "packed", "packed_sequences": 3},
         description="Packed row of 3 sequences with eager attention: the masked scores span the whole 512-token row"),
    case("tinyllama-ampbf16-adamw-ckpt-packed8-b2-s2048-fake", "tinyllama-1.1b", batch=2, seq=2048,
         precision="amp-bf16", implementation="for-loop", checkpointing="full", fake=True,
         extra={"batch": "packed", "packed_sequences": 8},
         description="TinyLlama (GQA) on fake tensors, a packed row of 8 sequences in 4096 tokens under full "
         "checkpointing: the block-diagonal mask and the repeated K/V in every recomputed layer"),
    # ---------------------------------------------------------------- padded rows with an attention_mask (issue 10)
    case("llama-14m-mha-ampbf16-adamw-padmask-b4-s256", LLAMA_14M_MHA, batch=4, seq=256, precision="amp-bf16",
         implementation="for-loop", extra={"batch": "padded_masked"},
         description="Padded rows passed with an attention_mask of trailing zeros (right padding): transformers "
         "builds a (4, 1, 256, 256) boolean mask instead of is_causal"),
    case("llama-14m-ampbf16-adamw-padmask-b4-s256", LLAMA_14M, batch=4, seq=256, precision="amp-bf16",
         implementation="for-loop", extra={"batch": "padded_masked"},
         description="Padded rows with an attention_mask on a grouped-query model: the mask rules out enable_gqa, "
         "K and V are repeated to all heads"),
    case("llama-14m-ampbf16-adamw-ckpt-padmask-b4-s256", LLAMA_14M, batch=4, seq=256, precision="amp-bf16",
         implementation="for-loop", checkpointing="full", extra={"batch": "padded_masked"},
         description="Padded rows with an attention_mask under full checkpointing (GQA): the boolean mask lives "
         "until backward, each recomputed layer rebuilds its additive copy and repeated K/V"),
    case("llama-14m-mha-fp32-adamw-eager-padmask-b2-s256", LLAMA_14M_MHA, batch=2, seq=256, attention="eager",
         implementation="for-loop", extra={"batch": "padded_masked"},
         description="Padded rows with an attention_mask and eager attention"),
    case("tinyllama-ampbf16-adamw-padmask-b2-s1024-fake", "tinyllama-1.1b", batch=2, seq=1024,
         precision="amp-bf16", implementation="for-loop", fake=True, extra={"batch": "padded_masked"},
         description="TinyLlama (GQA) on fake tensors, padded rows with an attention_mask: 22 layers' additive "
         "(2, 1, 1024, 1024) masks and repeated K/V kept for backward"),
    # ---------------------------------------------------------------- gated short convolutions (LFM2)
    case("lfm2-small-fp32-adamw-b2-s256", LFM2_SMALL, batch=2, seq=256,
         description="LFM2: gated short convolutions (torch fallback of causal_conv1d_fn) and GQA attention."),
    case("lfm2-small-ampbf16-adamw-b2-s256", LFM2_SMALL, batch=2, seq=256, precision="amp-bf16"),
    case("lfm2-small-ampbf16-adamw-ckpt-b2-s512", LFM2_SMALL, batch=2, seq=512, precision="amp-bf16",
         checkpointing="full"),
    case("lfm2-small-bf16-lora-all-b2-s256", LFM2_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"},
         description="LoRA all-linear: in_proj and out_proj of the convolutions, q/k/v/out_proj, w1/w3/w2."),
    case("lfm2-small-fp32-adamw-eager-b1-s512", LFM2_SMALL, batch=1, seq=512, attention="eager"),
    case("lfm2-1.2b-bf16-adamw-b1-s2048-fake", "lfm2-1.2b", batch=1, seq=2048, precision="bf16-pure", fake=True,
         description="LFM2-1.2B on fake tensors: ten short-convolution and six attention layers."),
    case("lfm2moe-small-fp32-adamw-b2-s256", LFM2_MOE_SMALL, batch=2, seq=256,
         description="LFM2-MoE: sigmoid router in the logits' dtype, expert_bias for the choice, fused experts."),
    case("lfm2moe-small-ampbf16-adamw-b2-s256", LFM2_MOE_SMALL, batch=2, seq=256, precision="amp-bf16"),
    case("lfm2moe-small-bf16-lora-all-b2-s256", LFM2_MOE_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"},
         description="LoRA all-linear: nn.Linear modules only (no MoE conversion for lfm2_moe in peft 0.21)."),
    # ---------------------------------------------------------------- hybrid linear attention (Qwen3-Next)
    case("qwen3next-small-fp32-adamw-b2-s256", QWEN3_NEXT_SMALL, batch=2, seq=256,
         description="Gated DeltaNet (torch fallback: chunked gated delta rule, causal conv1d) and gated attention."),
    case("qwen3next-small-ampbf16-adamw-ckpt-b2-s200", QWEN3_NEXT_DENSE_SMALL, batch=2, seq=200, precision="amp-bf16",
         checkpointing="full", description="The sequence padded to the 64-token chunk; a dense first layer."),
    case("qwen3next-small-bf16-lora-all-b2-s256", QWEN3_NEXT_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"},
         description="LoRA all-linear: in_proj_qkvz, in_proj_ba, out_proj, attention, shared expert, router, experts."),
    case("qwen3next-small-ampbf16-adamw-eager-b1-s512", QWEN3_NEXT_SMALL, batch=1, seq=512, precision="amp-bf16",
         attention="eager"),
    case("qwen3next-80b-bf16-lora-all-b1-s512-fake", "qwen3-next-80b-a3b", batch=1, seq=512, precision="bf16-pure",
         lora={"r": 16, "target_modules": "all-linear"}, fake=True,
         description="Qwen3-Next-80B-A3B (512 experts, 36 Gated DeltaNet layers) LoRA on everything PEFT adapts."),
    # ---------------------------------------------------------------- hybrid linear attention (OLMo Hybrid)
    case("olmohybrid-small-fp32-adamw-b2-s256", OLMO_HYBRID_SMALL, batch=2, seq=256,
         description="OLMo Hybrid: pre-norm Gated DeltaNet layers (torch fallback) and post-norm OLMo 3 attention."),
    case("olmohybrid-small-ampbf16-adamw-b2-s256", OLMO_HYBRID_SMALL, batch=2, seq=256, precision="amp-bf16"),
    case("olmohybrid-small-bf16-lora-all-b2-s256", OLMO_HYBRID_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"}),
    case("olmohybrid-small-nope-ampbf16-adamw-ckpt-b2-s200", OLMO_HYBRID_NOPE_SMALL, batch=2, seq=200,
         precision="amp-bf16", checkpointing="full",
         description="As released: no RoPE (rope_theta null); the sequence padded to the 64-token chunk."),
    # ---------------------------------------------------------------- hybrid linear attention (Qwen3.5)
    case("qwen3_5-small-fp32-adamw-b2-s256", QWEN3_5_SMALL, batch=2, seq=256,
         description="Qwen3.5 dense: split Gated DeltaNet projections (in_proj_qkv, z, b, a), gated attention, mRoPE."),
    case("qwen3_5-small-ampbf16-adamw-ckpt-b2-s200", QWEN3_5_SMALL, batch=2, seq=200, precision="amp-bf16",
         checkpointing="full", description="The sequence padded to the 64-token chunk."),
    case("qwen3_5-small-ampbf16-adamw-eager-b1-s512-fake", QWEN3_5_SMALL, batch=1, seq=512, precision="amp-bf16",
         attention="eager", fake=True),
    case("qwen3_5moe-small-fp32-adamw-b2-s256", QWEN3_5_MOE_SMALL, batch=2, seq=256,
         description="Qwen3.5 MoE: routed experts and a gated shared expert in every layer."),
    case("qwen3_5moe-small-bf16-lora-all-b2-s256", QWEN3_5_MOE_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"},
         description="LoRA all-linear: PEFT adapts the nn.Linear modules only (no v4 MoE conversion for qwen3_5_moe_text)."),
    case("qwen3_5moe-small-ampbf16-adamw-b2-s256", QWEN3_5_MOE_SMALL, batch=2, seq=256, precision="amp-bf16"),
    case("qwen3_5moe-small-bf16-adamw-b2-s512-fake", QWEN3_5_MOE_SMALL, batch=2, seq=512, precision="bf16-pure",
         fake=True, description="On fake tensors (AMP on fake tensors fails in _grouped_mm's dtype check on CPU)."),
    # ---------------------------------------------------------------- hyper-connected hybrid (Qwen4-Exp)
    case("qwen4exp-small-fp32-adamw-b2-s128", QWEN4_EXP_SMALL, batch=2, seq=128,
         description="Qwen4-Exp: four hyper-connection streams, PLE n-gram embedding, QSA indexer, Gated DeltaNet, MoE."),
    case("qwen4exp-small-ampbf16-adamw-b2-s128", QWEN4_EXP_SMALL, batch=2, seq=128, precision="amp-bf16"),
    case("qwen4exp-small-ampbf16-adamw-ckpt-b2-s128", QWEN4_EXP_SMALL, batch=2, seq=128, precision="amp-bf16",
         checkpointing="full"),
    case("qwen4exp-small-bf16-lora-all-b2-s128", QWEN4_EXP_SMALL, batch=2, seq=128, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"},
         description="LoRA all-linear: the nn.Linear modules, the indexer's and the hyper-connections' included."),
    # ---------------------------------------------------------------- Mamba-2 hybrids (Granite 4.0)
    case("granite4-small-fp32-adamw-b2-s256", GRANITE4_SMALL, batch=2, seq=256,
         description="Granite 4.0 hybrid: Mamba-2 (torch SSD scan, chunk 64) and NoPE attention, MoE with a shared MLP."),
    case("granite4-small-ampbf16-adamw-ckpt-b2-s200", GRANITE4_SMALL, batch=2, seq=200, precision="amp-bf16",
         checkpointing="full", description="The scan pads the sequence to the 64-token chunk."),
    case("granite4-small-bf16-lora-all-b2-s256", GRANITE4_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"},
         description="LoRA all-linear: in_proj, out_proj, q/k/v/o, the shared MLP (no v4 MoE conversion for granitemoe)."),
    case("granite4dense-small-fp32-adamw-b2-s256", GRANITE4_DENSE_SMALL, batch=2, seq=256,
         description="Granite 4.0 dense hybrid (H Micro's layout): shared MLP only, 2 B/C groups, RoPE."),
    case("granite4dense-small-ampbf16-adamw-b1-s512", GRANITE4_DENSE_SMALL, batch=1, seq=512, precision="amp-bf16"),
    case("granite4-h-tiny-bf16-lora-all-b1-s512-fake", "granite-4.0-h-tiny", batch=1, seq=512, precision="bf16-pure",
         lora={"r": 16, "target_modules": "all-linear"}, fake=True,
         description="Granite 4.0 H Tiny (7B: 36 Mamba-2 layers, 4 attention, 64 experts) LoRA all-linear on fake tensors."),
    # ---------------------------------------------------------------- Mamba-2 hybrids (Nemotron-H)
    case("nemotronh-small-fp32-adamw-b2-s256", NEMOTRON_H_SMALL, batch=2, seq=256,
         description="Nemotron-H: Mamba-2, relu2 MLP and attention blocks (M-M*-M), one mixer per block."),
    case("nemotronh-small-ampbf16-adamw-ckpt-b2-s200", NEMOTRON_H_SMALL, batch=2, seq=200, precision="amp-bf16",
         checkpointing="full", description="The scan pads the sequence to the 64-token chunk."),
    case("nemotronh-small-bf16-lora-b2-s256", NEMOTRON_H_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": ["in_proj", "q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"]},
         description="LoRA on every linear PEFT allows for nemotron_h (it refuses out_proj and conv1d, so all-linear)."),
    case("nemotronh-nano-9b-v2-bf16-lora-b1-s512-fake", "nemotron-nano-9b-v2", batch=1, seq=512, precision="bf16-pure",
         lora={"r": 16, "target_modules": ["in_proj", "q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"]},
         fake=True, description="Nemotron Nano 9B v2 (27 Mamba-2, 4 attention, 25 MLP blocks) LoRA on fake tensors."),
    # ---------------------------------------------------------------- Mamba-2 hybrids (Falcon-H1)
    case("falconh1-small-fp32-adamw-b2-s256", FALCON_H1_SMALL, batch=2, seq=256,
         description="Falcon-H1: attention and the Mamba-2 mixer in parallel in every layer, µP multipliers."),
    case("falconh1-small-ampbf16-adamw-b2-s256", FALCON_H1_SMALL, batch=2, seq=256, precision="amp-bf16",
         description="The fp32 µP vector promotes in_proj's bf16 output: the mixer after in_proj runs in fp32."),
    case("falconh1-small-ampbf16-adamw-ckpt-b2-s200", FALCON_H1_SMALL, batch=2, seq=200, precision="amp-bf16",
         checkpointing="full", description="The scan pads the sequence to the 64-token chunk."),
    case("falconh1-small-bf16-lora-b2-s256", FALCON_H1_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": ["in_proj", "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                          "down_proj"]},
         description="LoRA on every linear PEFT allows for falcon_h1 (it refuses out_proj and conv1d)."),
    case("falconh1norm-small-fp32-adamw-b2-s256", FALCON_H1_NORM_SMALL, batch=2, seq=256,
         description="FalconH1RMSNormGated before the gate (mamba_rms_norm), in_proj/out_proj biases."),
    case("falcon-h1-0.5b-bf16-adamw-b1-s512-fake", "falcon-h1-0.5b", batch=1, seq=512, precision="bf16-pure",
         fake=True, description="Falcon-H1 0.5B (36 layers of attention + Mamba-2) on fake tensors."),
    # ---------------------------------------------------------------- Apertus (xIELU)
    case("apertus-small-fp32-adamw-b2-s256", APERTUS_SMALL, batch=2, seq=256,
         description="xIELU's Python path: the mask, alpha_p * x, expm1 and expm1 - x saved besides x."),
    case("apertus-small-ampbf16-adamw-b2-s256", APERTUS_SMALL, batch=2, seq=256, precision="amp-bf16",
         description="xIELU's (1,)-shaped fp32 scalars promote its bf16 products to fp32 under autocast."),
    case("apertus-small-ampbf16-adamw-ckpt-b2-s256", APERTUS_SMALL, batch=2, seq=256, precision="amp-bf16",
         checkpointing="full"),
    case("apertus-small-bf16-lora-all-b2-s256", APERTUS_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"}, description="Frozen xIELU scalars: fewer tensors saved."),
    # ---------------------------------------------------------------- GLM-4 (0414)
    case("glm4-small-fp32-adamw-b2-s256", GLM4_SMALL, batch=2, seq=256,
         description="GLM-4: sandwich norms, interleaved partial RoPE (cos/sin repeat_interleaved per layer)."),
    case("glm4-small-ampbf16-adamw-ckpt-b2-s256", GLM4_SMALL, batch=2, seq=256, precision="amp-bf16",
         checkpointing="full"),
    case("glm4-small-bf16-lora-all-b2-s256", GLM4_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"}),
    # ---------------------------------------------------------------- Mamba-2 (pure)
    case("mamba2-small-fp32-adamw-b2-s256", MAMBA2_SMALL, batch=2, seq=256, attention="eager",
         description="Mamba-2 blocks only: the torch SSD scan (chunk 64), 2 B/C groups, untied head."),
    case("mamba2-small-ampbf16-adamw-ckpt-b2-s200", MAMBA2_SMALL, batch=2, seq=200, precision="amp-bf16",
         checkpointing="full", attention="eager", description="The scan pads the sequence to the 64-token chunk."),
    case("mamba2-small-bf16-lora-b2-s256", {**MAMBA2_SMALL, "residual_in_fp32": False}, batch=2, seq=256,
         precision="bf16-pure", lora={"r": 8, "target_modules": ["in_proj"]}, attention="eager",
         description="LoRA on in_proj (PEFT refuses out_proj and conv1d of Mamba models)."),
    # ---------------------------------------------------------------- Cohere (Command-R)
    case("cohere-small-fp32-adamw-b2-s256", COHERE_SMALL, batch=2, seq=256,
         description="Parallel attention and MLP after one bias-free LayerNorm, fp32 interleaved RoPE, logit_scale."),
    case("cohere-small-ampbf16-adamw-ckpt-b2-s256", COHERE_QK_NORM_SMALL, batch=2, seq=256, precision="amp-bf16",
         checkpointing="full", description="Per-head q/k LayerNorms (Command-R+), untied head."),
    case("cohere-small-bf16-lora-all-b2-s256", COHERE_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": "all-linear"}),
    # ---------------------------------------------------------------- Falcon (rotary)
    case("falcon-small-fp32-adamw-b2-s256", FALCON_SMALL, batch=2, seq=256, attention="sdpa-math",
         description="Multi-query (one key/value head): SDPA takes its math path; parallel attention and MLP."),
    case("falcon-new-small-ampbf16-adamw-ckpt-b2-s256", FALCON_NEW_SMALL, batch=2, seq=256, precision="amp-bf16",
         checkpointing="full", description="New decoder architecture: key/value groups broadcast, ln_attn and ln_mlp."),
    case("falcon-new-small-bf16-lora-default-b2-s256", FALCON_NEW_SMALL, batch=2, seq=256, precision="bf16-pure",
         lora={"r": 8, "target_modules": None}, description="PEFT's default target for falcon: query_key_value."),
    # ---------------------------------------------------------------- vision-language models (real)
    *[vlm_case(f"llava-small-{precision}-{tower}-tower-{images}img-b2-s128", LLAVA_SMALL, images=images, tower=tower,
               precision=precision,
               description="LLaVA: CLIP tower (vision_feature_layer -2: the last layer gets no gradient), "
               "two-layer projector, 64 tokens per image." if images == 1 and tower == "frozen" else "")
      for precision, tower, images in (("fp32", "frozen", 1), ("fp32", "frozen", 4), ("fp32", "trained", 1),
                                       ("fp32", "trained", 4), ("bf16-pure", "trained", 1))],
    vlm_case("llava-small-fp32-trained-tower-ckpt-4img-b2-s128", LLAVA_SMALL, images=4, tower="trained",
             checkpointing="full", description="Full checkpointing reaches the CLIP encoder too."),
    *[vlm_case(f"qwen25vl-small-{precision}-{tower}-tower-{images}img-{h}x{w}-b2-s128", QWEN2_5_VL_SMALL, images=images,
               tower=tower, precision=precision, height=h, width=w,
               description="Qwen2.5-VL: smart_resize to multiples of 28, window attention per span, merger."
               if (images, h, tower) == (1, 224, "frozen") else "")
      for precision, tower, images, h, w in (("fp32", "frozen", 1, 224, 224), ("fp32", "trained", 1, 224, 224),
                                             ("fp32", "trained", 4, 224, 224), ("fp32", "trained", 1, 448, 336),
                                             ("bf16-pure", "trained", 1, 448, 336))],
    vlm_case("qwen25vl-small-ampbf16-trained-tower-1img-224x224-b2-s128", QWEN2_5_VL_SMALL, images=1, tower="trained",
             precision="amp-bf16", height=224, width=224,
             description="CPU autocast: the Conv3d patch embedding saves its bf16 weight copy; softmax stays bf16."),
    vlm_case("qwen25vl-small-bf16-lora-projector-4img-448x336-b2-s128", QWEN2_5_VL_SMALL, images=4, tower="frozen",
             precision="bf16-pure", height=448, width=336,
             lora={"r": 8, "target_modules": ["q_proj", "v_proj"]}, projector="trained",
             description="The common recipe: frozen tower, trained merger, LoRA on the language model."),
]
# fmt: on

import sys as _sys  # noqa: E402
from pathlib import Path as _Path  # noqa: E402

_sys.path.insert(0, str(_Path(__file__).resolve().parent))
from post_training_cases import post_training_cases  # noqa: E402  (TRL post-training modes)

CASES += post_training_cases(case, globals())
from encoder_corpus_cases import ENCODER_CASES  # noqa: E402  (the encoder families and their heads)

CASES += ENCODER_CASES
from vision_encoder_corpus_cases import VISION_ENCODER_CASES  # noqa: E402  (ViT, DINOv2, CLIP/SigLIP towers)

CASES += VISION_ENCODER_CASES
from encoder_decoder_corpus_cases import ENCODER_DECODER_CASES  # noqa: E402  (T5, flan-T5, mT5)

CASES += ENCODER_DECODER_CASES
from ppo_corpus_cases import ppo_cases  # noqa: E402  (verl's PPO and its critic)

CASES += ppo_cases(case)
from families_2026c_cases import families_2026c_cases  # noqa: E402  (Ministral 3, Mistral 4, DeepSeek-V3.2)

CASES += families_2026c_cases(case)
