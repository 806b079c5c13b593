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
* **the loss sees the whole vocabulary**: the head's weight (and gradient) is the rank's
  vocabulary slice, but its local logits (vocab / t) are all-gathered to a replicated (b, s, vocab) tensor (``ColwiseParallel._prepare_output_fn``,
  ``torch/distributed/tensor/parallel/style.py``), and the cross-entropy upcasts and
  log-softmaxes all of it on every rank; Megatron's vocab-parallel cross-entropy works on
  the rank's slice.

Measured (``tp-dtensor-*``): parameters and optimizer states to the byte.
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


def loss_head_shape(plan: "Plan", shape: "LayerShape") -> "LayerShape":
    """The shape the loss head runs at: under DTensor sequence parallelism, every token (gathered)."""
    if runs_dtensor_tp(plan) and plan.parallel.sequence_parallel:
        return replace(shape, stream_tokens=shape.batch * shape.seq)
    return shape
