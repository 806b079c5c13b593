"""What a CUDA training process holds outside PyTorch's caching allocator, part by part, with sources.

The figures are data (``trainmem/data/cuda_overheads.json``); each part has a best figure (the
estimate) and an upper figure (the upper bound the fit verdict uses):

* **CUDA context** by GPU architecture, with lazy module loading (CUDA ≥ 11.7, PyTorch's
  default); eager loading (``CUDA_MODULE_LOADING=EAGER`` or CUDA before 11.7) adds every kernel.
  ``runtime.cuda_context_mib`` replaces both figures with a measured one.
* **NCCL** per communicator the rank joins: one per process group the layout runs collectives on,
  each sized from NCCL's defaults (:mod:`trainmem.parallel.nccl`).
* **torch.compile** (Triton kernels in the context) and **CUDA graphs** (a private pool that keeps
  the captured activations reserved apart from the default pools).

Two CUDA parts live *inside* the allocator and are reported as allocated: the cuBLAS workspace
(:func:`cublas_workspace`) and, in the upper bound only, flash attention's backward scratch
(:func:`attention_backward_workspace`), which the tape does not replay.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from ..package_data import data_text

from ..plan import Plan
from ..units import MIB
from .settings import cublas_workspace_bytes, version_tuple


@lru_cache(maxsize=1)
def overheads() -> dict:
    """``data/cuda_overheads.json``."""
    text = data_text("cuda_overheads.json")
    return json.loads(text)


@dataclass(frozen=True)
class OutsidePart:
    """One contributor outside the allocator: its best figure, its upper figure, where both come from."""

    name: str
    bytes: int
    upper_bytes: int
    detail: str
    upper_detail: str = ""
    """Where the upper figure comes from (when it differs from the best one)."""


@dataclass(frozen=True)
class Communicator:
    """One NCCL communicator a rank joins."""

    name: str
    size: int


def communicators(plan: Plan) -> list[Communicator]:
    """The NCCL communicators of one rank: one per parallel dimension of more than one rank.

    A hook: a model of per-process-group communicators (FSDP's, DeepSpeed's and Megatron's extra
    groups) replaces this list; each communicator is charged the per-communicator figures.
    """
    from ..parallel.nccl import process_groups

    return [Communicator(group.name, group.size) for group in process_groups(plan)]


def eager_module_loading(plan: Plan) -> bool:
    runtime = plan.setup.runtime
    if runtime.cuda_module_loading == "eager":
        return True
    minimum = version_tuple(overheads()["cuda_context"]["lazy_loading_min_cuda"])
    return runtime.cuda_version is not None and version_tuple(runtime.cuda_version)[:2] < minimum


def cuda_context(plan: Plan, gpu_architecture: str) -> OutsidePart:
    data = overheads()["cuda_context"]
    runtime = plan.setup.runtime
    if runtime.cuda_context_mib is not None:
        measured = int(runtime.cuda_context_mib * MIB)
        return OutsidePart("CUDA context", measured, measured, "runtime.cuda_context_mib (given)")
    table = data["lazy_mib_by_architecture"]
    key = gpu_architecture if gpu_architecture in table else "custom"
    lazy = table[key] * MIB
    eager_extra = data["eager_extra_mib"] * MIB
    kernels = data["training_kernels_mib"] * MIB
    if eager_module_loading(plan):
        total = lazy + eager_extra
        return OutsidePart(
            "CUDA context", total, total, f"eager module loading: {data['lazy_sources'][key]}, plus every kernel"
        )
    return OutsidePart(
        "CUDA context",
        lazy + kernels,
        lazy + eager_extra,
        f"lazy module loading: {data['lazy_sources'][key]}; + {data['training_kernels_mib']} MiB of training "
        "kernels (assumed)",
        f"as if every kernel were loaded: + {data['eager_extra_mib']} MiB ({data['eager_extra_source']})",
    )


def nccl(plan: Plan, gpu_architecture: str = "") -> OutsidePart:
    """NCCL's buffers: one communicator per process group, each from NCCL's defaults
    (trainmem.parallel.nccl); the upper figure stays the multi-communicator one."""
    from ..parallel import nccl as nccl_model

    data = overheads()["nccl"]
    groups = communicators(plan)
    process_groups = nccl_model.process_groups(plan)
    best = sum(nccl_model.communicator_bytes(group, gpu_architecture) for group in process_groups)
    upper = max(best, len(groups) * data["upper_per_communicator_mib"] * MIB)
    names = ", ".join(f"{g.name} ({g.size} ranks)" for g in groups)
    override = plan.setup.runtime.nccl_communicator_mib
    if override is not None:  # the user's own figure (e.g. NVLS on Hopper): best and upper alike
        best = upper = int(len(groups) * override * MIB)
        return OutsidePart(
            "NCCL buffers", best, upper, f"{len(groups)} communicator(s): {names}; runtime.nccl_communicator_mib", ""
        )
    return OutsidePart(
        "NCCL buffers",
        best,
        upper,
        nccl_model.describe(process_groups, gpu_architecture),
        f"{data['upper_per_communicator_mib']} MiB per communicator: {data['upper_source']}",
    )


def compile_and_graphs(plan: Plan, activations_at_peak_bytes: int) -> list[OutsidePart]:
    runtime, data = plan.setup.runtime, overheads()
    parts = []
    if runtime.torch_compile:
        nbytes = data["torch_compile"]["context_mib"] * MIB
        parts.append(OutsidePart("torch.compile kernels", nbytes, nbytes, data["torch_compile"]["source"]))
    if runtime.cuda_graphs:
        parts.append(
            OutsidePart(
                "CUDA graph private pool",
                activations_at_peak_bytes,
                activations_at_peak_bytes,
                data["cuda_graphs"]["source"],
            )
        )
    return parts


def outside_parts(plan: Plan, gpu_architecture: str, activations_at_peak_bytes: int) -> list[OutsidePart]:
    """Every part outside the allocator for a CUDA run of ``plan`` (none on CPU)."""
    if plan.device != "cuda":
        return []
    parts = [cuda_context(plan, gpu_architecture), nccl(plan, gpu_architecture)]
    parts += compile_and_graphs(plan, activations_at_peak_bytes)
    return [part for part in parts if part.bytes or part.upper_bytes]


def cublas_workspace(plan: Plan, gpu_architecture: str) -> tuple[int, str]:
    """(bytes, source) of the cuBLAS workspaces: one per (handle, stream) that runs GEMMs."""
    if plan.device != "cuda":
        return 0, ""
    data = overheads()["cublas_workspace"]
    config = plan.setup.runtime.cublas_workspace_config
    origin = "CUBLAS_WORKSPACE_CONFIG " + config if config else "default"
    if not config:
        config = data["default_config_by_architecture"].get(gpu_architecture, data["default_config"])
    nbytes = cublas_workspace_bytes(config) * data["streams_using_cublas"]
    return nbytes, f"CUBLAS_WORKSPACE_CONFIG {config} ({'given' if origin != 'default' else 'PyTorch default'}), " \
        "allocated through the caching allocator (CublasHandlePool.cpp)"


def attention_backward_workspace(plan: Plan, fused_attention: bool) -> int:
    """One layer's flash-attention backward scratch: fp32 dq accumulator and softmax_d (``mha_bwd``)."""
    arch = plan.architecture
    if plan.device != "cuda" or arch is None or not fused_attention:
        return 0
    data = overheads()["attention_workspace"]
    setup, tp = plan.setup, plan.parallel.tensor_parallel_size
    seq = -(-setup.sequence_length // plan.parallel.context_parallel_size // data["seq_round"]) * data["seq_round"]
    heads = max(1, arch.num_attention_heads // tp)
    head_dim = -(-arch.resolved_head_dim // data["head_dim_round"]) * data["head_dim_round"]
    batch = setup.micro_batch_size
    return batch * seq * heads * head_dim * 4 + batch * heads * seq * 4


def margin_fraction() -> float:
    return float(overheads()["upper_bound"]["margin_fraction"])
