"""Granite (transformers/models/granite): Llama with four multipliers.

``inputs_embeds * embedding_multiplier`` and ``hidden_states * residual_multiplier`` before each
residual add are Python-float products (a new tensor each, nothing saved); ``logits /
logits_scaling`` makes one more logits-sized tensor before the loss's fp32 upcast;
``attention_multiplier`` is the attention's scale (no tensor). PEFT has no default LoRA targets for
granite.
"""

from __future__ import annotations

from ..architecture import Architecture
from .family import DecoderFamily, common_decoder_fields
from .fields import ConfigFields
from .llama import LLAMA_DEFAULTS


class Granite(DecoderFamily):
    model_type = "granite"
    lora_default_targets = None

    def read_config(self, fields: ConfigFields) -> Architecture:
        bias = fields.boolean("attention_bias", False)
        return Architecture(
            **common_decoder_fields(fields, LLAMA_DEFAULTS),
            attention_qkv_bias=bias,
            attention_output_bias=bias,
            mlp_bias=fields.boolean("mlp_bias", False),
            embedding_multiplier=fields.number("embedding_multiplier", 1.0),
            residual_multiplier=fields.number("residual_multiplier", 1.0),
            logits_scaling=fields.number("logits_scaling", 1.0, minimum=1e-30),
        )
