"""The step program of each post-training mode, as hooks into the supervised step simulation.

The supervised step (``trainmem.simulate``) already replays forward, loss, backward and the
optimizer. A TRL trainer changes it in four places, each a function here:

1. the rows and tokens of the forward (:func:`effective_setup`): a preference pair is two rows
   (``DataCollatorForPreference`` puts the chosen rows first, then the rejected ones, in one batch);
   a GRPO step trains on ``micro_batch_size`` completions of ``max_prompt_length +
   max_completion_length`` tokens;
2. the loss head: TRL's fused log-prob head (:mod:`.fused_head`) instead of transformers' logits
   and cross-entropy;
3. model copies resident on the GPU (:func:`resident_copies`): the reference (a second copy of the
   weights in the policy's dtype, TRL ``create_model_from_path(..., dtype=model.dtype)``; none for a
   PEFT policy, whose base with adapters disabled is the reference; none with precomputed
   reference log-probs), the teacher (GKD);
4. forwards under ``torch.no_grad`` between the policy's forward and its backward
   (:func:`record_reference_forward`): DPOTrainer's reference forward runs after the policy's
   ``outputs = model(...)`` returned, so it sits on top of every activation the policy saved.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..tape import DTYPE_BYTES

if TYPE_CHECKING:
    from ..plan import Plan, Stage
    from ..setup import Setup
    from ..timeline import MemoryAccount

REFERENCE_DETAIL_COPY = "the reference model: a frozen copy of the weights in the policy's dtype (TRL create_model_from_path)"
REFERENCE_FORWARD_DETAIL = (
    "the reference model's forward under no_grad (one layer's working memory, its fused log-prob head), "
    "while the policy's saved activations wait for backward"
)


def effective_setup(setup: "Setup") -> "Setup":
    """The setup whose supervised step has the mode's forward shape (rows, tokens per row)."""
    training = setup.training
    if training.is_supervised:
        return setup
    update: dict = {}
    rows = training.rows_per_example
    if rows != 1:
        update["micro_batch_size"] = setup.micro_batch_size * rows
    if training.mode == "grpo":
        update["sequence_length"] = training.resolved("max_prompt_length") + training.resolved("max_completion_length")
    if not update:
        return setup
    return setup.model_copy(update=update)


def uses_fused_head(plan: "Plan") -> bool:
    """TRL 1.16's trainers score tokens with the fused log-prob head (``add_fused_lm_head``); the reward
    model has a score head instead."""
    return plan.setup.training.mode not in ("sft", "reward")


def adjust_inventory(setup: "Setup", inventory):
    """The reward model has ``score`` (hidden → 1, no bias) where the causal LM has ``lm_head``
    (transformers ``*ForSequenceClassification``, TRL RewardTrainer ``num_labels=1``)."""
    if inventory is None or setup.training.mode != "reward":
        return inventory
    from dataclasses import replace as replace_fields

    from ..models.blocks import ParameterTensor

    head = [tensor for tensor in inventory.head if tensor.group != "lm_head"]
    hidden = setup.architecture().hidden_size
    head.append(ParameterTensor("score.weight", "lm_head", (1, hidden), (hidden, 1)))
    return replace_fields(inventory, head=tuple(head))


def _peft(plan: "Plan") -> bool:
    return plan.lora


def reference_weight_bytes(plan: "Plan", stage: "Stage") -> int:
    """The reference copy on one rank: every base tensor in the stored dtype (ZeRO-3/FSDP shard it too, as
    TRL prepares it with the same engine), 0 when TRL keeps no copy."""
    training = plan.setup.training
    if not training.reference_copy(_peft(plan)) or plan.inventory is None:
        return 0
    element = DTYPE_BYTES[plan.precision.stored_weight_dtype]
    from ..allocator import rounded

    total = 0
    for slice_ in plan.slices(stage):
        total += rounded(slice_.numel * element, plan.device) * slice_.count
    return total // plan.sharding.weights


def resident_copies(plan: "Plan", stage: "Stage", account: "MemoryAccount") -> None:
    """Set the parts of the model copies besides the policy (before the step starts)."""
    reference = reference_weight_bytes(plan, stage)
    if reference:
        account.set("parameters", "reference model", reference, REFERENCE_DETAIL_COPY)


def reference_forward_bytes(plan: "Plan") -> int:
    """High-water bytes of the reference forward under no_grad, above what the step holds at that moment.

    Alive during it: the reference's ``inputs_embeds`` (referenced by the model's forward until it returns)
    and the rotary tables; then, layer after layer, the current hidden state and one layer's no-grad
    working memory; at the end the fused head's forward (``log_probs`` only)."""
    from ..layers import Trainability, trace_layer
    from ..simulate import _cached, _kernels, _rotary_bytes, _shape
    from .fused_head import reference_head_forward_bytes

    training = plan.setup.training
    if not training.has_reference(_peft(plan)):
        return 0
    arch = plan.architecture
    shape = _shape(plan)
    kernels = replace(_kernels(plan, selective=False), lora_rank=0)
    frozen = Trainability(lambda module: False, lambda module: False)
    stream = shape.stream_tokens * arch.hidden_size * DTYPE_BYTES[plan.precision.stream_dtype]
    layers = 0
    for _, group, _ in plan.stage_layer_groups(plan.stages[0]):
        kind_shape = _shape(plan, group.architecture)
        trace = _cached(
            ("no_grad", group.architecture, kind_shape, kernels),
            lambda a=group.architecture, sh=kind_shape: trace_layer(a, sh, kernels, frozen, False, False),
        )
        layers = max(layers, stream + trace.forward_peak_bytes)
    vocab = arch.vocab_size // plan.parallel.tensor_parallel_size
    head = reference_head_forward_bytes(arch, shape, kernels, vocab)
    return stream + _rotary_bytes(plan) + max(layers, head)


def record_reference_forward(plan: "Plan", account: "MemoryAccount", micro_batch: int, suffix: str) -> None:
    """The reference forward as one event of the timeline (phase ``reference``)."""
    nbytes = reference_forward_bytes(plan)
    if not nbytes:
        return
    account.details[("activations", "reference forward")] = REFERENCE_FORWARD_DETAIL
    account.record("reference forward" + suffix, "reference", micro_batch, {("activations", "reference forward"): nbytes})
