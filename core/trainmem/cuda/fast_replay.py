"""The replay's hot loop for the plain best-fit allocator: the same steps as ``malloc`` and ``free``, inlined.

Most setups replay with no ``expandable_segments``, no garbage collector and no memory limit
(``set_per_process_memory_fraction``). Then ``DeviceCachingAllocator::malloc`` is best fit
(``get_free_block``), else a new segment (``alloc_block``, which cannot fail on an unbounded
device), then ``alloc_found_block``; and ``free`` is ``free_block`` with ``try_merge_blocks``
on both neighbours (c10/cuda/CUDACachingAllocator.cpp). :func:`replay_best_fit` runs exactly
those steps of :class:`~trainmem.cuda.caching_allocator.CachingAllocator` (``malloc``,
``_best_fit``, ``_alloc_block``, ``_alloc_found_block``, ``free``, ``_try_merge_blocks``) on the
same data structures, with the allocator's counters held in local variables and the method
calls inlined: per event the interpreter runs one loop body instead of six to eight calls.
The allocator it leaves behind is the one the method-by-method replay leaves (the same blocks,
free lists, counters and segment heads), which ``tests/test_cuda_fast_replay.py`` checks on
real event streams, and ``benchmarks/replay_identity.py`` on whole reports.

Only exact: anything the inlined path does not cover (an allocator with other settings, a
size or address too wide for the free lists' packed keys) is left to the methods.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Optional

from .caching_allocator import (
    MIN_BLOCK_BYTES,
    SMALL_SIZE_BYTES,
    Block,
    CachingAllocator,
    allocation_size,
    round_size,
)

KEY_FIELD_LIMIT = 1 << 62
"""The inlined loop gives up (returns None) when a request or a new segment's address reaches this:
below it, every size and address fits the 64-bit fields of the free lists' packed keys (a block is
never larger than its segment, a segment at most a request rounded up to 2 MiB or 20 MiB)."""


def fast_path_applies(allocator: CachingAllocator) -> bool:
    """The allocator is the plain best fit on an unbounded device (what :func:`replay_best_fit` inlines),
    and nothing has been replayed on it yet."""
    settings = allocator.settings
    return (
        allocator._best_fit_only
        and not settings.expandable_segments
        and settings.memory_limit_bytes is None
        and settings.capacity_bytes is None
        and allocator.small.blocks._width == 64
        and allocator.large.blocks._width == 64
        and allocator._next_address < KEY_FIELD_LIMIT
    )


def replay_best_fit(allocator: CachingAllocator, events: list) -> Optional[tuple[int, int]]:
    """Run ``events`` (``("alloc" | "free" | "step_end", slot, bytes, stream)``) through ``allocator``.

    Returns (the highest allocated bytes of the measured step, the reserved bytes at that moment),
    the figures :func:`trainmem.cuda.replay.replay_events` tracks; the allocator's own peaks are
    updated as ``malloc`` updates them. The caller checks :func:`fast_path_applies` first. None
    when a size or an address reached :data:`KEY_FIELD_LIMIT`: the allocator is then half-replayed
    and the caller replays the stream again on a fresh one, through the methods."""
    settings = allocator.settings
    max_split = settings.max_split_size_bytes
    max_non_split = settings.max_non_split_rounding_bytes
    rounds_by_divisions = allocator._rounds_by_divisions
    small_pool, large_pool = allocator.small, allocator.large
    small_keys, small_list = small_pool.blocks._keys, small_pool.blocks._blocks
    large_keys, large_list = large_pool.blocks._keys, large_pool.blocks._blocks
    heads = allocator._segment_heads
    heads_pop = heads.pop
    new_address = allocator._new_address
    allocated = allocator.allocated_bytes
    requested_total = allocator.requested_bytes
    reserved = allocator.reserved_bytes
    peak_allocated = allocator.peak_allocated_bytes
    peak_reserved = allocator.peak_reserved_bytes
    device_allocs = allocator.num_device_alloc
    live_segments = allocator._live_segments
    best_allocated, reserved_at_best = -1, 0
    blocks: dict[int, Block] = {}
    blocks_pop = blocks.pop
    # the module's constants as locals (the loop reads them for every event)
    min_block, small_size, key_limit, new_block = MIN_BLOCK_BYTES, SMALL_SIZE_BYTES, KEY_FIELD_LIMIT, Block
    # Keys pack (stream, size, address) into 64-bit fields: ((stream << 64 | size) << 64) | address.
    for op, slot, nbytes, stream in events:
        if op == "alloc":
            if nbytes >= key_limit:
                return None
            # ------------------------------------------------ malloc: round_size, get_pool
            if rounds_by_divisions or nbytes < min_block:
                size = round_size(nbytes, settings)
            else:
                size = -(-nbytes // min_block) * min_block
            small = size <= small_size
            if small:
                keys, listed = small_keys, small_list
            else:
                keys, listed = large_keys, large_list
            # ------------------------------------------------ get_free_block (best fit)
            block: Optional[Block] = None
            index = bisect_left(keys, ((stream << 64) | size) << 64)
            if index < len(keys):
                found = listed[index]
                if found.stream == stream:
                    if size < max_split:
                        fits = found.size < max_split
                    else:
                        fits = found.size < size + max_non_split
                    if fits:
                        del keys[index]
                        del listed[index]
                        block = found
            if block is None:
                # -------------------------------------------- alloc_block: a new segment (cudaMalloc)
                segment_bytes = allocation_size(size)
                block = new_block(stream, segment_bytes, small, new_address(segment_bytes))
                if allocator._next_address >= key_limit:
                    return None
                heads[id(block)] = block
                live_segments += 1
                reserved += segment_bytes
                if reserved > peak_reserved:
                    peak_reserved = reserved
                device_allocs += 1
            # ------------------------------------------------ should_split + alloc_found_block
            remaining = block.size - size
            if (remaining >= min_block) if small else (size < max_split and remaining > small_size):
                rest = block
                block = new_block(stream, size, small, rest.address, rest.segment)
                before = rest.prev
                block.prev = before
                if before is not None:
                    before.next = block
                block.next = rest
                rest.prev = block
                rest.address += size
                rest.size -= size
                # the first block of a segment (no predecessor) is its head: the new block takes its place
                if before is None and heads_pop(id(rest), None) is not None:
                    heads[id(block)] = block
                key = (((stream << 64) | rest.size) << 64) | rest.address
                index = bisect_left(keys, key)
                keys.insert(index, key)
                listed.insert(index, rest)
            block.allocated = True
            block.requested = nbytes
            allocated += block.size
            requested_total += nbytes
            if allocated > peak_allocated:
                peak_allocated = allocated
            blocks[slot] = block
            if allocated > best_allocated:
                best_allocated, reserved_at_best = allocated, reserved
        elif op == "free":
            block = blocks_pop(slot, None)
            if block is None:
                continue
            # ---------------------------------------------------- free -> free_block
            block.allocated = False
            allocated -= block.size
            requested_total -= block.requested
            if block.small:
                keys, listed = small_keys, small_list
            else:
                keys, listed = large_keys, large_list
            neighbour = block.prev
            if neighbour is not None and not neighbour.allocated:
                # try_merge_blocks(block, prev): the block starts where its free predecessor did
                block.address = neighbour.address
                before = neighbour.prev
                block.prev = before
                if before is not None:
                    before.next = block
                elif heads_pop(id(neighbour), None) is not None:  # the predecessor was its segment's head
                    heads[id(block)] = block
                key = (((neighbour.stream << 64) | neighbour.size) << 64) | neighbour.address
                index = bisect_left(keys, key)
                if index < len(keys) and listed[index] is neighbour:
                    del keys[index]
                    del listed[index]
                block.size += neighbour.size
            neighbour = block.next
            if neighbour is not None and not neighbour.allocated:
                # try_merge_blocks(block, next)
                after = neighbour.next
                block.next = after
                if after is not None:
                    after.prev = block
                key = (((neighbour.stream << 64) | neighbour.size) << 64) | neighbour.address
                index = bisect_left(keys, key)
                if index < len(keys) and listed[index] is neighbour:
                    del keys[index]
                    del listed[index]
                block.size += neighbour.size
            key = (((block.stream << 64) | block.size) << 64) | block.address
            index = bisect_left(keys, key)
            keys.insert(index, key)
            listed.insert(index, block)
        elif op == "step_end" and slot == 0:
            # torch.cuda.reset_peak_memory_stats() between the warm-up step and the measured one
            peak_reserved, peak_allocated = reserved, allocated
            best_allocated, reserved_at_best = allocated, reserved
    allocator.allocated_bytes = allocated
    allocator.requested_bytes = requested_total
    allocator.reserved_bytes = reserved
    allocator.peak_allocated_bytes = peak_allocated
    allocator.peak_reserved_bytes = peak_reserved
    allocator.num_device_alloc = device_allocs
    allocator._live_segments = live_segments
    return best_allocated, reserved_at_best
