"""How PyTorch's allocators count bytes.

The CUDA caching allocator rounds every allocation up to a multiple of 512 bytes
(``kMinBlockSize`` in c10/cuda/CUDACachingAllocator.cpp), and ``torch.cuda.memory_allocated``
/ ``max_memory_allocated`` report those rounded block sizes. On CPU, trainmem's measurements
count each storage's exact ``nbytes``.
"""

from __future__ import annotations

CUDA_BLOCK_BYTES = 512


def granularity(device: str) -> int:
    """The multiple an allocation of ``device`` is counted in."""
    return CUDA_BLOCK_BYTES if device == "cuda" else 1


def rounded(nbytes: int, device: str) -> int:
    """``nbytes`` as the allocator of ``device`` counts it."""
    step = granularity(device)
    return -(-nbytes // step) * step
