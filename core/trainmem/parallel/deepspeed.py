"""DeepSpeed ZeRO (0.19) as its source allocates, stage by stage.

Buckets are allocated at their configured size, not the model's:

* **ZeRO-1/2 reduce bucket**: ``DeepSpeedZeroOptimizer.setup_buckets``
  (``deepspeed/runtime/zero/stage_1_and_2.py``), called when the first gradient of a step
  arrives, allocates ``torch.empty(reduce_bucket_size)`` per gradient dtype (the model's
  dtype, or the fp32 accumulation dtype when ``grad_accum_dtype`` is fp32), and a second one
  when ``overlap_comm`` is on; the buffers are cleared at the end of the backward
  (``overlapping_partition_gradients_reduce_epilogue``), so they are alive only while
  gradients are reduced. Measured (``zero1-llama-7m-fp32-w2``): a 2 GB (5e8 × 4 B) bucket
  for a 7M-parameter model, from the loss's backward to the end of the backward.
* **ZeRO-3 reduce bucket**: ``DeepSpeedZeroOptimizer_Stage3.__init__`` (``stage3.py``)
  allocates one ``reduce_bucket_size`` buffer per gradient dtype at start-up, resident for
  the whole run.
* **an fp32 partition always**: stage 1/2 clone the rank's partition of every bit16 group
  to fp32 (``single_partition_of_fp32_groups``, ``.clone().float()``), stage 3 builds
  ``fp32_partitioned_groups_flat`` — also when the model is already fp32, so an fp32 run
  holds a second fp32 copy of its partition (measured: ``zero*-llama-7m-fp32-w2``).
* **ZeRO-3 gradient partitions**: ``grad_partitions_flat_buffer``, a ``torch.zeros`` of
  the rank's partition in ``gradient_accumulation_dtype``, at start-up (on the CPU and
  pinned under ``offload_optimizer``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..tape import DTYPE_BYTES

if TYPE_CHECKING:  # pragma: no cover
    from ..plan import Plan


def runs_zero(plan: "Plan") -> bool:
    parallel = plan.parallel
    return parallel.strategy == "zero" and parallel.zero_stage >= 1 and plan.data_parallel_size > 1


def overlap_comm(plan: "Plan") -> bool:
    """DeepSpeed's overlap_comm: the setup's, or its default (``ZeroConfig.overlap_comm_valid``: stage 3 only)."""
    chosen = plan.parallel.zero_overlap_comm
    return plan.parallel.zero_stage == 3 if chosen is None else chosen


def reduce_bucket_bytes(plan: "Plan") -> int:
    """Bytes of the reduce bucket(s) at their configured size, in the gradient dtype."""
    if not runs_zero(plan):
        return 0
    buckets = 2 if overlap_comm(plan) and plan.parallel.zero_stage < 3 else 1
    return buckets * plan.parallel.zero_reduce_bucket_size * DTYPE_BYTES[plan.precision.gradient_dtype]


def bucket_is_resident(plan: "Plan") -> bool:
    """ZeRO-3 keeps its bucket for the whole run; ZeRO-1/2 allocate it per backward."""
    return plan.parallel.zero_stage == 3


BUCKET_DETAIL_RESIDENT = "DeepSpeed ZeRO-3 reduce bucket, reduce_bucket_size elements, allocated at start-up"
BUCKET_DETAIL_BACKWARD = "DeepSpeed ZeRO-1/2 reduce bucket, reduce_bucket_size elements, allocated for each backward"


def keeps_fp32_partition(plan: "Plan") -> bool:
    """DeepSpeed ZeRO keeps an fp32 copy of the rank's partition whatever the model's dtype."""
    parallel = plan.parallel
    return parallel.strategy == "zero" and parallel.zero_stage >= 1


ZERO3_KEPT_DETAIL = (
    "ZeRO-3 keeps gathered parameters for reuse: the model is under stage3_max_live_parameters, so nothing "
    "is released between forward and backward"
)


def zero3_keeps_everything_gathered(plan: "Plan") -> bool:
    """ZeRO-3 releases a gathered parameter only when more than ``stage3_max_live_parameters`` (1e9) are
    live or its next use is further than ``stage3_max_reuse_distance`` (1e9 elements)
    (``PartitionedParameterCoordinator.release_sub_module``, deepspeed/runtime/zero/
    partitioned_param_coordinator.py). For a model whose layers hold fewer elements than the limit,
    every layer gathered in forward stays gathered until its backward, and the embedding and head
    until the end of the backward (measured: ``zero3-llama-7m-*``, the whole 7M-parameter model
    gathered at the peak). Larger models are treated as releasing each layer (all-or-nothing: the
    partial case in between is not modelled)."""
    parallel = plan.parallel
    if not (parallel.strategy == "zero" and parallel.zero_stage == 3 and plan.sharding.weights > 1):
        return False
    if plan.inventory is None:
        return False
    return plan.num_parameters <= parallel.zero3_max_live_parameters


def kept_after_forward(plan: "Plan", layer_bytes: int) -> int:
    return layer_bytes if zero3_keeps_everything_gathered(plan) else 0
