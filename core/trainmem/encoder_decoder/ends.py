"""The ends of an encoder-decoder on the tape: the embeddings of both stacks and the decoder's loss head.

* :func:`trace_seq2seq_embedding`: ``shared(ids)`` (T5: then dropout) or BART's ``shared(ids) * embed_scale
  + embed_positions(positions + 2)``, ``layernorm_embedding``, dropout. The lookups save their int64 ids
  (the batch's token ids are inputs of the step; BART's offset position ids are a new tensor: (t,) for the
  decoder, which passes ``position_ids``, (b, s) for the encoder, which expands an ``arange``).
* :func:`trace_seq2seq_loss_head`: T5: ``final_layer_norm``, dropout, ``* d_model**-0.5`` (T5 v1.0),
  ``lm_head``, cross-entropy (CrossEntropyLoss on the logits; autocast runs its log-softmax in fp32, as the
  causal-LM head's ``logits.float()`` does). BART: no final norm, ``lm_head``, ``+ final_logits_bias`` (a (1, V)
  buffer in the weights' dtype: the sum is a new logits tensor, fp32 under autocast), cross-entropy.
"""

from __future__ import annotations

from ..architecture import Architecture
from ..layers import LayerKernels, LayerShape, Trace, Trainability, replay
from ..models import family_for
from ..tape import Sym, Tape


def trace_seq2seq_embedding(
    arch: Architecture, shape: LayerShape, kernels: LayerKernels, trainability: Trainability,
    parameter_grads_exist: bool, token_grad_exists: bool, positions_per_sample: bool,
) -> Trace:
    """One stack's embedding. ``token_grad_exists``: the shared table's gradient is already pending (the
    tied head's, or the decoder's for the encoder), so this lookup's gradient is added into it.
    ``positions_per_sample``: BART's encoder looks its positions up per sample ((b, s) ids)."""
    names = family_for(arch).names
    tape = Tape(device=kernels.device, autocast=kernels.autocast)
    tokens, h, dtype = shape.stream_tokens, shape.hidden, kernels.weight_dtype
    trains = trainability.trains(names.embed_tokens)
    weight = Sym(arch.vocab_size * h, dtype, trains, "external" if token_grad_exists else "parameter")
    out = tape.new(tokens * h, dtype, trains)
    tape.record("embedding", [Sym(tokens, "int64", False, "external")], [weight], [out])
    if arch.position_embedding == "learned":
        family = family_for(arch)
        scaled = out
        if getattr(family, "embedding_scale_op", True):
            scaled = tape.scale(out)  # BartScaledWordEmbedding: * embed_scale (1.0 or sqrt(d_model)), a new tensor
            tape.release(out)
        # Whisper's decoder: position_ids = arange(t).unsqueeze(0).repeat(b, 1), then embed_positions.weight[position_ids]
        rows = tokens if positions_per_sample or arch.num_mel_bins else shape.seq
        ids = tape.new(rows, "int64", False)  # position_ids + offset
        offset = getattr(family, "position_offset", 2)
        table = Sym((arch.max_position_embeddings + offset) * h, dtype, trainability.trains(names.embed_positions), "parameter")
        positions = tape.new(rows * h, dtype, table.requires_grad)
        tape.record("embedding", [ids], [table], [positions])
        tape.release(ids)
        summed = tape.add(scaled, positions)
        tape.release(scaled, positions)
        out = summed
        if arch.embedding_norm:
            normed = program_norm(arch, shape, kernels, trainability, tape, names.embedding_norm, out)
            tape.release(out)
            out = normed
    dropped = tape.dropout(out, arch.embedding_dropout)
    if dropped is not out:
        tape.release(out)
    return replay(tape, [dropped], tape.peak_live_bytes, dropped.nbytes, False, parameter_grads_exist)


def program_norm(arch, shape, kernels, trainability, tape, module: str, x: Sym) -> Sym:
    program = family_for(arch).program()(arch, shape, kernels, trainability, tape)
    return program.norm(module, x, shape.stream_tokens, shape.hidden)


def trace_seq2seq_loss_head(
    arch: Architecture, shape: LayerShape, kernels: LayerKernels, trainability: Trainability, vocab: int,
    parameter_grads_exist: bool = False,
) -> Trace:
    family = family_for(arch)
    tape = Tape(device=kernels.device, autocast=kernels.autocast)
    program = family.program()(arch, shape, kernels, trainability, tape)
    tokens, h = shape.stream_tokens, shape.hidden
    x = tape.new(tokens * h, kernels.stream_dtype, True)
    hidden = x
    if family.has_final_norm:  # T5Stack: final_layer_norm, then dropout
        normed = program.norm(family.names.final_norm, x, tokens, h)
        tape.release(x)
        hidden = tape.dropout(normed, arch.residual_dropout if getattr(family, "final_norm_dropout", True) else 0.0)
        if hidden is not normed:
            tape.release(normed)
    if arch.decoder_output_scale:  # T5 v1.0: sequence_output * d_model**-0.5
        scaled = tape.scale(hidden)
        if hidden is not x:
            tape.release(hidden)
        hidden = scaled
    names = family.names
    head_trains = trainability.trains(names.embed_tokens if arch.tie_word_embeddings else names.lm_head)
    weight = Sym(vocab * h, kernels.weight_dtype, head_trains, "parameter")
    logits = tape.linear(hidden, weight, vocab)
    if hidden is not x:
        tape.release(hidden)
    if family.final_logits_bias:  # lm_logits + final_logits_bias: a new tensor, promoted to the buffer's dtype
        biased = tape.add(logits, Sym(vocab, kernels.weight_dtype, False, "external"))
        tape.release(logits)
        logits = biased
    logits32 = tape.to(logits, "fp32")
    loss = tape.cross_entropy(logits32, shape.tokens)
    tape.release(logits32, logits)
    return replay(tape, [loss], tape.peak_live_bytes, loss.nbytes, False, parameter_grads_exist, x)
