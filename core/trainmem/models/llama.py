"""Llama (``LlamaForCausalLM``, transformers/models/llama): the reference decoder layout.

RMSNorm before attention and MLP, RoPE, grouped-query attention, SwiGLU MLP. ``attention_bias``
puts a bias on q, k, v and o; ``mlp_bias`` on the three MLP projections. PEFT's default LoRA
targets: q_proj, v_proj.
"""

from __future__ import annotations

from ..architecture import Architecture
from .family import DecoderFamily, common_decoder_fields
from .fields import ConfigFields

#: LlamaConfig's defaults (those of Llama-2-7B).
LLAMA_DEFAULTS = dict(
    vocab_size=32000,
    hidden_size=4096,
    intermediate_size=11008,
    num_hidden_layers=32,
    num_attention_heads=32,
    max_position_embeddings=2048,
    tie_word_embeddings=False,
)


class Llama(DecoderFamily):
    model_type = "llama"

    def read_config(self, fields: ConfigFields) -> Architecture:
        attention_bias = fields.boolean("attention_bias", False)
        return Architecture(
            **common_decoder_fields(fields, LLAMA_DEFAULTS),
            attention_qkv_bias=attention_bias,
            attention_output_bias=attention_bias,
            mlp_bias=fields.boolean("mlp_bias", False),
        )
