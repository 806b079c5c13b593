"""OLMo 2 (transformers/models/olmo2).

Post-norm layers: the attention and MLP outputs are normed before each residual add
(``post_attention_layernorm``, ``post_feedforward_layernorm``; no norm on the sub-blocks' inputs),
and q and k are RMS-normed over the whole projection (``q_norm`` of a·d, ``k_norm`` of k·d features)
before they are split into heads. ``Olmo2RMSNorm`` multiplies by the weight in fp32 and casts the
product back (``(self.weight * hidden_states).to(input_dtype)``), and its RoPE casts the rotated q and
k back to their dtype (``q_embed.to(q_type)``). PEFT has no default LoRA targets for olmo2.
"""

from __future__ import annotations

from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import Sym
from .family import DecoderFamily, common_decoder_fields
from .fields import ConfigFields
from .norm_programs import WeightTimesFp32RMSNorm

OLMO2_DEFAULTS = dict(
    vocab_size=50304,
    hidden_size=4096,
    intermediate_size=11008,
    num_hidden_layers=32,
    num_attention_heads=32,
    max_position_embeddings=2048,
    tie_word_embeddings=False,
)


class Olmo2Program(WeightTimesFp32RMSNorm):
    """``Olmo2RMSNorm`` (the weight times the fp32 normalized tensor, then the cast) and Olmo 2's RoPE."""

    def _rope(self, q: Sym) -> Sym:
        """``apply_rotary_pos_emb`` ends with ``q_embed.to(q_type)``."""
        rotated = super()._rope(q)
        out = self.tape.to(rotated, q.dtype)
        if out is not rotated:
            self.tape.release(rotated)
        return out


class Olmo2(DecoderFamily):
    model_type = "olmo2"
    lora_default_targets = None

    def read_config(self, fields: ConfigFields) -> Architecture:
        bias = fields.boolean("attention_bias", False)
        return Architecture(
            **common_decoder_fields(fields, OLMO2_DEFAULTS),
            attention_qkv_bias=bias,
            attention_output_bias=bias,
            qk_norm=True,
            qk_norm_over="projection",
            norm_position="post",
        )

    def program(self) -> type[LayerProgram]:
        return Olmo2Program
