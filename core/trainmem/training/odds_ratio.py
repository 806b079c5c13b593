"""ORPO, CPO and SimPO (trl.experimental ORPOTrainer / CPOTrainer, TRL 1.16): the loss head over the full logits.

``concatenated_forward`` calls the model without labels (``outputs.logits``: ``(2b, s, V)`` in the compute
dtype, transformers' head does no upcast then) and keeps the logits alive to the end of the loss. Two terms read
them:

1. the NLL of the chosen half (``cross_entropy_loss``; CPO skips it when ``cpo_alpha`` is 0, which TRL's
   ``alphapo`` sets: not a field here, so it is counted): ``logits[:b, :-1, :].contiguous()`` (a copy, freed when
   the function returns), then ``nn.CrossEntropyLoss`` (fp32 under autocast; the log-softmax it saves is the
   chosen half's);
2. ``get_batch_logps`` over every row: ``selective_log_softmax(logits[:, :-1, :], labels)`` (trl/trainer/utils.py).
   For fp32 logits it gathers the label logits and runs ``torch.logsumexp`` row by row, which saves its input: the
   whole logits tensor stays alive until backward. For 16-bit logits it runs ``log_softmax`` row by row (each row's
   result saved) and gathers.

Backward (PyTorch's engine, newest node first): the log-prob term first, whose gradient of ``logits[:, :-1]`` is
built from the per-row gradients stacked by the row loop's ``UnbindBackward`` and then, for the gather,
``new_zeros(...).scatter_add(...)`` (two more tensors of that size), summed, and widened to the logits' shape by
the slice's backward; then the NLL term's gradient (log-softmax backward, the copy and the two slices' backward)
is summed into it; then ``lm_head``. The tape below replays exactly these tensors; the rows × vocabulary
temporaries inside one ``logsumexp``/``exp`` of a row are counted as one row's scratch.
"""

from __future__ import annotations

from ..architecture import Architecture
from ..layers import LayerKernels, LayerShape, Trace, Trainability
from ..tape import DTYPE_BYTES, Tape

ODDS_RATIO_MODES = ("orpo", "cpo", "simpo")


def trace_odds_ratio_head(
    arch: Architecture,
    shape: LayerShape,
    kernels: LayerKernels,
    trainability: Trainability,
    vocab: int,
    parameter_grads_exist: bool = False,
) -> Trace:
    """The final norm, ``lm_head``, the chosen half's NLL and ``selective_log_softmax`` over every row."""
    from ..ends import _finish, _head_logits, _tape_through_final_norm

    tape, x, normed = _tape_through_final_norm(arch, shape, kernels, trainability)
    rows, seq = shape.batch, shape.seq
    chosen = rows // 2
    logits = _head_logits(tape, arch, shape, kernels, trainability, normed, vocab)
    element = DTYPE_BYTES[logits.dtype]
    # 1. the chosen half's NLL: a contiguous copy of logits[:b, :-1]; its backward widens the gradient to
    #    (b, s, V) (the inner slice) before summing it into the logits' gradient.
    #    The sum of the two logits gradients is out of place (the engine's InputBuffer adds into a new tensor):
    #    the existing gradient, the new one and their sum are alive together, the copy's own gradient (counted by
    #    the tape for the whole node) already freed by then.
    full = rows * seq * vocab * element
    copied = chosen * (seq - 1) * vocab * element
    shifted = tape.copy(logits, copied // element, backward_scratch_bytes=max(full - copied, chosen * seq * vocab * element))
    loss_input = tape.autocast_input("cross_entropy", shifted)
    nll = tape.cross_entropy(loss_input, chosen * (seq - 1))
    tape.release(shifted, loss_input)
    # 2. selective_log_softmax(logits[:, :-1, :], labels) over every row
    positions = rows * (seq - 1)
    row_elements = (seq - 1) * vocab
    sliced = logits.view(positions * vocab)  # logits[:, :-1, :]: its own autograd identity, the logits' storage
    tape.record("slice", [], [logits], [sliced])
    labels = [tape.new(positions, "int64", False), tape.new(positions, "int64", False), tape.new(positions, "bool", False)]
    if logits.dtype == "fp32":
        selected = tape.new(positions, "fp32", True)
        # gather's backward (derivatives.yaml gather_backward(grad, self, ...)): it saves self, so the logits live
        # until it runs; new_zeros of the slice's shape, then an out-of-place scatter_add
        tape.record("gather", [labels[1], sliced], [sliced], [selected], positions * vocab * element)
        lse = tape.new(positions, "fp32", True)
        scratch = tape.new(2 * row_elements * element, "uint8", False)  # one row's logsumexp temporaries
        tape.release(scratch)
        # the per-row gradients wait for UnbindBackward's stack: all rows at once, besides the stacked result
        tape.record("logsumexp", [sliced, lse], [sliced], [lse], positions * vocab * element)
        per_token = tape.new(positions, "fp32", True)
        tape.record("sub", [], [selected, lse], [per_token])
        tape.release(selected, lse)
    else:
        # row by row: log_softmax (each result saved; in fp32 where autocast lists it, from a row's cast), then
        # the gather of the label's log-prob. Backward runs row by row too: each row's saved result is freed as
        # its gradient appears, and UnbindBackward stacks the rows' gradients: one node here, whose saved
        # results and new gradient of the slice are the two full-size tensors alive at its end.
        dtype = "fp32" if _autocasts_to_fp32(tape, "log_softmax") else logits.dtype
        if dtype != logits.dtype:
            cast = tape.new(row_elements, dtype, False)  # one row's cast, freed after its log_softmax
            tape.release(cast)
        log_probs = tape.new(positions * vocab, dtype, False)
        per_token = tape.new(positions, dtype, True)
        tape.record("log_softmax_gather_rows", [log_probs, labels[1]], [sliced], [per_token])
        tape.release(log_probs)
    tape.release(*labels)
    logps = tape.reduce(per_token, rows, "fp32")
    tape.release(per_token)
    loss = tape.new(1, "fp32", True)
    tape.record("loss", [], [nll, logps], [loss])
    tape.release(nll, logps, logits, sliced)
    return _finish(tape, loss, parameter_grads_exist, x)


def _autocasts_to_fp32(tape: Tape, op: str) -> bool:
    from ..tape import AUTOCAST_FP32

    return tape.autocast is not None and op in AUTOCAST_FP32[tape.device]
