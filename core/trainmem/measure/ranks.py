"""Local gloo ranks for a multi-process measurement, and the parts of a rank's record they share.

:func:`spawn_ranks` starts ``parallelism.num_gpus`` processes with
``torch.multiprocessing.start_processes`` (spawn), each on 127.0.0.1 with the ``MASTER_ADDR`` /
``MASTER_PORT`` / ``RANK`` / ``LOCAL_RANK`` / ``WORLD_SIZE`` variables that
``torch.distributed.init_process_group``'s ``env://`` rendezvous reads; each runs one measuring
function (:mod:`trainmem.measure.distributed`'s frameworks, :mod:`trainmem.measure.pipelining`'s
schedules) and writes its :class:`~trainmem.measure.record.Measurement` to a temporary folder,
which the parent reads back rank 0 first. :func:`rank_measurement` builds that record the same way
for both: the kernels that ran, the setup as replayed on the CPU, the environment with gloo.
"""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path
from typing import Any, Callable

from ..setup import Setup
from .record import Measurement

MeasureRank = Callable[[Setup, int, int, int, int, str, str], Measurement]
"""``(setup, rank, world_size, seed, warmup_steps, case_id, description) -> Measurement``, run in a rank."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def set_rank_environment(rank: int, world_size: int, port: int, **extra: str) -> None:
    """The ``env://`` rendezvous variables of one local rank (and ``extra`` ones, e.g. ``DS_ACCELERATOR``)."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        **extra,
    )


def spawn_ranks(
    measure_rank: MeasureRank,
    setup: Setup,
    *,
    seed: int,
    warmup_steps: int,
    case_id: str,
    description: str,
    folder_prefix: str,
    environment: dict[str, str],
) -> list[Measurement]:
    """Run ``measure_rank`` on ``num_gpus`` spawned local ranks; their Measurements, rank 0 first.

    ``measure_rank`` must be a module-level function (spawn pickles it by name)."""
    import torch.multiprocessing as mp

    world_size = setup.parallelism.num_gpus
    with tempfile.TemporaryDirectory(prefix=folder_prefix) as folder:
        arguments = (
            measure_rank, environment, world_size, free_port(), setup.model_dump_json(), seed, warmup_steps,
            case_id, description, folder,
        )
        mp.start_processes(_rank_main, args=arguments, nprocs=world_size, join=True, start_method="spawn")
        return [
            Measurement.model_validate_json((Path(folder) / f"rank{rank}.json").read_text(encoding="utf-8"))
            for rank in range(world_size)
        ]


def _rank_main(
    rank: int,
    measure_rank: MeasureRank,
    environment: dict[str, str],
    world_size: int,
    port: int,
    setup_json: str,
    seed: int,
    warmup_steps: int,
    case_id: str,
    description: str,
    folder: str,
) -> None:
    set_rank_environment(rank, world_size, port, **environment)
    import torch

    torch.set_num_threads(1)
    setup = Setup.model_validate_json(setup_json)
    measurement = measure_rank(setup, rank, world_size, seed, warmup_steps, case_id, description)
    (Path(folder) / f"rank{rank}.json").write_text(measurement.model_dump_json(), encoding="utf-8")


def rank_measurement(
    setup: Setup,
    rank: int,
    world_size: int,
    *,
    tracker: Any,
    accounting: Any,
    optimizer: tuple[str, dict[str, Any], str],
    input_embeddings_require_grad: bool,
    seed: int,
    warmup_steps: int,
    frameworks: dict[str, str],
    case_id: str,
    default_id: Callable[[Setup], str],
    description: str,
    num_parameters: int,
    notes: list[str],
    framework: str,
    host_parts: dict[str, int],
    num_trainable_parameters: "int | None" = None,
    lora: "tuple[list[str] | None, str | None]" = (None, None),
) -> Measurement:
    """One rank's Measurement. ``optimizer`` is (qualified class, kwargs, implementation) as built;
    the recorded setup is the one that ran (attention kernel as observed, optimizer implementation,
    ``runtime.device`` cpu); the id is ``case_id`` (or ``default_id`` of that setup) and ``-rankN``."""
    import torch

    from .record import Kernels
    from .runner import _attention_that_ran, _environment, _replayed_setup
    from .step import AUTOCAST_DTYPES

    optimizer_class, optimizer_kwargs, optimizer_implementation = optimizer
    autocast_dtype = AUTOCAST_DTYPES.get(setup.precision)
    kernels = Kernels(
        attention=_attention_that_ran(setup, tracker),
        attention_ops=sorted(op for op in tracker.op_counts if "scaled_dot_product" in op or op == "aten._safe_softmax"),
        optimizer_class=optimizer_class,
        optimizer_kwargs=optimizer_kwargs,
        optimizer_implementation=optimizer_implementation,
        autocast_device="cpu" if autocast_dtype is not None else None,
        autocast_dtype=str(autocast_dtype).removeprefix("torch.") if autocast_dtype is not None else None,
        input_embeddings_require_grad=input_embeddings_require_grad,
        lora_target_modules=lora[0],
        lora_adapter_dtype=lora[1],
    )
    replayed = _replayed_setup(setup, kernels, "cpu")  # LoRA: peft's resolved target modules filled in
    environment = _environment(torch.device("cpu"), False, seed, warmup_steps)
    environment = environment.model_copy(update={"distributed_backend": "gloo", "frameworks": frameworks})
    return Measurement(
        id=f"{case_id or default_id(replayed)}-rank{rank}",
        description=description,
        setup=replayed,
        kernels=kernels,
        environment=environment,
        num_parameters=num_parameters,
        num_trainable_parameters=num_parameters if num_trainable_parameters is None else num_trainable_parameters,
        **accounting.measurement_fields(),
        untracked_input_bytes=tracker.untracked_input_bytes,
        notes=notes,
        rank=rank,
        world_size=world_size,
        framework=framework,
        host_parts=host_parts,
    )
