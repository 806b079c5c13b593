"""DeepSeek-V3.2-Exp (``deepseek_v32``: deepseek-ai/DeepSeek-V3.2-Exp, -V3.2; transformers/models/deepseek_v32, 5.24).

DeepSeek-V3 with **DeepSeek Sparse Attention** (DSA): every attention layer gets a *lightning indexer*
(``DeepseekV32Indexer``) that scores each query against every key and keeps the ``index_topk`` best tokens; the
rest are masked out of the MLA attention. The rest is DeepSeek-V3 (models/deepseek.py) as GLM-4.7-Flash's classes
build it (``DeepseekV32DecoderLayer`` = ``Glm4MoeLiteDecoderLayer``: dense layers from ``mlp_layer_types``,
default the first ``first_k_dense_replace`` = 3; the sigmoid group-limited router with its correction bias; one
shared expert). The attention always has the query LoRA (``AXK1Attention``: ``q_lora_rank`` null is refused) and
always rotates interleaved pairs (``rope_interleave`` is not a field of the class).

**The indexer's parameters** (per layer): ``wq_b`` (``q_lora_rank`` → ``index_n_heads × index_head_dim``, fed the
attention's normed query latent ``q_resid``), ``wk`` (h → ``index_head_dim``), ``k_norm`` (a LayerNorm with bias) and
``weights_proj`` (h → ``index_n_heads``). Its forward runs under ``@torch.no_grad()``: these parameters never get a
gradient (so no optimizer state either; AdamW skips parameters whose ``grad`` is None), and nothing it computes is
saved for backward. They are counted as weights and put in the ``unused`` group (no gradient).

**What the indexer allocates in training, as transformers' code runs it on CPU** (all transient, freed before the
attention runs; replayed in :meth:`DeepseekV32Program._indexer`): the query ``wq_b(q_resid)`` (b·s·H·D), the key
``k_norm(wk(x))`` (b·s·D), their half-split RoPE on the first ``qk_rope_head_dim`` features and ``torch.cat``s, the
scores ``matmul(q.float(), k.float())`` of shape (b, s, H, s) — under autocast the matmul casts its fp32 inputs back
to 16 bits — times ``softmax_scale``, ``relu``, the per-head weights ``weights_proj(x).float() · H^-½``, their
weighted sum over the heads (b, s, s), the causal mask folded in (``masked_fill(~mask, -inf)``), ``topk`` (values and
int64 indices) and the int32 indices. Then the attention turns the indices into a boolean (b, 1, s, s) mask
(``new_ones().scatter()``) and ands it with the causal mask, which SDPA receives. The (b, s, H, s) scores are the
largest of these: at s = 4096 with DeepSeek-V3.2's 64 indexer heads they are 2 GiB per row of the batch in bf16,
alive for a moment in every layer's forward (and again in every recomputed layer with checkpointing). The model's
forward also always builds the 4-D causal mask (``allow_is_causal_skip=False``): one (b, 1, s, s) boolean for all
layers, alive until the forward returns.

**A CUDA kernel would do otherwise (not measured here):** DeepSeek's own indexer (DeepSeek-V3.2-Exp's
``inference/kernel.py`` ``fp8_index``) scores FP8-quantised queries and keys after a Hadamard rotation, in tiles,
and never materialises the (b, s, H, s) fp32 tensor, and FlashMLA's sparse kernels take the top-k indices instead of
a dense mask (transformers keeps ``_supports_flash_attn = False`` for this model). Training with such kernels costs
the (b, s, topk) indices and the (b, s, s) index scores at most; trainmem models transformers' dense path.
"""

from __future__ import annotations

from ..architecture import Architecture
from ..tape import Sym
from . import blocks
from .blocks import NO_GRADIENT_GROUP, ParameterTensor
from .deepseek import DEEPSEEK_V3_DEFAULTS, MlaNames, MlaProgram, mla_attention
from .fields import ConfigFields
from .glm4_moe_lite import Glm4MoeLite, dense_layers_from_mlp_layer_types
from .glm4_moe import mtp_not_counted

DEEPSEEK_V32_DEFAULTS = dict(
    DEEPSEEK_V3_DEFAULTS,
    max_position_embeddings=163840,
    index_topk=2048,
    index_head_dim=128,
    index_n_heads=64,
)
"""``DeepseekV32Config``'s defaults (modular_deepseek_v32.py; those of DeepSeek-V3.2-Exp)."""

INDEXER = "self_attn.indexer"
NO_GRAD = NO_GRADIENT_GROUP  # the indexer runs under torch.no_grad() only (blocks.NO_GRADIENT_GROUP)


def indexer_tensors(arch: Architecture) -> list[ParameterTensor]:
    """``DeepseekV32Indexer.__init__``: wq_b, wk, k_norm (LayerNorm, weight and bias), weights_proj — none trains."""
    h, heads, width = arch.hidden_size, arch.indexer_heads, arch.indexer_head_dim
    assert heads and width and arch.q_lora_rank
    tensors = blocks.linear(f"{INDEXER}.wq_b", NO_GRAD, arch.q_lora_rank, heads * width, False)
    tensors += blocks.linear(f"{INDEXER}.wk", NO_GRAD, h, width, False)
    tensors += [ParameterTensor(f"{INDEXER}.k_norm.weight", NO_GRAD, (width,)),
                ParameterTensor(f"{INDEXER}.k_norm.bias", NO_GRAD, (width,))]
    tensors += blocks.linear(f"{INDEXER}.weights_proj", NO_GRAD, h, heads, False)
    return tensors


def _no_grad(tensor: Sym) -> Sym:
    """The same tensor as seen under ``torch.no_grad()``: ops on it record no autograd node."""
    return Sym(tensor.numel, tensor.dtype, False, tensor.tag, tensor.storage, tensor.storage_nbytes)


class DeepseekV32Program(MlaProgram):
    """``DeepseekV32Attention.forward``: DeepSeek-V3's MLA, the indexer, the index mask, then SDPA."""

    def attention(self, x: Sym) -> Sym:
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        tokens, heads = shape.tokens, shape.heads
        nope, rope, v_dim = arch.qk_nope_head_dim, arch.qk_rope_head_dim, arch.v_head_dim or 0
        qk = nope + rope
        kv_rank, q_rank = arch.kv_lora_rank or 0, arch.q_lora_rank or 0
        q_latent = self.linear(names.q_a_proj, x, shape.hidden, q_rank, arch.attention_qkv_bias)
        q_resid = self.rms_norm(names.q_a_layernorm, q_latent, tokens, q_rank)
        tape.release(q_latent)
        q = self.linear(names.q_b_proj, q_resid, q_rank, heads * qk, False)
        q_nope, q_rope = tape.split(q, [tokens * heads * nope, tokens * heads * rope])
        compressed = self.linear(names.kv_a_proj, x, shape.hidden, kv_rank + rope, arch.attention_qkv_bias)
        kv_latent, k_rope = tape.split(compressed, [tokens * kv_rank, tokens * rope])
        kv_normed = self.rms_norm(names.kv_a_layernorm, kv_latent, tokens, kv_rank)
        q_rotated = self._mla_rope(q_rope)
        k_rotated = self._mla_rope(k_rope)
        query = self._concatenate(q_nope, q_rotated)
        tape.release(q_rotated)
        # q_pass and kv_pass / k_rot, views of q_b_proj's and kv_a_proj's outputs, are forward's locals: both
        # outputs live until it returns (measured: a recomputed layer's indexer peak holds them)
        expanded = self.linear(names.kv_b_proj, kv_normed, kv_rank, heads * (nope + v_dim), False)
        tape.release(kv_normed)
        k_nope, value = tape.split(expanded, [tokens * heads * nope, tokens * heads * v_dim])
        k_rope_heads = tape.expand(k_rotated, tokens * heads * rope)
        key = self._concatenate(k_nope, k_rope_heads)
        tape.release(k_rotated)
        top_indices = self._indexer(x, q_resid)
        tape.release(q_resid)  # forward's local: alive until here (saved by q_b_proj when it trains)
        mask = self._index_mask(top_indices)
        tape.release(top_indices)
        out = self._mla_attention_core(query, key, value)
        tape.release(query, key, expanded, mask)
        projected = self.linear(names.o_proj, out, heads * v_dim, shape.hidden, arch.attention_output_bias)
        tape.release(out, q, compressed)
        return projected

    def _indexer_weight(self, name: str, numel: int) -> Sym:
        return Sym(numel, self.kernels.weight_dtype, False, "parameter")

    def _indexer(self, x: Sym, q_resid: Sym) -> Sym:
        """``DeepseekV32Indexer.forward`` under no_grad (see the module docstring); returns the int32 top-k indices."""
        arch, shape, tape = self.arch, self.shape, self.tape
        b, s, rows = shape.batch, shape.seq, shape.tokens
        heads, width, rope = arch.indexer_heads or 0, arch.indexer_head_dim or 0, arch.qk_rope_head_dim
        x, q_resid = _no_grad(x), _no_grad(q_resid)
        q = tape.linear(q_resid, self._indexer_weight("wq_b", (arch.q_lora_rank or 0) * heads * width), heads * width)
        k_raw = tape.linear(x, self._indexer_weight("wk", shape.hidden * width), width)
        k = tape.unary_saving_result("layer_norm", k_raw)
        tape.release(k_raw)
        q_rotated, k_rotated = self._indexer_rope(q, rows * heads * rope), self._indexer_rope(k, rows * rope)
        q_cat = tape.copy(q)  # torch.cat([q_rot, q_pass])
        k_cat = tape.copy(k)
        # forward's locals q_pass/k_pass (views of q and k), q_rot/k_rot and the concatenations live until it returns
        q32, k32 = tape.to(q_cat, "fp32"), tape.to(k_cat, "fp32")
        raw = tape.matmul(q32, k32, b * s * heads * s)  # (b, s, H, D) @ (b, 1, D, s)
        for cast, original in ((q32, q_cat), (k32, k_cat)):
            if cast is not original:
                tape.release(cast)
        scores = tape.scale(raw)  # * softmax_scale
        tape.release(raw)
        relu = tape.scale(scores)  # F.relu: rebinding `scores` frees the scaled ones; the relu lives until return
        tape.release(scores)
        weights_low = tape.linear(x, self._indexer_weight("weights_proj", shape.hidden * heads), heads)
        weights32 = tape.to(weights_low, "fp32")
        if weights32 is not weights_low:
            tape.release(weights_low)
        weights = tape.scale(weights32)  # * n_heads ** -0.5
        tape.release(weights32)
        summed = tape.matmul(weights, relu, b * s * s)  # (b, s, 1, H) @ (b, s, H, s)
        tape.release(weights)
        inverted = tape.new(b * s * s, "bool", False)  # ~attention_mask
        masked = tape.scale(summed)  # masked_fill(~attention_mask, -inf)
        tape.release(summed, inverted)
        topk = min(arch.indexer_topk or s, s)
        values = tape.new(b * s * topk, masked.dtype, False)
        indices = tape.new(b * s * topk, "int64", False)
        tape.release(masked, values)
        indices32 = tape.new(b * s * topk, "int32", False)
        tape.release(indices, q, k, q_rotated, k_rotated, q_cat, k_cat, relu)
        return indices32

    def _indexer_rope(self, x: Sym, rope_numel: int) -> Sym:
        """``apply_rotary_pos_emb`` (rotate_half) on the first ``qk_rope_head_dim`` features: x·cos, the two
        halves' ``torch.cat((-x2, x1))`` (a negation, then the cat), its product with sin, the sum."""
        tape = self.tape
        part = x.view(rope_numel)
        with_cos = tape.new(rope_numel, tape.promote(x.dtype, self.kernels.stream_dtype), False)
        negated = tape.new(rope_numel // 2, x.dtype, False)
        rotated = tape.new(rope_numel, x.dtype, False)
        tape.release(negated)
        with_sin = tape.new(rope_numel, with_cos.dtype, False)
        tape.release(rotated)
        out = tape.new(rope_numel, with_cos.dtype, False)
        tape.release(with_cos, with_sin)
        del part
        return out

    def _index_mask(self, indices: Sym) -> Sym:
        """``new_ones((b, s, s), bool).scatter(-1, indices.long(), False)``, then ``attention_mask & ~index_mask``."""
        tape, shape = self.tape, self.shape
        cells = shape.batch * shape.seq * shape.seq
        ones = tape.new(cells, "bool", False)
        long_indices = tape.new(indices.numel, "int64", False)
        index_mask = tape.new(cells, "bool", False)
        tape.release(ones, long_indices)
        inverted = tape.new(cells, "bool", False)
        combined = tape.new(cells, "bool", False)
        tape.release(index_mask, inverted)
        return combined


class DeepseekV32(Glm4MoeLite):
    model_type = "deepseek_v32"
    defaults = DEEPSEEK_V32_DEFAULTS
    names = MlaNames()

    def read_config(self, fields: ConfigFields) -> Architecture:
        if "q_lora_rank" in fields.config and fields.config["q_lora_rank"] is None:
            raise fields.fail("q_lora_rank", "DeepSeek-V3.2's attention always has the query LoRA (transformers' "
                                             "AXK1Attention); give a positive integer, got null")
        arch = super(Glm4MoeLite, self).read_config(fields)
        d = self.defaults
        update: dict[str, object] = {
            "not_counted": mtp_not_counted(fields, 0),
            "rope_layout": "interleaved",
            "indexer_heads": fields.integer("index_n_heads", d["index_n_heads"]),
            "indexer_head_dim": fields.integer("index_head_dim", d["index_head_dim"]),
            "indexer_topk": fields.integer("index_topk", d["index_topk"]),
        }
        if update["indexer_head_dim"] < arch.qk_rope_head_dim:  # type: ignore[operator]
            raise fields.fail("index_head_dim", f"must be at least qk_rope_head_dim ({arch.qk_rope_head_dim}): the "
                                                f"indexer rotates its first qk_rope_head_dim features")
        if arch.num_experts:
            if fields.config.get("mlp_layer_types") is not None:  # a list, [] included (transformers refuses [])
                if not fields.string_list("mlp_layer_types"):
                    raise fields.fail("mlp_layer_types", f"has 0 entries for {arch.num_hidden_layers} layers")
                dense = dense_layers_from_mlp_layer_types(fields, arch.num_hidden_layers)
                if len(dense) == arch.num_hidden_layers:
                    raise fields.fail("mlp_layer_types", "marks every layer dense; give n_routed_experts: 0 for a dense model")
            else:  # DeepseekV32Config.__post_init__: the first first_k_dense_replace layers dense (as DeepSeek-V3)
                dense = tuple(range(min(fields.integer("first_k_dense_replace", d["first_k_dense_replace"], minimum=0),
                                        arch.num_hidden_layers)))
            update["dense_layers"] = dense
        return Architecture(**{**arch.model_dump(), **update})

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        return super().layer(arch) + indexer_tensors(arch)

    def quantized_by_bitsandbytes(self, tensor: ParameterTensor) -> bool:
        """``_keep_in_fp32_modules = ["indexer.weights_proj"]``: transformers skips it when quantising (and keeps it
        in fp32 when loading from a checkpoint)."""
        return super().quantized_by_bitsandbytes(tensor) and not tensor.name.startswith(f"{INDEXER}.weights_proj")

    def forward_locals_bytes(self, arch: Architecture, rows: int, seq: int, attention: str) -> list[tuple[str, int, str]]:
        return [("causal mask", rows * seq * seq,
                 "the (b, 1, s, s) boolean mask DeepseekV32Model always builds (allow_is_causal_skip=False)")]

    def program(self) -> type[MlaProgram]:
        return DeepseekV32Program


__all__ = ["DeepseekV32", "mla_attention"]
