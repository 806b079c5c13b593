"""GKD (trl.experimental.gkd, TRL 1.16): a frozen teacher's forward and the generalized JSD over the vocabulary.

``GKDTrainer.compute_loss``: ``student_outputs = model(input_ids)`` (full logits, transformers' head with no
labels: ``(rows, seq, vocab)`` in the compute dtype), then ``teacher_outputs = teacher_model(input_ids)`` under
``torch.no_grad`` (its logits too), then ``generalized_jsd_loss(student[:, :-1], teacher[:, :-1], labels,
beta)``: both divided by the temperature, ``log_softmax`` of each, ``logsumexp(stack([s + log(1-β),
t + log(β)]))`` (the mixture; it saves the stack and its result), two ``kl_div(..., log_target=True)``
(``exp(target) * (target − input)``), ``β·kl_t + (1−β)·kl_s``, the masked selection and the sum. Both
outputs stay referenced until ``compute_loss`` returns, so the logits of student and teacher are alive
through the whole loss. The teacher is a trainmem preset or, by default, the student's architecture, held
in the student's weight dtype (an assumption: TRL loads it with ``teacher_model_init_kwargs``). On-policy
batches (``lmbda``: the student generates) are not modelled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..architecture import Architecture
from ..layers import LayerKernels, LayerShape, Trace, Trainability
from ..tape import DTYPE_BYTES, Sym, Tape

if TYPE_CHECKING:
    from ..plan import Plan


def trace_gkd_head(
    arch: Architecture,
    shape: LayerShape,
    kernels: LayerKernels,
    trainability: Trainability,
    vocab: int,
    parameter_grads_exist: bool = False,
) -> Trace:
    """The student's final norm and lm_head, the teacher's logits (made by the teacher forward), the JSD."""
    from ..ends import _finish, _head_logits, _tape_through_final_norm

    tape, x, normed = _tape_through_final_norm(arch, shape, kernels, trainability)
    tokens = shape.stream_tokens
    n = shape.batch * (shape.seq - 1) * vocab
    logits = _head_logits(tape, arch, shape, kernels, trainability, normed, vocab)
    teacher = tape.new(tokens * vocab, logits.dtype, False)
    student = tape.scale(logits.view(n))  # / temperature
    scaled_teacher = tape.new(n, logits.dtype, False)
    student_log = tape.unary_saving_result("log_softmax", student)
    teacher_log = tape.new(n, student_log.dtype, False)  # the locals rebound to logits / T stay alive
    shifted = tape.scale(student_log)  # + log1p(-beta)
    shifted_teacher = tape.new(n, teacher_log.dtype, False)
    stacked = tape.copy(shifted, 2 * n)  # torch.stack of the two
    tape.release(shifted, shifted_teacher)
    mixture = tape.new(n, stacked.dtype, True)
    tape.record("logsumexp", [stacked, mixture], [stacked], [mixture])
    tape.release(stacked)
    kl_teacher = _kl_div_log_target(tape, mixture, teacher_log)
    kl_student = _kl_div_log_target(tape, mixture, student_log)
    coefficient = Sym(1, kl_teacher.dtype, False)
    jsd = tape.add(tape.mul(kl_teacher, coefficient), tape.mul(kl_student, coefficient))
    tape.release(kl_teacher, kl_student, student_log, teacher_log, mixture)
    selected = tape.gather(jsd, n, 2 * shape.batch * (shape.seq - 1))
    tape.release(jsd)
    loss = tape.reduce(selected, 1)
    tape.release(selected, logits, teacher, student, scaled_teacher)
    _release_all_intermediates(tape)
    return _finish(tape, loss, parameter_grads_exist, x)


def _kl_div_log_target(tape: Tape, input: Sym, target: Sym) -> Sym:
    """``F.kl_div(input, target, reduction="none", log_target=True)``, which ATen decomposes into
    ``exp(target) * (target − input)`` (autograd sees the pieces: ``exp`` saves its result when the target needs a
    gradient, ``mul`` saves the operand the other one's gradient needs). Under autocast the op is cast first:
    CPU autocast lists ``kl_div`` among its fp32 ops (probed with torch 2.13: a bf16 mixture and target give an
    fp32 result), so both inputs are copied to fp32, and those copies die with the call."""
    input_in = tape.autocast_input("kl_div", input)
    target_in = tape.autocast_input("kl_div", target)
    if target.requires_grad:
        target_exp = tape.unary_saving_result("exp", target_in)
    else:
        target_exp = tape.new(target_in.numel, target_in.dtype, False)
    difference = tape.add(target_in, input_in)  # (target − input)
    divergence = tape.mul(target_exp, difference)
    tape.release(target_exp, difference)
    tape.release(*[cast for cast, given in ((input_in, input), (target_in, target)) if cast is not given])
    return divergence


def _release_all_intermediates(tape: Tape) -> None:
    """Temporaries of the JSD's expression (``(target − input)``, the β products) die with the statement."""
    for storage, tensor in list(tape.live.items()):
        if storage not in tape.saved_storages and tensor.numel > 1:
            tape.release(tensor)


def teacher_plan(plan: "Plan") -> "Plan":
    """The teacher as a plan of its own (a preset), or the student's plan (the same architecture)."""
    teacher = plan.setup.training.teacher
    if teacher is None:
        return plan
    from ..plan import Plan
    from ..setup import PresetModel
    from .config import Training

    return Plan(plan.setup.model_copy(update={"model": PresetModel(preset=teacher), "training": Training()}))


def teacher_weight_bytes(plan: "Plan") -> int:
    if plan.setup.training.mode != "gkd" or plan.inventory is None:
        return 0
    teacher = teacher_plan(plan)
    from ..allocator import rounded

    element = DTYPE_BYTES[plan.precision.stored_weight_dtype]
    total = sum(rounded(s.numel * element, plan.device) * s.count for s in teacher.slices(teacher.stages[0]))
    return total // plan.sharding.weights


def teacher_forward_bytes(plan: "Plan") -> int:
    """The teacher forward under no_grad, with the student's logits alive: the teacher's inputs_embeds and
    one layer's no-grad working memory, or at its end its final norm output and its logits."""
    from ..simulate import _rotary_bytes
    from .phases import no_grad_layers

    teacher = teacher_plan(plan)
    arch = teacher.architecture
    shape, kernels, stream, layers = no_grad_layers(teacher)
    compute = kernels.autocast or kernels.weight_dtype
    logits = shape.stream_tokens * arch.vocab_size * DTYPE_BYTES[compute]
    head = stream + logits
    student_arch = plan.architecture
    student_logits = plan.setup.micro_batch_size * plan.setup.sequence_length * student_arch.vocab_size * DTYPE_BYTES[compute]
    return student_logits + stream + _rotary_bytes(teacher) + max(layers, head)
