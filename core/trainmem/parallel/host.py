"""Host RAM per node, next to GPU memory: what a training run keeps in the CPU's memory.

Runs run out of host RAM before GPU memory when optimizer states are offloaded or when
every rank loads the full checkpoint (DeepSpeed#3448 needed 750–800 GB; #4867, #3606;
LlamaFactory#6755 with 744 GB; verl#224). The per-node figure is the sum of:

* **offloaded model states** of the node's ranks (``ranks per node`` × each rank's
  ``cpu_offload_bytes``): DeepSpeed ``offload_optimizer`` keeps the fp32 master partition,
  the optimizer states *and the fp32 gradient partition* on the CPU
  (``stage_1_and_2.py``: ``single_partition_of_fp32_groups`` and their ``.grad`` are CPU
  tensors under ``cpu_offload``; ``stage3.py``: ``fp32_partitioned_groups_flat`` and the
  pinned ``grad_partitions_flat_buffer``); ``offload_param`` the 16-bit weight partition
  (ZeRO-3); FSDP's ``CPUOffloadPolicy`` the sharded parameters, their gradients and the
  optimizer states. DeepSpeed pins these buffers (``pin_memory``) — pinned pages cannot be
  swapped, so they count in full.
* **the model load**, the largest moment before training starts: with ``model_load =
  "every_rank"`` (``from_pretrained`` in every process, the default without ``zero.Init``
  or meta-device init) each rank holds a full copy of the weights in the load dtype at once;
  ``"rank0"`` (FSDP ``sync_module_states`` / ``cpu_ram_efficient_loading``, Accelerate's
  default for FSDP) one copy per node at most; ``"sharded"`` (``deepspeed.zero.Init``,
  meta-device init with per-rank shards) each rank's shard only.
* **dataloader workers**: ``runtime.dataloader_workers`` per rank ×
  ``runtime.dataloader_worker_mib`` — an assumption the setup states, not a measurement.
* **the process baseline** per rank (``runtime.host_process_mib``): the Python interpreter,
  torch, CUDA's host-side state; assumed 2 GiB by default, not measured here (a CPU-only
  ``import torch, transformers`` takes about 0.5 GiB of RSS on this machine; CUDA builds
  add their libraries' pinned and mapped pages).

Training needs ``max(load, steady)``: the load happens before the offloaded states exist
(they are created by the optimizer) but the baseline and workers exist in both.
ZeRO-Infinity (``offload_device="nvme"``) moves the offloaded states to NVMe and keeps
DeepSpeed's pinned swap buffers in RAM (``offload_param.buffer_count`` 5 ×
``buffer_size`` 1e8 elements, DeepSpeed's defaults, deepspeed/runtime/zero/offload_config.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..tape import DTYPE_BYTES
from . import deepspeed
from ..units import MIB

if TYPE_CHECKING:  # pragma: no cover
    from ..plan import Plan

NVME_SWAP_BUFFER_COUNT = 5
"""DeepSpeed offload_param.buffer_count default."""
NVME_SWAP_BUFFER_ELEMENTS = 100_000_000
"""DeepSpeed offload_param.buffer_size default (1e8 elements)."""


@dataclass(frozen=True)
class HostPart:
    name: str
    bytes: int
    detail: str


@dataclass(frozen=True)
class HostMemory:
    """Host RAM of one node: the steady training state, the model load, and the NVMe figure."""

    ranks_per_node: int
    steady_parts: list[HostPart]
    load_parts: list[HostPart]
    nvme_bytes: int

    @property
    def steady_bytes(self) -> int:
        return sum(part.bytes for part in self.steady_parts)

    @property
    def load_bytes(self) -> int:
        return sum(part.bytes for part in self.load_parts)

    @property
    def peak_bytes(self) -> int:
        return max(self.steady_bytes, self.load_bytes)


def host_memory(
    plan: "Plan", offloaded_bytes_per_rank: int, offloaded_parts: "tuple[tuple[str, int, str], ...]" = ()
) -> HostMemory:
    """Host RAM per node for ``plan``, given each rank's offloaded model-state bytes (and, when known,
    what they are made of: (name, bytes per rank, detail), listed one by one for the node)."""
    setup, parallel, runtime = plan.setup, plan.parallel, plan.setup.runtime
    ranks = min(parallel.gpus_per_node, parallel.num_gpus)
    baseline = HostPart(
        "process baseline",
        ranks * int(runtime.host_process_mib * MIB),
        f"{ranks} rank(s) × {runtime.host_process_mib:g} MiB (interpreter, torch, CUDA host state; assumed)",
    )
    workers = HostPart(
        "dataloader workers",
        ranks * runtime.dataloader_workers * int(runtime.dataloader_worker_mib * MIB),
        f"{runtime.dataloader_workers} worker(s) per rank × {runtime.dataloader_worker_mib:g} MiB (assumed)",
    )
    nvme = 0
    steady = [baseline, workers]
    if offloaded_bytes_per_rank:
        if parallel.offload_device == "nvme":
            nvme = ranks * offloaded_bytes_per_rank
            swap = NVME_SWAP_BUFFER_COUNT * NVME_SWAP_BUFFER_ELEMENTS * DTYPE_BYTES[plan.precision.compute_weight_dtype]
            steady.append(
                HostPart(
                    "pinned NVMe swap buffers",
                    ranks * swap,
                    "DeepSpeed offload buffer_count 5 × buffer_size 1e8 per rank (ZeRO-Infinity defaults)",
                )
            )
        elif sum(part[1] for part in offloaded_parts) == offloaded_bytes_per_rank:
            for name, nbytes, detail in offloaded_parts:
                steady.append(HostPart(f"offloaded {name}", ranks * nbytes, f"{ranks} rank(s) × {detail}"))
            rounding = deepspeed.pinned_rounding_bytes(plan, offloaded_parts)
            if rounding:
                steady.append(
                    HostPart("pinned-memory rounding", ranks * rounding, f"{ranks} rank(s) × {deepspeed.PINNED_ROUNDING_DETAIL}")
                )
        else:
            steady.append(
                HostPart(
                    "offloaded model states",
                    ranks * offloaded_bytes_per_rank,
                    f"{ranks} rank(s) × their offloaded optimizer states, master weights, gradients or weights (pinned)",
                )
            )
    weights = plan.num_parameters * DTYPE_BYTES[plan.precision.stored_weight_dtype]
    if setup.parallelism.model_load == "every_rank":
        copies, detail = ranks, f"every rank loads the full state dict ({ranks} copies)"
    elif setup.parallelism.model_load == "rank0":
        copies, detail = 1, "rank 0 loads the state dict and broadcasts it"
    else:
        copies, detail = 0, ""
    load = [baseline, workers]
    if copies:
        load.append(HostPart("model load", copies * weights, detail))
    else:
        shard = weights // max(1, plan.sharding.weights)
        load.append(HostPart("model load", ranks * shard, "each rank materialises its own shard (zero.Init / meta device)"))
        in_full = sharded_load_transient_bytes(plan)
        if in_full:
            load.append(HostPart("module being partitioned", ranks * in_full, SHARDED_LOAD_DETAIL))
    return HostMemory(ranks, [part for part in steady if part.bytes], [part for part in load if part.bytes], nvme)


SHARDED_LOAD_DETAIL = (
    "zero.Init materialises each module in full before partitioning it: the largest tensor once per rank "
    "(measured on 2 ranks, trainmem.measure.model_load)"
)


def sharded_load_transient_bytes(plan: "Plan") -> int:
    """Under ``deepspeed.zero.Init`` a module's parameters are created whole and partitioned when its
    ``__init__`` returns (``InsertPostInitMethodToModuleSubClasses`` / ``Init._post_init_method``,
    deepspeed/runtime/zero/partition_parameters.py), so while the largest module is built its full
    weights exist next to the shards built so far — the largest tensor, in the load dtype, per rank.
    Measured (``python -m trainmem.measure.model_load``, the 7M Llama on 2 ranks): the build's high-water
    mark is the other modules' shards plus the 8000 × 256 head in full (built in fp32 by ``from_config``,
    then cast to bf16: both copies); with ``torch_dtype=bf16`` only the bf16 copy is made."""
    if plan.inventory is None or plan.sharding.weights <= 1:
        return 0
    return plan.inventory.largest_tensor_numel * DTYPE_BYTES[plan.precision.stored_weight_dtype]
