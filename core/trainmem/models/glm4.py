"""GLM-4 (``glm4``, transformers/models/glm4, transformers 5.24): GLM-4-9B-0414, GLM-4-32B-0414, GLM-Z1.

* **Layer** (``Glm4DecoderLayer.forward``): four RMSNorms, ``x + post_self_attn_layernorm(attn(input_layernorm(x)))``
  then ``h + post_mlp_layernorm(mlp(post_attention_layernorm(h)))`` (Gemma 2's sandwich with Llama's norm).
* **Attention**: q/k/v biases (``attention_bias``, on by default; never on ``o_proj``), ``head_dim`` 128 by
  default, **partial rotary** (``partial_rotary_factor`` 0.5 unless the file says otherwise:
  ``Glm4Config.__post_init__``) with GLM's interleaved rotation (``apply_rotary_pos_emb`` in modeling_glm4.py):
  per call, ``cos[..., : d // 2].repeat_interleave(2, dim=-1)`` and the same for ``sin`` (two new tensors of the
  rotary tables' dtype, saved by q's and k's products: each layer keeps its own pair, as ERNIE 4.5's RoPE);
  ``rotate_half`` is ``torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)`` (a half-size negation
  and a full-size stack); ``torch.cat([q_embed, q_pass], dim=-1)`` makes a new heads-first tensor.
* **MLP** (``Glm4MLP``): fused ``gate_up_proj`` → ``chunk`` → ``up * act(gate)`` → ``down_proj``, no biases.
* PEFT 0.21 has no default targets for glm4; ``all-linear`` adapts q/k/v/o, gate_up_proj and down_proj.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import Sym
from .blocks import ModuleNames
from .family import DecoderFamily, common_decoder_fields
from .fields import ConfigFields
from .qwen3_next import partial_rotary_factor

GLM4_DEFAULTS = dict(
    vocab_size=151552,
    hidden_size=4096,
    intermediate_size=13696,
    num_hidden_layers=40,
    num_attention_heads=32,
    num_key_value_heads=2,
    head_dim=128,
    max_position_embeddings=131072,
    tie_word_embeddings=False,
)
"""``Glm4Config``'s defaults."""


@dataclass(frozen=True)
class Glm4Names(ModuleNames):
    """GLM-4's four norms, in the order the layer runs them."""

    post_attention_norm: str = "post_self_attn_layernorm"
    pre_feedforward_norm: str = "post_attention_layernorm"
    post_feedforward_norm: str = "post_mlp_layernorm"


class Glm4(DecoderFamily):
    model_type = "glm4"
    names = Glm4Names()
    lora_default_targets = None
    layers_save_rotary_tables = False
    """No layer saves the model's cos/sin (each saves its own repeat_interleaved pair), so they die when
    ``Glm4Model.forward`` returns, before the loss (measured: one pair less at the backward peak). With full
    checkpointing the recomputation keeps them. Not counted during the forward either (a forward peak would be
    under-predicted by one pair)."""

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, GLM4_DEFAULTS)
        if "head_dim" in fields.config and fields.config["head_dim"] is None:
            common["head_dim"] = common["hidden_size"] // common["num_attention_heads"]
        return Architecture(
            **common,
            attention_qkv_bias=fields.boolean("attention_bias", True),
            attention_output_bias=False,
            fused_gate_up=True,
            norms_per_layer=4,
            partial_rotary_factor=partial_rotary_factor(fields, 0.5),
        )

    def program(self) -> type[LayerProgram]:
        return Glm4Program


class Glm4Program(LayerProgram):
    """Llama's layer with GLM-4's sandwich norms and its interleaved partial RoPE."""

    def _position_and_norm(self, q: Sym, k: Sym, produced: list[Sym]) -> tuple[Sym, Sym, bool]:
        tape, shape = self.tape, self.shape
        table_numel = shape.seq * self.arch.rotary_dim
        # cos[..., : d // 2].repeat_interleave(2, dim=-1), sin likewise: new tensors, one pair per call
        cos = tape.new(table_numel, self.kernels.stream_dtype, False)
        sin = tape.new(table_numel, self.kernels.stream_dtype, False)
        q_out = self._interleaved_partial_rope(q, cos, sin, shape.heads)
        k_out = self._interleaved_partial_rope(k, cos, sin, shape.kv_heads)
        tape.release(cos, sin)
        tape.release(*produced)
        return q_out, k_out, True

    def _interleaved_partial_rope(self, x: Sym, cos: Sym, sin: Sym, heads: int) -> Sym:
        """``torch.cat([x_rot * cos + rotate_half(x_rot) * sin, x_pass], dim=-1)`` with the interleaved
        ``rotate_half``; ``x_rot`` and ``x_pass`` are views of x."""
        tape, shape = self.tape, self.shape
        rotary_dim = self.arch.rotary_dim
        x_rot = x.view(x.numel // shape.head_dim * rotary_dim) if rotary_dim != shape.head_dim else x
        with_cos = tape.mul(x_rot, cos)  # saves cos
        negated = tape.scale(x_rot.view(x_rot.numel // 2))  # -x2: a new half-size tensor
        stacked = tape.new(x_rot.numel, x.dtype, x.requires_grad)
        # the strided slices' backward writes each half into full-size zeros
        tape.record("stack", [], [negated, x_rot], [stacked], extra_backward_bytes=x_rot.nbytes)
        tape.release(negated)
        with_sin = tape.mul(stacked, sin)  # saves sin
        tape.release(stacked)
        summed = tape.add(with_cos, with_sin)
        tape.release(with_cos, with_sin)
        out = tape.new(self._heads_numel(heads), tape.promote(summed.dtype, x.dtype), x.requires_grad)
        tape.record("cat", [], [summed, x], [out])
        tape.release(summed)
        return out
