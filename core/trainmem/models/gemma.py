"""Gemma 2 and Gemma 3 text models (transformers/models/gemma2, models/gemma3).

Both put four RMSNorms around each sub-block (``input_layernorm`` → attention →
``post_attention_layernorm``, ``pre_feedforward_layernorm`` → MLP → ``post_feedforward_layernorm``),
scale the embeddings by √h, tie the head, and use a GeGLU MLP (``gelu_pytorch_tanh``). Their RMSNorm
multiplies in fp32 by ``1 + weight`` before casting back (``Gemma2RMSNorm.forward``).

* Gemma 2 soft-caps the attention scores (``attn_logit_softcapping``, 50) and the logits
  (``final_logit_softcapping``, 30); transformers refuses SDPA with soft-capping, so it trains eager.
* Gemma 3 drops the soft-capping (``None`` by default), adds per-head q/k RMSNorms, alternates
  sliding-window and global layers (``layer_types``, every 6th global), and keeps one rotary table per
  layer type (``Gemma3RotaryEmbedding``: ``<type>_inv_freq`` buffers, one cos/sin pair per type per
  forward); its scaled embedding holds the scale as a one-element buffer
  (``Gemma3TextScaledWordEmbedding.embed_scale``). The multimodal ``gemma3`` config's language model is
  its ``text_config`` (read by the registry; the vision tower is not counted yet).
"""

from __future__ import annotations

from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import Sym
from .family import DecoderFamily, checked_layer_types, common_decoder_fields, sliding_window_fields
from .fields import ConfigFields


class GemmaProgram(LayerProgram):
    """Gemma's RMSNorm: ``(normalized * (1 + weight.float())).type_as(x)``."""

    def rms_norm(self, module: str, x: Sym, rows: int, width: int) -> Sym:
        tape = self.tape
        normalized = self._normalize_in_fp32(x, rows)
        weight = tape.to(self.parameter(module, width), "fp32")
        one_plus = tape.scale(weight)
        scaled = tape.mul(normalized, one_plus)
        tape.release(normalized, one_plus)
        out = tape.to(scaled, x.dtype)
        if out is not scaled:
            tape.release(scaled)
        return out


GEMMA2_DEFAULTS = dict(
    vocab_size=256000,
    hidden_size=2304,
    intermediate_size=9216,
    num_hidden_layers=26,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=256,
    max_position_embeddings=8192,
    tie_word_embeddings=True,
    hidden_act="gelu_pytorch_tanh",
)

GEMMA3_TEXT_DEFAULTS = dict(
    vocab_size=262_208,
    hidden_size=2304,
    intermediate_size=9216,
    num_hidden_layers=26,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=256,
    max_position_embeddings=131_072,
    tie_word_embeddings=True,
    hidden_act="gelu_pytorch_tanh",
)


class Gemma2(DecoderFamily):
    model_type = "gemma2"

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, GEMMA2_DEFAULTS)
        bias = fields.boolean("attention_bias", False)
        layers = common["num_hidden_layers"]
        alternating = tuple(i for i in range(layers) if (i + 1) % 2)  # Gemma2Config: every other layer slides
        return Architecture(
            **common,
            **sliding_window_fields(fields, layers, 4096, alternating),
            norms_per_layer=4,
            attention_qkv_bias=bias,
            attention_output_bias=bias,
            scale_embeddings=True,
            final_logit_softcapping=fields.optional_number("final_logit_softcapping", minimum=1e-9)
            if "final_logit_softcapping" in fields.config
            else 30.0,
            attn_logit_softcapping=fields.optional_number("attn_logit_softcapping", minimum=1e-9)
            if "attn_logit_softcapping" in fields.config
            else 50.0,
        )

    def program(self) -> type[LayerProgram]:
        return GemmaProgram



class Gemma3Text(DecoderFamily):
    model_type = "gemma3_text"

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, GEMMA3_TEXT_DEFAULTS)
        bias = fields.boolean("attention_bias", False)
        layers = common["num_hidden_layers"]
        layer_types = checked_layer_types(fields, layers)
        if not layer_types:
            pattern = fields.integer("sliding_window_pattern", 6)
            layer_types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]
        return Architecture(
            **common,
            norms_per_layer=4,
            qk_norm=True,
            attention_qkv_bias=bias,
            attention_output_bias=bias,
            scale_embeddings=True,
            final_logit_softcapping=fields.optional_number("final_logit_softcapping", minimum=1e-9),
            attn_logit_softcapping=fields.optional_number("attn_logit_softcapping", minimum=1e-9),
            rope_sets=len(set(layer_types)),
            **sliding_window_fields(
                fields, layers, 4096, tuple(i for i, kind in enumerate(layer_types) if kind == "sliding_attention")
            ),
            embedding_scale_buffer=True,
        )

    def program(self) -> type[LayerProgram]:
        return GemmaProgram
