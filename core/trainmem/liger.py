"""Liger-Kernel's fused linear cross-entropy (``use_liger_kernel``), replayed on a tape: ``loss: "liger"``.

Read from liger_kernel/ops/fused_linear_cross_entropy.py (linkedin/Liger-Kernel, commit 00eba634,
``fused_linear_cross_entropy_forward``); Liger needs Triton and a GPU, so it cannot run here, and no
measurement backs this head: it is the source's allocations, stated op by op.

* The chunk size bounds the transient logits near ``BT × H`` elements: ``inc_factor = ceil(V / H)``,
  ``chunk_size = min(next_power_of_2(ceil(BT / inc_factor)), BT)``, ``num_chunks = ceil(BT / chunk_size)``
  (``chunk_mem_const`` 1, the public default). For BT = 16,384, V = 32,000, H = 4,096: 8 chunks of 2,048.
* Before the loop: ``grad_input = zeros_like(_input)`` (BT × H, the input's dtype), ``grad_weight =
  zeros_like(weight)`` when the head trains (V × H, the weight's dtype), ``loss_1d`` (BT, fp32) and the
  ``target != ignore_index`` mask (BT, bool).
* Per chunk: ``logits_chunk = _input_chunk @ weight.t()`` (chunk × V in the matmul's dtype; autocast casts
  the operands for the call), the Triton cross-entropy kernel writes the loss and, in place, the gradient
  of the logits into ``logits_chunk`` (no fp32 copy of the logits exists), then ``grad_input[chunk] =
  grad_logits @ weight`` (a chunk × H product copied in) and ``grad_weight`` accumulates by ``addmm``.
* Saved for backward: ``grad_input`` and ``grad_weight`` (``ctx.save_for_backward``); backward scales them
  by the incoming gradient in place and returns them. The tape's backward replay gives the node new
  gradients of its inputs instead, so the head's backward is counted high by ``grad_input`` (and
  ``grad_weight`` when the head trains) for that moment: an upper bound.
"""

from __future__ import annotations

from .architecture import Architecture
from .layers import LayerKernels, LayerShape, Trace, Trainability
from .tape import Sym


def _next_power_of_2(value: int) -> int:
    return 1 << max(0, (value - 1).bit_length())


def liger_chunk_rows(tokens: int, vocab: int, hidden: int) -> tuple[int, int]:
    """(chunk_size, num_chunks) of ``fused_linear_cross_entropy_forward`` for BT tokens."""
    inc_factor = -(-vocab // hidden)
    chunk = min(_next_power_of_2(-(-tokens // inc_factor)), tokens)
    return chunk, -(-tokens // chunk)


def trace_liger_loss_head(
    arch: Architecture,
    shape: LayerShape,
    kernels: LayerKernels,
    trainability: Trainability,
    vocab_per_rank: int,
    parameter_grads_exist: bool = False,
) -> Trace:
    """Final norm, then ``LigerFusedLinearCrossEntropyFunction`` (see the module docstring)."""
    from .ends import _finish, _head_trains, _tape_through_final_norm

    tape, x, normed = _tape_through_final_norm(arch, shape, kernels, trainability)
    h = shape.hidden
    head_trains = _head_trains(arch, trainability)
    weight = Sym(vocab_per_rank * h, kernels.weight_dtype, head_trains, "parameter")
    rows = shape.tokens
    chunk, _ = liger_chunk_rows(rows, vocab_per_rank, h)

    grad_input = tape.new(normed.numel, normed.dtype, False)
    grad_weight = tape.new(weight.numel, weight.dtype, False) if head_trains else None
    loss_1d = tape.new(rows, "fp32", False)
    mask = tape.new(rows, "bool", False)
    # One chunk (the last may be shorter; the first is the largest): the autocast casts, the logits
    # (overwritten in place by their gradient), and grad_logits @ weight before it is copied in.
    input_chunk = tape.new(chunk * h, kernels.autocast, False) if kernels.autocast and normed.dtype != kernels.autocast else None
    weight_cast = tape.new(weight.numel, kernels.autocast, False, "weight_copy") if kernels.autocast and weight.dtype != kernels.autocast else None
    compute = kernels.autocast or weight.dtype
    logits_chunk = tape.new(chunk * vocab_per_rank, compute, False)
    tape.release(*filter(None, (input_chunk, weight_cast)))
    weight_cast = tape.new(weight.numel, kernels.autocast, False, "weight_copy") if kernels.autocast and weight.dtype != kernels.autocast else None
    input_product = tape.new(chunk * h, compute, False)
    tape.release(input_product, *filter(None, (weight_cast,)))
    tape.release(logits_chunk, mask)
    loss = tape.new(1, "fp32", True)
    tape.release(loss_1d)
    tape.record("liger_fused_linear_cross_entropy", [grad_input, grad_weight], [normed, weight], [loss])
    tape.release(normed)
    return _finish(tape, loss, parameter_grads_exist, x)
