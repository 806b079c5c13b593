"""Qwen3 and Qwen3-MoE (transformers/models/qwen3, models/qwen3_moe).

Qwen3 adds an RMSNorm over each query and key head (``q_norm``, ``k_norm``) before RoPE, and an
optional ``attention_bias`` on q, k, v and o; ``head_dim`` defaults to 128. Qwen3-MoE has the same
attention, routed experts of ``moe_intermediate_size`` and no shared expert; ``mlp_only_layers`` and
``decoder_sparse_step`` give dense layers as in Qwen2-MoE. PEFT converts Qwen-MoE's v4 target names
(``gate``, ``gate_proj``, ``up_proj``, ``down_proj``) to the router and fused experts for qwen3_moe
(transformers/conversion_mapping.py ``_MODEL_TO_CONVERSION_PATTERN``); it has no default targets.
"""

from __future__ import annotations

from ..architecture import Architecture
from .family import QWEN2_MOE_STYLE_TARGETS, DecoderFamily, common_decoder_fields
from .fields import ConfigFields
from .qwen2 import QWEN2_DEFAULTS, qwen_sliding_window, sparse_step_dense_layers

QWEN3_MOE_DEFAULTS = dict(
    vocab_size=151936,
    hidden_size=2048,
    intermediate_size=6144,
    num_hidden_layers=24,
    num_attention_heads=32,
    num_key_value_heads=4,
    max_position_embeddings=32768,
    tie_word_embeddings=False,
)
"""``Qwen3MoeConfig``'s defaults. It has no ``head_dim`` field: the attention reads ``getattr(config, "head_dim",
hidden_size // num_attention_heads)``, so a file without one gets hidden_size // heads (checked on the meta device;
the fuzz of benchmarks/fuzz_family_configs.py found 128 here)."""


class Qwen3(DecoderFamily):
    model_type = "qwen3"

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, {**QWEN2_DEFAULTS, "head_dim": 128})
        bias = fields.boolean("attention_bias", False)
        return Architecture(
            **common,
            **qwen_sliding_window(fields, common["num_hidden_layers"]),
            qk_norm=True,
            attention_qkv_bias=bias,
            attention_output_bias=bias,
        )


class Qwen3Moe(DecoderFamily):
    model_type = "qwen3_moe"
    lora_default_targets = None
    moe_lora_conversion = QWEN2_MOE_STYLE_TARGETS

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, QWEN3_MOE_DEFAULTS)
        bias = fields.boolean("attention_bias", False)
        dense = sparse_step_dense_layers(fields, common["num_hidden_layers"])
        dense_width = common["intermediate_size"]
        common["intermediate_size"] = fields.integer("moe_intermediate_size", 768)
        return Architecture(
            **common,
            **qwen_sliding_window(fields, common["num_hidden_layers"]),
            qk_norm=True,
            attention_qkv_bias=bias,
            attention_output_bias=bias,
            num_experts=fields.integer("num_experts", 128),
            num_experts_per_tok=fields.integer("num_experts_per_tok", 8),
            dense_layers=dense,
            dense_intermediate_size=dense_width,
        )
