"""BART (``BartForConditionalGeneration``, transformers/models/bart): a post-LN encoder-decoder.

``model.shared`` (``BartScaledWordEmbedding``: times ``sqrt(d_model)`` when ``scale_embedding``, else 1.0)
embeds the source tokens for ``model.encoder`` and ``shift_tokens_right(labels)`` for ``model.decoder``.
Each stack adds its own learned positions (``BartLearnedPositionalEmbedding``: ``max_position_embeddings
+ 2`` rows, the ids offset by 2), normalises with ``layernorm_embedding`` and applies dropout. Layers are
post-LN (``x = LayerNorm(x + dropout(sub_block(x)))``), with biases on every linear and a plain GELU MLP
(``fc1``, activation, ``activation_dropout``, ``fc2``); a decoder layer adds ``encoder_attn`` between
self-attention and the MLP. No final norm; the ``lm_head`` is tied to ``shared`` and
``final_logits_bias`` (a (1, V) buffer) is added to the logits. The decoder's positions bound the target
length: ``max_target_positions`` = ``max_position_embeddings``.

Counting rules (checked against transformers 5.24 on the meta device in tests/test_encoder_decoders.py):

  shared          V×h
  positions       (P + 2)×h per stack; layernorm_embedding 2h per stack
  attention       q, k, v, out_proj: h×h + h each
  MLP             fc1 h×f + f, fc2 f×h + h
  norms           LayerNorm 2h after each sub-block (2 per encoder layer, 3 per decoder layer)

PEFT's default LoRA targets for ``bart``: q_proj, v_proj.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..architecture import Architecture
from . import blocks
from .blocks import ParameterTensor
from .fields import ConfigFields
from .t5 import T5, T5Names

if TYPE_CHECKING:
    from ..layers import LayerProgram

#: BartConfig's defaults (those of bart-large).
BART_DEFAULTS = dict(vocab_size=50265, d_model=1024, layers=12, heads=16, ffn=4096, max_position_embeddings=1024)

#: The block layout BART and Whisper share: encoder-decoder layers with cross-attention, LayerNorm, a plain
#: (fc1, activation, fc2) MLP, biases on the linears, learned positions.
BART_LAYOUT = dict(
    cross_attention=True,
    mlp="plain",
    norm="layernorm",
    attention_qkv_bias=True,
    attention_output_bias=True,
    mlp_bias=True,
    position_embedding="learned",
)

#: Positions a BartLearnedPositionalEmbedding keeps besides max_position_embeddings (ids are offset by 2).
POSITION_OFFSET = 2


def read_shared_widths(fields: ConfigFields, defaults: dict) -> tuple[int, int]:
    """(heads, ffn): the decoder's ``decoder_attention_heads`` and ``decoder_ffn_dim``, which the encoder's must
    equal (one width per model is modelled), after refusing LayerDrop (``encoder_layerdrop`` /
    ``decoder_layerdrop``: a random number of layers per step). BartConfig's and WhisperConfig's fields."""
    heads = fields.integer("decoder_attention_heads", defaults["heads"])
    ffn = fields.integer("decoder_ffn_dim", defaults["ffn"])
    if fields.integer("encoder_attention_heads", defaults["heads"]) != heads:
        raise fields.fail("encoder_attention_heads", "must equal decoder_attention_heads (different ones are not modelled yet)")
    if fields.integer("encoder_ffn_dim", defaults["ffn"]) != ffn:
        raise fields.fail("encoder_ffn_dim", "must equal decoder_ffn_dim (different ones are not modelled yet)")
    for name in ("encoder_layerdrop", "decoder_layerdrop"):
        if fields.probability(name, 0.0) > 0:
            raise fields.fail(name, "LayerDrop (a random number of layers per step) is not modelled; set it to 0")
    return heads, ffn


def _names() -> T5Names:
    return T5Names(
        embed_tokens="model.shared",
        embed_positions="model.decoder.embed_positions",
        embedding_norm="model.decoder.layernorm_embedding",
        final_norm="",
        lm_head="lm_head",
        input_norm="self_attn_layer_norm",
        post_attention_norm="final_layer_norm",
        q_proj="self_attn.q_proj",
        k_proj="self_attn.k_proj",
        v_proj="self_attn.v_proj",
        o_proj="self_attn.out_proj",
        mlp="",
        fc1="fc1",
        fc2="fc2",
        cross_q="encoder_attn.q_proj",
        cross_k="encoder_attn.k_proj",
        cross_v="encoder_attn.v_proj",
        cross_o="encoder_attn.out_proj",
        cross_norm="encoder_attn_layer_norm",
        relative_bias="",
    )


BART_NAMES = _names()


class Bart(T5):
    """BART's reader, inventory and post-LN program on top of the T5 encoder-decoder machinery."""

    model_type = "bart"
    names: T5Names = BART_NAMES
    encoder_names: T5Names = BART_NAMES
    lora_default_targets: Optional[tuple[str, ...]] = ("q_proj", "v_proj")
    has_final_norm = False
    final_logits_bias = True

    # ------------------------------------------------------------------ config
    def read_config(self, fields: ConfigFields) -> Architecture:
        d = BART_DEFAULTS
        hidden = fields.integer("d_model", d["d_model"], aliases=("hidden_size",))
        encoder_layers = fields.integer("encoder_layers", d["layers"], maximum=1024)
        decoder_layers = fields.integer("decoder_layers", d["layers"], maximum=1024)
        heads, ffn = read_shared_widths(fields, d)
        if not fields.boolean("tie_word_embeddings", True):
            # transformers 5 then unties every _tied_weights_keys entry: separate encoder and decoder tables
            # next to an unused shared one, a layout trainmem does not model.
            raise fields.fail("tie_word_embeddings", "false is not modelled for bart (separate encoder, decoder and head tables)")
        positions = fields.integer("max_position_embeddings", d["max_position_embeddings"])
        dropout = fields.probability("dropout", 0.1)
        return Architecture(
            model_type=fields.string("model_type"),
            vocab_size=fields.integer("vocab_size", d["vocab_size"]),
            hidden_size=hidden,
            num_hidden_layers=decoder_layers,
            encoder_layers=encoder_layers,
            **BART_LAYOUT,
            num_attention_heads=heads,
            intermediate_size=ffn,
            hidden_act=fields.activation("activation_function", "gelu"),
            max_position_embeddings=positions,
            max_target_positions=positions,
            tie_word_embeddings=True,
            scale_embeddings=fields.boolean("scale_embedding", False),
            embedding_norm=True,
            embedding_dropout=dropout,
            residual_dropout=dropout,
            attention_dropout=fields.probability("attention_dropout", 0.0),
            mlp_activation_dropout=fields.probability("activation_dropout", 0.0),
        )

    # ------------------------------------------------------------------ inventory
    def _positions(self, arch: Architecture, stack: str) -> list[ParameterTensor]:
        h = arch.hidden_size
        return [
            ParameterTensor(f"model.{stack}.embed_positions.weight", "embeddings", (arch.max_position_embeddings + POSITION_OFFSET, h)),
            *blocks.norm(f"model.{stack}.layernorm_embedding", arch, h),
        ]

    def embedding(self, arch: Architecture) -> list[ParameterTensor]:
        return [ParameterTensor("model.shared.weight", "embeddings", (arch.vocab_size, arch.hidden_size)), *self._positions(arch, "decoder")]

    def block(self, arch: Architecture, names: T5Names, cross_attention: bool) -> list[ParameterTensor]:
        h, f = arch.hidden_size, arch.intermediate_size
        tensors = self._self_attention(arch, names) + blocks.norm(names.input_norm, arch, h)
        if cross_attention:
            tensors += self._cross_attention(names, h)
            tensors += blocks.norm(names.cross_norm, arch, h)
        tensors += blocks.linear(names.fc1, "mlp", h, f, True) + blocks.linear(names.fc2, "mlp", f, h, True)
        return tensors + blocks.norm(names.post_attention_norm, arch, h)

    def _self_attention(self, arch: Architecture, names: T5Names) -> list[ParameterTensor]:
        return blocks.attention(arch, names)

    def _cross_attention(self, names: T5Names, h: int) -> list[ParameterTensor]:
        """``encoder_attn``: q, k, v, out_proj, h×h with a bias each."""
        tensors: list[ParameterTensor] = []
        for module in (names.cross_q, names.cross_k, names.cross_v, names.cross_o):
            tensors += blocks.linear(module, "attention", h, h, True)
        return tensors

    def head(self, arch: Architecture) -> list[ParameterTensor]:
        if arch.tie_word_embeddings:
            return []
        return [ParameterTensor("lm_head.weight", "lm_head", (arch.vocab_size, arch.hidden_size), (arch.hidden_size, arch.vocab_size))]

    def encoder_prelude(self, arch: Architecture) -> list[ParameterTensor]:
        return [t._replace(group="encoder") for t in self._positions(arch, "encoder")]

    def encoder_postlude(self, arch: Architecture) -> list[ParameterTensor]:
        return []

    # ------------------------------------------------------------------ the tape
    def program(self) -> type[LayerProgram]:
        from ..encoder_decoder.program import BartLayerProgram

        return BartLayerProgram
