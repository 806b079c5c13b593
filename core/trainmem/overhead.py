"""Memory a training process holds beyond its live tensors.

* **CUDA context**: the driver's per-process state and loaded kernels, outside PyTorch's
  allocator. With lazy module loading (CUDA ≥ 11.7) a bare PyTorch context takes about
  300–400 MiB (PyTorch maintainers in pytorch/pytorch#107667 and #109888) and grows as
  cuBLAS, cuDNN and NCCL load their kernels during training; trainmem assumes 512 MiB on
  NVIDIA GPUs unless ``runtime.cuda_context_mib`` says otherwise.
* **cuBLAS workspace**: PyTorch allocates it through the caching allocator (so it counts as
  allocated): CUBLAS_WORKSPACE_CONFIG ``:4096:8`` = 32 MiB on Hopper and newer, ``:4096:2:16:8``
  ≈ 8 MiB before.
* **NCCL communicators**: buffers NCCL allocates itself, per communicator, growing with the
  channel count. NVIDIA/nccl#964 measured 544 MB for a 2-GPU group and 688 MB for larger
  groups on 4×A100 with NVLink; trainmem charges 656 MiB (688 MB) per communicator a rank
  uses (data, tensor, pipeline, context, expert parallel groups); ``runtime.nccl_communicator_mib``
  replaces the figure (NVLS on Hopper, set by ``NCCL_NVLS_ENABLE``, can take GBs more per
  communicator: NVIDIA/nccl#864, #818, #986).
* **Allocator reserve**: ``max_memory_reserved − max_memory_allocated``, the caching
  allocator's rounding and fragmentation. It depends on the allocation pattern; trainmem
  assumes 5% of the peak allocated bytes (``runtime`` lets a user with a measured ratio
  replace it) and reports it separately so it can be judged.
"""

from __future__ import annotations

from dataclasses import dataclass

from .plan import Plan
from .units import MIB

NVIDIA_CUDA_CONTEXT_MIB = 512
CUBLAS_WORKSPACE_MIB = {"hopper": 32, "blackwell": 32}
CUBLAS_WORKSPACE_DEFAULT_MIB = 8
NCCL_COMMUNICATOR_MIB = 656
ALLOCATOR_RESERVE_FRACTION = 0.05


@dataclass(frozen=True)
class ProcessOverhead:
    cuda_context_bytes: int
    cublas_workspace_bytes: int
    nccl_bytes: int
    nccl_communicators: int
    allocator_reserve_fraction: float


def process_overhead(plan: Plan, gpu_architecture: str) -> ProcessOverhead:
    """The per-process overheads of a training run with this plan on this GPU."""
    runtime, parallel = plan.setup.runtime, plan.parallel
    if runtime.device == "cpu":
        return ProcessOverhead(0, 0, 0, 0, 0.0)
    if runtime.cuda_context_mib is not None:
        context = int(runtime.cuda_context_mib * MIB)
    else:
        context = NVIDIA_CUDA_CONTEXT_MIB * MIB
    workspace = CUBLAS_WORKSPACE_MIB.get(gpu_architecture, CUBLAS_WORKSPACE_DEFAULT_MIB) * MIB
    groups = [
        plan.data_parallel_size,
        parallel.tensor_parallel_size,
        parallel.pipeline_parallel_size,
        parallel.context_parallel_size,
        parallel.expert_parallel_size,
    ]
    communicators = sum(1 for size in groups if size > 1)
    per_communicator = runtime.nccl_communicator_mib if runtime.nccl_communicator_mib is not None else NCCL_COMMUNICATOR_MIB
    return ProcessOverhead(
        context, workspace, int(communicators * per_communicator * MIB), communicators, ALLOCATOR_RESERVE_FRACTION
    )
