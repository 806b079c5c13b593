"""The two ends of the model: the embedding before the first layer and the loss head after the last.

Both are replayed on a :class:`~trainmem.tape.Tape` like a decoder layer (``layers.py``).
The head is where single-GPU steps usually peak: ``ForCausalLMLoss`` upcasts the logits to
fp32 (``logits.float()``), ``cross_entropy`` saves the fp32 log-softmax, and the first
backward nodes allocate its gradient and the gradient of the logits while the saved
log-softmax is still alive. A chunked loss (torchtune's ``CEWithChunkedOutputLoss``, Liger's
fused linear cross-entropy) runs the same ops on 1/chunks of the tokens at a time.
"""

from __future__ import annotations

from typing import Optional

from .architecture import Architecture
from .layers import LayerKernels, LayerProgram, LayerShape, Trace, Trainability, replay
from .tape import Sym, Tape


def _program(arch: Architecture, shape: LayerShape, kernels: LayerKernels, trainability: Trainability, tape: Tape) -> LayerProgram:
    from .models import family_for

    return family_for(arch).program()(arch, shape, kernels, trainability, tape)


def trace_embedding(
    arch: Architecture,
    shape: LayerShape,
    kernels: LayerKernels,
    trainability: Trainability,
    parameter_grads_exist: bool = False,
    token_grad_exists: bool = False,
    vocab: Optional[int] = None,
) -> Trace:
    """``embed_tokens(input_ids)`` (+ GPT-2's learned positions and dropout, Gemma's sqrt(h) scaling).

    The embedding output stays referenced by the model's forward (``inputs_embeds``) until the
    forward returns; the caller keeps it alive through the forward. ``vocab``: the rows this
    rank holds (vocab / t under tensor parallelism: Megatron's ``VocabParallelEmbedding`` and
    DTensor's ``RowwiseParallel`` embedding both leave the gradient of the rank's slice only).
    """
    from .models import family_for

    names = family_for(arch).names
    tape = Tape(device=kernels.device, autocast=kernels.autocast)
    tokens, h = shape.stream_tokens, shape.hidden
    weight = Sym(
        (vocab or arch.vocab_size) * h,
        kernels.weight_dtype,
        trainability.trains(names.embed_tokens),
        "external" if token_grad_exists else "parameter",
    )
    out = tape.new(tokens * h, kernels.weight_dtype, weight.requires_grad)
    tape.record("embedding", [Sym(tokens, "int64", False, "external")], [weight], [out])  # saves input_ids itself
    if arch.position_embedding == "learned":
        positions = Sym(arch.max_position_embeddings * h, kernels.weight_dtype, trainability.trains(names.embed_positions), "parameter")
        position_out = tape.new(shape.seq * h, kernels.weight_dtype, positions.requires_grad)
        tape.record("embedding", [Sym(shape.seq, "int64", False)], [positions], [position_out])
        out = tape.add(out, position_out)  # inputs_embeds and position_embeds stay referenced
    if arch.scale_embeddings:
        scaled = tape.mul(out, Sym(1, out.dtype, False))  # inputs_embeds * normalizer
        out = scaled
    if arch.embedding_multiplier is not None:  # Granite: inputs_embeds * embedding_multiplier (a float)
        scaled = tape.scale(out)
        tape.release(out)
        out = scaled
    dropped = tape.dropout(out, arch.embedding_dropout)
    if dropped is not out and arch.position_embedding == "learned":
        tape.release(out)  # the sum is not saved by dropout
    streams = family_for(arch).residual_streams(arch)
    if streams > 1:  # hidden_states.repeat(1, 1, hc_count) (Qwen4-Exp): inputs_embeds stays referenced too
        dropped = tape.copy(dropped, dropped.numel * streams)
    saved = tape.saved_bytes(("activation",))
    return replay(tape, [dropped], tape.peak_live_bytes, tape.live_bytes() - saved, False, parameter_grads_exist)


def trace_loss_head(
    arch: Architecture,
    shape: LayerShape,
    kernels: LayerKernels,
    trainability: Trainability,
    vocab_per_rank: int,
    parameter_grads_exist: bool = False,
    gathered_vocab: Optional[int] = None,
) -> Trace:
    """Final norm, ``lm_head``, optional logit soft-capping, ``logits.float()`` and cross-entropy.

    ``gathered_vocab``: the head's local logits (``vocab_per_rank`` columns) are all-gathered to
    this many columns before the loss (DTensor ``ColwiseParallel(output_layouts=Replicate())``)."""
    if arch.cross_attention:  # an encoder-decoder's decoder (trainmem.encoder_decoder.ends)
        from .encoder_decoder.ends import trace_seq2seq_loss_head

        return trace_seq2seq_loss_head(arch, shape, kernels, trainability, vocab_per_rank, parameter_grads_exist)
    tape, x, normed = _tape_through_final_norm(arch, shape, kernels, trainability)
    tokens, h = shape.stream_tokens, shape.hidden
    if kernels.saves_gathered_sequence and tokens != shape.tokens:
        # DTensor SequenceParallel: ``model.norm`` runs on the sequence shard and ``lm_head``'s
        # ``ColwiseParallel(input_layouts=Shard(1))`` all-gathers its input, which the matmul saves.
        gathered = tape.new(shape.tokens * h, normed.dtype, normed.requires_grad)
        tape.record("all_gather", [], [normed], [gathered])
        tape.release(normed)
        normed, tokens = gathered, shape.tokens
    weight = Sym(vocab_per_rank * h, kernels.weight_dtype, _head_trains(arch, trainability), "parameter")
    bias = Sym(vocab_per_rank, kernels.weight_dtype, weight.requires_grad, "parameter") if arch.lm_head_bias else None
    logits = tape.linear(normed, weight, vocab_per_rank, bias, saves_input=kernels.linear_saves_input)
    tape.release(normed)
    if gathered_vocab:
        local = logits
        logits = tape.copy(local, tokens * gathered_vocab)  # the all-gather: nothing saved
        tape.release(local)
    if arch.final_logit_softcapping:  # logits / cap -> tanh -> * cap
        divided = tape.scale(logits)
        tape.release(logits)
        capped = tape.unary_saving_result("tanh", divided)
        tape.release(divided)
        logits = tape.scale(capped)
    if arch.logits_scaling is not None:  # Granite: logits / logits_scaling
        divided = tape.scale(logits)
        tape.release(logits)
        logits = divided
    logits32 = tape.to(logits, "fp32")
    loss = tape.cross_entropy(logits32, shape.tokens)
    tape.release(logits32, logits)
    return _finish(tape, loss, parameter_grads_exist, x)


def trace_chunked_loss_head(
    arch: Architecture,
    shape: LayerShape,
    kernels: LayerKernels,
    trainability: Trainability,
    vocab_per_rank: int,
    chunks: int,
    parameter_grads_exist: bool = False,
) -> Trace:
    """A fused linear cross-entropy (Liger ``LigerFusedLinearCrossEntropyLoss``).

    The forward walks the tokens in ``chunks`` pieces: for each, it computes the logits, their
    fp32 softmax and at once the gradients of the hidden states and of the head weight, so no
    full logits tensor ever exists. What it saves for backward is those two gradients.
    """
    tape, x, normed = _tape_through_final_norm(arch, shape, kernels, trainability)
    tokens, h = shape.stream_tokens, shape.hidden
    head_trains = _head_trains(arch, trainability)
    weight = Sym(vocab_per_rank * h, kernels.weight_dtype, head_trains, "parameter")
    compute = kernels.autocast or kernels.weight_dtype
    grad_input = Sym(tokens * h, compute, False)
    grad_weight = Sym(vocab_per_rank * h, kernels.weight_dtype, False) if head_trains else None
    rows = -(-shape.tokens // chunks)
    for tensor in filter(None, (grad_input, grad_weight)):
        tape.keep(tensor)
    chunk_logits = tape.new(rows * vocab_per_rank, compute, False)
    chunk_fp32 = tape.new(rows * vocab_per_rank, "fp32", False)
    tape.release(chunk_logits, chunk_fp32)
    loss = tape.new(1, "fp32", True)
    tape.record("fused_linear_cross_entropy", [grad_input, grad_weight], [normed, weight], [loss])
    tape.release(normed)
    return _finish(tape, loss, parameter_grads_exist, x)


def _head_trains(arch: Architecture, trainability: Trainability) -> bool:
    from .models import family_for

    names = family_for(arch).names
    return trainability.trains(names.embed_tokens if arch.tie_word_embeddings else names.lm_head)


def _tape_through_final_norm(
    arch: Architecture, shape: LayerShape, kernels: LayerKernels, trainability: Trainability
) -> tuple[Tape, Sym, Sym]:
    """Every loss head's start: a tape, the last layer's output ``x`` (the head's input, requiring grad) and
    the final norm's output; the forward code has dropped its reference to ``x``."""
    tape = Tape(device=kernels.device, autocast=kernels.autocast)
    program = _program(arch, shape, kernels, trainability, tape)
    tokens, h = shape.stream_tokens, shape.hidden
    x = tape.new(tokens * h * program.family.residual_streams(arch), kernels.stream_dtype, True)
    normed = program.final_norm(x, tokens)
    tape.release(x)
    return tape, x, normed


def _head_logits(
    tape: Tape, arch: Architecture, shape: LayerShape, kernels: LayerKernels, trainability: Trainability,
    normed: Sym, vocab: int,
) -> Sym:
    """``lm_head(normed)`` with no bias over ``vocab`` columns (the full logits, in the compute dtype), after
    which the forward code drops ``normed``."""
    weight = Sym(vocab * shape.hidden, kernels.weight_dtype, _head_trains(arch, trainability), "parameter")
    logits = tape.linear(normed, weight, vocab)
    tape.release(normed)
    return logits


def _finish(tape: Tape, loss: Sym, parameter_grads_exist: bool, x: Sym) -> Trace:
    return replay(tape, [loss], tape.peak_live_bytes, loss.nbytes, False, parameter_grads_exist, x)


def trace_final_norm(arch: Architecture, shape: LayerShape, kernels: LayerKernels, trainability: Trainability) -> Trace:
    """The final norm alone, as the loss head runs it: what it saves, and its backward's high-water mark
    (the moment DeepSpeed ZeRO-1/2 allocate their reduce bucket is inside the head's backward, after
    ``lm_head``'s gradient and before the final norm's backward; see trainmem.parallel.deepspeed)."""
    tape, x, normed = _tape_through_final_norm(arch, shape, kernels, trainability)
    return replay(tape, [normed], tape.peak_live_bytes, normed.nbytes, False, False, x)
