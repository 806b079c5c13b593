"""FSDP2 (``fully_shard``, torch 2.13) and FSDP1: what stays unsharded, and when.

The layout trainmem assumes is the one the FSDP2 tutorial and torchtitan use and the
distributed measurement runs: ``fully_shard`` on every decoder layer, then on the root
model, so the root unit holds everything outside the layers (embedding, final norm, head).

Rules, from ``torch/distributed/fsdp/_fully_shard/``:

* **sharded parameters** stay allocated for the whole step (``FSDPParam.sharded_param``,
  ``_fsdp_param.py``); the unsharded parameters are separate storages that
  ``alloc_storage``/``free_storage`` resize in place.
* **the root unit is not resharded after forward**: ``FSDPState._lazy_init``
  (``_fsdp_state.py``) sets the root group's ``post_forward_mesh_info`` to None, so its
  unsharded weights (the whole embedding and head, in the param dtype) live from the root's
  pre-forward to its post-backward (the end of the embedding's backward).
* **a layer unit** is all-gathered before its forward (``FSDPParamGroup.unshard``):
  ``foreach_all_gather`` fills a flat output of world size × the padded shard, which
  ``foreach_all_gather_copy_out`` copies into the unsharded parameters; both exist at once,
  so a layer in compute costs two copies of its weights. With
  ``reshard_after_forward=True`` it is freed after the forward and gathered again for the
  backward; with ``False`` it stays until its backward is done.
* **backward prefetch**: the root's pre-backward unshards the last layer
  (``FSDPParamGroup._backward_prefetch``), so its all-gather output is alive while the
  loss head's backward runs (the peak of the measured steps).

Measured (``fsdp2-llama-7m-*``): the parameters at the loss backward are the shard, the
root unit and one layer's all-gather output, to the byte.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..tape import DTYPE_BYTES

if TYPE_CHECKING:  # pragma: no cover
    from ..plan import Plan, Stage

ROOT_DETAIL = "the root fully_shard unit (embedding, final norm, head) stays unsharded from forward to backward"
KEPT_DETAIL = "reshard_after_forward=False: each layer's unsharded weights stay until its backward"
PREFETCH_DETAIL = "the last layer's all-gather output, prefetched by the root's pre-backward"


def runs_fsdp2(plan: "Plan") -> bool:
    """FSDP2 with sharded weights (FULL_SHARD / HYBRID_SHARD)."""
    parallel = plan.parallel
    return parallel.strategy == "fsdp" and parallel.fsdp_version == 2 and plan.sharding.weights > 1


def runs_fsdp1(plan: "Plan") -> bool:
    """FSDP1 (``FullyShardedDataParallel``, one FlatParameter per wrapped decoder layer and one for the
    root) with sharded weights."""
    parallel = plan.parallel
    return parallel.strategy == "fsdp" and parallel.fsdp_version == 1 and plan.sharding.weights > 1


def runs_fsdp_units(plan: "Plan") -> bool:
    """FSDP1 or FSDP2 wrapped per decoder layer and on the root: the root-unit and prefetch rules hold for both.

    FSDP1's root is not resharded after forward either (``_post_forward_reshard`` in
    ``torch/distributed/fsdp/_runtime_utils.py`` skips the root under FULL_SHARD: its parameters
    are used again at once by backward), and ``BackwardPrefetch.BACKWARD_PRE`` (the default)
    all-gathers the next layer when a layer's backward starts, the last one in the root's
    pre-backward. Measured (``fsdp1-llama-7m-fp32-w2``)."""
    return runs_fsdp2(plan) or runs_fsdp1(plan)


def root_unit_bytes(plan: "Plan", stage: "Stage") -> int:
    """Unsharded weights of the root unit: every tensor outside the decoder layers, in the compute dtype."""
    if not runs_fsdp_units(plan):
        return 0
    return ends_bytes(plan, stage)


def forward_gathered_bytes(plan: "Plan", layer_bytes: int, default: int) -> int:
    """A layer's gathered weights during its forward: FSDP1 all-gathers straight into the unit's padded
    unsharded FlatParameter (``_full_param_padded``, ``FlatParamHandle.unshard``), one copy, and does not
    prefetch in forward (``forward_prefetch=False``); FSDP2 keeps ``default`` (all-gather output and
    unsharded parameters)."""
    return layer_bytes if runs_fsdp1(plan) else default


def ends_bytes(plan: "Plan", stage: "Stage") -> int:
    """Every tensor of the stage outside the decoder layers (embedding, final norm, head), whole, in the compute dtype."""
    compute = DTYPE_BYTES[plan.precision.compute_weight_dtype]
    return sum(s.total_numel for s in plan.slices(stage) if not s.layer_scope) * compute


def kept_after_forward(plan: "Plan", layer_bytes: int) -> int:
    """Bytes a layer leaves unsharded after its forward (reshard_after_forward=False), else 0."""
    if not runs_fsdp2(plan) or plan.parallel.fsdp_reshard_after_forward:
        return 0
    return layer_bytes


def backward_prefetch_bytes(plan: "Plan", layer_bytes: int) -> int:
    """The last layer's all-gather output alive during the loss head's backward (0 if it was never resharded)."""
    if not runs_fsdp_units(plan) or not plan.parallel.fsdp_reshard_after_forward:
        return 0
    return layer_bytes


def offloads_to_host(plan: "Plan") -> bool:
    """FSDP CPU offload (FSDP2 ``CPUOffloadPolicy``, FSDP1 ``CPUOffload(offload_params=True)``; trainmem's
    ``offload_parameters`` for strategy 'fsdp'): the sharded parameters, their gradients and the optimizer
    states live on the host; FSDP2's ``foreach_reduce`` (``_fsdp_collectives.py``) copies each reduce-scattered
    gradient shard to the CPU, so none stays on the GPU after its layer's backward (FSDP1 keeps them until the end
    of the backward: :func:`keeps_reduced_shards_on_device`). On a CPU-only machine the host-device copies are
    no-ops (measured: ``fsdp2-llama-7m-fp32-offload-w2``, ``fsdp1-llama-7m-fp32-offload-w2``, the host side)."""
    parallel = plan.parallel
    return parallel.strategy == "fsdp" and parallel.offload_parameters and plan.sharding.weights > 1


def keeps_reduced_shards_on_device(plan: "Plan") -> bool:
    """FSDP1's CPU offload keeps each unit's reduce-scattered gradient on the device until the end of the backward:
    ``_reduce_grad`` -> ``_accumulate_sharded_grad`` stores it in ``flat_param._saved_grad_shard`` and
    ``_offload_grad`` copies it into the host ``_cpu_grad``, but the device tensor is only dropped by
    ``FlatParamHandle.prepare_gradient_for_optim`` (``delattr(flat_param, "_saved_grad_shard")``) in the
    post-backward final callback (torch/distributed/fsdp/_runtime_utils.py, _flat_param.py); the update then reads
    ``_cpu_grad``. FSDP2's ``foreach_reduce`` frees its device output once copied. Measured on gloo
    (``fsdp1-llama-7m-fp32-offload-w2``): the shards do stay through the backward, 14.0 MB by its end."""
    return runs_fsdp1(plan) and offloads_to_host(plan)


WRITEBACK_DETAIL = (
    "FSDP1 CPUOffload on a CPU-only run: each unit's pre-backward copies the orig params' .grad views of _cpu_grad "
    "into a new sharded gradient (_writeback_orig_params), kept as _saved_grad_shard to the end of the backward"
)


def writes_back_gradient_copies(plan: "Plan") -> bool:
    """FSDP1's CPU offload as a CPU-only run replays it (``runtime.device: "cpu"``): a sharded gradient copy per unit
    from the unit's pre-backward (or its prefetch) to the end of the backward.

    From the source (torch/distributed/fsdp/_flat_param.py, _runtime_utils.py): with offload, ``sharded_grad`` is
    ``_cpu_grad``, so ``_use_sharded_grad_views`` leaves every original parameter's ``.grad`` a view of ``_cpu_grad``
    again after ``zero_grad``; the next backward's ``pre_unshard`` runs ``_writeback_orig_params``, which finds
    ``param.grad`` not in ``flat_param.grad`` (None) and allocates ``torch.zeros_like(flat_param)`` (the shard) as the
    new ``flat_param.grad``. ``prepare_gradient_for_backward`` then keeps it as ``_saved_grad_shard``, because on the
    CPU the gradient is on the FlatParameter's device, and ``_accumulate_sharded_grad`` adds the reduce-scattered
    shard into it in place; ``prepare_gradient_for_optim`` drops it after the backward. The root's pre-backward
    unshards the root and prefetches the last layer (``BACKWARD_PRE``), each layer's the one below, so the root's and
    the last layer's copies exist at the head's backward (measured: ``fsdp1-llama-7m-fp32-offload-w2``, 9.6 MB at
    the peak).

    On a GPU the same copy is made while the FlatParameter is still the host shard (``_writeback_orig_params`` runs
    before ``flat_param_to(device)``): host memory, dropped by ``prepare_gradient_for_backward``
    (``grad_offloaded``), and the device holds each unit's reduce-scattered shard from its post-backward to the end
    of the backward instead (:func:`keeps_reduced_shards_on_device`)."""
    return runs_fsdp1(plan) and offloads_to_host(plan) and plan.device == "cpu"


def offloaded_gradient_parts(plan: "Plan", trainable_numel: int) -> list[tuple[str, int, str]]:
    """The gradient shard FSDP's CPU offload keeps on the host, as (name, bytes, detail)."""
    if not offloads_to_host(plan):
        return []
    shard = trainable_numel // plan.sharding.gradients * DTYPE_BYTES[plan.precision.gradient_dtype]
    return [("gradient shard", shard, "sharded gradients on the CPU (CPUOffloadPolicy)")]


def flat_shard_views(unit_numels: list[int], shards: int, ranks: "list[int] | None" = None) -> list[list[int]]:
    """FSDP1's sharding of one unit: the unit's parameters are flattened into one FlatParameter in registration
    order, padded to a multiple of the shard count and cut into equal chunks (``FlatParamHandle.shard``,
    ``_get_shard``, torch/distributed/fsdp/_flat_param.py); with ``use_orig_params=True`` each original parameter
    on rank r is the 1-D view of its elements inside chunk r (``_get_shard_metadata``, ``_use_sharded_views``),
    empty where it lies outside. Returns, for each of ``ranks`` (default: every rank), the element count of each
    parameter's view. Unlike FSDP2, which shards every tensor on dim 0, a rank may hold a whole parameter (the 7M
    Llama's embedding on rank 0, its head on rank 1). The per-parameter alignment padding of ``use_orig_params``
    (16 bytes) is not counted."""
    shards = max(1, shards)
    chunk = max(1, -(-sum(unit_numels) // shards))
    views = []
    for rank in range(shards) if ranks is None else ranks:
        start, end = rank * chunk, (rank + 1) * chunk
        offset, rank_views = 0, []
        for numel in unit_numels:
            rank_views.append(max(0, min(end, offset + numel) - max(start, offset)))
            offset += numel
        views.append(rank_views)
    return views


def representative_ranks(units: list[list[int]], shards: int) -> list[int]:
    """Ranks that between them show every distinct set of views (:func:`flat_shard_views`) across ``units``: a
    chunk holding a tensor boundary of some unit, and the one after it; the ranks in between see the same views
    as their neighbour. At most four per tensor, however many ranks shard the model."""
    shards = max(1, shards)
    ranks = {0}
    for numels in units:
        chunk = max(1, -(-sum(numels) // shards))
        offset = 0
        for numel in numels:
            for edge in (offset, offset + numel):
                rank = min(shards - 1, edge // chunk)
                ranks.update((rank, min(shards - 1, rank + 1)))
            offset += numel
    return sorted(ranks)


def steps_flat_shard_views(plan: "Plan") -> bool:
    """FSDP1 with sharded weights and ``use_orig_params`` (the layout trainmem assumes): the optimizer steps each
    original parameter's view of the rank's FlatParameter chunk, so a for-loop optimizer's temporaries follow the
    largest view, not the largest parameter / shards (measured: ``fsdp1-llama-7m-fp32-w2``, AdamW's two
    temporaries of the whole 8000 × 256 embedding on rank 0 and of the head on rank 1)."""
    return runs_fsdp1(plan) and not plan.lora


# ---------------------------------------------------------------------------- FSDP1 units mixing frozen and trainable tensors

FROZEN_GRADIENTS_DETAIL = (
    "FSDP1 use_orig_params with LoRA: a decoder layer's FlatParameter mixes the frozen base and the adapters, "
    "requires grad as a whole, and gets a gradient of every element (the frozen weights' too), sharded after "
    "the reduce-scatter"
)


def computes_frozen_gradients(plan: "Plan") -> bool:
    """FSDP1 (``use_orig_params=True``) wrapping decoder layers whose frozen base weights and trainable LoRA adapters
    share one FlatParameter: ``FlatParamHandle._init_flat_param_and_metadata`` (torch/distributed/fsdp/_flat_param.py)
    permits mixed ``requires_grad`` under ``use_orig_params`` and gives the FlatParameter ``requires_grad=True`` if any
    original parameter requires it; in forward ``_use_unsharded_views(as_params=False)`` sets every original parameter,
    the frozen ones too, to a view of the unsharded FlatParameter, so autograd treats the frozen weights as requiring
    grad. It saves what a full fine-tune's layer saves and makes a gradient of the whole FlatParameter
    (``_validate_frozen_params``, _wrap_utils.py, warns of this: "739840 numel instead of 14336 numel before sharding
    via reduce-scatter" for a layer of the 7M Llama), reduce-scattered into a shard of the whole unit.

    Measured (``fsdp1-llama-7m-fp32-lora-w2``): each layer's forward saves a full fine-tune's activations plus the
    adapters' own, and each layer leaves a gradient shard of its whole FlatParameter (1.48 MB, not 57 KB) through the
    update. FSDP2 shards each parameter by itself (its frozen weights get no gradient; measured exact without this
    rule, ``fsdp2-llama-7m-fp32-lora-w2``), and so does an FSDP1 unit that holds no adapter (the root here)."""
    return runs_fsdp1(plan) and plan.lora and plan.lora_targets is not None


def unit_layout(plan: "Plan", group: object) -> list[tuple[int, bool]]:
    """One decoder layer's FlatParameter, as (elements, trains) in registration order: each base tensor, and after an
    adapted linear PEFT's ``lora_A`` (r × in) and ``lora_B`` (out × r) (``LoraLayer.update_layer`` registers them
    after ``base_layer``, peft/tuners/lora/layer.py)."""
    targets = plan.lora_targets
    adapters = {adapter.module: adapter for adapter in targets.adapters_of(group)} if targets is not None else {}
    layout: list[tuple[int, bool]] = []
    for tensor in group.tensors:  # type: ignore[attr-defined]
        layout.append((tensor.numel, False))
        adapter = adapters.pop(tensor.module, None) if tensor.linear_features is not None else None
        if adapter is not None:
            layout.append((adapter.rank * adapter.in_features * adapter.experts, True))
            layout.append((adapter.out_features * adapter.rank * adapter.experts, True))
    return layout


def adapter_views_per_rank(plan: "Plan", stage: "Stage") -> list[list[tuple[int, int]]]:
    """For each representative rank, the (elements, layers) of every non-empty adapter view in its FlatParameter
    chunks (:func:`flat_shard_views` over each layer's :func:`unit_layout`): with ``use_orig_params`` the optimizer
    steps only the views a rank holds, so one rank may hold every adapter of a layer and another none (measured:
    ``fsdp1-llama-7m-fp32-lora-w2``, rank 0 has all the adapters' AdamW states, rank 1 none)."""
    shards = max(1, plan.sharding.weights)
    units = [(unit_layout(plan, group), count) for _, group, count in plan.stage_layer_groups(stage)]
    ranks = representative_ranks([[numel for numel, _ in layout] for layout, _ in units], shards)
    per_rank: list[list[tuple[int, int]]] = [[] for _ in ranks]
    for layout, count in units:
        views = flat_shard_views([numel for numel, _ in layout], shards, ranks)
        for position, rank_views in enumerate(views):
            per_rank[position] += [(view, count) for view, (_, trains) in zip(rank_views, layout) if trains and view]
    return per_rank


def casts_adapters_for_compute(plan: "Plan") -> bool:
    """FSDP2's ``MixedPrecisionPolicy(param_dtype=bf16)`` (trainmem's ``bf16-mixed`` under strategy 'fsdp') casts every
    parameter of a unit to the param dtype when it all-gathers it (``FSDPParam.init_all_gather_outputs``,
    ``_fsdp_param.py``), PEFT's fp32 adapters too: the adapters' shards stay fp32, their unsharded copies and the LoRA
    matmuls are bf16, and PEFT's ``x.to(lora_A.weight.dtype)`` makes no fp32 copy of the input (measured:
    ``fsdp2-llama-7m-mixed-bf16-lora-w2``, one layer's all-gather output 739,840 bf16 elements, adapters included, and
    the activations of a bf16 LoRA). FSDP1's ``MixedPrecision`` casts its FlatParameter alike (from the source, not
    measured)."""
    return plan.lora and runs_fsdp_units(plan) and plan.precision.recipe in ("fsdp-mixed-bf16", "fsdp-mixed-fp16")
