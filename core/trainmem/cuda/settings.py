"""The CUDA-specific ``runtime`` fields of a Setup: their types, their checks, and what they resolve to.

* ``cuda_alloc_conf`` is a ``PYTORCH_CUDA_ALLOC_CONF`` string, checked with the allocator's own
  option rules (:func:`trainmem.cuda.caching_allocator.parse_alloc_conf`);
* ``cublas_workspace_config`` is a ``CUBLAS_WORKSPACE_CONFIG`` string (``:SIZE_KiB:COUNT`` pairs,
  ``parseChosenWorkspaceSize`` in aten/src/ATen/cuda/CublasHandlePool.cpp);
* ``cuda_version`` is ``MAJOR.MINOR``.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

from ..units import GIB
from .caching_allocator import AllocatorSettings, parse_alloc_conf

_WORKSPACE_PAIR = re.compile(r":([0-9]+):([0-9]+)")


def _check_alloc_conf(text: str) -> str:
    parse_alloc_conf(text, field_name="")
    return text.strip()


def cublas_workspace_bytes(config: str) -> int:
    """Bytes of one cuBLAS workspace for a ``CUBLAS_WORKSPACE_CONFIG`` value: COUNT buffers of SIZE KiB for
    each ``:SIZE:COUNT`` pair, the CUDA Toolkit's reading of the variable. It matches PyTorch's default
    before Hopper, ``:4096:2:16:8``, which ``at::cuda::getChosenWorkspaceSize()`` reports as 8,519,680 bytes
    (= (4096 × 2 + 16 × 8) KiB); older releases summed SIZE alone."""
    pairs = _WORKSPACE_PAIR.findall(config)
    return sum(int(size) * int(count) * 1024 for size, count in pairs)


def _check_workspace_config(text: str) -> str:
    text = text.strip()
    if text and (not _WORKSPACE_PAIR.fullmatch(text) and not re.fullmatch(r"(:[0-9]+:[0-9]+)+", text)):
        raise ValueError(f"must be ':SIZE_KiB:COUNT' pairs like ':4096:8' or ':4096:2:16:8', got {text!r}")
    return text


def _check_cuda_version(text: str) -> str:
    text = text.strip()
    if not re.fullmatch(r"[0-9]+\.[0-9]+(\.[0-9]+)?", text):
        raise ValueError(f"must be MAJOR.MINOR like 12.8, got {text!r}")
    return text


AllocConf = Annotated[str, AfterValidator(_check_alloc_conf)]
CublasWorkspaceConfig = Annotated[str, AfterValidator(_check_workspace_config)]
CudaVersion = Annotated[str, AfterValidator(_check_cuda_version)]


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def allocator_settings(alloc_conf: str, memory_fraction, device_memory_bytes: int) -> AllocatorSettings:
    """The allocator the setup's runtime describes, on a device of ``device_memory_bytes``."""
    options = parse_alloc_conf(alloc_conf, field_name="runtime.cuda_alloc_conf")
    limit = int(memory_fraction * device_memory_bytes) if memory_fraction is not None else None
    return AllocatorSettings(memory_limit_bytes=limit, device_total_bytes=device_memory_bytes or 80 * GIB, **options)
