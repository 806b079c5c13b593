"""Replay a simulated step's allocations through the caching-allocator model: reserved memory and fragmentation.

Two optimizer steps are replayed, the way ``trainmem measure`` runs them: the first warms the
cache (segments are reserved and kept), then the peak statistics are reset
(``torch.cuda.reset_peak_memory_stats``) and the second step gives ``max_memory_allocated``
and ``max_memory_reserved``. The fragmentation at the peak is the memory the allocator holds
but has not handed out at the moment of the allocated peak (``memory_reserved −
memory_allocated`` then), and the largest free block it has at that moment.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from .caching_allocator import AllocatorOutOfMemory, AllocatorSettings, CachingAllocator
from .fast_replay import fast_path_applies, replay_best_fit

ALTERNATIVE_CONFS = (
    "expandable_segments:True",
    "max_split_size_mb:256",
    "roundup_power2_divisions:4",
    "garbage_collection_threshold:0.8",
)
"""The ``PYTORCH_CUDA_ALLOC_CONF`` settings the report compares with the setup's own (PyTorch's
"Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF" notes name these four)."""


@dataclass(frozen=True)
class ReplayResult:
    """What the allocator model says about the measured (second) step."""

    peak_allocated_bytes: int
    peak_reserved_bytes: int
    reserved_at_allocated_peak_bytes: int
    largest_free_block_after_step_bytes: int
    segments_after_step: int
    out_of_memory: bool
    num_device_allocs: int
    """cudaMalloc calls (or page mappings) over both steps."""

    @property
    def cached_at_allocated_peak_bytes(self) -> int:
        """Reserved but unallocated at the allocated peak: the fragmentation that decides an OOM."""
        return self.reserved_at_allocated_peak_bytes - self.peak_allocated_bytes

    @property
    def reserve_gap_bytes(self) -> int:
        """``max_memory_reserved − max_memory_allocated`` of the replay."""
        return max(0, self.peak_reserved_bytes - self.peak_allocated_bytes)


def replay_events(
    events: Iterable[tuple], settings: AllocatorSettings = AllocatorSettings(), inline: bool = True
) -> ReplayResult:
    """Run ``events`` (``("alloc" | "free" | "step_end", key, bytes, stream)``) through a fresh allocator.

    The plain best-fit allocator (no expandable segments, collector or memory limit: most setups)
    runs the same steps inlined (:mod:`trainmem.cuda.fast_replay`); the figures are the same
    (``inline=False`` calls the allocator's methods for every event instead)."""
    allocator = CachingAllocator(settings)
    if not isinstance(events, list):
        events = list(events)
    if inline and fast_path_applies(allocator):
        inlined = replay_best_fit(allocator, events)
        if inlined is not None:
            return _result(allocator, inlined[1], False)
        allocator = CachingAllocator(settings)  # sizes beyond the inlined loop's keys: start again
    reserved_at_best, out_of_memory = replay_by_methods(allocator, events)
    return _result(allocator, reserved_at_best, out_of_memory)


def replay_by_methods(allocator: CachingAllocator, events: Iterable[tuple]) -> tuple[int, bool]:
    """Every event through ``allocator.malloc`` / ``free``; returns (reserved at the measured step's
    allocated peak, whether the replay ran out of memory)."""
    blocks: dict = {}
    best_allocated, at_best = -1, (0, 0, 0)
    out_of_memory = False
    malloc, free, pop = allocator.malloc, allocator.free, blocks.pop
    for op, key, nbytes, stream in events:
        if op == "alloc":
            try:
                blocks[key] = malloc(nbytes, stream)
            except AllocatorOutOfMemory:
                out_of_memory = True
                break
            if allocator.allocated_bytes > best_allocated:
                best_allocated = allocator.allocated_bytes
                at_best = (allocator.reserved_bytes, -1, -1)
        elif op == "free":
            block = pop(key, None)
            if block is not None:
                free(block)
        elif op == "step_end" and key == 0:
            allocator.reset_peak_stats()
            best_allocated = allocator.allocated_bytes
            at_best = (allocator.reserved_bytes, -1, -1)
    return at_best[0], out_of_memory


def _result(allocator: CachingAllocator, reserved_at_best: int, out_of_memory: bool) -> ReplayResult:
    largest, segments = _free_figures(allocator)
    return ReplayResult(
        peak_allocated_bytes=allocator.peak_allocated_bytes,
        peak_reserved_bytes=allocator.peak_reserved_bytes,
        reserved_at_allocated_peak_bytes=max(reserved_at_best, allocator.peak_allocated_bytes),
        largest_free_block_after_step_bytes=largest,
        segments_after_step=segments,
        out_of_memory=out_of_memory,
        num_device_allocs=allocator.num_device_alloc,
    )


def _free_figures(allocator: CachingAllocator) -> tuple[int, int]:
    """Largest cached free block and segment count at the end of the replay (the cache the peak left)."""
    return allocator.largest_free_block(), allocator.segment_count()


def with_conf(settings: AllocatorSettings, conf: str) -> AllocatorSettings:
    """``settings`` with the options of one ``PYTORCH_CUDA_ALLOC_CONF`` string applied on top."""
    from .caching_allocator import parse_alloc_conf

    return replace(settings, **parse_alloc_conf(conf))
