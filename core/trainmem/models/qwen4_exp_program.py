"""Qwen4-Exp's decoder layer on the tape (transformers 5.24 ``modeling_qwen4_exp.py``), op by op.

The layer's input and output are the (tokens, hc·h) residual streams. ``Qwen4ExpTextDecoderLayer.forward``:

1. PLE layers: ``hidden_states + ple(hidden_states, input_ids)`` (:meth:`Qwen4ExpProgram._ple`);
2. ``attn_hyper_connection`` (:meth:`Qwen4ExpProgram._gated_residual`) gives the (tokens, h) input of the mixer,
   the streams themselves and the (tokens, hc) inject weights;
3. the Gated DeltaNet (Qwen3.5's, with ``output_gate_type`` in its gated norm) or the QSA indexer and Qwen3.5's
   gated attention under the combined boolean mask;
4. ``hidden_states = hyper_input + (out.unsqueeze(-2) * inject.unsqueeze(-1)).flatten(-2)``; the same around
   the MoE with ``mlp_hyper_connection``.

Every RMSNorm here is ``Qwen4ExpTextRMSNorm`` (Gemma's ``(1 + weight)`` in fp32, then ``type_as``); the
hyper-connection and PLE norms reduce over groups of h (``reshape(..., -1, h)``: rows = tokens · hc).
"""

from __future__ import annotations

import dataclasses

from ..tape import Sym
from .qwen3_5 import Qwen3_5Program


class Qwen4ExpProgram(Qwen3_5Program):
    """A Qwen4-Exp decoder layer: hyper-connections around Qwen3.5-MoE's sub-blocks, PLE, the QSA indexer."""

    linear_attention_family = "qwen4_exp_text"

    def __init__(self, arch, shape, kernels, trainability, tape):
        # The causal mask is always materialised (``allow_is_causal_skip=False``, for the indexer's overlay), so
        # SDPA gets a 4-D boolean mask on the attention layers (and repeats grouped K/V: layers.sdpa_repeats_kv).
        super().__init__(arch, dataclasses.replace(shape, attention_mask=True), kernels, trainability, tape)
        hc = arch.hyper_connections
        assert hc is not None
        self.hc = hc

    # ------------------------------------------------------------------ the layer
    def layer(self, x: Sym) -> Sym:
        tape, names = self.tape, self.names
        hidden = x
        if self.arch.layer_ple_index is not None:
            injected = self._ple(x)
            hidden = tape.add(x, injected)
            tape.release(injected)
        mixer_in, weights = self._gated_residual(names.attn_hyper_connection, hidden)
        mixed = self.attention(mixer_in)
        tape.release(mixer_in)
        after_attention = self._inject(hidden, mixed, weights)
        if hidden is not x:
            tape.release(hidden)
        mlp_in, weights = self._gated_residual(names.mlp_hyper_connection, after_attention)
        mixed = self.mlp(mlp_in)
        tape.release(mlp_in)
        out = self._inject(after_attention, mixed, weights)
        tape.release(after_attention)
        return out

    def final_norm(self, x: Sym, rows: int) -> Sym:
        """``hyper_connection_mixer``: the mixed (tokens, h) input of the head (no final norm, no inject weights)."""
        mixed, _ = self._gated_residual(self.names.hyper_connection_mixer, x, inject=False)
        return mixed

    # ------------------------------------------------------------------ hyper-connections
    def _gated_residual(self, module: str, x: Sym, inject: bool = True) -> tuple[Sym, Sym | None]:
        """``Qwen4ExpTextGatedResidual.forward``: ``normed = hc_norm(x)``;
        ``mix = sigmoid(up(silu(down(normed) / hc)))``; ``(mix * normed.unflatten).mean(-2)``; and
        ``2 * sigmoid(block_inject_weight(normed) / hc)``. Returns the mixed input and the inject weights."""
        tape, hc, h = self.tape, self.hc, self.shape.hidden
        tokens, wide = self.shape.tokens, self.hc.streams * self.shape.hidden
        normed = self._grouped_norm(f"{module}.hc_norm", x)
        down = self.linear(f"{module}.input_mix_weight_down", normed, wide, hc.rank, False)
        divided = tape.scale(down)
        tape.release(down)
        activated = tape.unary_saving_input("silu", divided)
        tape.release(divided)
        up = self.linear(f"{module}.input_mix_weight_up", activated, hc.rank, wide, False)
        tape.release(activated)
        mix = tape.unary_saving_result("sigmoid", up)
        tape.release(up)
        weighted = tape.mul(mix, normed)
        tape.release(mix)
        mixed = tape.reduce(weighted, tokens * h)  # .mean(dim=-2)
        tape.release(weighted)
        weights = None
        if inject:
            logits = self.linear(f"{module}.block_inject_weight", normed, wide, hc.streams, False)
            divided = tape.scale(logits)
            tape.release(logits)
            sigmoid = tape.unary_saving_result("sigmoid", divided)
            tape.release(divided)
            weights = tape.scale(sigmoid)  # 2 * sigmoid(...)
            tape.release(sigmoid)
        tape.release(normed)
        return mixed, weights

    def _inject(self, streams: Sym, out: Sym, weights: Sym | None) -> Sym:
        """``streams + (out.unsqueeze(-2) * weights.unsqueeze(-1)).flatten(-2)``: the broadcast product saves both
        operands; the sum saves nothing."""
        tape = self.tape
        assert weights is not None
        injection = self._broadcast_mul(out, weights, streams.numel)
        tape.release(out, weights)
        total = tape.add(streams, injection)
        tape.release(injection)
        return total

    def _broadcast_mul(self, a: Sym, b: Sym, numel: int) -> Sym:
        """``a * b`` broadcast to ``numel`` elements (``tape.mul`` assumes one operand has the output's size)."""
        tape = self.tape
        out = tape.new(numel, tape.promote(a.dtype, b.dtype), a.requires_grad or b.requires_grad)
        tape.record("mul", [b if a.requires_grad else None, a if b.requires_grad else None], [a, b], [out])
        return out

    def _grouped_norm(self, module: str, x: Sym) -> Sym:
        """``Qwen4ExpTextRMSNorm(hc·h, group_size=h)``: the fp32 RMS over each group of h, times
        ``1 + weight.float()`` (hc·h), ``type_as(x)``."""
        tape = self.tape
        rows = x.numel // self.shape.hidden
        normalized = self._normalize_in_fp32(x, rows)
        weight = tape.to(self.parameter(module, x.numel // self.shape.tokens), "fp32")
        one_plus = tape.scale(weight)
        scaled = tape.mul(normalized, one_plus)
        tape.release(normalized, one_plus)
        out = tape.to(scaled, x.dtype)
        if out is not scaled:
            tape.release(scaled)
        return out

    # ------------------------------------------------------------------ attention with the QSA indexer
    def attention(self, x: Sym) -> Sym:
        if self.arch.layer_linear_attention:
            return self.linear_attention(x)
        mask = self._indexer(x)
        out = self.gated_attention(x)
        self.tape.release(mask)
        return out

    def _indexer(self, x: Sym) -> Sym:
        """``Qwen4ExpTextQSAIndexer.forward``: ``index_qk_proj``, per-head norms and RoPE of the queries, a loop over
        every (sample, query) pooling complete key blocks and keeping the top-k blocks; its output is a boolean
        (b, 1, s, s) mask, so the autograd graph it built dies when it returns (nothing saved, no gradient) and
        only its transients count. Returns the combined mask (``attention_mask & selected``), alive through the
        attention call. Under autocast ``index_qk_proj``'s weight cast is cached until the region exits."""
        tape, shape, hc = self.tape, self.shape, self.hc
        masks = shape.batch * shape.seq * shape.kv_seq
        if not hc.indexer_heads:  # refused by the reader on attention layers: kept for explicit architectures
            return tape.new(0, "bool", False)
        width = (hc.indexer_heads + 1) * hc.indexer_head_dim
        weight = self.module_parameter(f"{self.names.indexer}.index_qk_proj", "weight", shape.hidden * width)
        x_in = tape.autocast_input("linear", x)
        tape.autocast_input("linear", weight)  # the weight's cast: cached (it requires grad) until autocast exits
        qk = tape.new(shape.tokens * width, x_in.dtype, False)
        if x_in is not x:
            tape.release(x_in)
        q32 = tape.new(shape.tokens * hc.indexer_heads * hc.indexer_head_dim, "fp32", False)  # q_layernorm's x.float()
        tape.release(q32)
        selected = tape.new(shape.tokens * (hc.indexer_budget + hc.indexer_compress_ratio - 1), "int32", False)
        scattered = tape.new(shape.batch * shape.seq * (shape.kv_seq + 1), "bool", False)
        tape.release(qk, selected)
        combined = tape.new(masks, "bool", False)  # attention_mask & selected_token_mask
        tape.release(scattered)
        return combined

    # ------------------------------------------------------------------ Gated DeltaNet: the output gate
    def _gate_activation(self, gate32: Sym) -> Sym:
        """``Qwen4ExpTextRMSNormGated``: Qwen3-Next's gated norm with ``ACT2FN[output_gate_type]`` on the gate:
        sigmoid saves its result where SiLU saves its input (the same bytes)."""
        if self.hc.output_gate == "silu":
            return super()._gate_activation(gate32)
        return self.tape.unary_saving_result("sigmoid", gate32)

    # ------------------------------------------------------------------ per-layer n-gram embedding
    def _ple(self, x: Sym) -> Sym:
        """``Qwen4ExpTextPLELayer.forward`` (no cache, no padding mask): returns the (tokens, hc·h) injection."""
        tape, shape, hc, names = self.tape, self.shape, self.hc, self.names
        b, s, h, tokens = shape.batch, shape.seq, shape.hidden, shape.tokens
        wide, ple = hc.streams * h, hc.ple_embed_dim
        embeddings = self._ngram_embedding()
        key = self.linear(f"{names.ple}.key_proj", embeddings, ple, wide, False)
        key_normed = self._grouped_norm(f"{names.ple}.norm_key", key)
        tape.release(key)
        value = self.linear(f"{names.ple}.value_proj", embeddings, ple, h, False)
        tape.release(embeddings)
        query_normed = self._grouped_norm(f"{names.ple}.norm_query", x)
        product = tape.mul(key_normed, query_normed)
        tape.release(key_normed, query_normed)
        summed = tape.reduce(product, tokens * hc.streams)  # .sum(dim=-1, keepdim=True)
        tape.release(product)
        gate = tape.scale(summed)  # / sqrt(hidden_size)
        tape.release(summed)
        # gate.abs().clamp_min(1e-6).sqrt() * gate.sign()
        absolute = tape.unary_saving_input("abs", gate)
        clamped = tape.unary_saving_input("clamp_min", absolute)
        tape.release(absolute)
        root = tape.unary_saving_result("sqrt", clamped)
        tape.release(clamped)
        sign = tape.new(gate.numel, gate.dtype, False)
        signed = tape.mul(root, sign)
        tape.release(root, sign, gate)
        sigmoid = tape.unary_saving_result("sigmoid", signed)
        tape.release(signed)
        gated_value = self._broadcast_mul(sigmoid, value, tokens * wide)  # sigmoid(gate) * value.unsqueeze(-2)
        tape.release(sigmoid, value)
        gated_normed = self._grouped_norm(f"{names.ple}.norm_conv", gated_value)
        conv = self._short_conv(gated_normed)
        tape.release(gated_normed)
        out = tape.add(gated_value, conv)
        tape.release(gated_value, conv)
        return out

    def _ngram_embedding(self) -> Sym:
        """``Qwen4ExpTextNGramEmbedding.forward``: int64 hashing of the token history (eos-padded by
        ngram_size − 1), then one lookup of (b, s, heads) ids into the concatenated tables; the lookup saves the
        ids, a slice of the (b, s + n − 1, heads) ``torch.cat`` of the per-order blocks (its whole storage)."""
        tape, shape, hc = self.tape, self.shape, self.hc
        b, s = shape.batch, shape.seq
        history = b * (s + hc.ngram_size - 1)
        ids = Sym(history * hc.ngram_heads, "int64", False)
        table = self.parameter(f"{self.names.ple}.ple_embedding.ngram_embedding", hc.ngram_rows(self.arch.layer_ple_index or 0) * hc.ngram_head_dim)
        tape.keep(ids)
        out = tape.new(shape.tokens * hc.ple_embed_dim, table.dtype, table.requires_grad)
        tape.record("embedding", [ids], [table], [out])
        tape.release(ids)
        return out

    def _short_conv(self, x: Sym) -> Sym:
        """``_short_conv``: ``F.pad`` by (kernel − 1)·dilation (a new tensor), the slice (all of it), the depthwise
        dilated ``conv1d`` (saves its padded input and the weight), SiLU (saves the conv's output)."""
        tape, shape, hc = self.tape, self.shape, self.hc
        wide = hc.streams * shape.hidden
        kernel = hc.ple_conv_kernel_size
        pad = (kernel - 1) * hc.ngram_size
        weight = self.parameter(f"{self.names.ple}.conv1d", wide * kernel)
        padded = tape.new(shape.batch * wide * (shape.seq + pad), x.dtype, x.requires_grad)
        tape.record("pad", [], [x], [padded])
        x_in = tape.autocast_input("conv", padded)
        w_in = tape.autocast_input("conv", weight)
        conv = tape.new(shape.tokens * wide, x_in.dtype if tape.autocast else w_in.dtype, True)
        tape.record("conv1d", [x_in, w_in], [x_in, w_in], [conv])
        if x_in is not padded:
            tape.release(padded)
        tape._release_casts((x_in, padded), (w_in, weight))
        tape.release(padded)
        activated = tape.unary_saving_input("silu", conv)
        tape.release(conv)
        return activated

