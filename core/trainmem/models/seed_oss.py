"""Seed-OSS (``seed_oss``, ByteDance Seed-OSS-36B; transformers/models/seed_oss, transformers 5.24).

Llama's layer with a bias on q, k and v (``attention_bias``, true by default) and a separate switch for
``o_proj``'s (``attention_out_bias``, false), an explicit ``head_dim`` (128: 80 query heads of a 5120-wide
stream), and dropout on each sub-block's output (``residual_dropout`` 0.1 by default: after ``o_proj`` in
``SeedOssAttention.forward`` and after ``down_proj`` in ``SeedOssMLP.forward``, before the residual add) on
top of ``attention_dropout`` (0.1 by default). The config class's dropouts are training defaults the
checkpoints keep (Seed-OSS-36B's config.json: 0.1 and 0.1): with attention dropout, CPU SDPA runs its math
path. PEFT 0.21 has no default LoRA targets for seed_oss.
"""

from __future__ import annotations

from ..architecture import Architecture
from .family import DecoderFamily, common_decoder_fields
from .fields import ConfigFields

SEED_OSS_DEFAULTS = dict(
    vocab_size=155136,
    hidden_size=4096,
    intermediate_size=27648,
    num_hidden_layers=64,
    num_attention_heads=80,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=524288,
    tie_word_embeddings=False,
)
"""``SeedOssConfig``'s defaults."""


class SeedOss(DecoderFamily):
    model_type = "seed_oss"
    lora_default_targets = None

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, SEED_OSS_DEFAULTS)
        common["attention_dropout"] = fields.probability("attention_dropout", 0.1)
        return Architecture(
            **common,
            attention_qkv_bias=fields.boolean("attention_bias", True),
            attention_output_bias=fields.boolean("attention_out_bias", False),
            mlp_bias=fields.boolean("mlp_bias", False),
            residual_dropout=fields.probability("residual_dropout", 0.1),
        )
