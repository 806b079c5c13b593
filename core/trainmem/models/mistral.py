"""Mistral and Mixtral (transformers/models/mistral, models/mixtral).

Mistral is Llama without biases, with Mistral-7B's defaults and an optional sliding window (a mask:
it changes what the eager path computes, not the shapes). Mixtral replaces every MLP by
``num_local_experts`` SwiGLU experts, top-k routed; transformers 5 stores them as two fused 3-D
parameters (``experts.gate_up_proj``, ``experts.down_proj``) and routes with ``MixtralTopKRouter``
(not an ``nn.Linear``). PEFT converts Mixtral's v4 target names (``gate``, ``w1``, ``w3``, ``w2``)
to the router and the fused experts.
"""

from __future__ import annotations

from ..architecture import Architecture
from .family import MIXTRAL_STYLE_MOE_TARGETS, DecoderFamily, common_decoder_fields, sliding_window_fields
from .fields import ConfigFields

#: MistralConfig's own defaults (those of Mistral-7B), shared by MixtralConfig.
MISTRAL_7B_DEFAULTS = dict(
    vocab_size=32000,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    max_position_embeddings=4096 * 32,
    tie_word_embeddings=False,
)


class Mistral(DecoderFamily):
    model_type = "mistral"

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, MISTRAL_7B_DEFAULTS)
        return Architecture(**common, **sliding_window_fields(fields, common["num_hidden_layers"], 4096))


class Mixtral(DecoderFamily):
    model_type = "mixtral"
    moe_lora_conversion = MIXTRAL_STYLE_MOE_TARGETS
    lora_default_targets = None
    """PEFT's mapping lists q_proj, v_proj for mixtral, but peft 0.21's MoE conversion empties the target
    list before the default applies (``_convert_peft_config_moe``: ``set(target_modules or [])``), so
    ``get_peft_model`` fails without explicit targets; trainmem asks for them too."""

    def read_config(self, fields: ConfigFields) -> Architecture:
        experts = fields.integer("num_local_experts", 8)
        common = common_decoder_fields(fields, MISTRAL_7B_DEFAULTS)
        return Architecture(
            **common,
            **sliding_window_fields(fields, common["num_hidden_layers"], None),
            num_experts=experts,
            num_experts_per_tok=fields.integer("num_experts_per_tok", 2),
        )
