"""The caching-allocator model against the rules of c10/cuda/CUDACachingAllocator.cpp, as the source states them.

Each test names the function whose rule it checks (``round_size``, ``get_allocation_size``,
``get_free_block``, ``should_split``, ``free_block``, ``release_available_cached_blocks``,
``garbage_collect_cached_blocks``, expandable segments' ``map_block``/``unmap_block``) and the
option parser of c10/core/AllocatorConfig.cpp.
"""

from __future__ import annotations

import pytest

from trainmem.cuda.caching_allocator import (
    AllocatorOutOfMemory,
    AllocatorSettings,
    CachingAllocator,
    allocation_size,
    parse_alloc_conf,
    round_size,
    roundup_power2_next_division,
)
from trainmem.units import GIB, KIB, MIB


# ---------------------------------------------------------------- round_size, get_allocation_size
def test_round_size_rounds_to_512_bytes():
    assert round_size(1) == 512
    assert round_size(512) == 512
    assert round_size(513) == 1024
    assert round_size(3 * MIB + 1) == 3 * MIB + 512


def test_roundup_power2_next_division_example_from_the_source():
    # "if we need to round-up 1200 and number of divisions is 4 ... return 1280"
    assert roundup_power2_next_division(1200, 4) == 1280
    assert roundup_power2_next_division(1024, 4) == 1024
    assert roundup_power2_next_division(1280, 4) == 1280


def test_round_size_with_power2_divisions_per_interval():
    settings = AllocatorSettings(**parse_alloc_conf("roundup_power2_divisions:4"))
    # 5 MiB lies between 4 and 8 MiB: steps of 1 MiB -> 5 MiB stays, 5 MiB + 1 -> 6 MiB
    assert round_size(5 * MIB + 1, settings) == 6 * MIB
    # only sizes above 512 × divisions are rounded by divisions
    assert round_size(1000, settings) == 1024
    assert round_size(2047, AllocatorSettings()) == 2048


def test_get_allocation_size():
    assert allocation_size(512) == 2 * MIB  # small pool: 2 MiB segments
    assert allocation_size(1 * MIB) == 2 * MIB
    assert allocation_size(1 * MIB + 512) == 20 * MIB  # 1–10 MiB: a 20 MiB segment
    assert allocation_size(10 * MIB - 512) == 20 * MIB
    assert allocation_size(10 * MIB) == 10 * MIB  # from kMinLargeAlloc: rounded to 2 MiB
    assert allocation_size(11 * MIB) == 12 * MIB


# ---------------------------------------------------------------- pools, best fit, splitting
def test_small_requests_share_one_2_mib_segment():
    allocator = CachingAllocator()
    blocks = [allocator.malloc(100 * KIB) for _ in range(20)]  # 20 × 100 KiB = 2000 KiB < 2 MiB
    assert allocator.reserved_bytes == 2 * MIB
    assert allocator.allocated_bytes == 20 * 100 * KIB
    allocator.malloc(100 * KIB)
    assert allocator.reserved_bytes == 4 * MIB
    for block in blocks:
        allocator.free(block)
    assert allocator.allocated_bytes == 100 * KIB
    assert allocator.reserved_bytes == 4 * MIB  # cached, not returned


def test_mid_size_requests_are_carved_from_20_mib_segments():
    allocator = CachingAllocator()
    for _ in range(4):
        allocator.malloc(4 * MIB)  # 4 × 4 MiB fit one 20 MiB segment
    assert allocator.reserved_bytes == 20 * MIB
    allocator.malloc(4 * MIB)  # 4 MiB remain, but the split left them in one block: it fits
    assert allocator.reserved_bytes == 20 * MIB
    allocator.malloc(4 * MIB)
    assert allocator.reserved_bytes == 40 * MIB


def test_large_pool_does_not_split_off_remainders_of_1_mib_or_less():
    # should_split: large pool splits only when the remainder is > kSmallSize (1 MiB)
    allocator = CachingAllocator()
    block = allocator.malloc(12 * MIB)
    allocator.free(block)
    reused = allocator.malloc(11 * MIB + 512)  # 12 MiB block, remainder < 1 MiB: no split
    assert reused.size == 12 * MIB
    assert allocator.allocated_bytes == 12 * MIB


def test_best_fit_takes_the_smallest_block_that_holds_the_request():
    allocator = CachingAllocator()
    big, small = allocator.malloc(40 * MIB), allocator.malloc(16 * MIB)
    small_address = small.address
    allocator.free(big)
    allocator.free(small)
    block = allocator.malloc(14 * MIB)
    assert block.address == small_address  # the 16 MiB block, split
    assert allocator.reserved_bytes == 56 * MIB


def test_free_merges_with_free_neighbours():
    allocator = CachingAllocator()
    a, b, c = (allocator.malloc(5 * MIB) for _ in range(3))
    allocator.free(a)
    allocator.free(c)
    allocator.free(b)
    (segment,) = allocator.snapshot()
    assert segment.total_size == 20 * MIB
    assert segment.blocks == ((20 * MIB, False),)


def test_streams_have_their_own_free_blocks():
    allocator = CachingAllocator()
    block = allocator.malloc(30 * MIB, stream=0)
    allocator.free(block)
    allocator.malloc(30 * MIB, stream=1)  # the cached block belongs to stream 0
    assert allocator.reserved_bytes == 60 * MIB
    allocator.malloc(30 * MIB, stream=0)
    assert allocator.reserved_bytes == 60 * MIB


# ---------------------------------------------------------------- max_split_size_mb
def test_blocks_over_max_split_size_are_not_split_and_not_given_to_small_requests():
    settings = AllocatorSettings(**parse_alloc_conf("max_split_size_mb:64"))
    allocator = CachingAllocator(settings)
    big = allocator.malloc(100 * MIB)
    allocator.free(big)
    allocator.malloc(30 * MIB)  # under max_split_size: the 100 MiB oversize block is off limits
    assert allocator.reserved_bytes == 130 * MIB
    default = CachingAllocator()
    allocator_big = default.malloc(100 * MIB)
    default.free(allocator_big)
    default.malloc(30 * MIB)  # without the option the 100 MiB block is split
    assert default.reserved_bytes == 100 * MIB


def test_oversize_blocks_serve_requests_within_max_non_split_rounding():
    allocator = CachingAllocator(AllocatorSettings(**parse_alloc_conf("max_split_size_mb:64")))
    block = allocator.malloc(100 * MIB)
    allocator.free(block)
    reused = allocator.malloc(90 * MIB)  # 100 < 90 + 20: taken whole
    assert reused.size == 100 * MIB and allocator.reserved_bytes == 100 * MIB
    allocator.free(reused)
    allocator.malloc(70 * MIB)  # 100 ≥ 70 + 20: a new segment
    assert allocator.reserved_bytes == 170 * MIB


def test_release_available_cached_blocks_frees_oversize_blocks_before_failing():
    settings = AllocatorSettings(capacity_bytes=200 * MIB, **parse_alloc_conf("max_split_size_mb:64"))
    allocator = CachingAllocator(settings)
    block = allocator.malloc(150 * MIB)
    allocator.free(block)
    allocator.malloc(100 * MIB)  # 150 + 100 > 200: the cached 150 MiB segment is released first
    assert allocator.reserved_bytes == 100 * MIB


def test_release_cached_blocks_then_out_of_memory():
    allocator = CachingAllocator(AllocatorSettings(capacity_bytes=100 * MIB))
    kept = allocator.malloc(40 * MIB)
    cached = allocator.malloc(40 * MIB)
    allocator.free(cached)
    allocator.malloc(50 * MIB)  # 40 cached + 40 + 50 > 100: the cache is emptied, then it fits
    assert allocator.reserved_bytes == 90 * MIB
    assert allocator.num_alloc_retries == 1
    with pytest.raises(AllocatorOutOfMemory):
        allocator.malloc(40 * MIB)
    assert kept.allocated


# ---------------------------------------------------------------- garbage_collection_threshold
def test_garbage_collection_needs_a_memory_fraction():
    # get_free_block / malloc run the collector only when set_fraction is true
    without = CachingAllocator(AllocatorSettings(**parse_alloc_conf("garbage_collection_threshold:0.5")))
    assert not without.settings.garbage_collection_enabled
    with_fraction = CachingAllocator(
        AllocatorSettings(memory_limit_bytes=100 * MIB, **parse_alloc_conf("garbage_collection_threshold:0.5"))
    )
    for allocator in (without, with_fraction):
        blocks = [allocator.malloc(30 * MIB) for _ in range(2)]
        for block in blocks:
            allocator.free(block)
        allocator.malloc(32 * MIB)  # no cached block fits: 60 MiB reserved > 50 MiB threshold
    assert without.reserved_bytes == 92 * MIB
    assert with_fraction.reserved_bytes < 92 * MIB


# ---------------------------------------------------------------- expandable segments
def test_expandable_segments_map_20_mib_pages_and_tile_requests():
    allocator = CachingAllocator(AllocatorSettings(**parse_alloc_conf("expandable_segments:True")))
    blocks = [allocator.malloc(30 * MIB) for _ in range(3)]  # 90 MiB tile into one segment
    assert allocator.reserved_bytes == 100 * MIB  # five 20 MiB pages
    assert allocator.allocated_bytes == 90 * MIB
    segments = allocator.snapshot()
    assert len(segments) == 1 and segments[0].is_expandable
    allocator.free(blocks[1])
    allocator.malloc(31 * MIB)  # the 30 MiB hole is too small: appended at the end
    assert allocator.reserved_bytes == 140 * MIB


def test_expandable_segments_reserve_less_than_fixed_segments_for_growing_sizes():
    def reserved(conf: str) -> int:
        allocator = CachingAllocator(AllocatorSettings(**parse_alloc_conf(conf)))
        for step in range(10):  # the "batch size changes" pattern of Note [Expandable Segments]
            blocks = [allocator.malloc((100 + 10 * step) * MIB) for _ in range(3)]
            for block in blocks:
                allocator.free(block)
        return allocator.peak_reserved_bytes

    assert reserved("expandable_segments:True") < reserved("")


def test_empty_cache_unmaps_free_pages():
    allocator = CachingAllocator(AllocatorSettings(**parse_alloc_conf("expandable_segments:True")))
    a = allocator.malloc(50 * MIB)
    allocator.free(a)
    allocator.malloc(1 * MIB + 512)
    allocator.empty_cache()
    assert allocator.reserved_bytes == 20 * MIB  # the page holding the live block stays mapped


def test_small_pool_expandable_pages_are_2_mib():
    allocator = CachingAllocator(AllocatorSettings(**parse_alloc_conf("expandable_segments:True")))
    allocator.malloc(100 * KIB)
    assert allocator.reserved_bytes == 2 * MIB


# ---------------------------------------------------------------- statistics and option parsing
def test_reserved_is_never_below_allocated_and_peaks_reset():
    allocator = CachingAllocator()
    block = allocator.malloc(1 * GIB)
    allocator.free(block)
    allocator.reset_peak_stats()
    assert allocator.peak_allocated_bytes == 0 and allocator.peak_reserved_bytes == 1 * GIB


def test_parse_alloc_conf():
    settings = parse_alloc_conf(
        "max_split_size_mb:128, roundup_power2_divisions:[256:1,512:2,1024:4,>:8],"
        "garbage_collection_threshold:0.6,expandable_segments:False"
    )
    assert settings["max_split_size_bytes"] == 128 * MIB
    divisions = settings["roundup_power2_divisions"]
    assert divisions[:8] == (1,) * 8 and divisions[8] == 1 and divisions[9] == 2 and divisions[10] == 4
    assert divisions[11:] == (8,) * 5
    assert settings["garbage_collection_threshold"] == 0.6
    assert settings["expandable_segments"] is False


@pytest.mark.parametrize(
    "conf, message",
    [
        ("max_split_size_mb:10", "max_split_size_mb must be >= 20"),
        ("garbage_collection_threshold:1.5", "in (0.0, 1.0)"),
        ("roundup_power2_divisions:3", "power of 2"),
        ("expandable_segments:maybe", "True or False"),
        ("backend:cudaMallocAsync", "unknown option 'backend'"),
        ("max_split_size_mb", "expected option:value"),
    ],
)
def test_parse_alloc_conf_rejects_bad_values(conf, message):
    with pytest.raises(ValueError, match=r"runtime\.cuda_alloc_conf") as error:
        parse_alloc_conf(conf)
    assert message in str(error.value)


def test_segment_count_and_largest_free_block_agree_with_the_snapshot():
    for conf in ("", "expandable_segments:True"):
        allocator = CachingAllocator(AllocatorSettings(**parse_alloc_conf(conf)))
        blocks = [allocator.malloc(size) for size in (100 * KIB, 3 * MIB, 30 * MIB, 30 * MIB, 700 * KIB)]
        allocator.free(blocks[2])
        allocator.free(blocks[1])
        snapshot = allocator.snapshot()
        assert allocator.segment_count() == len(snapshot)
        largest = max(size for segment in snapshot for size, allocated in segment.blocks if not allocated)
        assert allocator.largest_free_block() == largest
