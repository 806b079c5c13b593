"""Encoders on the tape: their post-LN layer, their embeddings, and the task heads of :mod:`trainmem.tasks`.

Each function mirrors the forward of the transformers 5.24 module it names, op for op, as
``layers.py`` and ``ends.py`` do for decoders:

* :class:`EncoderLayerProgram` (``BertLayer``): self-attention over every position (no causal mask;
  with no padding mask transformers passes none: ``create_bidirectional_mask`` returns ``None`` for a
  fully visible batch), the output projection, dropout, ``LayerNorm(x + ·)``; then the intermediate
  dense layer, GELU, the output dense layer, dropout, ``LayerNorm(h + ·)``;
* :func:`trace_encoder_embedding` (``BertEmbeddings``): word + token-type + position embeddings,
  LayerNorm, dropout; RoBERTa computes its position ids from the input ids;
* :func:`trace_task_head`: the head of ``arch.task`` and its loss (cross-entropy inside the
  model's forward, so under autocast ``log_softmax`` upcasts the logits itself).
"""

from __future__ import annotations

from typing import Optional

from .architecture import Architecture
from .layers import LayerKernels, LayerProgram, LayerShape, Trace, Trainability, replay
from .tape import Sym, Tape

CONTRASTIVE_SCALE = 20.0
"""sentence-transformers' MultipleNegativesRankingLoss scale (a Python float: nothing saved)."""


class EncoderLayerProgram(LayerProgram):
    """``BertLayer.forward`` (and DistilBERT's ``TransformerBlock``): post-LN residual blocks."""

    def layer(self, x: Sym) -> Sym:
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        rows, h = shape.stream_tokens, shape.hidden
        attended = self.attention(x)
        if self.family.attention_output_dropout:
            attended = self._dropped(attended, arch.residual_dropout)
        summed = tape.add(attended, x)
        hidden = self.norm(names.post_attention_norm, summed, rows, h)
        # ``BertSelfOutput.forward``: ``LayerNorm(hidden_states + input_tensor)``, the dense output is its local
        # until it returns; ``BertOutput.forward`` likewise keeps its ``input_tensor`` through its LayerNorm
        # (measured, torch 2.13 CPU: both freed after the norm's output exists).
        tape.release(attended, summed)
        inner = self.linear(names.intermediate, hidden, h, shape.intermediate, True)
        activated = self._activation(inner)
        tape.release(inner)
        out = self.linear(names.output, activated, shape.intermediate, h, True)
        tape.release(activated)
        out = self._dropped(out, arch.residual_dropout)
        summed = tape.add(out, hidden)
        result = self.norm(names.post_feedforward_norm, summed, rows, h)
        tape.release(out, hidden, summed)
        return result

    def _attention_core(self, q: Sym, k: Sym, v: Sym) -> Sym:
        """Fused and math SDPA as for decoders; the eager path is BERT's ``eager_attention_forward``:
        ``softmax(q kᵀ · scale)`` in the scores' dtype, dropout, ``@ v``, transposed to a contiguous copy.
        CPU autocast leaves ``softmax`` in bf16 (measured, torch 2.13: ``aten._softmax`` returns bf16
        for bf16 scores); CUDA autocast runs it in fp32 (the AMP docs' float32 list)."""
        if self.kernels.attention != "eager":
            return super()._attention_core(q, k, v)
        shape, tape = self.shape, self.tape
        scores = tape.matmul(q, k, shape.batch * shape.heads * shape.seq * shape.kv_seq)
        scaled = tape.scale(scores)
        tape.release(scores)
        keep_dtype = scaled.dtype if tape.device == "cpu" else None
        probs = tape.unary_saving_result("softmax", scaled, dtype=keep_dtype)
        tape.release(scaled)
        dropped = tape.dropout(probs, self.arch.attention_dropout)
        context = tape.matmul(dropped, v, q.numel)
        tape.release(probs, dropped)
        out = tape.copy(context)  # attn_output.transpose(1, 2).contiguous()
        tape.release(context)
        return out

    def _dropped(self, x: Sym, p: float) -> Sym:
        dropped = self.tape.dropout(x, p)
        if dropped is not x:
            self.tape.release(x)
        return dropped

    # ------------------------------------------------------------------ the heads
    def head_trains(self, module: Optional[str] = None) -> bool:
        """Whether a module of the task head trains: the ``lm_head`` group's rule, or under LoRA the module's
        own (PEFT's ``modules_to_save`` copies, e.g. the classifier a ``SEQ_CLS`` task type adds)."""
        if self.kernels.lora_rank and module:
            return self.trainability.trains(module)
        return self.trainability.trains(self.names.lm_head)

    def head_parameter(self, numel: int, module: Optional[str] = None) -> Sym:
        """A weight of the task head (the ``lm_head`` group)."""
        return Sym(numel, self.kernels.weight_dtype, self.head_trains(module), "parameter")

    def head_linear(self, x: Sym, in_features: int, out_features: int, module: Optional[str] = None, bias: bool = True) -> Sym:
        weight = self.head_parameter(in_features * out_features, module)
        bias_param = self.head_parameter(out_features, module) if bias else None
        return self.tape.linear(x, weight, out_features, bias_param)

    def task_head(self, x: Sym) -> Sym:
        """The head of ``arch.task`` on the last layer's output ``x`` (b·s·h); returns the loss."""
        arch, shape, tape = self.arch, self.shape, self.tape
        h, batch, tokens = shape.hidden, shape.batch, shape.tokens
        task = arch.task
        if task == "sequence_classification":
            logits = self._sequence_logits(x)
            loss = self._cross_entropy(logits, batch)
            tape.release(logits)
            return loss
        if task == "token_classification":
            dropped = tape.dropout(x, self.family.head_dropout(arch, task))
            logits = self.head_linear(dropped, h, arch.num_labels, self.names.classifier)
            if dropped is not x:
                tape.release(dropped)
            loss = self._cross_entropy(logits, tokens)
            tape.release(logits)
            return loss
        if task == "masked_lm":
            return self._masked_lm(x)
        return self._contrastive(x)

    def _sequence_logits(self, x: Sym) -> Sym:
        """The first token's hidden state (``x[:, 0]``, a view of x) through the family's classifier."""
        arch, shape, tape = self.arch, self.shape, self.tape
        h, batch = shape.hidden, shape.batch
        first = x.view(batch * h)
        style = self.family.sequence_head
        p = self.family.head_dropout(arch, "sequence_classification")
        if style == "classification_head":  # RoBERTa: dropout, dense, tanh, dropout, out_proj
            dropped = tape.dropout(first, p)
            dense = self.head_linear(dropped, h, h, self.names.classification_dense)
            if dropped is not first:
                tape.release(dropped)
            activated = tape.unary_saving_result("tanh", dense)
        else:  # BERT's pooler (dense, tanh) or DistilBERT's pre_classifier (dense, ReLU)
            module = self.names.pooler if style == "pooler" else self.names.classification_dense
            dense = self.head_linear(first, h, h, module)
            activated = tape.unary_saving_result("tanh" if style == "pooler" else "relu", dense)
        tape.release(dense)
        dropped = tape.dropout(activated, p)
        if dropped is not activated:
            tape.release(activated)
        logits = self.head_linear(dropped, h, arch.num_labels, self.names.classifier)
        tape.release(dropped)
        return logits

    def _masked_lm(self, x: Sym) -> Sym:
        """``BertOnlyMLMHead``: dense, GELU, LayerNorm, the decoder (tied to the word embeddings) and its
        bias; ``CrossEntropyLoss`` over ``prediction_scores.view(-1, vocab_size)``."""
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        h, tokens = shape.hidden, shape.tokens
        dense = self.head_linear(x, h, h, names.mlm_transform)
        activated = tape.unary_saving_input(arch.hidden_act, dense)
        tape.release(dense)
        weight, bias = self.head_parameter(h, names.mlm_norm), self.head_parameter(h, names.mlm_norm)
        normed = tape.layer_norm(activated, tokens, weight, bias)
        tape.release(activated)
        decoder_trains = self.trainability.trains(names.embed_tokens if arch.tie_word_embeddings else names.lm_head)
        decoder = Sym(arch.vocab_size * h, self.kernels.weight_dtype, decoder_trains, "parameter")
        logits = tape.linear(normed, decoder, arch.vocab_size, self.head_parameter(arch.vocab_size, names.mlm_decoder))
        tape.release(normed)
        loss = self._cross_entropy(logits, tokens)
        tape.release(logits)
        return loss

    def _contrastive(self, x: Sym) -> Sym:
        """Mean pooling as sentence-transformers 6.2's ``Pooling`` does it (the hidden states times the
        attention mask cast to their dtype, broadcast over the hidden size, summed over the sequence,
        divided by the mask's sum), L2 normalisation, the b×b cosine similarities of anchors and
        positives times a scale, cross-entropy against the diagonal."""
        shape, tape = self.shape, self.tape
        h, sequences, tokens = shape.hidden, shape.batch, shape.tokens
        pairs = sequences // 2
        mask = tape.new(tokens, x.dtype, False)  # attention_mask.unsqueeze(-1).to(dtype): (2b, s, 1)
        masked = tape.mul(x, mask)  # broadcast over the hidden size
        accumulation = "fp32" if x.dtype in ("bf16", "fp16") else x.dtype
        summed = tape.sum(masked, sequences * h, dtype=accumulation)
        tape.release(masked)
        counts = tape.new(sequences, accumulation, False)  # mask.sum(1, dtype=...).clamp(min=1e-9)
        divided = tape.mul(summed, counts)  # sum / count (DivBackward saves the divisor)
        tape.release(summed, counts, mask)
        pooled = tape.to(divided, x.dtype)  # .to(hidden.dtype)
        if pooled is not divided:
            tape.release(divided)
        squares = tape.reduce(pooled, sequences)  # F.normalize: x / ‖x‖₂.clamp_min(eps)
        norms = tape.unary_saving_result("norm", squares)
        tape.release(squares)
        normalized = tape.mul(pooled, norms)
        tape.release(norms)
        anchors, positives = tape.split(normalized, [pairs * h, pairs * h])
        scores = tape.matmul(anchors, positives, pairs * pairs)
        scaled = tape.scale(scores)
        tape.release(scores)
        loss = self._cross_entropy(scaled, pairs)
        tape.release(scaled, normalized, pooled)
        return loss

    def _cross_entropy(self, logits: Sym, rows: int) -> Sym:
        """``F.cross_entropy`` inside the autocast region: log_softmax casts 16-bit logits to fp32 (a
        per-call copy, freed once the log-softmax is computed)."""
        tape = self.tape
        logits32 = tape.autocast_input("log_softmax", logits)
        loss = tape.cross_entropy(logits32, rows)
        if logits32 is not logits:
            tape.release(logits32)
        return loss


def trace_encoder_embedding(
    arch: Architecture,
    shape: LayerShape,
    kernels: LayerKernels,
    trainability: Trainability,
    parameter_grads_exist: bool = False,
    token_grad_exists: bool = False,
) -> Trace:
    """``BertEmbeddings.forward``: ``LayerNorm(word(ids) + token_type(tt) + position(pos))``, dropout.

    The position ids are a slice of a buffer (BERT, DistilBERT: (1, s), no new memory) or computed
    from the input ids (RoBERTa: a (b, s) int64 tensor); the token-type ids are gathered from the
    zero buffer at the position ids ((1, s) for BERT, (b, s) for RoBERTa) and expanded to the batch.
    The embedding backward saves its int64 indices. Every local (word, token-type and position
    embeddings, the first sum) lives until the forward returns; the second sum is saved by the
    LayerNorm, and the model keeps the output referenced until it returns."""
    from .models import family_for

    names = family_for(arch).names
    tape = Tape(device=kernels.device, autocast=kernels.autocast)
    tokens, h, seq = shape.stream_tokens, shape.hidden, shape.seq
    dtype = kernels.weight_dtype

    def table(module: str, rows: int, external: bool = False) -> Sym:
        trains = trainability.trains(module)
        return Sym(rows * h, dtype, trains, "external" if external else "parameter")

    words_weight = table(names.embed_tokens, arch.vocab_size, token_grad_exists)
    words = tape.new(tokens * h, dtype, words_weight.requires_grad)
    tape.record("embedding", [Sym(tokens, "int64", False, "external")], [words_weight], [words])
    position_rows = tokens if arch.positions_from_input_ids else seq
    position_ids = tape.new(position_rows, "int64", False) if arch.positions_from_input_ids else Sym(seq, "int64", False, "external")
    locals_ = [words]
    summed = words
    if arch.type_vocab_size:
        type_ids = tape.new(position_rows, "int64", False)  # torch.gather(buffer, 1, position_ids)
        type_weight = table(names.embed_token_types, arch.type_vocab_size)
        types = tape.new(tokens * h, dtype, type_weight.requires_grad)
        tape.record("embedding", [type_ids], [type_weight], [types])
        tape.release(type_ids)
        summed = tape.add(words, types)
        locals_.append(types)
    if arch.position_embedding == "learned":
        position_weight = table(names.embed_positions, arch.max_position_embeddings)
        positions = tape.new(position_rows * h, dtype, position_weight.requires_grad)
        tape.record("embedding", [position_ids], [position_weight], [positions])
        tape.release(position_ids)
        total = tape.add(summed, positions)
        if summed is not words:
            tape.release(summed)
        locals_.append(positions)
    else:  # ModernBERT: RoPE in the layers, the norm reads the token embeddings
        total = summed
        locals_.remove(words)
    out = total
    if arch.embedding_norm:
        norm_bias = table(names.embedding_norm, 1) if arch.norm_bias else None
        out = tape.layer_norm(total, tokens, table(names.embedding_norm, 1), norm_bias)
        tape.release(total)
    dropped = tape.dropout(out, arch.embedding_dropout)
    if dropped is not out:
        tape.release(out)
    tape.release(*locals_)
    saved = tape.saved_bytes(("activation",))
    return replay(tape, [dropped], tape.peak_live_bytes, tape.live_bytes() - saved, False, parameter_grads_exist)


def trace_task_head(
    arch: Architecture,
    shape: LayerShape,
    kernels: LayerKernels,
    trainability: Trainability,
    parameter_grads_exist: bool = False,
    text_sequence_length: int = 0,
) -> Trace:
    """The task head and its loss on the last layer's output (``text_sequence_length``: the contrastive task's text)."""
    from .models import family_for

    tape = Tape(device=kernels.device, autocast=kernels.autocast)
    program = family_for(arch).program()(arch, shape, kernels, trainability, tape)
    if text_sequence_length:
        program.text_sequence_length = text_sequence_length
    x = tape.new(shape.stream_tokens * shape.hidden, kernels.stream_dtype, True)
    loss = program.task_head(x)
    tape.release(x)
    return replay(tape, [loss], tape.peak_live_bytes, loss.nbytes, False, parameter_grads_exist, x)


def encoder_buffer_bytes(arch: Architecture, device: str) -> int:
    """``position_ids`` and ``token_type_ids``: int64 buffers of ``max_position_embeddings`` values
    registered by the embeddings module (``nn.Buffer(..., persistent=False)``); DistilBERT has only
    the first. Not cast with the model (integers)."""
    from .allocator import rounded

    if not arch.bidirectional:
        return 0
    if arch.image_size:  # a vision encoder (models/vision_encoders.py): CLIP's and SigLIP's position_ids only
        from .models import family_for

        buffer = family_for(arch).buffer_bytes(arch)
        return rounded(buffer, device) if buffer else 0
    if arch.position_embedding != "learned":
        return 0  # ModernBERT: position ids made per forward (arange), RoPE's inv_freq buffers instead
    buffers = 2 if arch.type_vocab_size else 1
    return buffers * rounded(arch.max_position_embeddings * 8, device)
