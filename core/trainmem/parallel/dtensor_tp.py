"""Tensor parallelism as PyTorch runs it: DTensor ``parallelize_module`` (torch 2.13).

The plan trainmem assumes is torchtitan's for Llama (``torchtitan/models/llama3/infra/
parallelize.py``, ``apply_tp``) without ``loss_parallel``, which is also what transformers'
``tp_plan="auto"`` does for its Llama ``base_model_tp_plan``: q/k/v and gate/up
``ColwiseParallel``, o and down ``RowwiseParallel``, the embedding
``RowwiseParallel(input_layouts=Replicate())`` (vocabulary-sharded weight), the head
``ColwiseParallel(output_layouts=Replicate())``; norms stay whole (replicated, with their
optimizer states) unless ``SequenceParallel`` shards the activations around them.

Where it differs from Megatron-Core's TP (``tensor_parallel_flavor="megatron"``):

* **the loss sees every token**: with ``SequenceParallel`` the head's input is
  all-gathered from its sequence shards (``ColwiseParallel(input_layouts=Shard(1))``), so
  the final norm's output and the logits cover the whole sequence.
* **the embedding's gradient is the whole vocabulary**: the embedding's output is a ``MaskPartial``
  that is all-reduced (or reduce-scattered) to its ``output_layouts``; the backward of that
  redistribute keeps the gradient ``Replicate`` instead of going back to ``Partial``
  (``_redistribute_backward`` in ``torch/distributed/tensor/_redistribute.py``), and with a replicated
  ``grad_out`` and replicated token ids the cheapest ``embedding_dense_backward`` strategy
  (``_ops/_embedding_ops.py``) is all-replicate: every rank makes the full vocab × hidden gradient, and
  ``AccumulateGrad`` keeps it as the ``.grad`` of the ``Shard(0)`` weight. The optimizer reads it
  through a local ``Replicate -> Shard(0)`` redistribute of each step (the states stay the rank's slice).
  Megatron's ``VocabParallelEmbedding`` makes the rank's slice only.
* **the loss sees the whole vocabulary**: the head's weight (and gradient) is the rank's
  vocabulary slice, but its local logits (vocab / t) are all-gathered to a replicated (b, s, vocab) tensor (``ColwiseParallel._prepare_output_fn``,
  ``torch/distributed/tensor/parallel/style.py``), and the cross-entropy upcasts and
  log-softmaxes all of it on every rank; Megatron's vocab-parallel cross-entropy works on
  the rank's slice.

Measured (``tp-dtensor-*``): parameters and optimizer states to the byte; the embedding's ``.grad`` is a
replicated (8000, 256) tensor on each of the two ranks (18.1 MB of gradients where the weights are 14.0 MB),
through the update.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ..layers import LayerShape
    from ..plan import Plan


def runs_dtensor_tp(plan: "Plan") -> bool:
    parallel = plan.parallel
    return parallel.tensor_parallel_size > 1 and parallel.tensor_parallel_flavor == "dtensor"


def gathered_logits_vocabulary(plan: "Plan", vocab_size: int) -> "int | None":
    """The columns the head's logits are all-gathered to before the loss: the whole vocabulary under
    DTensor TP (the head's weight and its gradient stay the rank's slice); None under Megatron's
    vocab-parallel cross-entropy."""
    return vocab_size if runs_dtensor_tp(plan) else None


def embedding_gradient_rows(plan: "Plan", vocab_size: int, tied: bool) -> int:
    """Rows of the embedding weight's gradient on each rank: the whole vocabulary under DTensor TP (a
    replicated gradient of the vocabulary-sharded weight, see the module docstring), the rank's slice
    (vocab / t) under Megatron's ``VocabParallelEmbedding`` or without TP. A tied embedding keeps the slice
    (the head's gradient of the shared weight is ``Shard(0)``; not measured)."""
    if runs_dtensor_tp(plan) and not tied:
        return vocab_size
    return vocab_size // plan.parallel.tensor_parallel_size


def saves_gathered_sequence(plan: "Plan") -> bool:
    """DTensor ``SequenceParallel``: ``PrepareModuleInput(desired_input_layouts=Replicate())`` all-gathers the
    block's input before q/k/v and gate/up, and the matmuls save that replicated tensor for backward (autograd
    saves the local input of ``aten.mm``); Megatron's column-parallel linear saves the shard and all-gathers it
    again in backward. Measured (``tp-dtensor-sp-llama-7m-fp32-w2``): one full-sequence hidden state more per
    sub-block than the shard."""
    return runs_dtensor_tp(plan) and plan.parallel.sequence_parallel


def loss_head_shape(plan: "Plan", shape: "LayerShape") -> "LayerShape":
    """The shape the loss head runs at: under DTensor sequence parallelism, every token (gathered)."""
    if runs_dtensor_tp(plan) and plan.parallel.sequence_parallel:
        return replace(shape, stream_tokens=shape.batch * shape.seq)
    return shape


MIXED_LISTS_FIELD = "optimizer.implementation"


def check_optimizer_over_mixed_tensors(setup: object) -> None:
    """Refuse what torch cannot run: DTensor TP without ``SequenceParallel`` and a foreach or fused torch optimizer.

    The plan leaves the norms out, so they stay plain ``torch.Tensor`` parameters next to the ``DTensor`` ones;
    ``torch.optim`` groups a step's tensors by device and dtype only (``_group_tensors_by_device_and_dtype``,
    torch/utils/_foreach_utils.py), so one ``_foreach_*`` (or ``_fused_adamw_``) call gets both kinds, and
    DTensor's dispatcher refuses a non-scalar plain tensor (``OpDispatcher._try_replicate_spec_for_scalar_tensor``,
    torch/distributed/tensor/_dispatch.py: "got mixed torch.Tensor and DTensor"). That check is the same on every
    device: measured on 2 gloo ranks with torch 2.13 (AdamW ``foreach=True`` and ``fused=True`` both raise, the
    for-loop runs), and on CUDA foreach is ``torch.optim``'s default (DTensor is in ``_foreach_supported_types``),
    as others hit it there (NVIDIA-NeMo/RL#151, cornstarch-org/Cornstarch#87). With ``SequenceParallel`` every
    parameter is a DTensor and foreach runs (measured: ``tp-dtensor-sp-llama-7m-fp32-foreach-w2``), and so it is under
    FSDP2, whose ``fully_shard`` turns every parameter into a DTensor on the data-parallel (or 2-D) mesh (from the
    source, ``_fsdp_param.py``; not measured with foreach).
    bitsandbytes' optimizers (quantized or paged states) step tensor by tensor and are not refused here."""
    from ..catalogs import optimizers
    from ..errors import FieldError

    parallel = setup.parallelism  # type: ignore[attr-defined]
    if parallel.tensor_parallel_size == 1 or parallel.tensor_parallel_flavor != "dtensor" or parallel.sequence_parallel:
        return
    if parallel.strategy == "fsdp" and parallel.fsdp_version == 2:
        return  # fully_shard makes every parameter, the norms too, a DTensor (FSDPParam.sharded_param)
    optimizer = setup.optimizer  # type: ignore[attr-defined]
    kind = optimizers().get(optimizer.name)
    if kind is None or kind.quantized_state_bits or kind.paged:
        return
    implementation, given = optimizer.implementation, repr(optimizer.implementation)
    if implementation is None:  # torch.optim's default on CUDA is foreach (trainmem assumes fused kernels under TP)
        implementation = "foreach" if setup.runtime.device == "cuda" else "for-loop"  # type: ignore[attr-defined]
        given = "unset (foreach, torch.optim's default on CUDA)"
    if implementation in ("foreach", "fused"):
        raise FieldError(
            MIXED_LISTS_FIELD,
            f"{given} cannot run under DTensor tensor parallelism without sequence_parallel: the norms stay "
            "plain tensors and torch's _foreach_/_fused_ ops refuse lists mixing torch.Tensor and DTensor; allowed: "
            "'for-loop' (foreach=False), or set parallelism.sequence_parallel",
        )
