"""Measure the memory a rank needs to build (load) the model, with and without ``deepspeed.zero.Init``.

The host RAM of a node is often decided before training starts, while every rank materialises
the model (trainmem.parallel.host, ``parallelism.model_load``). :func:`measure_model_load`
starts ``parallelism.num_gpus`` local gloo ranks (as :mod:`trainmem.measure.distributed` does)
and, on each, builds the setup's model from its config with a
:class:`~trainmem.measure.tracker.StorageTracker` running — plainly, or under
``deepspeed.zero.Init`` when the setup is ZeRO-3 with ``model_load == "sharded"``
(:func:`trainmem.measure.frameworks.model_building_context`) — and reports the high-water
mark of live tensor bytes during the build and what is left after it. Nothing is trained.

On a GPU machine a plain build happens in host RAM (``from_config``/``from_pretrained`` on the
CPU, then ``deepspeed.initialize`` moves the model); under ``zero.Init`` each parameter is
partitioned as its module's ``__init__`` returns. On this CPU machine both are the same pool.
``python -m trainmem.measure.model_load SETUP.json`` prints one JSON line per rank.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Union

from ..setup import Setup


def measure_model_load(setup: Union[Setup, dict[str, Any]], *, seed: int = 0) -> list[dict[str, int]]:
    """Per rank (rank 0 first): ``{"rank", "build_peak_bytes", "after_build_bytes"}``."""
    setup = setup if isinstance(setup, Setup) else Setup.model_validate(setup)
    world_size = setup.parallelism.num_gpus
    if not 1 <= world_size <= 4:
        raise ValueError(f"parallelism.num_gpus: a local model-load measurement runs 1–4 ranks (got {world_size})")
    import torch.multiprocessing as mp

    from .ranks import free_port

    with tempfile.TemporaryDirectory(prefix="trainmem-load-") as folder:
        arguments = (world_size, free_port(), setup.model_dump_json(), seed, folder)
        mp.start_processes(_rank_main, args=arguments, nprocs=world_size, join=True, start_method="spawn")
        return [json.loads((Path(folder) / f"rank{rank}.json").read_text(encoding="utf-8")) for rank in range(world_size)]


def _rank_main(rank: int, world_size: int, port: int, setup_json: str, seed: int, folder: str) -> None:
    from .ranks import set_rank_environment

    set_rank_environment(rank, world_size, port, DS_ACCELERATOR="cpu")
    import torch
    import torch.distributed as dist

    from .events import ALLOC, FREE
    from .frameworks import model_building_context
    from .hf_model import build_model
    from .runner import _quiet_libraries
    from .tracker import StorageTracker, tracking_storage_resizes

    torch.set_num_threads(1)
    setup = Setup.model_validate_json(setup_json)
    parallel = setup.parallelism
    if parallel.strategy == "zero":
        import deepspeed

        deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
    tracker = StorageTracker()
    with _quiet_libraries(), tracker, tracking_storage_resizes(tracker):
        torch.manual_seed(seed)
        with model_building_context(setup):
            model = build_model(setup, on_meta=False)
        tracker.stop()
    live = peak = 0
    for kind, _, nbytes in tracker.events:
        if kind == ALLOC:
            live += nbytes
            peak = max(peak, live)
        elif kind == FREE:
            live -= nbytes
    result = {"rank": rank, "build_peak_bytes": peak, "after_build_bytes": live}
    (Path(folder) / f"rank{rank}.json").write_text(json.dumps(result), encoding="utf-8")
    del model
    dist.destroy_process_group()


if __name__ == "__main__":  # pragma: no cover - a measurement entry point
    from ..files import read_json_file

    for line in measure_model_load(read_json_file(sys.argv[1], "setup")):
        print(json.dumps(line))
