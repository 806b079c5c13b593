"""A T5 block on the tape (transformers 5.24 ``T5Block``, ``T5Attention``, ``T5LayerFF``).

Encoder block: ``x + dropout(SelfAttention(layer_norm(x)))``, then ``x + dropout(DenseReluDense(layer_norm(x)))``.
Decoder block: the same with ``x + dropout(EncDecAttention(layer_norm(x), encoder_output))`` between them.

* the norms are ``T5LayerNorm`` (RMSNorm, variance in fp32): :meth:`LayerProgram.norm`;
* attention has no biases and no rotary embedding; the relative position bias (computed once per stack by
  its first layer and handed down) is added to the scores: a transient that saves nothing, shared by the
  layers (the stack keeps one (1, a, s, s) tensor, :mod:`trainmem.encoder_decoder.stack`);
* cross-attention projects the encoder output to K and V in every decoder layer (b·s_src·a·d_kv each,
  saved by the attention kernel); the encoder output itself is one tensor shared by all layers (an
  ``external`` tensor here: the stack keeps it until the decoder's backward is done), and its gradient
  is one buffer that the layers' backward add into (kept by the stack's accounting, not per layer);
* ``DenseReluDense``: ``wo(dropout(act(wi(x))))`` or ``wo(dropout(gelu_new(wi_0(x)) * wi_1(x)))``.
"""

from __future__ import annotations

from dataclasses import replace

from ..layers import LayerProgram
from ..tape import Sym


class T5LayerProgram(LayerProgram):
    """One T5 block (encoder or decoder, by ``arch.cross_attention``)."""

    def __init__(self, arch, shape, kernels, trainability, tape):
        super().__init__(arch, shape, kernels, trainability, tape)
        if not arch.cross_attention:
            self.names = self.family.encoder_names

    def layer(self, x: Sym) -> Sym:
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        rows, h = shape.stream_tokens, shape.hidden
        normed = self.norm(names.input_norm, x, rows, h)
        attended = self._residual_dropout(self.attention(normed))
        tape.release(normed)
        hidden = tape.add(x, attended)
        tape.release(attended)
        if arch.cross_attention:
            normed = self.norm(names.cross_norm, hidden, rows, h)
            crossed = self._residual_dropout(self.cross_attention(normed))
            tape.release(normed)
            summed = tape.add(hidden, crossed)
            tape.release(hidden, crossed)
            hidden = summed
        normed = self.norm(names.post_attention_norm, hidden, rows, h)
        mixed = self._residual_dropout(self.feed_forward(normed))
        tape.release(normed)
        out = tape.add(hidden, mixed)
        tape.release(hidden, mixed)
        return out

    def cross_attention(self, x: Sym) -> Sym:
        """``EncDecAttention``: q from the decoder, k and v from the encoder output (``cross_seq`` positions)."""
        shape, tape, names = self.shape, self.tape, self.names
        inner = shape.heads * shape.head_dim
        source_tokens = shape.batch * shape.cross_seq
        # The encoder output requires grad when the encoder trains (full fine-tuning: every module does) or
        # carries adapters (LoRA's target_modules match both stacks' modules by name: PEFT's defaults q, v and
        # q_proj, v_proj do); frozen groups are refused for encoder-decoders (trainmem.encoder_decoder.checks).
        encoder_trains = self.trainability.trains(names.cross_k) or self.kernels.lora_rank > 0
        encoder_output = Sym(source_tokens * shape.hidden, self.kernels.stream_dtype, encoder_trains, "external")
        q = self.linear(names.cross_q, x, shape.hidden, inner, self.arch.attention_qkv_bias)
        k = self._encoder_projection(names.cross_k, encoder_output, inner)
        v = self._encoder_projection(names.cross_v, encoder_output, inner)
        self_shape = self.shape
        self.shape = replace(self_shape, kv_seq=shape.cross_seq, attention_mask=False, packed_row=False)
        self._cross = True
        try:
            out = self._attention_core(q, k, v)
        finally:
            self.shape = self_shape
            self._cross = False
        tape.release(q, k, v)
        projected = self.linear(names.cross_o, out, inner, shape.hidden, self.arch.attention_output_bias)
        tape.release(out)
        return projected

    def _encoder_projection(self, module: str, encoder_output: Sym, inner: int) -> Sym:
        """``k(encoder_output)`` / ``v(encoder_output)``. Under autocast each call casts the shared encoder
        output to the low dtype: a new activation per projection, which the linear saves for its weight's
        gradient (measured, torch 2.13 CPU autocast)."""
        tape = self.tape
        source = encoder_output
        if tape.autocast is not None and encoder_output.dtype != tape.autocast:
            source = tape.new(encoder_output.numel, tape.autocast, encoder_output.requires_grad)
            tape.record("to_copy", [], [encoder_output], [source])
        out = self.linear(module, source, self.shape.hidden, inner, self.arch.attention_qkv_bias)
        if source is not encoder_output:
            tape.release(source)
        return out

    _cross = False

    def _attention_core(self, q: Sym, k: Sym, v: Sym) -> Sym:
        """T5's ``eager_attention_forward``: ``softmax(q kᵀ · scaling + position_bias) [dropout] @ v``.

        The position bias is a tensor: in self-attention the relative bias table's lookup in the weights'
        dtype (fp32 under autocast, so the biased scores, their softmax and its dropout are fp32), in
        cross-attention zeros in the query's dtype. SDPA and its math path are the shared kernels
        (:meth:`LayerProgram._attention_core`; the bias is their additive mask, not modelled)."""
        if self.kernels.attention != "eager":
            return super()._attention_core(q, k, v)
        shape, tape = self.shape, self.tape
        first_saved = len(tape.saved_storages)
        scores = tape.matmul(q, k, shape.batch * shape.heads * shape.seq * shape.kv_seq)
        scaled = tape.scale(scores)
        tape.release(scores)
        bias_dtype = q.dtype if self._cross else self.kernels.weight_dtype
        biased = tape.add(scaled, Sym(shape.heads * shape.seq * shape.kv_seq, bias_dtype, False, "external"))
        tape.release(scaled)
        # CPU autocast left the softmax in the scores' dtype (measured, torch 2.13: bf16 in cross-attention, fp32
        # where the fp32 bias promoted the scores); CUDA autocast runs softmax in fp32 (its fp32 op list).
        probs = tape.unary_saving_result("softmax", biased, dtype=biased.dtype if self.kernels.device == "cpu" else None)
        tape.release(biased)
        dropped = tape.dropout(probs, self.arch.attention_dropout)
        context = tape.matmul(dropped, v, q.numel)
        tape.release(probs, dropped)
        out = tape.copy(context)  # transpose(1, 2).contiguous()
        tape.release(context)
        if self.kernels.selective_recompute:
            self._forget_saved_since(first_saved, keep=(q, k, v))
        return out

    def feed_forward(self, x: Sym) -> Sym:
        """``T5DenseActDense`` / ``T5DenseGatedActDense``: dropout between the activation and ``wo``."""
        arch, tape, names = self.arch, self.tape, self.names
        h, width, prefix = self.shape.hidden, self.shape.intermediate, names.mlp
        if arch.mlp == "plain":
            hidden = self.linear(f"{prefix}.{names.fc1}", x, h, width, False)
            activated = self._activation(hidden)
            tape.release(hidden)
        else:
            gate = self.linear(f"{prefix}.{names.gate_proj}", x, h, width, False)
            up = self.linear(f"{prefix}.{names.up_proj}", x, h, width, False)
            act = self._activation(gate)
            activated = tape.mul(act, up)
            tape.release(gate, up, act)
        dropped = tape.dropout(activated, arch.residual_dropout)
        if dropped is not activated:
            tape.release(activated)
        out = self.linear(f"{prefix}.{names.down_proj}", dropped, width, h, False)
        tape.release(dropped)
        return out


class BartLayerProgram(T5LayerProgram):
    """``BartEncoderLayer`` / ``BartDecoderLayer``: post-LN sub-blocks, ``x = LayerNorm(x + dropout(f(x)))``.

    Attention is BERT's ``eager_attention_forward`` (``softmax(q kᵀ · scaling [+ mask])`` in the scores'
    dtype on a CPU, fp32 under CUDA autocast, dropout, ``@ v``) or SDPA; the MLP is ``fc2(activation_dropout(
    act(fc1(x))))``. The decoder's eager causal mask (a (b, 1, t, t) tensor of the whole forward, in the
    embeddings' dtype) promotes its self-attention scores; the mask itself is not counted."""

    def layer(self, x: Sym) -> Sym:
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        rows, h = shape.stream_tokens, shape.hidden
        hidden = self._post_norm(names.input_norm, x, self._residual_dropout(self.attention(x)), False)
        if arch.cross_attention:
            hidden = self._post_norm(names.cross_norm, hidden, self._residual_dropout(self.cross_attention(hidden)))
        return self._post_norm(names.post_attention_norm, hidden, self._residual_dropout(self.feed_forward(hidden)))

    def _post_norm(self, module: str, residual: Sym, branch: Sym, release_residual: bool = True) -> Sym:
        """``LayerNorm(residual + branch)``; the layer's own input is the caller's to release."""
        tape = self.tape
        summed = tape.add(residual, branch)
        tape.release(branch)
        if release_residual:
            tape.release(residual)
        out = self.norm(module, summed, self.shape.stream_tokens, self.shape.hidden)
        tape.release(summed)
        return out

    def feed_forward(self, x: Sym) -> Sym:
        arch, tape, names = self.arch, self.tape, self.names
        h, width = self.shape.hidden, self.shape.intermediate
        hidden = self.linear(names.fc1, x, h, width, arch.mlp_bias)
        activated = self._activation(hidden)
        tape.release(hidden)
        dropped = tape.dropout(activated, arch.mlp_activation_dropout)
        if dropped is not activated:
            tape.release(activated)
        out = self.linear(names.fc2, dropped, width, h, arch.mlp_bias)
        tape.release(dropped)
        return out

    def _attention_core(self, q: Sym, k: Sym, v: Sym) -> Sym:
        if self.kernels.attention != "eager":
            return LayerProgram._attention_core(self, q, k, v)
        shape, tape = self.shape, self.tape
        first_saved = len(tape.saved_storages)
        scores = tape.matmul(q, k, shape.batch * shape.heads * shape.seq * shape.kv_seq)
        scaled = tape.scale(scores)
        tape.release(scores)
        if self.arch.cross_attention and not self._cross:
            # The decoder's self-attention adds its 4-D causal mask, made in the embeddings' dtype (BartDecoder
            # passes an all-ones attention_mask, so eager gets a float mask): fp32 under autocast promotes the scores.
            masked = tape.add(scaled, Sym(shape.batch * shape.seq * shape.kv_seq, self.kernels.weight_dtype, False, "external"))
            tape.release(scaled)
            scaled = masked
        probs = tape.unary_saving_result("softmax", scaled, dtype=scaled.dtype if tape.device == "cpu" else None)
        tape.release(scaled)
        dropped = tape.dropout(probs, self.arch.attention_dropout)
        context = tape.matmul(dropped, v, q.numel)
        tape.release(probs, dropped)
        out = tape.copy(context)  # attn_output.transpose(1, 2).contiguous()
        tape.release(context)
        if self.kernels.selective_recompute:
            self._forget_saved_since(first_saved, keep=(q, k, v))
        return out


class WhisperLayerProgram(BartLayerProgram):
    """``WhisperEncoderLayer`` / ``WhisperDecoderLayer``: BART's attention and MLP in T5's pre-LN order,
    ``x + dropout(f(LayerNorm(x)))`` (transformers 5.24 models/whisper/modeling_whisper.py)."""

    layer = T5LayerProgram.layer

    def _attention_core(self, q: Sym, k: Sym, v: Sym) -> Sym:
        """BART's kernels, but ``WhisperAttention`` hands SDPA contiguous (b, a, s, d) queries
        (``(q_proj(x) * scaling).view(...).transpose(1, 2).contiguous()``), so the fused kernel's output,
        laid out like the query, is (b, a, s, d) too, and ``attn_output.transpose(1, 2).contiguous()`` copies
        it: the kernel keeps its output for backward and ``out_proj`` saves the copy (measured, torch 2.13 CPU
        flash attention: one clone per attention call; BART's transposed query views need no copy)."""
        out = super()._attention_core(q, k, v)
        if self.kernels.attention != "fused":
            return out
        copied = self.tape.copy(out)
        self.tape.release(out)
        return copied
