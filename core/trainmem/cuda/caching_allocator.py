"""A model of PyTorch's CUDA caching allocator, replayed over a stream of allocations and frees.

It follows ``DeviceCachingAllocator`` in c10/cuda/CUDACachingAllocator.cpp (PyTorch 2.x; the
rules below are unchanged from 2.1 to 2.13 except where noted) and the option parser in
c10/core/AllocatorConfig.cpp (``AcceleratorAllocatorConfig::parseArgs``):

* ``round_size``: every request is rounded up to a multiple of 512 bytes (``kMinBlockSize``),
  or to the next of ``roundup_power2_divisions`` equal steps between two powers of two
  (``roundup_power2_next_division``) when that option is set for the request's size interval
  (16 intervals, from 1 MiB to 64 GiB, ``AcceleratorAllocatorConfig::roundup_power2_divisions``).
* ``get_pool``: requests of at most 1 MiB (``kSmallSize``) use the small pool, others the large
  pool; each pool keeps its free blocks per stream, ordered by (stream, size, address)
  (``BlockComparatorSize``), so a block freed on one stream is reused only on that stream.
* ``get_allocation_size``: a new segment (``cudaMalloc``) is 2 MiB (``kSmallBuffer``) for small
  requests, 20 MiB (``kLargeBuffer``) for requests under 10 MiB (``kMinLargeAlloc``), and the
  request rounded up to 2 MiB (``kRoundLarge``) above that.
* ``get_free_block``: best fit, the smallest free block of the stream that holds the request;
  a request under ``max_split_size`` never takes a block of ``max_split_size`` or more, and a
  request of ``max_split_size`` or more takes a block at most ``max_non_split_rounding_mb``
  (default 20 MiB, ``kLargeBuffer``) larger.
* ``should_split`` / ``alloc_found_block``: the block is split when the remainder is at least
  512 bytes (small pool, or ``expandable_segments``), or, in the large pool, when the request
  is under ``max_split_size`` and the remainder is more than 1 MiB; ``free_block`` merges a
  freed block with its free neighbours (``try_merge_blocks``).
* ``malloc``'s fallbacks: when no free block fits, ``garbage_collect_cached_blocks`` (only with
  ``garbage_collection_threshold`` *and* a per-process memory fraction, ``set_fraction``),
  then ``alloc_block``; if that fails, ``release_available_cached_blocks`` (oversize blocks,
  only with ``max_split_size_mb``), then ``release_cached_blocks`` (every unsplit cached
  segment), then out of memory.
* ``expandable_segments:True`` (``try_allocate_expandable_block``, ``map_block``,
  ``unmap_block``): one segment per stream and pool whose address space grows by mapping
  pages of 2 MiB (small pool) or 20 MiB (large pool) at the lowest free address; frees are
  cached as usual and whole free pages are unmapped only by ``release_cached_blocks``.

``reserved`` is ``total_allocated_memory`` (``stats.reserved_bytes``: what
``torch.cuda.memory_reserved`` reports), ``allocated`` the sum of the allocated blocks' sizes
(``stats.allocated_bytes``, ``torch.cuda.memory_allocated``). Not modelled: CUDA graph private
pools, cross-stream ``record_stream`` events (a block is free when the program frees it), IPC.
"""

from __future__ import annotations

import bisect
import itertools
import re
from dataclasses import dataclass, field
from typing import Optional

from ..units import GIB, MIB

MIN_BLOCK_BYTES = 512
"""kMinBlockSize: all sizes are rounded to at least 512 bytes."""
SMALL_SIZE_BYTES = 1 * MIB
"""kSmallSize: the largest "small" allocation."""
SMALL_BUFFER_BYTES = 2 * MIB
"""kSmallBuffer: small allocations are packed in 2 MiB segments (and expandable small pages)."""
LARGE_BUFFER_BYTES = 20 * MIB
"""kLargeBuffer: allocations between 1 and 10 MiB may use 20 MiB segments (and expandable large pages)."""
MIN_LARGE_ALLOC_BYTES = 10 * MIB
"""kMinLargeAlloc: requests from here on get a segment of their own size."""
ROUND_LARGE_BYTES = 2 * MIB
"""kRoundLarge: large segments are rounded up to 2 MiB."""
ROUNDUP_POWER2_INTERVALS = 16
"""kRoundUpPowerOfTwoIntervals: 1 MiB, 2 MiB, ... 32 GiB and above."""
NO_LIMIT = (1 << 64) - 1
"""std::numeric_limits<size_t>::max(): max_split_size when it is not set."""

_ALLOWED_OPTIONS = (
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "roundup_power2_divisions",
    "garbage_collection_threshold",
    "expandable_segments",
)


class AllocatorOutOfMemory(RuntimeError):
    """The replay's ``malloc`` found no block and could not reserve a new one within the capacity."""


@dataclass(frozen=True)
class AllocatorSettings:
    """``PYTORCH_CUDA_ALLOC_CONF`` as the allocator sees it, plus the device it runs on."""

    max_split_size_bytes: int = NO_LIMIT
    max_non_split_rounding_bytes: int = LARGE_BUFFER_BYTES
    roundup_power2_divisions: tuple[int, ...] = (0,) * ROUNDUP_POWER2_INTERVALS
    garbage_collection_threshold: float = 0.0
    expandable_segments: bool = False
    memory_limit_bytes: Optional[int] = None
    """``torch.cuda.set_per_process_memory_fraction`` × device memory (``allowed_memory_maximum``);
    None when no fraction is set (``set_fraction`` false: the garbage collector never runs)."""
    capacity_bytes: Optional[int] = None
    """What ``cudaMalloc`` can still get on the device (its memory minus what lives outside the
    allocator); None replays on an unbounded device."""
    device_total_bytes: int = 80 * GIB
    """``totalGlobalMem``: sizes the address space an expandable segment reserves (1⅛ of it)."""

    @property
    def garbage_collection_enabled(self) -> bool:
        return self.memory_limit_bytes is not None and self.garbage_collection_threshold > 0.0


def parse_alloc_conf(text: str, field_name: str = "runtime.cuda_alloc_conf") -> dict:
    """Parse a ``PYTORCH_CUDA_ALLOC_CONF`` string into keyword arguments of :class:`AllocatorSettings`.

    Follows ``AcceleratorAllocatorConfig::parseArgs`` and its per-option parsers: ``max_split_size_mb``
    and ``max_non_split_rounding_mb`` must be ≥ 20 (kLargeBuffer / 1 MiB); ``garbage_collection_threshold``
    in (0, 1); ``roundup_power2_divisions`` a power of two for all sizes, or ``[256:1,512:2,>:8]``
    (interval boundaries in MiB, powers of two; values powers of two or 0); ``expandable_segments``
    True/False. Raises ``ValueError`` naming the option.
    """
    result: dict = {}
    text = text.strip()
    if not text:
        return result
    for key, value in _split_options(text, field_name):
        if key not in _ALLOWED_OPTIONS:
            raise ValueError(f"{_prefix(field_name)}unknown option {key!r}; allowed: {', '.join(_ALLOWED_OPTIONS)}")
        if key in ("max_split_size_mb", "max_non_split_rounding_mb"):
            megabytes = _integer(value, f"{_prefix(field_name)}{key}")
            if megabytes < LARGE_BUFFER_BYTES // MIB:
                raise ValueError(f"{_prefix(field_name)}{key} must be >= {LARGE_BUFFER_BYTES // MIB}, got {megabytes}")
            name = "max_split_size_bytes" if key == "max_split_size_mb" else "max_non_split_rounding_bytes"
            result[name] = min(megabytes * MIB, NO_LIMIT)
        elif key == "garbage_collection_threshold":
            try:
                threshold = float(value)
            except ValueError:
                raise ValueError(f"{_prefix(field_name)}garbage_collection_threshold must be a number, got {value!r}") from None
            if not 0.0 < threshold < 1.0:
                raise ValueError(f"{_prefix(field_name)}garbage_collection_threshold must be in (0.0, 1.0), got {value}")
            result["garbage_collection_threshold"] = threshold
        elif key == "expandable_segments":
            if value not in ("True", "False", "true", "false", "1", "0"):
                raise ValueError(f"{_prefix(field_name)}expandable_segments must be True or False, got {value!r}")
            result["expandable_segments"] = value in ("True", "true", "1")
        else:
            result["roundup_power2_divisions"] = parse_roundup_power2_divisions(value, field_name)
    return result


def _prefix(field_name: str) -> str:
    """Messages start with the field's name when the caller gives one (pydantic adds its own)."""
    return f"{field_name}: " if field_name else ""


def _split_options(text: str, field_name: str) -> list[tuple[str, str]]:
    """``a:1,b:[x:1,y:2]`` -> [("a", "1"), ("b", "[x:1,y:2]")] (commas inside brackets stay)."""
    options, depth, current = [], 0, ""
    for char in text.replace(" ", "") + ",":
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            if current:
                key, sep, value = current.partition(":")
                if not sep or not value:
                    raise ValueError(f"{_prefix(field_name)}expected option:value, got {current!r}")
                options.append((key, value))
            current = ""
        else:
            current += char
    if depth != 0:
        raise ValueError(f"{_prefix(field_name)}unbalanced brackets in {text!r}")
    return options


def _integer(value: str, name: str) -> int:
    if not re.fullmatch(r"[0-9]+", value):
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def _power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def parse_roundup_power2_divisions(value: str, field_name: str = "runtime.cuda_alloc_conf") -> tuple[int, ...]:
    """``AcceleratorAllocatorConfig::parseRoundUpPower2Divisions``: one value for every interval, or a
    list of ``boundary_mib:divisions`` (the first one also fills the intervals below it) and ``>:divisions``
    for every interval after the last boundary."""
    name = f"{_prefix(field_name)}roundup_power2_divisions"
    divisions = [0] * ROUNDUP_POWER2_INTERVALS
    if not value.startswith("["):
        single = _integer(value, name)
        if not _power_of_two(single):
            raise ValueError(f"{name} must be a power of 2, got {single}")
        return (single,) * ROUNDUP_POWER2_INTERVALS
    if not value.endswith("]"):
        raise ValueError(f"{name}: expected [boundary:divisions,...], got {value!r}")
    first, last_index = True, 0
    for item in filter(None, value[1:-1].split(",")):
        boundary, sep, count_text = item.partition(":")
        if not sep:
            raise ValueError(f"{name}: expected boundary:divisions, got {item!r}")
        count = _integer(count_text, name)
        if count != 0 and not _power_of_two(count):
            raise ValueError(f"{name}: divisions must be a power of 2 or 0, got {count}")
        if boundary == ">":
            for index in range(last_index + 1, ROUNDUP_POWER2_INTERVALS):
                divisions[index] = count
            continue
        boundary_mib = _integer(boundary, name)
        if not _power_of_two(boundary_mib):
            raise ValueError(f"{name}: interval boundaries must be powers of 2 (MiB), got {boundary_mib}")
        index = min(boundary_mib.bit_length() - 1, ROUNDUP_POWER2_INTERVALS - 1)
        if first:
            for below in range(index):
                divisions[below] = count
            first = False
        divisions[index] = count
        last_index = index
    return tuple(divisions)


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """``roundup_power2_next_division``: ``size`` up to the next of ``divisions`` equal steps between
    the powers of two around it (1200 with 4 divisions: steps 1024, 1280, 1536, 1792 → 1280)."""
    if _power_of_two(size):
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    rounded_floor = size & ~(step - 1)
    return size if rounded_floor == size else rounded_floor + step


def divisions_for(size: int, settings: AllocatorSettings) -> int:
    """``AcceleratorAllocatorConfig::roundup_power2_divisions(size)``: the interval is log2(size) − 20."""
    log_size = size.bit_length() - 1
    index = max(0, log_size - 20)
    return settings.roundup_power2_divisions[min(index, ROUNDUP_POWER2_INTERVALS - 1)]


def round_size(size: int, settings: AllocatorSettings = AllocatorSettings()) -> int:
    """``round_size``: the block size a request of ``size`` bytes gets."""
    if size < MIN_BLOCK_BYTES:
        return MIN_BLOCK_BYTES
    divisions = divisions_for(size, settings)
    if divisions > 1 and size > MIN_BLOCK_BYTES * divisions:
        return roundup_power2_next_division(size, divisions)
    return -(-size // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES


def allocation_size(size: int) -> int:
    """``get_allocation_size``: the segment ``cudaMalloc`` gets for a (rounded) request no block holds."""
    if size <= SMALL_SIZE_BYTES:
        return SMALL_BUFFER_BYTES
    if size < MIN_LARGE_ALLOC_BYTES:
        return LARGE_BUFFER_BYTES
    return -(-size // ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES


# ---------------------------------------------------------------------------- blocks and pools


class _Segment:
    """An expandable segment: reserved address space mapped page by page."""

    __slots__ = ("base", "size", "page")

    def __init__(self, base: int, size: int, page: int):
        self.base, self.size, self.page = base, size, page


class Block:
    """``Block``: a range of a segment, allocated or cached, linked to its neighbours in the segment."""

    __slots__ = ("stream", "size", "requested", "small", "address", "allocated", "prev", "next", "mapped",
                 "segment", "gc_base")  # fmt: skip

    def __init__(self, stream: int, size: int, small: bool, address: int, segment: Optional[_Segment] = None):
        self.stream = stream
        self.size = size
        self.requested = 0
        self.small = small
        self.address = address
        self.allocated = False
        self.prev: Optional[Block] = None
        self.next: Optional[Block] = None
        self.mapped = True
        self.segment = segment
        self.gc_base = 0

    @property
    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        state = "allocated" if self.allocated else ("free" if self.mapped else "unmapped")
        return f"Block({self.size} B at {self.address:#x}, stream {self.stream}, {state})"


class _SortedBlocks:
    """A ``std::set<Block*>`` ordered by (stream, size, address), with ``lower_bound``.

    Each key is one integer, ``stream``, ``size`` (0 when ordered by address alone) and ``address``
    packed into fields of ``_width`` bits, so that ``bisect`` compares integers, not tuples; the
    order is the tuples' order. A size or address that does not fit widens every field first."""

    __slots__ = ("_keys", "_blocks", "_by_size", "_width")

    def __init__(self, by_size: bool):
        self._keys: list[int] = []
        self._blocks: list[Block] = []
        self._by_size = by_size
        self._width = 64

    def _key(self, block: Block) -> int:
        width = self._width
        if (block.size | block.address) >> width:
            self._widen(max(block.size, block.address).bit_length())
            width = self._width
        size = block.size if self._by_size else 0
        return (((block.stream << width) | size) << width) | block.address

    def _widen(self, bits: int) -> None:
        self._width = max(2 * self._width, bits)
        self._keys = [self._key(b) for b in self._blocks]

    def insert(self, block: Block) -> None:
        width, address = self._width, block.address
        if self._by_size and not (block.size | address) >> width:  # _key, inlined: the replay's hottest call
            key = (((block.stream << width) | block.size) << width) | address
        else:
            key = self._key(block)
        keys = self._keys
        index = bisect.bisect_left(keys, key)
        keys.insert(index, key)
        self._blocks.insert(index, block)

    def erase(self, block: Block) -> bool:
        width, address = self._width, block.address
        if self._by_size and not (block.size | address) >> width:
            key = (((block.stream << width) | block.size) << width) | address
        else:
            key = self._key(block)
        index = bisect.bisect_left(self._keys, key)
        if index < len(self._keys) and self._blocks[index] is block:
            del self._keys[index]
            del self._blocks[index]
            return True
        return False

    def lower_bound(self, stream: int, size: int = 0) -> int:
        """The first block of ``stream`` with at least ``size`` bytes (addresses are never 0)."""
        width = self._width
        if size >> width:
            self._widen(size.bit_length())
            width = self._width
        return bisect.bisect_left(self._keys, ((stream << width) | size) << width)

    def __getitem__(self, index: int) -> Block:
        return self._blocks[index]

    def __len__(self) -> int:
        return len(self._blocks)

    def __iter__(self):
        return iter(list(self._blocks))


@dataclass
class _Pool:
    """``BlockPool``: cached free blocks (by size) and unmapped expandable ranges (by address)."""

    small: bool
    blocks: _SortedBlocks = field(default_factory=lambda: _SortedBlocks(by_size=True))
    unmapped: _SortedBlocks = field(default_factory=lambda: _SortedBlocks(by_size=False))
    free_block_calls: int = 0
    """``get_free_blocks_call_count``: the garbage collector's clock."""

    def insert(self, block: Block) -> None:
        """``insert_into_blocks``: cache a block and stamp its age."""
        block.gc_base = self.free_block_calls
        self.blocks.insert(block)


@dataclass(frozen=True)
class SegmentInfo:
    """One segment as ``torch.cuda.memory_snapshot()`` lists it."""

    address: int
    stream: int
    is_large: bool
    is_expandable: bool
    total_size: int
    allocated_size: int
    blocks: tuple[tuple[int, bool], ...]
    """(size, allocated) of each block, in address order."""


# ---------------------------------------------------------------------------- the allocator


class CachingAllocator:
    """``DeviceCachingAllocator`` for one device: ``malloc``, ``free``, ``empty_cache`` and its statistics."""

    def __init__(self, settings: AllocatorSettings = AllocatorSettings()):
        self.settings = settings
        self._collects = settings.garbage_collection_enabled
        self._rounds_by_divisions = any(settings.roundup_power2_divisions)
        self._best_fit_only = not settings.expandable_segments and not self._collects
        """``get_free_block`` is the plain best fit (no expandable sizes, no garbage-collector clock)."""
        self.small = _Pool(small=True)
        self.large = _Pool(small=False)
        self.reserved_bytes = 0
        """``total_allocated_memory`` / ``stats.reserved_bytes``."""
        self.allocated_bytes = 0
        self.requested_bytes = 0
        self.peak_reserved_bytes = 0
        self.peak_allocated_bytes = 0
        self.num_device_alloc = 0
        self.num_device_free = 0
        self.num_alloc_retries = 0
        self._addresses = itertools.count(1)
        self._next_address = 1 << 40
        self._expandable: list[_Segment] = []
        self._segment_heads: dict[int, Block] = {}
        self._live_segments = 0

    # ---------------------------------------------------------------- public API
    def malloc(self, size: int, stream: int = 0) -> Block:
        """``DeviceCachingAllocator::malloc``: a block of ``round_size(size)`` bytes on ``stream``."""
        if self._rounds_by_divisions or size < MIN_BLOCK_BYTES:
            rounded = round_size(size, self.settings)
        else:
            rounded = -(-size // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES
        pool = self.small if rounded <= SMALL_SIZE_BYTES else self.large
        if self._best_fit_only:
            block = self._best_fit(pool, rounded, stream)
        else:
            block = self._get_free_block(pool, rounded, stream)
        if block is None:
            alloc_size = allocation_size(rounded)
            if self._collects:
                self._garbage_collect_cached_blocks()
            block = self._alloc_block(pool, rounded, alloc_size, stream)
            if block is None and self._release_available_cached_blocks(pool, rounded, stream):
                block = self._alloc_block(pool, rounded, alloc_size, stream)
            if block is None:
                self.release_cached_blocks()
                self.num_alloc_retries += 1
                block = self._alloc_block(pool, rounded, alloc_size, stream)
            if block is None:
                raise AllocatorOutOfMemory(
                    f"tried to allocate {rounded} bytes with {self.reserved_bytes} reserved "
                    f"and {self.allocated_bytes} allocated"
                )
        return self._alloc_found_block(pool, block, rounded, size, stream)

    def free(self, block: Block) -> None:
        """``DeviceCachingAllocator::free`` → ``free_block``: cache the block, merged with free neighbours."""
        if not block.allocated:
            raise ValueError("block freed twice")
        block.allocated = False
        self.allocated_bytes -= block.size
        self.requested_bytes -= block.requested
        pool = self.small if block.small else self.large
        before, after = block.prev, block.next
        if before is not None and not before.allocated:
            self._try_merge_blocks(block, before, pool)
        if after is not None and not after.allocated:
            self._try_merge_blocks(block, after, pool)
        block.gc_base = pool.free_block_calls  # pool.insert, inlined
        pool.blocks.insert(block)

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()`` → ``release_cached_blocks``."""
        self.release_cached_blocks()

    def reset_peak_stats(self) -> None:
        """``torch.cuda.reset_peak_memory_stats()``: peaks restart from the current values."""
        self.peak_reserved_bytes = self.reserved_bytes
        self.peak_allocated_bytes = self.allocated_bytes

    def snapshot(self) -> list[SegmentInfo]:
        """``snapshot()``: every segment (each mapped range of an expandable one) and its blocks."""
        starts: dict[int, Block] = {}
        for pool in (self.small, self.large):
            for block in list(pool.blocks) + list(pool.unmapped):
                starts[id(block)] = block
        starts.update({id(b): b for b in self._segment_heads.values()})
        firsts: dict[int, Block] = {}
        for block in starts.values():
            while block.prev is not None:
                block = block.prev
            firsts[id(block)] = block
        result = []
        for first in firsts.values():
            block: Optional[Block] = first
            while block is not None:
                if not block.mapped:
                    block = block.next
                    continue
                head, blocks = block, []
                while block is not None and block.mapped:
                    blocks.append((block.size, block.allocated))
                    block = block.next
                result.append(
                    SegmentInfo(
                        address=head.address,
                        stream=head.stream,
                        is_large=not head.small,
                        is_expandable=head.segment is not None,
                        total_size=sum(size for size, _ in blocks),
                        allocated_size=sum(size for size, allocated in blocks if allocated),
                        blocks=tuple(blocks),
                    )
                )
        return sorted(result, key=lambda s: s.address)

    def largest_free_block(self) -> int:
        """``cacheInfo``: the largest cached free block (``cache_info_aux`` over both pools)."""
        return max((b.size for pool in (self.small, self.large) for b in pool.blocks), default=0)

    def segment_count(self) -> int:
        """Segments held: cudaMalloc'd ones, or each mapped range of an expandable segment (as snapshot() lists)."""
        if not self._expandable:
            return self._live_segments
        return len(self.snapshot())

    @property
    def cached_bytes(self) -> int:
        """Reserved but not allocated: free blocks the allocator keeps for reuse."""
        return self.reserved_bytes - self.allocated_bytes

    # ---------------------------------------------------------------- malloc's steps
    def _get_free_block(self, pool: _Pool, size: int, stream: int) -> Optional[Block]:
        """``get_free_block``: best fit on the stream, with the oversize-block limits."""
        settings = self.settings
        if self._collects:
            pool.free_block_calls += 1
        index = pool.blocks.lower_bound(stream, size)
        if index >= len(pool.blocks) or pool.blocks[index].stream != stream:
            return None
        block = pool.blocks[index]
        if block.segment is not None and settings.expandable_segments:
            # Best fit by the size a block could grow to (its unmapped tail counts).
            def expandable_size(b: Block) -> int:
                return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)

            while (
                pool.blocks[index].segment is not None
                and index + 1 < len(pool.blocks)
                and pool.blocks[index + 1].stream == stream
                and expandable_size(pool.blocks[index + 1]) < expandable_size(pool.blocks[index])
            ):
                index += 1
            block = pool.blocks[index]
        max_split = settings.max_split_size_bytes
        if size < max_split and block.size >= max_split:
            return None
        if size >= max_split and block.size >= size + settings.max_non_split_rounding_bytes:
            return None
        pool.blocks.erase(block)
        return block

    def _best_fit(self, pool: _Pool, size: int, stream: int) -> Optional[Block]:
        """``get_free_block`` without expandable segments or a garbage collector: the same answer as
        :meth:`_get_free_block`, with the sorted list read and the block taken out in place."""
        blocks = pool.blocks
        keys, width = blocks._keys, blocks._width
        if size >> width:
            return self._get_free_block(pool, size, stream)
        index = bisect.bisect_left(keys, ((stream << width) | size) << width)
        if index >= len(keys):
            return None
        block = blocks._blocks[index]
        if block.stream != stream:
            return None
        settings = self.settings
        max_split = settings.max_split_size_bytes
        if size < max_split:
            if block.size >= max_split:
                return None
        elif block.size >= size + settings.max_non_split_rounding_bytes:
            return None
        del keys[index]
        del blocks._blocks[index]
        return block

    def _alloc_block(self, pool: _Pool, size: int, alloc_size: int, stream: int) -> Optional[Block]:
        """``alloc_block``: a new segment (``cudaMalloc``), or more pages of an expandable one."""
        settings = self.settings
        if settings.memory_limit_bytes is not None and self.reserved_bytes + alloc_size > settings.memory_limit_bytes:
            return None
        if settings.expandable_segments:
            return self._try_allocate_expandable_block(pool, size, stream)
        if not self._device_has(alloc_size):
            return None
        block = Block(stream, alloc_size, pool.small, self._new_address(alloc_size))
        self._segment_heads[id(block)] = block
        self._live_segments += 1
        self._grow_reserved(alloc_size)
        self.num_device_alloc += 1
        return block

    def _alloc_found_block(self, pool: _Pool, block: Block, size: int, requested: int, stream: int) -> Block:
        """``should_split`` + ``alloc_found_block``: split off the remainder when the rules allow it."""
        remaining = block.size - size
        if pool.small or self.settings.expandable_segments:
            split = remaining >= MIN_BLOCK_BYTES
        else:
            split = size < self.settings.max_split_size_bytes and remaining > SMALL_SIZE_BYTES
        if split:
            rest = block
            block = Block(stream, size, pool.small, rest.address, rest.segment)
            block.prev = rest.prev
            if block.prev is not None:
                block.prev.next = block
            block.next = rest
            rest.prev = block
            rest.address += size
            rest.size -= size
            if self._segment_heads.pop(id(rest), None) is not None:
                self._segment_heads[id(block)] = block
            rest.gc_base = pool.free_block_calls  # pool.insert, inlined
            pool.blocks.insert(rest)
        block.allocated = True
        block.requested = requested
        self.allocated_bytes += block.size
        self.requested_bytes += requested
        if self.allocated_bytes > self.peak_allocated_bytes:
            self.peak_allocated_bytes = self.allocated_bytes
        return block

    def _try_merge_blocks(self, dst: Block, src: Optional[Block], pool: _Pool) -> int:
        """``try_merge_blocks``: fold a free neighbour into ``dst``; returns the bytes it took."""
        if src is None or src.allocated or dst.mapped != src.mapped:
            return 0
        if dst.prev is src:
            dst.address = src.address
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
            if self._segment_heads.pop(id(src), None) is not None:
                self._segment_heads[id(dst)] = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        if src.mapped:
            pool.blocks.erase(src)
        else:
            pool.unmapped.erase(src)
        dst.size += src.size
        return src.size

    # ---------------------------------------------------------------- giving memory back
    def release_cached_blocks(self) -> None:
        """``release_cached_blocks`` → ``release_blocks``: free every unsplit cached segment and unmap
        the free pages of expandable segments."""
        for pool in (self.large, self.small):
            to_unmap = []
            for block in pool.blocks:
                if block.segment is not None:
                    to_unmap.append(block)
                elif not block.is_split:
                    self._release_block(pool, block)
            for block in to_unmap:
                self._unmap_block(pool, block)
                if not block.is_split:
                    pool.unmapped.erase(block)
                    if block.segment in self._expandable:
                        self._expandable.remove(block.segment)

    def _release_block(self, pool: _Pool, block: Block) -> None:
        """``release_block``: ``cudaFree`` a whole cached segment."""
        pool.blocks.erase(block)
        self._segment_heads.pop(id(block), None)
        self.reserved_bytes -= block.size
        self.num_device_free += 1
        self._live_segments -= 1

    def _release_available_cached_blocks(self, pool: _Pool, size: int, stream: int) -> bool:
        """``release_available_cached_blocks``: with ``max_split_size_mb``, free oversize cached blocks,
        largest first, until ``max(size, max_split_size)`` bytes are released."""
        max_split = self.settings.max_split_size_bytes
        if max_split == NO_LIMIT:
            return False
        key_size = max(size, max_split)
        index = pool.blocks.lower_bound(stream, key_size)
        if index < len(pool.blocks) and pool.blocks[index].stream == stream:
            block = pool.blocks[index]
            if block.is_split:
                return False
            self._release_block(pool, block)
            return True
        if index == 0:
            return False
        released, index = 0, index - 1
        while index >= 0 and released < key_size:
            block = pool.blocks[index]
            if block.size < max_split or block.stream != stream:
                break
            if not block.is_split:
                released += block.size
                self._release_block(pool, block)
            index -= 1
        return released >= key_size

    def _garbage_collect_cached_blocks(self) -> None:
        """``garbage_collect_cached_blocks``: above ``threshold × allowed_memory_maximum`` reserved, free
        unsplit large cached blocks at least as old as the average, until the excess is reclaimed."""
        limit = self.settings.memory_limit_bytes or 0
        threshold = int(self.settings.garbage_collection_threshold * limit)
        if self.reserved_bytes <= threshold:
            return
        target = self.reserved_bytes - threshold
        pool = self.large

        def age(block: Block) -> int:
            return pool.free_block_calls - block.gc_base

        freeable = [b for b in pool.blocks if not b.is_split and b.segment is None]
        if not freeable:
            return
        total_age, count, reclaimed, freed = sum(age(b) for b in freeable), len(freeable), 0, True
        while reclaimed < target and freed and count > 0:
            threshold_age = total_age / count
            freed = False
            for block in [b for b in pool.blocks if not b.is_split and b.segment is None]:
                if age(block) >= threshold_age:
                    freed = True
                    reclaimed += block.size
                    total_age -= age(block)
                    count -= 1
                    self._release_block(pool, block)

    # ---------------------------------------------------------------- expandable segments
    def _try_allocate_expandable_block(self, pool: _Pool, size: int, stream: int) -> Optional[Block]:
        """``try_allocate_expandable_block``: map pages at the lowest address with room for ``size``."""
        candidate = self._find_expandable_block(pool, size, stream)
        if not candidate.mapped:
            mapped = self._map_block(pool, candidate, min(candidate.size, size))
            if mapped is None:
                return None
            candidate = mapped
        while candidate.size < size:
            following = candidate.next
            assert following is not None and not following.mapped
            mapped = self._map_block(pool, following, min(size - candidate.size, following.size))
            if mapped is None:
                return None
            candidate = mapped
        pool.blocks.erase(candidate)
        return candidate

    def _find_expandable_block(self, pool: _Pool, size: int, stream: int) -> Block:
        """``find_expandable_block``: free-then-unmapped address space of ``stream``, or a new segment."""

        def allocatable(block: Optional[Block]) -> bool:
            return block is not None and not block.allocated

        def room(block: Optional[Block]) -> bool:
            total = 0
            while total < size and allocatable(block):
                total += block.size
                block = block.next
            return total >= size

        index = pool.unmapped.lower_bound(stream)
        while index < len(pool.unmapped) and pool.unmapped[index].stream == stream:
            candidate = pool.unmapped[index]
            if allocatable(candidate.prev):
                candidate = candidate.prev
            if room(candidate):
                return candidate
            index += 1
        page = SMALL_BUFFER_BYTES if pool.small else LARGE_BUFFER_BYTES
        total = self.settings.device_total_bytes
        # PyTorch reserves 1.125 × the device's memory of address space; a request larger than that would
        # run out of memory there. The replay still needs a number (the setup does not fit anyway), so the
        # span grows to hold the request.
        span = -(-max(total + total // 8, size) // page) * page
        segment = _Segment(self._new_address(span), span, page)
        self._expandable.append(segment)
        block = Block(stream, span, pool.small, segment.base, segment)
        block.mapped = False
        pool.unmapped.insert(block)
        return block

    def _map_block(self, pool: _Pool, block: Block, size: int) -> Optional[Block]:
        """``map_block``: back ``[block, block + size)`` with whole pages, merge with free neighbours."""
        segment = block.segment
        assert segment is not None and not block.mapped
        offset = block.address - segment.base
        end = -(-(offset + size) // segment.page) * segment.page
        mapped_size = end - offset
        if not self._device_has(mapped_size):
            return None
        pool.unmapped.erase(block)
        block.mapped = True
        if mapped_size < block.size:
            rest = Block(block.stream, block.size - mapped_size, pool.small, block.address + mapped_size, segment)
            rest.mapped = False
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            pool.unmapped.insert(rest)
            block.size = mapped_size
        self._try_merge_blocks(block, block.prev, pool)
        self._try_merge_blocks(block, block.next, pool)
        pool.insert(block)
        self._grow_reserved(mapped_size)
        self.num_device_alloc += 1
        return block

    def _unmap_block(self, pool: _Pool, block: Block) -> None:
        """``unmap_block``: give back the whole pages inside a free block of an expandable segment."""
        segment = block.segment
        assert segment is not None
        offset = block.address - segment.base
        begin = -(-offset // segment.page) * segment.page
        end = (offset + block.size) // segment.page * segment.page
        if begin >= end:
            return
        pool.blocks.erase(block)
        before = begin - offset
        if before > 0:
            head = Block(block.stream, before, pool.small, block.address, segment)
            head.prev, head.next = block.prev, block
            if block.prev is not None:
                block.prev.next = head
            block.prev = head
            pool.insert(head)
        after = block.size - before - (end - begin)
        if after > 0:
            tail = Block(block.stream, after, pool.small, segment.base + end, segment)
            tail.prev, tail.next = block, block.next
            if block.next is not None:
                block.next.prev = tail
            block.next = tail
            pool.insert(tail)
        block.address = segment.base + begin
        block.size = end - begin
        block.mapped = False
        self._try_merge_blocks(block, block.prev, pool)
        self._try_merge_blocks(block, block.next, pool)
        pool.unmapped.insert(block)
        self.reserved_bytes -= end - begin
        self.num_device_free += 1

    # ---------------------------------------------------------------- bookkeeping
    def _device_has(self, nbytes: int) -> bool:
        capacity = self.settings.capacity_bytes
        return capacity is None or self.reserved_bytes + nbytes <= capacity

    def _grow_reserved(self, nbytes: int) -> None:
        self.reserved_bytes += nbytes
        self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)

    def _new_address(self, size: int) -> int:
        """A fresh, 2 MiB-aligned virtual address (segments never overlap; the order breaks ties)."""
        address = self._next_address
        self._next_address += -(-size // SMALL_BUFFER_BYTES) * SMALL_BUFFER_BYTES + SMALL_BUFFER_BYTES
        return address
