"""NCCL communicators: one per process group the layout runs collectives on, each sized from NCCL's defaults.

NCCL allocates its buffers itself, outside PyTorch's caching allocator, for every communicator
a rank joins (``torch.distributed`` creates one per process group on its first collective), and
memory grows with the number of communicators (NVIDIA/nccl#864: 1.6 GB with one, 6 GB with three
or more; NVIDIA/nccl#986). The figures are data (``trainmem/data/nccl.json``) and every one is an
assumption with its source:

* **per communicator** = channels × connections per channel × the three protocols' buffers per
  connection (Simple ``NCCL_BUFFSIZE`` 4 MiB, LL128 4.69 MiB, LL 0.5 MiB), each connection rounded
  to cuMem's 2 MiB granularity: 16 × 2 × 10 MiB = 320 MiB for a 2-rank group, 16 × 3 × 10 MiB =
  480 MiB for a larger one;
* **NVLS** on Hopper and Blackwell for groups of more than two GPUs within a node: 72 × buffSize
  (288 MiB) more per rank, as NCCL logs it on 8×H200;
* ``runtime.nccl_communicator_mib`` replaces the per-communicator figure (e.g. a measured one, or
  ``NCCL_NVLS_ENABLE=0``'s).

The process groups (:func:`process_groups`) follow the frameworks' own group layouts:

* data parallelism (DDP, ZeRO, FSDP FULL_SHARD): one group over the data-parallel ranks;
  FSDP/HSDP ``HYBRID_SHARD``: a shard group of ``gpus_per_node`` ranks and a replicate
  group across them (``torch.distributed.fsdp`` builds a 2-D ``DeviceMesh``);
* tensor, pipeline, context and expert parallelism: one group each
  (``megatron/core/parallel_state.py``, ``initialize_model_parallel``);
* Megatron with context parallelism reduces gradients over data × context parallel ranks
  (``_DATA_PARALLEL_GROUP_WITH_CP``), and with pipeline parallelism and a tied embedding
  all-reduces the embedding's gradient between the first and the last stage (``_EMBEDDING_GROUP``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from ..package_data import data_text
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ..plan import Plan


@lru_cache(maxsize=1)
def defaults() -> dict:
    """``data/nccl.json``."""
    text = data_text("nccl.json")
    return json.loads(text)


@dataclass(frozen=True)
class ProcessGroup:
    """One process group a rank runs collectives on (one NCCL communicator)."""

    name: str
    size: int
    intra_node: bool


def process_groups(plan: "Plan") -> list[ProcessGroup]:
    """The groups of more than one rank that a rank of ``plan`` joins."""
    parallel = plan.parallel
    per_node = max(1, parallel.gpus_per_node)
    tp, pp, cp, ep = (
        parallel.tensor_parallel_size,
        parallel.pipeline_parallel_size,
        parallel.context_parallel_size,
        parallel.expert_parallel_size,
    )
    dp = plan.data_parallel_size
    groups: list[ProcessGroup] = []
    if parallel.strategy == "fsdp" and parallel.fsdp_sharding_strategy == "HYBRID_SHARD" and dp > 1:
        shard = min(dp, per_node)  # trainmem.plan: HYBRID_SHARD shards within a node
        groups.append(ProcessGroup("FSDP shard", shard, shard * tp <= per_node))
        groups.append(ProcessGroup("FSDP replicate", dp // shard, False))
    else:
        groups.append(ProcessGroup("data parallel", dp, dp * tp <= per_node))
    groups.append(ProcessGroup("tensor parallel", tp, tp <= per_node))
    groups.append(ProcessGroup("pipeline parallel", pp, False))
    groups.append(ProcessGroup("context parallel", cp, cp * tp <= per_node))
    groups.append(ProcessGroup("expert parallel", ep, ep <= per_node))
    if parallel.strategy == "megatron" and cp > 1 and dp > 1:
        groups.append(ProcessGroup("data × context parallel", dp * cp, dp * cp * tp <= per_node))
    arch = plan.architecture
    if parallel.strategy == "megatron" and pp > 1 and arch is not None and arch.tie_word_embeddings:
        groups.append(ProcessGroup("embedding (first and last stage)", 2, False))
    return [group for group in groups if group.size > 1]


def connection_bytes() -> int:
    """One connection's buffers for the three protocols, rounded to the allocation granularity."""
    data = defaults()
    raw = data["buffsize_bytes"] + data["ll128_buffsize_bytes"] + data["ll_buffsize_bytes"]
    granularity = data["allocation_granularity_bytes"]
    return -(-raw // granularity) * granularity


def communicator_bytes(group: ProcessGroup, gpu_architecture: str) -> int:
    """NCCL's buffers for one communicator on one rank, from NCCL's defaults (see the module)."""
    data = defaults()
    connections = data["connections_two_ranks"] if group.size == 2 else data["connections_more_ranks"]
    total = data["channels"] * connections * connection_bytes()
    if gpu_architecture in data["nvls_architectures"] and group.size > 2 and group.intra_node:
        total += data["nvls_per_rank_buffsizes"] * data["buffsize_bytes"]
    return total


def describe(groups: list[ProcessGroup], gpu_architecture: str) -> str:
    data = defaults()
    names = ", ".join(f"{g.name} ({g.size} ranks)" for g in groups)
    nvls = any(g.size > 2 and g.intra_node for g in groups) and gpu_architecture in data["nvls_architectures"]
    return (
        f"{len(groups)} communicator(s): {names}; NCCL defaults: {data['channels']} channels × "
        f"{data['connections_two_ranks']}–{data['connections_more_ranks']} connections × "
        f"{connection_bytes() // 2**20} MiB (NCCL_BUFFSIZE 4 MiB + LL128 + LL, 2 MiB cuMem granularity)"
        + (", + NVLS 288 MiB per intra-node group of > 2 GPUs" if nvls else "")
        + " (assumed; trainmem/data/nccl.json; cf. NVIDIA/nccl#964's 544–688 MB per communicator on 4×A100)"
    )
