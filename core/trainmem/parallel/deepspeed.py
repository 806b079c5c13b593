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
    from ..layers import Trace
    from ..plan import Plan, Stage


def runs_zero(plan: "Plan") -> bool:
    """DeepSpeed's ZeRO optimizer wraps the client optimizer (stage 1–3), on one rank too: the engine picks
    it from the config, not from the data-parallel size (``DeepSpeedEngine._do_optimizer_sanity_check``), and
    ``DeepSpeedZeroOptimizer`` has no single-rank path for its buckets, flattened copies or partitions (a
    partition is then the whole model). Measured: ``zero2-llama-7m-bf16-w1`` and
    ``zero2-llama-7m-bf16-fp32grads-w1``, the 1 GB bf16 reduce bucket and its flattened copy on one gloo rank."""
    parallel = plan.parallel
    return parallel.strategy == "zero" and parallel.zero_stage >= 1


def overlap_comm(plan: "Plan") -> bool:
    """DeepSpeed's overlap_comm: the setup's, or its default (``ZeroConfig.overlap_comm_valid``: stage 3 only)."""
    chosen = plan.parallel.zero_overlap_comm
    return plan.parallel.zero_stage == 3 if chosen is None else chosen


def runs_bf16_optimizer(plan: "Plan") -> bool:
    """ZeRO-1 with bf16 weights and ``data_types.grad_accum_dtype: fp32`` (trainmem's
    ``bf16-master-weights-fp32-grads``), optimizer not offloaded: ``DeepSpeedEngine._do_optimizer_sanity_check``
    (deepspeed/runtime/engine.py) wraps the client optimizer in ``BF16_Optimizer``
    (deepspeed/runtime/bf16_optimizer.py), not the ZeRO optimizer. ``_setup_for_real_optimizer`` keeps the bf16
    weights whole, an fp32 master partition, and a *full-size* fp32 gradient buffer
    (``fp32_groups_gradients_flat``, ``torch.zeros_like`` of the flat bf16 group) for the run; there is no
    reduce bucket (the engine all-reduces the gradients itself), and the bf16 ``.grad`` tensors stay until
    the step ends (measured: ``zero1-llama-7m-bf16-fp32grads-w2``)."""
    parallel = plan.parallel
    return (
        parallel.strategy == "zero"
        and parallel.zero_stage == 1
        and plan.precision.recipe == "bf16-master-weights-fp32-grads"
        and not parallel.offload_optimizer
    )


BF16_OPTIMIZER_GRADIENTS_DETAIL = (
    "BF16_Optimizer: full-size fp32 gradient buffer (fp32_groups_gradients_flat) for the run, and the bf16 .grad "
    "tensors until the step"
)


def reduce_bucket_bytes(plan: "Plan") -> int:
    """Bytes of the reduce bucket(s) at their configured size, in the gradient dtype."""
    if not runs_zero(plan) or runs_bf16_optimizer(plan):
        return 0
    buckets = 2 if overlap_comm(plan) and plan.parallel.zero_stage < 3 else 1
    return buckets * plan.parallel.zero_reduce_bucket_size * DTYPE_BYTES[bucket_dtype(plan)]


def bucket_dtype(plan: "Plan") -> str:
    """The reduce bucket's dtype (``_gradient_reduction_buffer_dtype``, stage_1_and_2.py): the fp32
    accumulation dtype only where ZeRO-1 keeps a separate ``grad_accum`` (``use_grad_accum_attribute``:
    accumulation dtype != model dtype, gradients not partitioned); else the model's dtype — ZeRO-2 with
    ``grad_accum_dtype`` fp32 stages bf16 gradients and keeps the fp32 result in its partition (measured:
    ``zero2-llama-7m-bf16-fp32grads-w2``, a 1 GB bf16 bucket)."""
    if plan.parallel.zero_stage == 1:
        return plan.precision.gradient_dtype
    return plan.precision.compute_weight_dtype


def accumulates_partition_in_fp32(plan: "Plan") -> bool:
    """ZeRO-2 with bf16 weights and fp32 ``grad_accum_dtype`` (``_use_compact_grad_partition_buffer``): the
    rank's partition of the reduced gradients is an fp32 buffer (``_build_compact_grad_partition_buffer``,
    ``averaged_gradients``) that the update reads as the master's gradient — no other fp32 copy is made."""
    return (
        gradients_live_in_bucket(plan)
        and plan.precision.gradient_dtype == "fp32"
        and plan.precision.compute_weight_dtype != "fp32"
    )


def reduced_gradient_fp32_copy_bytes(plan: "Plan", largest_numel: int, partition_numel: int) -> int:
    """With the fp32 partition buffer, each reduced bf16 gradient slice is cast to fp32 before it is added in:
    one parameter's slice at a time, the largest one in the rank's partition (measured: an 8 MB fp32 copy of
    the 8000 × 256 embedding at the end of the backward, ``zero2-llama-7m-bf16-fp32grads-w2``)."""
    if not accumulates_partition_in_fp32(plan) or plan.parallel.offload_optimizer:
        return 0
    return min(largest_numel, partition_numel) * 4


FP32_COPY_DETAIL = "fp32 copy of one reduced gradient slice, added into the fp32 partition (end of backward)"


def bucket_is_resident(plan: "Plan") -> bool:
    """ZeRO-3 keeps its bucket for the whole run; ZeRO-1/2 allocate it per backward."""
    return plan.parallel.zero_stage == 3


BUCKET_DETAIL_RESIDENT = "DeepSpeed ZeRO-3 reduce bucket, reduce_bucket_size elements, allocated at start-up"
BUCKET_DETAIL_BACKWARD = "DeepSpeed ZeRO-1/2 reduce bucket, reduce_bucket_size elements, allocated for each backward"


def casts_adapters(plan: "Plan") -> bool:
    """DeepSpeed's engine with ``bf16``/``fp16`` enabled casts every parameter of the module to that dtype, PEFT's
    fp32 LoRA adapters too (``DeepSpeedEngine._configure_distributed_model`` -> ``_cast_module_mixed_precision``,
    deepspeed/runtime/engine.py; buffers keep fp32), and ZeRO then keeps the fp32 copy of the rank's partition of the
    trainable parameters, the adapters, like any model's (``single_partition_of_fp32_groups`` /
    ``fp32_partitioned_groups_flat`` are built from the client optimizer's param groups: trainable tensors only).
    Measured (``zero2-llama-7m-bf16-lora-w2``): bf16 adapters, an fp32 master partition of 28,672 adapter elements
    per rank and one step counter (the flat partition)."""
    parallel = plan.parallel
    return (
        plan.lora
        and parallel.strategy == "zero"
        and parallel.zero_stage >= 1
        and plan.precision.compute_weight_dtype in ("bf16", "fp16")
    )


def linear_saves_input(plan: "Plan") -> bool:
    """ZeRO-3 converts the model with ``zero.Init(module=...)`` (``DeepSpeedZeRoOffload._convert_to_zero_parameters``,
    parameter_offload.py), which, with ``zero_optimization.memory_efficient_linear`` (default True), replaces
    ``torch.nn.functional.linear`` by ``zero3_linear_wrap`` (``Init._enable_mem_efficient_linear``,
    partition_parameters.py): ``LinearFunctionForZeroStage3.setup_context`` (zero/linear.py) saves the input and the
    weight of every linear, frozen or not. A full fine-tune saves those inputs anyway; with LoRA the frozen linears'
    inputs are saved too (measured: ``zero3-llama-7m-bf16-lora-w2``, 944 bf16 values per token and layer more than
    ZeRO-2 keeps, the MLP's input and down_proj's, and the frozen head's input, the final norm's output). Modelled
    for the decoder layers' linears and the causal-LM head."""
    parallel = plan.parallel
    return plan.lora and parallel.strategy == "zero" and parallel.zero_stage == 3


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


def released_frozen_embedding_bytes(plan: "Plan", stage: "Stage") -> int:
    """ZeRO-3 keeps a gathered parameter only while it has a next use in the step's trace
    (``PartitionedParameterCoordinator.__params_to_release``, partitioned_param_coordinator.py): a frozen, untied
    embedding takes no part in the backward (its output needs no gradient), so it is released after its forward, while
    the frozen layers and head stay gathered for their input gradients (measured: ``zero3-llama-7m-bf16-lora-w2``, the
    8000 × 256 bf16 embedding gone from the parameters at the loss's backward). Bytes of that embedding, or 0."""
    if not zero3_keeps_everything_gathered(plan) or not stage.has_embedding or plan.architecture is None:
        return 0
    names = plan.family.names if plan.family else None
    if names is None or plan.module_trains(names.embed_tokens) or plan.architecture.tie_word_embeddings:
        return 0
    compute = DTYPE_BYTES[plan.precision.compute_weight_dtype]
    return sum(s.total_numel for s in plan.slices(stage) if not s.layer_scope and s.tensor.group == "embeddings") * compute


def kept_after_forward(plan: "Plan", layer_bytes: int) -> int:
    return layer_bytes if zero3_keeps_everything_gathered(plan) else 0


# ---------------------------------------------------------------------------- offload_optimizer

NORM_DTYPE_BYTES = 8
"""``get_norm_dtype()`` (deepspeed/runtime/utils.py): gradient norms are taken in fp64."""


def runs_zero_offload(plan: "Plan") -> bool:
    """DeepSpeed ZeRO with ``offload_optimizer`` (ZeRO-Offload; also on a single GPU, its headline use)."""
    parallel = plan.parallel
    return parallel.strategy == "zero" and parallel.zero_stage >= 1 and parallel.offload_optimizer


def offload_gpu_staging_bytes(plan: "Plan", largest_numel: int) -> int:
    """ZeRO-1/2 offload's one device buffer besides the bit16 weights and the buckets:
    ``temp_grad_buffer_for_gpu_offload``, ``torch.zeros(largest_param_numel, dtype=self.dtype)`` on
    the accelerator (``DeepSpeedZeroOptimizer.__init__``, stage_1_and_2.py), resident for the run."""
    if not runs_zero_offload(plan) or plan.parallel.zero_stage == 3:
        return 0
    return largest_numel * DTYPE_BYTES[plan.precision.compute_weight_dtype]


OFFLOAD_STAGING_DETAIL = "temp_grad_buffer_for_gpu_offload: the largest parameter's gradient, on the GPU (ZeRO-Offload)"


def offload_norm_copy_bytes(plan: "Plan", largest_numel: int, partition_numel: int) -> int:
    """ZeRO-1/2 offload, end of backward: ``set_norm_for_param_grad_in_gpu`` (stage_1_and_2.py) takes each
    partition gradient's norm on the GPU through an fp64 copy (``.to(get_norm_dtype()).norm(2)``), one
    parameter at a time: the largest parameter's slice in the rank's partition, in fp64, while the
    reduce bucket is alive (measured: ``zero2-llama-7m-bf16-offload-w2``, 16 MB for an 8000 × 256
    embedding)."""
    if not runs_zero_offload(plan) or plan.parallel.zero_stage == 3:
        return 0
    return min(largest_numel, partition_numel) * NORM_DTYPE_BYTES


NORM_COPY_DETAIL = "fp64 copy of a gradient for its norm (set_norm_for_param_grad_in_gpu), while the bucket is reduced"


def offloaded_gradient_parts(plan: "Plan", trainable_numel: int, largest_numel: int) -> list[tuple[str, int, str]]:
    """The host-memory buffers offload_optimizer adds to the fp32 master partition and the optimizer
    states, per rank, as (name, bytes, detail); all pinned (``pin_memory`` defaults to True):

    * stage 1/2 (``DeepSpeedZeroOptimizer``, ``self.device = 'cpu'``): the fp32 gradient partition
      (``single_partition_of_fp32_groups[i].grad``, ``initialize_optimizer_states``), the bit16
      staging copy of the partition (``param_buffer_of_bit16_for_cpu_offload_groups``), and
      ``temp_grad_buffer_for_cpu_offload`` (the largest parameter in the bit16 dtype);
    * stage 3 (``DeepSpeedZeroOptimizer_Stage3``): ``grad_partitions_flat_buffer`` (the partition in
      the gradient-accumulation dtype, ``_create_fp16_partitions_with_defragmentation``) and the fp32
      gradient of each sub-group's master partition (``initialize_optimizer_states``).

    Measured on 2 gloo ranks (``zero2/zero3-llama-7m-bf16-offload-w2``): to the byte, but for padding.
    """
    if not runs_zero_offload(plan):
        return []
    parallel = plan.parallel
    partition = trainable_numel // plan.sharding.optimizer
    bit16 = DTYPE_BYTES[plan.precision.compute_weight_dtype]
    if parallel.zero_stage == 3:
        return [
            ("gradient partition", partition * DTYPE_BYTES[plan.precision.gradient_dtype], "grad_partitions_flat_buffer (pinned)"),
            ("fp32 gradient partition", partition * 4, "fp32 .grad of the master partition (pinned)"),
        ]
    return [
        ("fp32 gradient partition", partition * 4, "fp32 .grad of the master partition (pinned)"),
        ("bit16 partition staging copy", partition * bit16, "param_buffer_of_bit16_for_cpu_offload_groups (pinned)"),
        ("gradient staging buffer", largest_numel * bit16, "temp_grad_buffer_for_cpu_offload: the largest parameter (pinned)"),
    ]


# ---------------------------------------------------------------------------- ZeRO-1/2 backward


def gradients_live_in_bucket(plan: "Plan") -> bool:
    """ZeRO-2 (``partition_gradients``, ``contiguous_gradients`` on by default): the gradient hook
    (``grad_handling_hook`` -> ``process_gradients`` -> ``reduce_independent_p_g_buckets_and_remove_grads``,
    stage_1_and_2.py) copies each new ``param.grad`` into the reduce bucket and points ``param.grad`` at
    the copy, so no gradient outlives its hook until the backward's epilogue; ZeRO-1 (stage 1,
    ``overlap_comm`` off) keeps its ``.grad`` tensors until ``reduce_gradients`` at the end of backward."""
    return runs_zero(plan) and plan.parallel.zero_stage == 2


def flattened_bucket_bytes(plan: "Plan", trainable_numel: int) -> int:
    """ZeRO-2, end of backward: ``reduce_ipg_grads`` -> ``average_tensor`` -> ``allreduce_and_scatter``
    -> ``allreduce_bucket`` flattens the bucket's gradients (``self.flatten``, a ``torch.cat``) before the
    all-reduce: at most ``reduce_bucket_size`` elements in the gradient dtype, alive with the bucket.
    Measured (``zero2-llama-7m-*``): the whole model's 7M gradients in one copy. ZeRO-1 does not take
    this path in the pinned version (measured: no such copy)."""
    if not gradients_live_in_bucket(plan):
        return 0
    elements = min(trainable_numel, plan.parallel.zero_reduce_bucket_size)
    return elements * DTYPE_BYTES[bucket_dtype(plan)]


FLATTENED_DETAIL = "allreduce_bucket flattens the bucket's gradients before the all-reduce (end of backward)"


def partition_gradient_bytes(plan: "Plan", trainable_numel: int) -> int:
    """ZeRO-2 without offload: after the bucket is reduced, ``copy_grads_in_partition`` keeps the rank's
    partition of the gradients in ``grads_in_partition`` (``torch.empty`` of the partition, gradient dtype),
    the ``averaged_gradients`` the optimizer step reads."""
    if not gradients_live_in_bucket(plan) or plan.parallel.offload_optimizer:
        return 0
    return trainable_numel // plan.sharding.gradients * DTYPE_BYTES[plan.precision.gradient_dtype]


def bucket_moment_activation_bytes(plan: "Plan", final_norm: "Trace", stream_bytes: int) -> int:
    """Activation bytes of the loss head alive when ZeRO-1/2's first gradient hook allocates the bucket.

    The hook runs on ``lm_head``'s weight gradient: the final norm's saved tensors and the gradient
    flowing into it are alive. ZeRO-2 drops the head's gradient into the bucket at once; ZeRO-1 keeps
    it through the final norm's backward, whose high-water mark (saved tensors, the incoming gradient,
    fp32 intermediates) then sits on top of the bucket (measured: ``zero1/zero2-llama-7m-bf16-w2``,
    the "backward head" segment)."""
    before_norm = final_norm.saved_activation_bytes + stream_bytes
    if gradients_live_in_bucket(plan):
        return before_norm
    return max(before_norm, final_norm.backward_peak_bytes)


def gradients_go_to_host(plan: "Plan") -> bool:
    """ZeRO-3 with ``offload_optimizer``: each reduce-scattered gradient partition is copied into the
    pinned host ``grad_partitions_flat_buffer`` (``partition_grads``, stage3.py), so none stays on
    the GPU after its layer's backward (measured: ``zero3-llama-7m-bf16-offload-w2``)."""
    return runs_zero_offload(plan) and plan.parallel.zero_stage == 3


# ---------------------------------------------------------------------------- the optimizer step

SUB_GROUP_SIZE = 1_000_000_000
"""DeepSpeed zero_optimization.sub_group_size default (1e9 elements, deepspeed/runtime/zero/config.py)."""


def steps_flat_partition(plan: "Plan") -> bool:
    """DeepSpeed ZeRO hands the client optimizer flat fp32 partitions, not the model's parameters:
    stage 1/2 replace each param group's ``params`` with ``[single_partition_of_fp32_groups[i]]``
    (``DeepSpeedZeroOptimizer.__init__``, stage_1_and_2.py), stage 3 with one
    ``fp32_partitioned_groups_flat`` tensor per ``sub_group_size`` elements (``_setup_for_real_optimizer``,
    stage3.py). A for-loop optimizer's temporaries (AdamW's ``denom``, its update) are then the size of
    the whole partition, not of the largest parameter (measured: ``zero2-llama-7m-bf16-smallbucket-w2``,
    two fp32 temporaries of the 3.5M-element partition in the step)."""
    parallel = plan.parallel
    return parallel.strategy == "zero" and parallel.zero_stage >= 1


def flat_partition_numel(plan: "Plan", trainable_numel: int) -> int:
    """Elements of the largest flat tensor the client optimizer steps: the rank's partition (stage 1/2),
    or one sub-group of it (stage 3, ``sub_group_size``)."""
    partition = trainable_numel // max(1, plan.sharding.optimizer)
    if plan.parallel.zero_stage == 3:
        return min(partition, SUB_GROUP_SIZE)
    return partition


def flattens_sub_group_gradients(plan: "Plan") -> bool:
    """ZeRO-3: ``_prepare_fp32_grad_for_sub_group`` (stage3.py) hands the master's sub-group a new tensor,
    ``self.flatten(averaged_gradients).to(fp32)`` — ``flatten`` is a ``torch.cat``, so there is an fp32 copy of
    one sub-group for the update also when the gradient partition is fp32 already (``grad_accum_dtype`` fp32,
    or an fp32 model). Measured: ``zero3-llama-7m-bf16-fp32grads-w1``, three fp32 partition-sized tensors in
    the step (that copy and AdamW's two temporaries)."""
    parallel = plan.parallel
    return parallel.strategy == "zero" and parallel.zero_stage == 3


def frees_gradients_before_update(plan: "Plan") -> bool:
    """ZeRO-1/2 (no offload, the ZeRO optimizer): ``DeepSpeedZeroOptimizer.step`` flattens the rank's gradient
    partition, hands its fp32 form to the master (``single_partition_of_fp32_groups[i].grad``), then frees every
    ``.grad`` (``free_grad_in_param_list``) and the 16-bit partition (``averaged_gradients[i] = None``,
    ``_release_preflattened_grad_buffers``) before ``_optimizer_step``: the update holds one fp32 gradient
    partition and the optimizer's temporaries, no other gradient (measured: ``zero2-llama-7m-bf16-smallbucket-w2``,
    no gradient bytes at the step's peak; ``zero1-llama-7m-{fp32,bf16}-w2``, where ZeRO-1's whole-model ``.grad``
    tensors are gone at the update too). Not with ZeRO-2's fp32 partition buffer, which the update reads as it is."""
    parallel = plan.parallel
    return (
        runs_zero(plan)
        and parallel.zero_stage in (1, 2)
        and not parallel.offload_optimizer
        and not runs_bf16_optimizer(plan)
        and not accumulates_partition_in_fp32(plan)
    )


def update_gradient_partition_bytes(plan: "Plan", trainable_numel: int) -> int:
    """ZeRO-1/2's fp32 gradient partition at the update (see :func:`frees_gradients_before_update`), in any model
    dtype: ``flat_grad_partition.to(fp32)`` is a new tensor for 16-bit gradients and the flattened copy itself for
    fp32 ones (``Tensor.to`` returns ``self`` when the dtype matches), so an fp32 model also holds one fp32
    partition-sized gradient through the update (measured: ``zero{1,2}-llama-7m-fp32-w2``, 14.0 MB on 2 ranks of
    the 7M-parameter model, beside AdamW's two temporaries). 0 where the rule does not apply."""
    if not frees_gradients_before_update(plan):
        return 0
    return trainable_numel // max(1, plan.sharding.optimizer) * 4


def flatten_moment_parts(plan: "Plan", trainable_numel: int) -> dict[tuple[str, str], int]:
    """What ZeRO-1/2's ``step`` holds just before it frees the 16-bit gradients, for the rank's partition P:
    the gradients in the partition (ZeRO-2's ``grads_in_partition``; ZeRO-1's ``.grad`` of the parameters in
    the partition, the others freed first by ``free_grad_in_param_list(params_not_in_partition)``), their
    flattened copy (``self.flatten``, a ``torch.cat``) and, for 16-bit gradients, its fp32 cast. Below the
    update with AdamW's two partition-sized temporaries (8P against 12P bytes), above it for an optimizer
    without temporaries (SGD); from the source, not measured."""
    if not frees_gradients_before_update(plan):
        return {}
    partition = trainable_numel // max(1, plan.sharding.optimizer)
    gradient_bytes = DTYPE_BYTES[plan.precision.gradient_dtype]
    parts = {
        ("gradients", "gradients"): partition * gradient_bytes,
        ("overhead", "flattened gradient partition"): partition * gradient_bytes,
    }
    if gradient_bytes != 4:
        parts[("overhead", "fp32 gradient partition")] = partition * 4
    return parts


FLATTEN_DETAIL = "ZeRO-1/2 step: the gradient partition flattened (and cast to fp32) before the 16-bit gradients are freed"


# ---------------------------------------------------------------------------- pinned host buffers

PINNED_STAGE_1_2 = ("fp32 master weights", "fp32 gradient partition", "bit16 partition staging copy", "gradient staging buffer")
"""Offloaded parts ZeRO-1/2 pins (``pin_memory`` defaults to True, offload_config.py): the fp32 master partition
and its ``.grad`` (``initialize_optimizer_states``), ``param_buffer_of_bit16_for_cpu_offload_groups`` and
``temp_grad_buffer_for_cpu_offload`` (stage_1_and_2.py). The optimizer's states are made by the client
optimizer (``torch.zeros_like``) and are pageable."""
PINNED_STAGE_3 = ("gradient partition", "fp32 gradient partition", "weights")
"""Offloaded parts ZeRO-3 pins: ``grad_partitions_flat_buffer``, each sub-group's fp32 gradient
(``subgroup_gradient_buffer``, ``_initialize_optimizer_states``) and, under ``offload_param``, each
sub-group's flat bit16 partition (``param_groups_fp16_flat_cpu_memory``); the fp32 master partitions are
plain clones (``_create_fp32_partitions``)."""
SUB_GROUPED_PARTS = ("fp32 gradient partition", "weights")


def pinned_allocations(plan: "Plan", parts: "tuple[tuple[str, int, str], ...]") -> list[int]:
    """The sizes in bytes of the pinned host buffers one rank allocates under ``offload_optimizer`` /
    ``offload_param`` to the CPU, from its offloaded parts (ZeRO-3's sub-grouped buffers split into
    ``sub_group_size``-element pieces, assuming the sub-groups are full but the last)."""
    parallel = plan.parallel
    if parallel.strategy != "zero" or parallel.offload_device != "cpu" or plan.device != "cuda":
        return []
    stage3 = parallel.zero_stage == 3
    pinned = PINNED_STAGE_3 if stage3 else PINNED_STAGE_1_2
    sizes: list[int] = []
    for name, nbytes, _ in parts:
        if name not in pinned or nbytes <= 0:
            continue
        if stage3 and name in SUB_GROUPED_PARTS:
            element_bytes = 4 if name == "fp32 gradient partition" else DTYPE_BYTES[plan.precision.stored_weight_dtype]
            chunk = SUB_GROUP_SIZE * element_bytes
            sizes += [chunk] * (nbytes // chunk) + ([nbytes % chunk] if nbytes % chunk else [])
        else:
            sizes.append(nbytes)
    return sizes


def power_of_two_ceil(nbytes: int) -> int:
    return 1 << (nbytes - 1).bit_length() if nbytes > 1 else nbytes


def pinned_rounding_bytes(plan: "Plan", parts: "tuple[tuple[str, int, str], ...]") -> int:
    """What pinning adds on one rank: DeepSpeed pins through ``tensor.pin_memory()`` (its accelerator's
    ``_torch_pin_memory``, deepspeed/accelerator/abstract_accelerator.py; ``DS_PIN_MEMORY_BACKEND`` defaults
    to torch), and PyTorch's ``CachingHostAllocator`` rounds every pinned block up to the next power of two
    (``CachingHostAllocatorImpl::allocate``, aten/src/ATen/core/CachingHostAllocator.h; no threshold unless
    ``pinned_max_round_threshold`` is set). A 6.5 GB fp32 partition takes 8 GiB of page-locked RAM.
    From source, not measured (pinning is a no-op on a CPU-only machine)."""
    return sum(power_of_two_ceil(size) - size for size in pinned_allocations(plan, parts))


PINNED_ROUNDING_DETAIL = (
    "PyTorch's CachingHostAllocator rounds each pinned buffer up to a power of two "
    "(aten/src/ATen/core/CachingHostAllocator.h; from source, not measured)"
)


def releases_all_for_step(plan: "Plan") -> bool:
    """ZeRO-3: ``DeepSpeedZeroOptimizer_Stage3.step`` first partitions every parameter
    (``_partition_all_parameters``), the persistent small ones included, and ``_post_step`` all-gathers
    the persistent ones again after the update (stage3.py): during the update only the partitions are
    alive (measured: ``zero3-llama-7m-bf16-smallbucket-w2``, the optimizer phase)."""
    parallel = plan.parallel
    return parallel.strategy == "zero" and parallel.zero_stage == 3 and plan.sharding.weights > 1
