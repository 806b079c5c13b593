"""Whisper (``WhisperForConditionalGeneration``, transformers/models/whisper): a pre-LN speech encoder-decoder.

``model.encoder`` reads ``input_features`` (b × num_mel_bins × 3000 fp32 log-mel frames: the feature extractor
always pads to 30 s, and ``WhisperEncoder.forward`` refuses any other length than ``max_source_positions ·
conv1.stride · conv2.stride``): ``gelu(conv1(x))`` (kernel 3, padding 1), ``gelu(conv2(x))`` (kernel 3, stride 2:
3000 frames → ``max_source_positions`` = 1500 positions), ``+ embed_positions`` (a sinusoidal (1500, h) table,
``requires_grad_(False)`` in ``WhisperEncoder.__init__``: a frozen parameter, no gradient, no optimizer state),
dropout, the pre-LN layers, ``layer_norm``. So the encoder's length is fixed by the config, not by the batch.
``model.decoder``: ``embed_tokens(decoder_input_ids)`` (``shift_tokens_right(labels)``; ``embed_scale`` is
computed but not applied in 5.24) ``+ embed_positions.weight[position_ids]`` (learned, ``max_target_positions``
rows, no offset), dropout, pre-LN layers with cross-attention, ``layer_norm``; ``proj_out`` (no bias) is tied to
``embed_tokens`` (``_tied_weights_keys``) unless ``tie_word_embeddings`` is false.

Layers (``WhisperEncoderLayer`` / ``WhisperDecoderLayer``): ``x + dropout(attn(LayerNorm(x)))``, (decoder:
``x + dropout(encoder_attn(LayerNorm(x), encoder_output))``,) ``x + dropout(fc2(activation_dropout(gelu(fc1(
LayerNorm(x))))))``. ``WhisperAttention``: q_proj, v_proj, out_proj with biases, ``k_proj`` without.

Counting rules (checked against transformers 5.24 on the meta device in tests/test_whisper.py):

  decoder         embed_tokens V×h, embed_positions T×h, layer_norm 2h, proj_out V×h when untied
  encoder         conv1 h×mel×3 + h, conv2 h×h×3 + h, embed_positions S×h (frozen), layer_norm 2h
  attention       q, v, out_proj h×h + h; k_proj h×h
  MLP             fc1 h×f + f, fc2 f×h + h
  norms           LayerNorm 2h before each sub-block (2 per encoder layer, 3 per decoder layer)

PEFT 0.21 has no default LoRA targets for ``whisper`` (``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``):
``target_modules`` must be given, as PEFT requires (the usual choice: q_proj, v_proj).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from ..architecture import Architecture
from . import blocks
from .blocks import ParameterTensor
from .bart import BART_LAYOUT, BART_NAMES, Bart, read_shared_widths
from .fields import ConfigFields
from .t5 import T5Names

if TYPE_CHECKING:
    from ..layers import LayerProgram

#: WhisperConfig's defaults (transformers 5.24 configuration_whisper.py; those of whisper-tiny but the vocabulary).
WHISPER_DEFAULTS = dict(
    vocab_size=51865, num_mel_bins=80, layers=4, heads=6, ffn=1536, d_model=384,
    max_source_positions=1500, max_target_positions=448,
)

#: ``nn.Conv1d`` kernel size of both front-end convolutions, and the stride of the second (WhisperEncoder.__init__).
CONV_KERNEL = 3
CONV2_STRIDE = 2

#: The group of the encoder's sinusoidal position table: a parameter with ``requires_grad = False``.
FROZEN = "frozen"


WHISPER_NAMES: T5Names = replace(
    BART_NAMES,  # BART's block layout; only the ends differ
    embed_tokens="model.decoder.embed_tokens",
    embedding_norm="",
    final_norm="model.decoder.layer_norm",
    lm_head="proj_out",
)


class Whisper(Bart):
    """Whisper's reader, inventory and pre-LN program on the encoder-decoder machinery (trainmem.encoder_decoder)."""

    model_type = "whisper"
    names: T5Names = WHISPER_NAMES
    encoder_names: T5Names = WHISPER_NAMES
    lora_default_targets: Optional[tuple[str, ...]] = None  # PEFT 0.21 has no default for whisper: give target_modules
    has_final_norm = True
    final_norm_dropout = False  # WhisperDecoder / WhisperEncoder: layer_norm, no dropout after it
    final_logits_bias = False
    position_offset = 0  # WhisperPositionalEmbedding: weight[position_ids], no offset
    embedding_scale_op = False  # the decoder's embed_scale is not applied (transformers 5.24)

    # ------------------------------------------------------------------ config
    def read_config(self, fields: ConfigFields) -> Architecture:
        d = WHISPER_DEFAULTS
        heads, ffn = read_shared_widths(fields, d)
        if fields.boolean("apply_spec_augment", False) and (
            fields.probability("mask_time_prob", 0.05) > 0 or fields.probability("mask_feature_prob", 0.0) > 0
        ):
            # WhisperModel._mask_input_features writes zeros into input_features in place (boolean masks of the
            # batch's shape): small, but not modelled.
            raise fields.fail("apply_spec_augment", "SpecAugment masking of the input features is not modelled; set it to false")
        target_positions = fields.integer("max_target_positions", d["max_target_positions"])
        dropout = fields.probability("dropout", 0.0)
        return Architecture(
            model_type=fields.string("model_type"),
            vocab_size=fields.integer("vocab_size", d["vocab_size"]),
            hidden_size=fields.integer("d_model", d["d_model"], aliases=("hidden_size",)),
            num_hidden_layers=fields.integer("decoder_layers", d["layers"], maximum=1024),
            encoder_layers=fields.integer("encoder_layers", d["layers"], maximum=1024),
            **BART_LAYOUT,  # attention_qkv_bias: q_proj and v_proj; k_proj has none (the inventory's rule)
            num_attention_heads=heads,
            intermediate_size=ffn,
            hidden_act=fields.activation("activation_function", "gelu"),
            max_position_embeddings=target_positions,
            max_target_positions=target_positions,
            tie_word_embeddings=fields.boolean("tie_word_embeddings", True),
            embedding_dropout=dropout,
            residual_dropout=dropout,
            attention_dropout=fields.probability("attention_dropout", 0.0),
            mlp_activation_dropout=fields.probability("activation_dropout", 0.0),
            num_mel_bins=fields.integer("num_mel_bins", d["num_mel_bins"]),
            max_source_positions=fields.integer("max_source_positions", d["max_source_positions"]),
        )

    # ------------------------------------------------------------------ inventory
    def embedding(self, arch: Architecture) -> list[ParameterTensor]:
        h = arch.hidden_size
        return [
            ParameterTensor("model.decoder.embed_tokens.weight", "embeddings", (arch.vocab_size, h)),
            ParameterTensor("model.decoder.embed_positions.weight", "embeddings", (arch.max_position_embeddings, h)),
        ]

    def _self_attention(self, arch: Architecture, names: T5Names) -> list[ParameterTensor]:
        return self._attention(names.q_proj, names.k_proj, names.v_proj, names.o_proj, arch.hidden_size)

    def _cross_attention(self, names: T5Names, h: int) -> list[ParameterTensor]:
        return self._attention(names.cross_q, names.cross_k, names.cross_v, names.cross_o, h)

    @staticmethod
    def _attention(q: str, k: str, v: str, o: str, h: int) -> list[ParameterTensor]:
        """``WhisperAttention``: ``k_proj`` has no bias (``nn.Linear(embed_dim, embed_dim, bias=False)``)."""
        return (
            blocks.linear(q, "attention", h, h, True) + blocks.linear(k, "attention", h, h, False)
            + blocks.linear(v, "attention", h, h, True) + blocks.linear(o, "attention", h, h, True)
        )

    def head(self, arch: Architecture) -> list[ParameterTensor]:
        tensors = blocks.norm(self.names.final_norm, arch, arch.hidden_size)
        if not arch.tie_word_embeddings:
            tensors.append(
                ParameterTensor("proj_out.weight", "lm_head", (arch.vocab_size, arch.hidden_size), (arch.hidden_size, arch.vocab_size))
            )
        return tensors

    def encoder_prelude(self, arch: Architecture) -> list[ParameterTensor]:
        """The conv front end and the frozen sinusoidal positions."""
        h, mel = arch.hidden_size, arch.num_mel_bins
        return [
            ParameterTensor("model.encoder.conv1.weight", "encoder", (h, mel, CONV_KERNEL)),
            ParameterTensor("model.encoder.conv1.bias", "encoder", (h,)),
            ParameterTensor("model.encoder.conv2.weight", "encoder", (h, h, CONV_KERNEL)),
            ParameterTensor("model.encoder.conv2.bias", "encoder", (h,)),
            ParameterTensor("model.encoder.embed_positions.weight", FROZEN, (arch.max_source_positions, h)),
        ]

    def encoder_postlude(self, arch: Architecture) -> list[ParameterTensor]:
        return [t._replace(group="encoder") for t in blocks.norm("model.encoder.layer_norm", arch, arch.hidden_size)]

    # ------------------------------------------------------------------ the tape
    def program(self) -> type[LayerProgram]:
        from ..encoder_decoder.program import WhisperLayerProgram

        return WhisperLayerProgram
