"""Cohere Command-R / Command-R+ (transformers/models/cohere/modeling_cohere.py, transformers 5.24).

* One norm per layer and a parallel block: ``x + attention(ln(x)) + mlp(ln(x))`` (both branches read
  the same normed tensor; ``CohereDecoderLayer.forward``).
* ``CohereLayerNorm``: a LayerNorm **without bias**, in fp32: ``x32 - mean`` (computed twice),
  ``pow(2).mean``, ``rsqrt``, the product, ``weight.float() *`` it, cast back. Its weight is the
  only parameter (counted as an RMSNorm's would be).
* Optional per-head q/k LayerNorms (``use_qk_norm``, Command-R+), weights of (heads, head_dim).
* RoPE with interleaved pairs: ``q.float()``, ``rotate_half`` by ``torch.stack([-x[..., 1::2],
  x[..., ::2]], -1)``, cast back to q's dtype; cos/sin are repeat-interleaved (same size as Llama's).
* ``logits * logit_scale`` (0.0625 by default) before the loss: one more logits tensor (modelled as
  Granite's ``logits_scaling``, the reciprocal); tied embeddings by default.
* PEFT 0.21 has no default LoRA targets for cohere (give ``target_modules``).
"""

from __future__ import annotations

from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import Sym
from .blocks import ParameterTensor
from . import blocks
from .family import DecoderFamily, common_decoder_fields
from .fields import ConfigFields

COHERE_DEFAULTS = dict(
    vocab_size=256000,
    hidden_size=8192,
    intermediate_size=22528,
    num_hidden_layers=40,
    num_attention_heads=64,
    max_position_embeddings=8192,
    tie_word_embeddings=True,
)
"""``CohereConfig``'s defaults (Command-R's shapes)."""


class Cohere(DecoderFamily):
    model_type = "cohere"
    lora_default_targets = None

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, COHERE_DEFAULTS)
        bias = fields.boolean("attention_bias", False)
        logit_scale = fields.number("logit_scale", 0.0625, minimum=1e-12)
        return Architecture(
            **common,
            attention_qkv_bias=bias,
            attention_output_bias=bias,
            qk_norm=fields.boolean("use_qk_norm", False),
            parallel_residual=True,
            logits_scaling=1.0 / logit_scale,
        )

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        names = self.names
        tensors = blocks.attention(arch.model_copy(update={"qk_norm": False}), names)
        if arch.qk_norm:  # CohereLayerNorm(hidden_size=(heads, head_dim))
            d = arch.resolved_head_dim
            tensors += [
                ParameterTensor(f"{names.q_norm}.weight", "norms", (arch.num_attention_heads, d)),
                ParameterTensor(f"{names.k_norm}.weight", "norms", (arch.kv_heads, d)),
            ]
        tensors += blocks.dense_mlp(arch, names, names.mlp, arch.intermediate_size)
        return tensors + blocks.norm(names.input_norm, arch, arch.hidden_size)

    def program(self) -> type[LayerProgram]:
        return CohereProgram


class CohereProgram(LayerProgram):
    def norm(self, module: str, x: Sym, rows: int, width: int) -> Sym:
        """``CohereLayerNorm.forward``."""
        tape = self.tape
        x32 = tape.to(x, "fp32")
        mean = tape.reduce(x32, rows)
        centered = tape.add(x32, mean)  # hidden_states - mean
        squared = tape.unary_saving_input("pow", centered)
        tape.release(centered)
        variance = tape.reduce(squared, rows)
        tape.release(squared)
        shifted = tape.scale(variance)
        tape.release(variance)
        inverse = tape.unary_saving_result("rsqrt", shifted)
        tape.release(shifted)
        centered_again = tape.add(x32, mean)  # (hidden_states - mean) once more
        tape.release(mean)
        if x32 is not x:
            tape.release(x32)
        normalized = tape.mul(centered_again, inverse)
        tape.release(centered_again, inverse)
        numel = width if module not in (self.names.q_norm, self.names.k_norm) else self._qk_norm_numel(module, width)
        weight = tape.to(self.parameter(module, numel), "fp32")
        weighted = tape.mul(weight, normalized)
        tape.release(normalized)
        if weight.tag != "parameter":
            tape.release(weight)
        out = tape.to(weighted, x.dtype)
        if out is not weighted:
            tape.release(weighted)
        return out

    def _qk_norm_numel(self, module: str, width: int) -> int:
        heads = self.shape.heads if module == self.names.q_norm else self.shape.kv_heads
        return heads * width

    def _rope(self, q: Sym) -> Sym:
        """``apply_rotary_pos_emb``: in fp32, interleaved ``rotate_half`` by ``torch.stack``, cast back."""
        tape = self.tape
        d = self.arch.rotary_dim
        q32 = tape.to(q, "fp32")
        cos = Sym(self.shape.seq * d, self.kernels.stream_dtype, False, "external")
        sin = Sym(self.shape.seq * d, self.kernels.stream_dtype, False, "external")
        with_cos = tape.mul(q32, cos)
        negated = tape.new(q32.numel // 2, "fp32", q32.requires_grad)  # -x[..., 1::2]
        tape.record("neg", [], [q32], [negated])
        stacked = tape.new(q32.numel, "fp32", q32.requires_grad)  # torch.stack([-x2, x1], -1).flatten(-2)
        tape.record("stack", [], [negated, q32], [stacked])
        tape.release(negated)
        with_sin = tape.mul(stacked, sin)
        tape.release(stacked)
        summed = tape.add(with_cos, with_sin)
        tape.release(with_cos, with_sin)
        if q32 is not q:
            tape.release(q32)
        out = tape.to(summed, q.dtype)
        if out is not summed:
            tape.release(summed)
        return out

    def layer(self, x: Sym) -> Sym:
        """``CohereDecoderLayer.forward``: ``residual + attention(ln(x)) + mlp(ln(x))``."""
        shape, tape, names = self.shape, self.tape, self.names
        normed = self.norm(names.input_norm, x, shape.stream_tokens, shape.hidden)
        attended = self.attention(normed)
        mixed = self.mlp(normed)
        tape.release(normed)
        partial = tape.add(x, attended)
        tape.release(attended)
        out = tape.add(partial, mixed)
        tape.release(partial, mixed)
        return out
