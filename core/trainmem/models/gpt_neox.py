"""GPT-NeoX and Pythia (transformers/models/gpt_neox).

A fused ``attention.query_key_value`` laid out per head (``view(b, s, heads, 3·d).transpose(1, 2)``,
then ``chunk(3)``: q, k and v are views of it), partial rotary (``partial_rotary_factor``, from
``rotary_pct``, 0.25 by default: RoPE on ``q[..., :rotary_dim]``, then ``torch.cat`` with the rest, so q
and k are new heads-first tensors), LayerNorm with bias, a plain GELU MLP (``dense_h_to_4h``,
``dense_4h_to_h``) with biases, ``hidden_dropout`` on the embeddings and on both branches, and the
parallel residual (``use_parallel_residual``: ``x + attention(ln1(x)) + mlp(ln2(x))``). The head is
``lm_head``, untied by default. PEFT's default LoRA target: query_key_value.
"""

from __future__ import annotations

from ..architecture import Architecture
from .blocks import ModuleNames
from .family import DecoderFamily
from .fields import ConfigFields
from .gpt_layout import gpt_layout

GPT_NEOX_NAMES = ModuleNames(
    embed_tokens="embed_in",
    final_norm="final_layer_norm",
    qkv_proj="attention.query_key_value",
    o_proj="attention.dense",
    fc1="dense_h_to_4h",
    fc2="dense_4h_to_h",
)


class GPTNeoX(DecoderFamily):
    model_type = "gpt_neox"
    names = GPT_NEOX_NAMES
    lora_default_targets = ("query_key_value",)
    rope_concatenates = True

    def read_config(self, fields: ConfigFields) -> Architecture:
        heads = fields.integer("num_attention_heads", 64)
        bias = fields.boolean("attention_bias", True)
        dropout = fields.probability("hidden_dropout")
        rope = fields.rope_parameters()
        factor = rope.get("partial_rotary_factor")
        if factor is None:
            factor = fields.number("rotary_pct", 0.25, minimum=1e-9, maximum=1.0)
        elif isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
            raise fields.fail("rope_parameters.partial_rotary_factor", f"expected a number in (0, 1], got {factor!r}")
        return Architecture(**gpt_layout(
            heads=heads,
            attention_bias=bias,
            model_type="gpt_neox",
            vocab_size=fields.integer("vocab_size", 50432),
            hidden_size=fields.integer("hidden_size", 6144),
            num_hidden_layers=fields.layers(44),
            intermediate_size=fields.integer("intermediate_size", 24576),
            hidden_act=fields.activation("hidden_act", "gelu"),
            max_position_embeddings=fields.integer("max_position_embeddings", 2048),
            tie_word_embeddings=fields.boolean("tie_word_embeddings", False),
            attention_dropout=fields.probability("attention_dropout"),
            residual_dropout=dropout,
            embedding_dropout=dropout,
            partial_rotary_factor=float(factor),
            parallel_residual=fields.boolean("use_parallel_residual", True),
        ))
