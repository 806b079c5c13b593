"""T5, T5 v1.1 / flan-T5 and mT5 (``T5ForConditionalGeneration``, transformers/models/t5, models/mt5).

An encoder-decoder: ``shared`` embeds the source tokens for the encoder stack (``encoder.block.N``) and
the target tokens (``decoder_input_ids = _shift_right(labels)``) for the decoder stack
(``decoder.block.N``), whose layers attend over the encoder's output. trainmem's decoder path
(``simulate.py``) runs the decoder; the encoder is a stack before it (``trainmem.encoder_decoder``).
The :class:`~trainmem.architecture.Architecture` a T5 config yields is the *decoder's*
(``num_hidden_layers`` = ``num_decoder_layers``) with ``encoder_layers`` = ``num_layers``.

Layout (transformers 5.24 ``T5Block``, ``T5Attention``, ``T5LayerFF``), each checked on the meta device
in tests/test_encoder_decoders.py:

  shared        V×h (the embedding of both stacks and, in transformers 5.24, the lm_head: ``T5Config``
                sets ``tie_word_embeddings = True`` whatever the file says; the file's ``false`` only turns
                off the ``d_model**-0.5`` scaling of the decoder output, ``scale_decoder_outputs``)
  attention     q, k, v: h×(a·d_kv), o: (a·d_kv)×h, no biases; ``d_kv`` is independent of h/a
  relative bias the first layer of each stack has ``relative_attention_bias`` (buckets × a); the other
                layers reuse the bias it computes (``position_bias`` handed down the stack)
  feed-forward  ``DenseReluDense``: wi h×d_ff, wo d_ff×h (``relu``), or wi_0, wi_1, wo (``gated-gelu``,
                T5 v1.1, flan-T5, mT5: ``gelu_new``)
  norms         ``T5LayerNorm`` = RMSNorm (weight only, variance in fp32) before each sub-layer, and a
                ``final_layer_norm`` per stack
  decoder layer self-attention, cross-attention (``EncDecAttention``), feed-forward: three norms

mT5 is the same code (``MT5Config`` also ties the head; its model never scales the decoder output).
PEFT's default LoRA targets for both: q, v.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from ..architecture import Architecture
from . import blocks
from .blocks import ModuleNames, ParameterTensor
from .family import DecoderFamily
from .fields import ConfigFields

if TYPE_CHECKING:
    from ..layers import LayerProgram

#: T5Config's defaults (those of t5-small).
T5_DEFAULTS = dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
                   feed_forward_proj="relu", relative_attention_num_buckets=32)
#: MT5Config's defaults.
MT5_DEFAULTS = dict(vocab_size=250112, d_model=512, d_kv=64, d_ff=1024, num_layers=8, num_heads=6,
                    feed_forward_proj="gated-gelu", relative_attention_num_buckets=32)


@dataclass(frozen=True)
class T5Names(ModuleNames):
    """Module paths of a T5 block (relative to ``decoder.block.N`` or ``encoder.block.N``)."""

    cross_q: str = "layer.1.EncDecAttention.q"
    cross_k: str = "layer.1.EncDecAttention.k"
    cross_v: str = "layer.1.EncDecAttention.v"
    cross_o: str = "layer.1.EncDecAttention.o"
    cross_norm: str = "layer.1.layer_norm"
    relative_bias: str = "layer.0.SelfAttention.relative_attention_bias"
    embedding_norm: str = ""
    """The LayerNorm over a stack's summed embeddings (BART's ``layernorm_embedding``; T5 has none)."""

    def module_paths(self) -> tuple[str, ...]:
        return (*super().module_paths(), self.cross_q, self.cross_k, self.cross_v, self.cross_o, self.cross_norm)


def _names(feed_forward: int) -> T5Names:
    """The names of a block whose feed-forward is sub-layer ``feed_forward`` (1 in the encoder, 2 in the decoder)."""
    return T5Names(
        embed_tokens="shared",
        final_norm="decoder.final_layer_norm",
        lm_head="lm_head",
        input_norm="layer.0.layer_norm",
        post_attention_norm=f"layer.{feed_forward}.layer_norm",
        q_proj="layer.0.SelfAttention.q",
        k_proj="layer.0.SelfAttention.k",
        v_proj="layer.0.SelfAttention.v",
        o_proj="layer.0.SelfAttention.o",
        mlp=f"layer.{feed_forward}.DenseReluDense",
        gate_proj="wi_0",
        up_proj="wi_1",
        down_proj="wo",
        fc1="wi",
        fc2="wo",
    )


DECODER_NAMES = _names(2)
ENCODER_NAMES = _names(1)


def encoder_architecture(decoder: Architecture) -> Architecture:
    """The encoder stack's layers as an Architecture: the decoder's shapes, bidirectional, no cross-attention."""
    return decoder.model_copy(
        update={"num_hidden_layers": decoder.encoder_layers, "encoder_layers": 0, "cross_attention": False,
                "bidirectional": True}
    )


class T5(DecoderFamily):
    model_type = "t5"
    names: T5Names = DECODER_NAMES
    encoder_names: T5Names = ENCODER_NAMES
    lora_default_targets: Optional[tuple[str, ...]] = ("q", "v")
    eager_softmax_in_fp32 = False  # T5's eager_attention_forward: softmax in the scores' dtype
    defaults = T5_DEFAULTS
    is_encoder_decoder = True
    """The Architecture is the decoder; the encoder is read from the same config (``encoder_*`` methods)."""
    has_final_norm = True
    """The decoder stack ends with a norm (T5's ``final_layer_norm``; BART has none)."""
    final_logits_bias = False
    """A (1, V) buffer added to the logits (BART)."""
    scales_decoder_output = True
    """``T5ForConditionalGeneration`` scales the decoder output when the file does not untie the head (mT5 never)."""

    # ------------------------------------------------------------------ config
    def read_config(self, fields: ConfigFields) -> Architecture:
        d = self.defaults
        layers = fields.integer("num_layers", d["num_layers"], maximum=1024, aliases=("num_hidden_layers",))
        decoder_layers = fields.optional_integer("num_decoder_layers", maximum=1024) or layers
        projection = fields.string("feed_forward_proj", d["feed_forward_proj"])
        parts = projection.split("-")
        if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated") or not parts[-1]:
            raise fields.fail("feed_forward_proj", f"must be 'ACT' or 'gated-ACT' (e.g. 'relu', 'gated-gelu'), got {projection!r}")
        activation = "gelu_new" if projection == "gated-gelu" else parts[-1]
        dropout = fields.probability("dropout_rate", 0.1)
        untied = fields.config.get("tie_word_embeddings") is False
        return Architecture(
            model_type=fields.string("model_type"),
            vocab_size=fields.integer("vocab_size", d["vocab_size"]),
            hidden_size=fields.integer("d_model", d["d_model"], aliases=("hidden_size",)),
            num_hidden_layers=decoder_layers,
            encoder_layers=layers,
            cross_attention=True,
            num_attention_heads=fields.integer("num_heads", d["num_heads"], aliases=("num_attention_heads",)),
            head_dim=fields.integer("d_kv", d["d_kv"], aliases=("head_dim",)),
            intermediate_size=fields.integer("d_ff", d["d_ff"], aliases=("intermediate_size",)),
            mlp="gated" if len(parts) == 2 else "plain",
            hidden_act=activation,
            norm="rmsnorm",
            position_embedding="relative",
            relative_attention_num_buckets=fields.integer(
                "relative_attention_num_buckets", d["relative_attention_num_buckets"]
            ),
            max_position_embeddings=2**20,  # relative positions: no table to run past (a bound, not a limit)
            tie_word_embeddings=True,  # T5Config / MT5Config.__post_init__ (transformers 5.24)
            decoder_output_scale=self.scales_decoder_output and not untied,
            embedding_dropout=dropout,
            attention_dropout=dropout,
            residual_dropout=dropout,
        )

    # ------------------------------------------------------------------ inventory
    def embedding(self, arch: Architecture) -> list[ParameterTensor]:
        """``shared`` and the decoder's relative position bias table (its first layer's)."""
        return [
            ParameterTensor("shared.weight", "embeddings", (arch.vocab_size, arch.hidden_size)),
            ParameterTensor(
                f"decoder.block.0.{self.names.relative_bias}.weight", "embeddings",
                (arch.relative_attention_num_buckets, arch.num_attention_heads),
            ),
        ]

    def _attention(self, arch: Architecture, prefix: str) -> list[ParameterTensor]:
        h, inner = arch.hidden_size, arch.query_width
        return [
            tensor
            for projection, (n_in, n_out) in (("q", (h, inner)), ("k", (h, inner)), ("v", (h, inner)), ("o", (inner, h)))
            for tensor in blocks.linear(f"{prefix}.{projection}", "attention", n_in, n_out, False)
        ]

    def block(self, arch: Architecture, names: T5Names, cross_attention: bool) -> list[ParameterTensor]:
        """One T5Block: self-attention, (cross-attention,) feed-forward, each after its RMSNorm."""
        h = arch.hidden_size
        tensors = self._attention(arch, "layer.0.SelfAttention") + blocks.norm(names.input_norm, arch, h)
        if cross_attention:
            tensors += self._attention(arch, "layer.1.EncDecAttention") + blocks.norm(names.cross_norm, arch, h)
        tensors += blocks.dense_mlp(arch, names, names.mlp, arch.intermediate_size)
        return tensors + blocks.norm(names.post_attention_norm, arch, h)

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        return self.block(arch, self.names, arch.cross_attention)

    def head(self, arch: Architecture) -> list[ParameterTensor]:
        tensors = blocks.norm(self.names.final_norm, arch, arch.hidden_size)
        if not arch.tie_word_embeddings:
            tensors.append(
                ParameterTensor("lm_head.weight", "lm_head", (arch.vocab_size, arch.hidden_size), (arch.hidden_size, arch.vocab_size))
            )
        return tensors

    def encoder_prelude(self, arch: Architecture) -> list[ParameterTensor]:
        """The encoder's relative position bias table (its first layer's)."""
        return [
            ParameterTensor(
                f"encoder.block.0.{self.encoder_names.relative_bias}.weight", "encoder",
                (arch.relative_attention_num_buckets, arch.num_attention_heads),
            )
        ]

    def encoder_layer(self, arch: Architecture) -> list[ParameterTensor]:
        return [t._replace(group="encoder") for t in self.block(arch, self.encoder_names, False)]

    def encoder_postlude(self, arch: Architecture) -> list[ParameterTensor]:
        return [t._replace(group="encoder") for t in blocks.norm("encoder.final_layer_norm", arch, arch.hidden_size)]

    # ------------------------------------------------------------------ the tape
    def program(self) -> type[LayerProgram]:
        from ..encoder_decoder.program import T5LayerProgram

        return T5LayerProgram


class MT5(T5):
    model_type = "mt5"
    defaults = MT5_DEFAULTS
    scales_decoder_output = False  # MT5ForConditionalGeneration has no d_model**-0.5 scaling (transformers 5.24)
