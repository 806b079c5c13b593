"""Qwen3.5: Qwen3-Next's hybrid of Gated DeltaNet and gated full attention, with split input
projections (transformers/models/qwen3_5/modular_qwen3_5.py and qwen3_5_moe/modular_qwen3_5_moe.py,
transformers 5.24).

Two text models, each the language model of a multimodal wrapper (``Qwen3_5Config`` /
``Qwen3_5MoeConfig``, ``model_type`` ``qwen3_5`` / ``qwen3_5_moe``, read through their
``text_config``; the vision tower is not counted):

* ``qwen3_5_text`` (``Qwen3_5TextConfig``): a dense SwiGLU MLP in every layer.
* ``qwen3_5_moe_text`` (``Qwen3_5MoeTextConfig``): a MoE in every layer (router, fused experts, a
  shared expert behind a sigmoid gate: ``Qwen3_5MoeSparseMoeBlock``, the same block and op order as
  Qwen3-Next's); the config has no ``mlp_only_layers`` / ``decoder_sparse_step``.

What differs from Qwen3-Next (``Qwen3_5GatedDeltaNet``): four input projections instead of two
fused ones — ``in_proj_qkv`` (2·key_dim + value_dim, the conv's input as it comes out of the
linear: no per-head reordering and no ``torch.cat``), ``in_proj_z`` (value_dim), ``in_proj_b`` and
``in_proj_a`` (value heads each) — so z, b and a are contiguous and nothing is copied before the
conv. Attention (``Qwen3_5Attention`` = ``Qwen3NextAttention``), the norms, the chunked gated delta
rule and the conv are Qwen3-Next's, replayed by :class:`~trainmem.models.qwen3_next.Qwen3NextProgram`.

The text rotary embedding is Qwen3-VL's interleaved multimodal RoPE (``Qwen3_5TextRotaryEmbedding``):
text-only position ids are expanded to (3, b, s), so the cos and sin tables it returns are
(b, s, rotary_dim) in the stream dtype — one row per sample, where Llama's are (1, s, d).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import Sym
from . import blocks
from .blocks import ParameterTensor
from .family import DecoderFamily, common_decoder_fields
from .fields import ConfigFields
from .qwen3_next import (
    GatedDeltaNetNames,
    Qwen3NextProgram,
    hybrid_attention_fields,
    hybrid_layer_tensors,
    linear_dims,
    read_layer_types,
)

QWEN3_5_TEXT_DEFAULTS = dict(
    vocab_size=248320,
    hidden_size=4096,
    intermediate_size=12288,
    num_hidden_layers=32,
    num_attention_heads=16,
    num_key_value_heads=4,
    head_dim=256,
    max_position_embeddings=32768,
    tie_word_embeddings=False,
)
"""``Qwen3_5TextConfig``'s defaults."""

QWEN3_5_MOE_TEXT_DEFAULTS = dict(
    vocab_size=248320,
    hidden_size=2048,
    intermediate_size=512,  # the class has no intermediate_size: every layer's MLP is the MoE
    num_hidden_layers=40,
    num_attention_heads=16,
    num_key_value_heads=2,
    head_dim=256,
    max_position_embeddings=32768,
    tie_word_embeddings=False,
)
"""``Qwen3_5MoeTextConfig``'s defaults."""


@dataclass(frozen=True)
class SplitLinearAttentionNames(GatedDeltaNetNames):
    """Qwen3.5's module paths: the Qwen2-MoE names plus its Gated DeltaNet's four input projections."""

    in_proj_qkv: str = "linear_attn.in_proj_qkv"
    in_proj_z: str = "linear_attn.in_proj_z"
    in_proj_b: str = "linear_attn.in_proj_b"
    in_proj_a: str = "linear_attn.in_proj_a"

    def input_projections(self) -> tuple[str, ...]:
        return (self.in_proj_qkv, self.in_proj_z, self.in_proj_b, self.in_proj_a)


QWEN3_5_NAMES = SplitLinearAttentionNames()


def split_linear_attention_tensors(arch: Architecture, names: SplitLinearAttentionNames) -> list[ParameterTensor]:
    """``Qwen3_5GatedDeltaNet.__init__`` in its parameter order: Qwen3-Next's conv1d, dt_bias, A_log,
    norm and out_proj (registered by ``super().__init__``), then the four projections it adds after
    deleting ``in_proj_qkvz`` / ``in_proj_ba``."""
    hk, hv, dk, dv, kernel = linear_dims(arch)
    h, key_dim, value_dim = arch.hidden_size, hk * dk, hv * dv
    conv_dim = 2 * key_dim + value_dim
    return (
        [
            ParameterTensor(f"{names.dt_bias}", "attention", (hv,)),
            ParameterTensor(f"{names.a_log}", "attention", (hv,)),
            ParameterTensor(f"{names.conv1d}.weight", "attention", (conv_dim, 1, kernel)),
            ParameterTensor(f"{names.gated_norm}.weight", "norms", (dv,)),
        ]
        + blocks.linear(names.out_proj, "attention", value_dim, h, False)
        + blocks.linear(names.in_proj_qkv, "attention", h, conv_dim, False)
        + blocks.linear(names.in_proj_z, "attention", h, value_dim, False)
        + blocks.linear(names.in_proj_b, "attention", h, hv, False)
        + blocks.linear(names.in_proj_a, "attention", h, hv, False)
    )


class Qwen3_5Text(DecoderFamily):
    """``Qwen3_5ForCausalLM`` over ``Qwen3_5TextModel``: dense MLPs."""

    model_type = "qwen3_5_text"
    names = QWEN3_5_NAMES
    lora_default_targets = None
    moe_lora_conversion = {}
    """No v4→v5 target conversion: transformers' ``_MODEL_TO_CONVERSION_PATTERN`` maps ``qwen3_5_moe_text`` to
    ``qwen3_5_text``, which PEFT's ``_MOE_TARGET_MODULE_MAPPING`` does not list, so ``all-linear`` adapts the
    ``nn.Linear`` modules only (the shared expert and its gate, not the router or the fused experts; checked
    against PEFT 0.21 in tests/test_families.py)."""
    rope_concatenates = True
    rotary_tables_per_sample = True
    """``Qwen3_5TextRotaryEmbedding.forward`` expands the position ids to (3, b, s): cos and sin are
    (b, s, rotary_dim) (measured: one table row per sample, 16 kB at b=2, s=256, rotary_dim 8, fp32)."""
    not_counted = ()
    defaults = QWEN3_5_TEXT_DEFAULTS

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, self.defaults)
        layer_types = read_layer_types(fields, common["num_hidden_layers"])
        bias = fields.boolean("attention_bias", False)
        common.update(self.moe_fields(fields))
        return Architecture(**common, **hybrid_attention_fields(fields, layer_types, bias))

    def moe_fields(self, fields: ConfigFields) -> dict[str, object]:
        return {}

    # ------------------------------------------------------------------ inventory
    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        return hybrid_layer_tensors(arch, self.names, split_linear_attention_tensors)


    def program(self) -> type[LayerProgram]:
        return Qwen3_5Program


class Qwen3_5MoeText(Qwen3_5Text):
    """``Qwen3_5MoeForCausalLM`` over ``Qwen3_5MoeTextModel``: a MoE with a gated shared expert in every layer."""

    model_type = "qwen3_5_moe_text"
    defaults = QWEN3_5_MOE_TEXT_DEFAULTS

    def moe_fields(self, fields: ConfigFields) -> dict[str, object]:
        experts = fields.integer("num_experts", 256)
        return dict(
            num_experts=experts,
            num_experts_per_tok=fields.integer("num_experts_per_tok", 8),
            shared_expert_intermediate_size=fields.integer("shared_expert_intermediate_size", 512),
            shared_expert_gate=True,
            intermediate_size=fields.integer("moe_intermediate_size", 512),
        )

    def read_config(self, fields: ConfigFields) -> Architecture:
        return super().read_config(_without_intermediate_size(fields))


def _without_intermediate_size(fields: ConfigFields) -> ConfigFields:
    """``Qwen3_5MoeTextConfig`` has no ``intermediate_size`` (the experts' width is
    ``moe_intermediate_size``): a stray one in the file is ignored, as the strict class drops it."""
    if "intermediate_size" not in fields.config:
        return fields
    config = {key: value for key, value in fields.config.items() if key != "intermediate_size"}
    return ConfigFields(config, fields.prefix)


class Qwen3_5Program(Qwen3NextProgram):
    """Qwen3.5's layer on the tape: Qwen3-Next's, with the split Gated DeltaNet projections."""

    linear_attention_family = "qwen3_5"

    def linear_attention(self, x: Sym) -> Sym:
        """``Qwen3_5GatedDeltaNet.forward`` without a cache (training)."""
        shape, tape, names = self.shape, self.tape, self.names
        self._refuse_split_linear_attention()
        hk, hv, dk, dv, kernel = linear_dims(self.arch)
        h, tokens = shape.hidden, shape.tokens
        key_dim, value_dim = hk * dk, hv * dv
        conv_dim = 2 * key_dim + value_dim
        mixed = self.linear(names.in_proj_qkv, x, h, conv_dim, False)
        z = self.linear(names.in_proj_z, x, h, value_dim, False)
        beta_in = self.linear(names.in_proj_b, x, h, hv, False)
        a = self.linear(names.in_proj_a, x, h, hv, False)
        core = self._conv_and_delta_rule(mixed, beta_in, a)
        normed = self._gated_norm(core, z, tokens * hv, dv)  # z.reshape(-1, head_v_dim): a view
        tape.release(core, z)
        out = self.linear(names.out_proj, normed, value_dim, h, False)
        tape.release(normed)
        return out
