"""Measure a distributed training step, rank by rank: :func:`measure_distributed`.

``parallelism.num_gpus`` local processes (2–4) are started with
``torch.multiprocessing.start_processes`` (spawn) and joined in one gloo process group over
127.0.0.1, so that the collectives really run (CPU: host and "device" memory are one pool).
Each rank, with the same seed:

1. starts a :class:`~trainmem.measure.tracker.StorageTracker` *before* it builds anything,
   and reports in-place storage resizes to it
   (:func:`~trainmem.measure.tracker.tracking_storage_resizes`): buffers that a framework
   allocates while it wraps the model (DDP's buckets, DeepSpeed's flat partitions) or in
   its first step are seen;
2. builds the model from its config (random weights, nothing downloaded) and wraps it with
   the setup's framework (:mod:`trainmem.measure.frameworks`): DDP, FSDP2, DTensor tensor
   parallelism or DeepSpeed ZeRO 1–3;
3. runs ``warmup_steps`` steps, then one measured step (the loop of
   :mod:`trainmem.measure.step`, with DeepSpeed's ``engine.backward``/``engine.step``);
4. rebases the log at the measured step's first marker (what is alive then is the step's
   start) and labels storages by who owns them: parameters and buffers (sharded ones as
   their local tensors), ``.grad``, optimizer state, and framework-owned buffers by the
   attribute that holds them.

Each rank's result is one :class:`~trainmem.measure.record.Measurement` with ``rank`` and
``world_size`` set; the case id ends in ``-rankN``. Fake tensors are not supported here:
gloo's collectives need real data.

Offload: on CPU the offloaded tensors live in the same pool as everything else; the
framework's own attribute names (e.g. DeepSpeed's ``single_partition_of_fp32_groups``
under ``offload_optimizer``, :meth:`~trainmem.measure.frameworks.Framework.host_tensors`)
say which storages would be in host memory on a GPU. Their allocations are left out of the
log, so that the record's peak and breakdown are the device side as ``max_memory_allocated``
would see it, and their bytes are recorded apart in ``host_parts``.
"""

from __future__ import annotations

import gc
from typing import Any, Optional, Union

from ..setup import Setup
from .record import Measurement

MAX_LOCAL_RANKS = 4


def runs_deepspeed_on_one_rank(setup: Setup) -> bool:
    """DeepSpeed ZeRO on a single process (``num_gpus`` 1, stage 1–3): the engine still wraps the
    client optimizer in its ZeRO (or BF16) optimizer, with a data-parallel group of one rank, so it is
    measured like the distributed runs (one gloo rank), not as a plain PyTorch step."""
    parallel = setup.parallelism
    return parallel.num_gpus == 1 and parallel.strategy == "zero" and parallel.zero_stage >= 1


def check_distributed(setup: Setup) -> None:
    """Raise ValueError naming the first field a local distributed measurement cannot replay."""
    parallel = setup.parallelism
    problems = []
    if not 2 <= parallel.num_gpus <= MAX_LOCAL_RANKS and not runs_deepspeed_on_one_rank(setup):
        problems.append(
            f"parallelism.num_gpus={parallel.num_gpus} (a distributed measurement runs 2–4 local ranks, "
            "or 1 under DeepSpeed ZeRO)"
        )
    if parallel.pipeline_parallel_size > 1 or parallel.context_parallel_size > 1 or parallel.expert_parallel_size > 1:
        problems.append("pipeline, context or expert parallelism")
    if parallel.tensor_parallel_size > 1:
        two_d = parallel.strategy == "fsdp" and parallel.fsdp_version == 2  # torchtitan's FSDP2 + TP
        if parallel.tensor_parallel_size != parallel.num_gpus and not two_d:
            problems.append("tensor parallelism combined with data parallelism (measured: FSDP2 outside TP)")
        if parallel.tensor_parallel_flavor != "dtensor":
            problems.append("parallelism.tensor_parallel_flavor 'megatron' (measured: 'dtensor')")
        if parallel.strategy not in ("ddp", "fsdp") or parallel.strategy == "fsdp" and not two_d:
            problems.append("tensor parallelism with a sharded data-parallel strategy other than FSDP2")
    if setup.finetuning.method not in ("full", "lora"):
        problems.append(f"finetuning.method {setup.finetuning.method!r} (measured: full, lora)")
    if setup.finetuning.method == "lora" and (setup.finetuning.lora.use_dora or setup.finetuning.lora.modules_to_save):
        problems.append("finetuning.lora use_dora or modules_to_save (measured: plain LoRA adapters)")
    if setup.finetuning.method == "lora" and parallel.tensor_parallel_size > 1:
        problems.append("LoRA under tensor parallelism (peft's adapters are not in the DTensor plan)")
    if problems:
        raise ValueError("cannot measure this distributed setup: " + "; ".join(problems))


def measure_distributed(
    setup: Union[Setup, dict[str, Any]],
    *,
    seed: int = 0,
    warmup_steps: Optional[int] = None,
    case_id: str = "",
    description: str = "",
) -> list[Measurement]:
    """Run the setup's step on ``num_gpus`` local gloo ranks; one Measurement per rank, rank 0 first.

    ``warmup_steps`` defaults to 2 for DDP, whose Reducer rebuilds its buckets in the order the
    gradients arrived during the first step at the start of the second one's forward
    (``Reducer::rebuild_buckets``, torch/csrc/distributed/c10d/reducer.cpp), and 1 otherwise.
    """
    setup = setup if isinstance(setup, Setup) else Setup.model_validate(setup)
    if setup.parallelism.pipeline_schedule is not None:  # torch.distributed.pipelining (measure/pipelining.py)
        from .pipelining import measure_pipeline

        return measure_pipeline(setup, seed=seed, warmup_steps=warmup_steps, case_id=case_id, description=description)
    check_distributed(setup)
    if warmup_steps is None:
        from .frameworks import framework_name

        warmup_steps = 2 if framework_name(setup) == "ddp" else 1
    from .ranks import spawn_ranks

    return spawn_ranks(
        _measure_rank, setup, seed=seed, warmup_steps=warmup_steps, case_id=case_id, description=description,
        folder_prefix="trainmem-dist-", environment={"DS_ACCELERATOR": "cpu"},
    )


def _measure_rank(
    setup: Setup, rank: int, world_size: int, seed: int, warmup_steps: int, case_id: str, description: str
) -> Measurement:
    import torch
    import torch.distributed as dist

    from .accounting import StepLog, account, rebased_at_first_mark
    from .events import MARK
    from .frameworks import FRAMEWORKS, framework_name, model_building_context
    from .hf_model import base_model, build_model, lora_adapter_dtype, lora_target_modules
    from .ranks import rank_measurement
    from .runner import _embeddings_require_grad, _quiet_libraries, default_case_id
    from .step import AUTOCAST_DTYPES
    from .tracker import StorageTracker, tracking_storage_resizes
    from .transformers_compat import unpacked_batches

    name = framework_name(setup)
    if name == "deepspeed":
        import deepspeed

        deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
    tracker = StorageTracker(autocast_recipe=setup.precision in AUTOCAST_DTYPES)
    try:
        with _quiet_libraries(), unpacked_batches(), tracker, tracking_storage_resizes(tracker):
            torch.manual_seed(seed)
            with model_building_context(setup):
                model = build_model(setup, on_meta=False)
            # under zero.Init a parameter's own tensor is empty; ds_numel is its full size
            num_parameters = sum(getattr(parameter, "ds_numel", parameter.numel()) for parameter in model.parameters())
            num_trainable = sum(
                getattr(parameter, "ds_numel", parameter.numel()) for parameter in model.parameters() if parameter.requires_grad
            )
            lora_targets, adapter_dtype = lora_target_modules(model), lora_adapter_dtype(model)
            framework = FRAMEWORKS[name](setup, model, world_size)
            owned: dict[int, tuple[str, str]] = {}
            host: dict[int, str] = {}
            framework.on_buffer = lambda category, part, tensor: _label_one(tracker, owned, category, part, tensor)
            framework.wrap()
            vocab_size = base_model(model).config.vocab_size
            batch = torch.randint(0, vocab_size, (setup.micro_batch_size, setup.sequence_length))
            step = framework.training_step(batch)
            for _ in range(warmup_steps):
                step.run()
            gc.collect()
            gc.disable()

            def label() -> None:
                _set_roles(tracker, framework, batch)
                _label(tracker, framework, owned)
                _note_host(tracker, framework, host)

            label()
            step.snapshot_hook = label
            step.run(tracker)
            label()
            tracker.stop()
    finally:
        gc.enable()
    log = rebased_at_first_mark(
        StepLog(
            storages=tracker.storages,
            events=[event for event in tracker.events if event[1] not in host or event[0] == MARK],
            segments=tracker.segments,
            gradient_storages=step.gradient_storages,
            optimizer_state_storages=step.optimizer_state_storages,
            assigned=owned,
        )
    )
    host_parts: dict[str, int] = {}
    for index, part in host.items():
        host_parts[part] = host_parts.get(part, 0) + tracker.storages[index].nbytes
    dist.destroy_process_group()
    return rank_measurement(
        setup,
        rank,
        world_size,
        tracker=tracker,
        accounting=account(log),
        optimizer=(framework.optimizer_class, framework.optimizer_kwargs, framework.optimizer_implementation),
        input_embeddings_require_grad=_embeddings_require_grad(setup),
        seed=seed,
        warmup_steps=warmup_steps,
        frameworks=_framework_versions(),
        case_id=case_id,
        default_id=lambda replayed: f"{name}-{default_case_id(replayed, False)}-w{world_size}",
        description=description,
        num_parameters=num_parameters,
        num_trainable_parameters=num_trainable,
        lora=(lora_targets, adapter_dtype),
        notes=step.notes,
        framework=name,
        host_parts=dict(sorted(host_parts.items())),
    )


def _set_roles(tracker: Any, framework: Any, batch: Any) -> None:
    from .events import ROLE_GRADIENT, ROLE_INPUT, ROLE_OPTIMIZER_STATE, ROLE_PARAMETER

    for tensor in framework.parameter_tensors():
        _set_role(tracker, tensor, ROLE_PARAMETER)
    for tensor in framework.gradient_tensors():
        _set_role(tracker, tensor, ROLE_GRADIENT)
    _set_role(tracker, batch, ROLE_INPUT)
    for tensor in framework.optimizer_state_tensors():
        _set_role(tracker, tensor, ROLE_OPTIMIZER_STATE)


def _label(tracker: Any, framework: Any, owned: dict[int, tuple[str, str]]) -> None:
    """Name the storages the framework holds (first name wins): its flat buffers, unsharded copies.

    Storages that are parameters (DeepSpeed's parameters are views of its flat bf16 groups),
    optimizer state or the batch keep that role."""
    for category, part, tensor in framework.owned_tensors():
        _label_one(tracker, owned, category, part, tensor)


def _note_host(tracker: Any, framework: Any, host: dict[int, str]) -> None:
    """Remember the storages the framework would keep in host memory (first name wins); their
    allocations are left out of the device-side log, and their bytes are recorded apart."""
    from .tracker import plain_tensors

    for _, part, tensor in framework.host_tensors():
        for plain in plain_tensors(tensor):
            index = tracker.index_of(plain)
            if index is not None:
                host.setdefault(index, part)


def _label_one(tracker: Any, owned: dict[int, tuple[str, str]], category: str, part: str, tensor: Any) -> None:
    from .tracker import plain_tensors

    for plain in plain_tensors(tensor):
        index = tracker.index_of(plain)
        if index is not None and index not in owned and tracker.storages[index].role == "allocated":
            owned[index] = (category, part)


def _set_role(tracker: Any, tensor: Any, role: str) -> None:
    from .tracker import plain_tensors

    for plain in plain_tensors(tensor):
        index = tracker.index_of(plain)
        if index is not None and tracker.storages[index].role == "allocated":
            tracker.storages[index].role = role


def _framework_versions() -> dict[str, str]:
    versions = {}
    try:
        import deepspeed

        versions["deepspeed"] = deepspeed.__version__
    except ImportError:
        pass
    return versions
