"""Falcon (transformers/models/falcon/modeling_falcon.py, transformers 5.24), rotary variants.

* One fused ``self_attention.query_key_value`` (``FalconLinear``: ``input @ weight.T`` plus the bias):
  ``multi_query`` (Falcon-7B) packs the heads plus one key and one value head; the
  ``new_decoder_architecture`` (Falcon-40B/180B) packs ``num_kv_heads`` groups of
  (heads / kv + 2) heads, and broadcasts each group's key and value to its query heads
  (``broadcast_to`` then ``flatten``: full-size copies); otherwise three tensors of all heads.
* Parallel attention (``parallel_attn``): one ``input_layernorm`` (Falcon-7B) or, in the new decoder
  architecture, ``ln_attn`` and ``ln_mlp``; ``mlp_output += attention_output`` in place, then
  ``dropout_add`` with the residual. Serial layers (``parallel_attn`` false) norm again after attention.
* LayerNorm with bias, a plain GELU MLP (``dense_h_to_4h``, ``dense_4h_to_h``, ``ffn_hidden_size``
  4h by default), no biases by default (``bias``), tied embeddings.
* ALiBi configs (``alibi`` true: Falcon-RW) are refused in one line: their attention is not replayed.
* PEFT's default LoRA target for falcon: query_key_value.
"""

from __future__ import annotations

from dataclasses import replace

from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import Sym
from . import blocks
from .blocks import ModuleNames, ParameterTensor
from .family import DecoderFamily
from .fields import ConfigFields

FALCON_NAMES = ModuleNames(
    embed_tokens="word_embeddings",
    final_norm="ln_f",
    input_norm="input_layernorm",
    post_attention_norm="post_attention_layernorm",
    pre_feedforward_norm="ln_attn",
    post_feedforward_norm="ln_mlp",
    qkv_proj="self_attention.query_key_value",
    o_proj="self_attention.dense",
    fc1="dense_h_to_4h",
    fc2="dense_4h_to_h",
)


class Falcon(DecoderFamily):
    model_type = "falcon"
    names = FALCON_NAMES
    lora_default_targets = ("query_key_value",)

    def read_config(self, fields: ConfigFields) -> Architecture:
        if fields.boolean("alibi", False):
            raise fields.fail("alibi", "ALiBi Falcon models (Falcon-RW) are not supported yet; only rotary Falcon")
        hidden = fields.integer("hidden_size", 4544, aliases=("n_embed",))
        heads = fields.integer("num_attention_heads", 71, aliases=("n_head",))
        new_architecture = fields.boolean("new_decoder_architecture", False)
        multi_query = fields.boolean("multi_query", True)
        if new_architecture:
            kv_heads = fields.integer("num_kv_heads", heads)
        else:
            kv_heads = 1 if multi_query else heads
        parallel = fields.boolean("parallel_attn", True)
        norms_in_parallel = fields.integer("num_ln_in_parallel_attn", 2 if new_architecture else 1)
        bias = fields.boolean("bias", False)
        return Architecture(
            model_type="falcon",
            vocab_size=fields.integer("vocab_size", 65024),
            hidden_size=hidden,
            num_hidden_layers=fields.layers(32, aliases=("n_layer",)),
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            intermediate_size=fields.integer("ffn_hidden_size", 4 * hidden),
            mlp="plain",
            hidden_act=fields.activation("activation", "gelu"),
            norm="layernorm",
            attention_qkv_bias=bias,
            attention_output_bias=bias,
            mlp_bias=bias,
            fused_qkv=True,
            max_position_embeddings=fields.integer("max_position_embeddings", 2048),
            tie_word_embeddings=fields.boolean("tie_word_embeddings", True),
            attention_dropout=fields.probability("attention_dropout"),
            residual_dropout=fields.probability("hidden_dropout"),
            parallel_residual=parallel,
            falcon_new_decoder_architecture=new_architecture,
            falcon_norms_in_parallel=norms_in_parallel,
        )

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        names, h = self.names, arch.hidden_size
        d = arch.resolved_head_dim
        qkv_width = (arch.num_attention_heads + 2 * arch.kv_heads) * d
        tensors = blocks.linear(names.qkv_proj, "attention", h, qkv_width, arch.attention_qkv_bias)
        tensors += blocks.linear(names.o_proj, "attention", arch.query_width, h, arch.attention_output_bias)
        tensors += blocks.dense_mlp(arch, names, "mlp", arch.intermediate_size)
        for module in self.layer_norm_modules(arch):
            tensors += blocks.norm(module, arch, h)
        return tensors

    def layer_norm_modules(self, arch: Architecture) -> list[str]:
        names = self.names
        if not arch.parallel_residual:
            return [names.post_attention_norm, names.input_norm]
        if arch.falcon_norms_in_parallel == 2:
            return [names.pre_feedforward_norm, names.post_feedforward_norm]
        return [names.input_norm]

    def program(self) -> type[LayerProgram]:
        return FalconProgram


class FalconProgram(LayerProgram):
    def attention(self, x: Sym) -> Sym:
        """``FalconAttention.forward`` (rotary): q is a view of the fused projection; k and v are
        copies (an indexed single head under multi-query, broadcast groups in the new architecture)."""
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        tokens, d = shape.tokens, shape.head_dim
        heads, kv_heads = shape.heads, shape.kv_heads
        fused = self.linear(names.qkv_proj, x, shape.hidden, (heads + 2 * kv_heads) * d, arch.attention_qkv_bias)
        q, k, v = tape.split(fused, [tokens * heads * d, tokens * kv_heads * d, tokens * kv_heads * d])
        if arch.falcon_new_decoder_architecture:
            k, v = tape.copy(k, tokens * heads * d), tape.copy(v, tokens * heads * d)  # broadcast_to + flatten
            kv_heads = heads
        elif kv_heads == 1:
            k, v = tape.copy(k), tape.copy(v)  # fused_qkv[..., [-2], :]: advanced indexing copies
        q_rot, k_rot = self._rope(q), self._rope(k)
        if k is not fused:
            tape.release(k)
        tape.release(fused)
        out = self._attention_core(q_rot, k_rot, v)
        tape.release(q_rot, k_rot, v)
        merged = tape.copy(out)  # view / permute / reshape of (b, heads, s, d): a copy
        tape.release(out)
        projected = self.linear(names.o_proj, merged, heads * d, shape.hidden, arch.attention_output_bias)
        tape.release(merged)
        return projected

    def _attention_core(self, q: Sym, k: Sym, v: Sym) -> Sym:
        """Multi-query Falcon calls SDPA with one key/value head for all query heads and no
        ``enable_gqa``: the fused kernels refuse the mismatch and SDPA takes its math path, which
        broadcasts k and v (measured, torch 2.13 CPU; assumed the same on CUDA, where flash and
        memory-efficient attention also need equal head counts)."""
        if self.arch.falcon_new_decoder_architecture:  # k and v were broadcast to every query head
            shape = self.shape
            self.shape = replace(shape, kv_heads=shape.heads)
            try:
                return super()._attention_core(q, k, v)
            finally:
                self.shape = shape
        if self.kernels.attention == "fused" and self.shape.kv_heads < self.shape.heads:
            return self._math_attention(q, k, v)
        return super()._attention_core(q, k, v)

    def layer(self, x: Sym) -> Sym:
        """``FalconDecoderLayer.forward``."""
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        rows, h = shape.stream_tokens, shape.hidden
        two_norms = arch.falcon_new_decoder_architecture and arch.falcon_norms_in_parallel == 2
        if two_norms:
            attention_in = self.norm(names.pre_feedforward_norm, x, rows, h)
            mlp_in = self.norm(names.post_feedforward_norm, x, rows, h)
        else:
            attention_in = self.norm(names.input_norm, x, rows, h)
            mlp_in = attention_in
        attended = self.attention(attention_in)
        residual = x
        if not arch.parallel_residual:
            dropped = tape.dropout(attended, arch.attention_dropout)
            residual = tape.add(x, dropped)
            tape.release(attended, dropped)
            mlp_in = self.norm(names.post_attention_norm, residual, rows, h)
        mixed = self.mlp(mlp_in)
        tape.release(attention_in, mlp_in)
        if arch.parallel_residual:
            summed = tape.add(mixed, attended)  # mlp_output += attention_output (in place: no new memory)
            tape.release(attended)
            tape.release(mixed)
            mixed = summed
        dropped = tape.dropout(mixed, arch.residual_dropout)
        out = tape.add(residual, dropped)
        tape.release(mixed, dropped)
        if residual is not x:
            tape.release(residual)
        return out
