"""The CUDA memory of one rank: allocated, reserved (replayed), total, and the upper bound the verdict uses.

* **allocated** is the simulation's peak (``torch.cuda.max_memory_allocated``), cuBLAS workspace included;
* **reserved** (``max_memory_reserved``) is allocated plus the gap the caching-allocator replay finds
  between its own reserved and allocated peaks (:mod:`trainmem.cuda.replay` over the tensor-level
  events of :mod:`trainmem.cuda.events`), so that reserved ≥ allocated always holds;
* **total** (what ``nvidia-smi`` and ``cudaMemGetInfo`` see) is reserved plus the parts outside the
  allocator (:mod:`trainmem.cuda.outside`);
* the **upper bound** is reserved plus the outside parts at their upper figures, flash attention's
  backward scratch, and a stated margin of the reserved peak.

Suggestions re-run ``estimate`` many times; inside :func:`scaled_reserve` (which ``estimate`` sets
around them) no replay runs and the reserve is scaled from the replay of the setup they start from.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Iterator, Optional

from ..plan import Plan, Stage
from ..report import AllocatorAlternative, CudaMemory, Part
from .caching_allocator import AllocatorSettings
from .events import step_events
from .outside import attention_backward_workspace, margin_fraction, outside_parts
from .replay import ReplayResult, replay_events, with_conf
from .settings import allocator_settings

_TRIAL_RESERVE_FRACTION: contextvars.ContextVar[Optional[float]] = contextvars.ContextVar(
    "trainmem_trial_reserve_fraction", default=None
)
_REPLAY_CACHE: dict[tuple, ReplayResult] = {}
_REPLAY_CACHE_SIZE = 64
_EVENTS_CACHE: dict = {}
"""The event streams of the last setup replayed (by max_layers), so that its alternative settings reuse them."""
ALTERNATIVE_CONF = "expandable_segments:True"
"""The setting the report compares with the setup's own: PyTorch's out-of-memory message recommends it."""


@contextmanager
def scaled_reserve(fraction: float) -> Iterator[None]:
    """Within this block, estimates scale their reserve by ``fraction`` of allocated instead of replaying."""
    token = _TRIAL_RESERVE_FRACTION.set(fraction)
    try:
        yield
    finally:
        _TRIAL_RESERVE_FRACTION.reset(token)


@contextmanager
def replayed_reserve() -> Iterator[None]:
    """Within this block, estimates replay the allocator again (inside a :func:`scaled_reserve` block)."""
    token = _TRIAL_RESERVE_FRACTION.set(None)
    try:
        yield
    finally:
        _TRIAL_RESERVE_FRACTION.reset(token)


@dataclass(frozen=True)
class RankCuda:
    """What ``estimate`` needs for one rank: the report section and the parts it adds."""

    memory: CudaMemory
    reserve_part: Part
    outside: list[Part]


def rank_cuda(
    plan: Plan,
    stage: Stage,
    resident_parts: dict,
    gpu_architecture: str,
    gpu_memory_bytes: int,
    peak_allocated_bytes: int,
    workspace_bytes: int,
    activations_at_peak_bytes: int,
    fused_attention: bool,
    compare_alternatives: bool,
) -> RankCuda:
    runtime = plan.setup.runtime
    settings = allocator_settings(runtime.cuda_alloc_conf, runtime.cuda_memory_fraction, gpu_memory_bytes)
    fraction = _TRIAL_RESERVE_FRACTION.get()
    alternatives: list[AllocatorAlternative] = []
    if fraction is not None:
        replayed = False
        gap = int(peak_allocated_bytes * fraction)
        result = ReplayResult(peak_allocated_bytes, peak_allocated_bytes + gap, peak_allocated_bytes + gap, 0, 0,
                              False, 0)  # fmt: skip
    else:
        replayed = True
        result = _replay(plan, stage, resident_parts, workspace_bytes, settings)
        gap = result.reserve_gap_bytes
        if compare_alternatives and ALTERNATIVE_CONF not in runtime.cuda_alloc_conf:
            other = _replay(plan, stage, resident_parts, workspace_bytes, with_conf(settings, ALTERNATIVE_CONF))
            reserved = peak_allocated_bytes + other.reserve_gap_bytes
            alternatives.append(
                AllocatorAlternative(
                    cuda_alloc_conf=",".join(filter(None, [runtime.cuda_alloc_conf, ALTERNATIVE_CONF])),
                    peak_reserved_bytes=reserved,
                    change_bytes=reserved - (peak_allocated_bytes + gap),
                )
            )
    reserved = peak_allocated_bytes + gap
    conf = runtime.cuda_alloc_conf or "PyTorch defaults"
    source = (
        f"max_memory_reserved − max_memory_allocated of the step's allocations replayed through a model of "
        f"PyTorch's caching allocator ({conf})"
        if replayed
        else "scaled from the replay of the setup the suggestions start from"
    )
    reserve_part = Part(category="overhead", name="allocator reserve", bytes=gap, allocated=False, detail=source)
    outside = outside_parts(plan, gpu_architecture, activations_at_peak_bytes)
    outside_best = [Part(category="overhead", name=p.name, bytes=p.bytes, allocated=False, detail=p.detail)
                    for p in outside]  # fmt: skip
    margin = margin_fraction()
    attention = attention_backward_workspace(plan, fused_attention)
    upper_parts = [
        Part(category="overhead", name=p.name, bytes=p.upper_bytes, allocated=False, detail=p.upper_detail or p.detail)
        for p in outside
    ]
    if attention:
        upper_parts.append(
            Part(
                category="overhead",
                name="flash-attention backward scratch",
                bytes=attention,
                detail="fp32 dq accumulator and softmax_d of one layer (FlashAttention-2 mha_bwd)",
            )
        )
    upper_parts.append(
        Part(
            category="overhead",
            name="margin",
            bytes=int(reserved * margin),
            allocated=False,
            detail=f"{margin:.0%} of the reserved peak for allocations the simulation does not see (assumed)",
        )
    )
    upper = reserved + sum(p.bytes for p in upper_parts)
    memory = CudaMemory(
        cuda_alloc_conf=runtime.cuda_alloc_conf,
        replayed=replayed,
        peak_allocated_bytes=peak_allocated_bytes,
        peak_reserved_bytes=reserved,
        replay_peak_allocated_bytes=result.peak_allocated_bytes,
        replay_peak_reserved_bytes=result.peak_reserved_bytes,
        fragmentation_bytes=result.cached_at_allocated_peak_bytes,
        largest_free_block_bytes=result.largest_free_block_after_step_bytes,
        segments=result.segments_after_step,
        outside_parts=outside_best,
        upper_bound_bytes=upper,
        upper_bound_parts=upper_parts,
        margin_fraction=margin,
        alternatives=alternatives,
    )
    return RankCuda(memory, reserve_part, [p for p in outside_best if p.bytes > 0])


REPLAYED_LAYERS = 8
"""Deeper models replay the step with 8 and with 4 decoder layers and extrapolate the reserve gap
linearly to their depth: each layer adds the same tensors, so the allocator's cached-but-unused
bytes grow by about the same amount per layer (an approximation, stated in the README)."""


def _replay(
    plan: Plan, stage: Stage, resident_parts: dict, workspace_bytes: int, settings: AllocatorSettings
) -> ReplayResult:
    setup = plan.setup
    key = (
        setup.model_dump_json(exclude={"gpu", "headroom_fraction"}),
        stage.index,
        workspace_bytes,
        _replay_relevant(settings),
        tuple(sorted(resident_parts.items())),
    )
    found = _REPLAY_CACHE.get(key)
    if found is None:

        def events(max_layers: Optional[int]) -> list:
            identity = (key[0], key[1], key[2], key[4])
            if _EVENTS_CACHE.get("identity") != identity:
                _EVENTS_CACHE.clear()  # one setup at a time: its settings are compared on the same events
                _EVENTS_CACHE["identity"] = identity
            cached = _EVENTS_CACHE.get(max_layers)
            if cached is None:
                cached = _EVENTS_CACHE[max_layers] = step_events(
                    plan, stage, resident_parts, workspace_bytes, max_layers=max_layers
                )
            return cached

        layers = stage.num_layers
        if layers <= REPLAYED_LAYERS:
            found = replay_events(events(None), settings)
        else:
            half = REPLAYED_LAYERS // 2
            deep = replay_events(events(REPLAYED_LAYERS), settings)
            shallow = replay_events(events(half), settings)
            found = _extrapolated(deep, shallow, REPLAYED_LAYERS, half, layers)
        if len(_REPLAY_CACHE) >= _REPLAY_CACHE_SIZE:
            _REPLAY_CACHE.clear()
        _REPLAY_CACHE[key] = found
    return found


def _replay_relevant(settings: AllocatorSettings) -> AllocatorSettings:
    """The settings as far as the replay reads them: the device's size only sizes the address space of
    an expandable segment (``_find_expandable_block``), so without expandable segments a change of
    GPU that leaves the stream and the limits alone replays nothing again."""
    return settings if settings.expandable_segments else replace(settings, device_total_bytes=0)


def _extrapolated(deep: ReplayResult, shallow: ReplayResult, deep_layers: int, shallow_layers: int, layers: int):
    """Figures of a ``layers``-deep replay, linear in the depth through two truncated replays (never below
    the deeper replay's gap and fragmentation)."""

    def grow(a: int, b: int) -> int:
        per_layer = (a - b) / (deep_layers - shallow_layers)
        return int(a + max(0.0, per_layer) * (layers - deep_layers))

    allocated = grow(deep.peak_allocated_bytes, shallow.peak_allocated_bytes)
    gap = grow(deep.reserve_gap_bytes, shallow.reserve_gap_bytes)
    cached = grow(deep.cached_at_allocated_peak_bytes, shallow.cached_at_allocated_peak_bytes)
    return ReplayResult(
        peak_allocated_bytes=allocated,
        peak_reserved_bytes=allocated + gap,
        reserved_at_allocated_peak_bytes=allocated + cached,
        largest_free_block_after_step_bytes=deep.largest_free_block_after_step_bytes,
        segments_after_step=grow(deep.segments_after_step, shallow.segments_after_step),
        out_of_memory=deep.out_of_memory,
        num_device_allocs=grow(deep.num_device_allocs, shallow.num_device_allocs),
    )
