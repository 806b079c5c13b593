"""ERNIE 4.5 dense (``ernie4_5``, Baidu ERNIE-4.5-0.3B; transformers/models/ernie4_5, transformers 5.24).

Llama's layer with one ``use_bias`` switch for q, k, v, o and the three MLP projections, ``head_dim`` 128 by
default (the class default, not ``hidden_size // num_attention_heads``), tied embeddings by default, and a
RoPE of its own, which this module replays op by op (``apply_rotary_pos_emb`` in modeling_ernie4_5.py):

* the rotary tables stay fp32 (``Ernie4_5RotaryEmbedding.forward`` returns ``cos, sin`` without casting);
* per call, ``cos[..., : d // 2].repeat_interleave(2, dim=-1)`` and the same for ``sin`` make two new fp32
  (1, 1, s, d) tensors; q's and k's products save them, so each layer keeps its own pair for backward;
* ``q.float() * cos + rotate_half(q).float() * sin``, cast back to q's dtype: under autocast (q in bf16)
  two fp32 copies of q per call, and the rotation is interleaved (``torch.stack((-x2, x1), dim=-1)``
  of the even and odd dims: a half-size negation and a full-size stack in q's dtype).

PEFT 0.21 has no default LoRA targets for ernie4_5.
"""

from __future__ import annotations

from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import Sym
from .family import DecoderFamily, common_decoder_fields
from .fields import ConfigFields

ERNIE4_5_DEFAULTS = dict(
    vocab_size=103424,
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=18,
    num_attention_heads=16,
    num_key_value_heads=2,
    head_dim=128,
    max_position_embeddings=131072,
    tie_word_embeddings=True,
)
"""``Ernie4_5Config``'s defaults (those of ERNIE-4.5-0.3B)."""


class Ernie4_5Program(LayerProgram):
    """Llama's layer with ERNIE 4.5's fp32, interleaved RoPE."""

    def _position_and_norm(self, q: Sym, k: Sym, produced: list[Sym]) -> tuple[Sym, Sym, bool]:
        tape = self.tape
        table_numel = self.shape.seq * self.arch.rotary_dim
        # cos[..., : d // 2].repeat_interleave(2, dim=-1), sin likewise: new fp32 tensors, one pair per call
        cos = tape.new(table_numel, "fp32", False)
        sin = tape.new(table_numel, "fp32", False)
        q_rot, k_rot = self._fp32_interleaved_rope(q, cos, sin), self._fp32_interleaved_rope(k, cos, sin)
        tape.release(cos, sin)
        tape.release(*produced)
        return q_rot, k_rot, False

    def _fp32_interleaved_rope(self, x: Sym, cos: Sym, sin: Sym) -> Sym:
        """``(x.float() * cos + rotate_half(x).float() * sin).to(x.dtype)`` with the interleaved
        ``rotate_half``: ``torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)``."""
        tape = self.tape
        x32 = tape.to(x, "fp32")
        with_cos = tape.mul(x32, cos)  # saves cos
        if x32 is not x:
            tape.release(x32)
        negated = tape.scale(x.view(x.numel // 2))  # -x2: a new half-size tensor
        stacked = tape.new(x.numel, x.dtype, x.requires_grad)
        # the strided slices' backward writes each half into full-size zeros
        tape.record("stack", [], [negated, x], [stacked], extra_backward_bytes=x.nbytes)
        tape.release(negated)
        stacked32 = tape.to(stacked, "fp32")
        if stacked32 is not stacked:
            tape.release(stacked)
        with_sin = tape.mul(stacked32, sin)  # saves sin
        tape.release(stacked32)
        summed = tape.add(with_cos, with_sin)
        tape.release(with_cos, with_sin)
        out = tape.to(summed, x.dtype)
        if out is not summed:
            tape.release(summed)
        return out


def ernie_head_dim(fields: ConfigFields, common: dict) -> int:
    """``head_dim`` 128 when the file leaves it out; ``null`` means ``hidden_size // num_attention_heads``."""
    if "head_dim" in fields.config and fields.config["head_dim"] is None:
        return common["hidden_size"] // common["num_attention_heads"]
    return fields.integer("head_dim", 128)


class Ernie4_5(DecoderFamily):
    model_type = "ernie4_5"
    layers_save_rotary_tables = False  # apply_rotary_pos_emb saves repeat_interleaved copies (see DecoderFamily)
    lora_default_targets = None
    defaults = ERNIE4_5_DEFAULTS

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, self.defaults)
        common["head_dim"] = ernie_head_dim(fields, common)
        bias = fields.boolean("use_bias", False)
        return Architecture(
            **common, attention_qkv_bias=bias, attention_output_bias=bias, mlp_bias=bias
        )

    def rotary_tables_bytes(self, arch: Architecture, seq: int, stream_bytes: int) -> list[int]:
        """cos and sin stay fp32 (``Ernie4_5RotaryEmbedding.forward`` does not cast them)."""
        return [seq * arch.rotary_dim * 4] * 2

    def program(self) -> type[LayerProgram]:
        return Ernie4_5Program
