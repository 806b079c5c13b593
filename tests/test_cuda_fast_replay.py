"""The inlined best-fit replay (trainmem.cuda.fast_replay) leaves the allocator the methods leave.

Each stream is replayed twice, once event by event through ``CachingAllocator.malloc`` / ``free``
and once through the inlined loop; the allocators must agree on every block of every segment
(``snapshot``), the free lists' keys, the counters, the peaks and the segment heads.
"""

from __future__ import annotations

import random

import pytest

from trainmem.cuda.caching_allocator import AllocatorSettings, CachingAllocator, parse_alloc_conf
from trainmem.cuda.events import step_events
from trainmem.cuda.fast_replay import fast_path_applies, replay_best_fit
from trainmem.cuda.replay import replay_by_methods, replay_events
from trainmem.estimate import effective_setup
from trainmem.plan import Plan
from trainmem.setup import Setup
from trainmem.simulate import simulate_rank
from trainmem.units import GIB, MIB

INLINED_CONFS = ("", "max_split_size_mb:256", "roundup_power2_divisions:4", "max_non_split_rounding_mb:64,max_split_size_mb:40")


def _state(allocator: CachingAllocator) -> dict:
    return {
        "snapshot": allocator.snapshot(),
        "small": list(allocator.small.blocks._keys),
        "large": list(allocator.large.blocks._keys),
        "counters": (
            allocator.allocated_bytes,
            allocator.requested_bytes,
            allocator.reserved_bytes,
            allocator.peak_allocated_bytes,
            allocator.peak_reserved_bytes,
            allocator.num_device_alloc,
            allocator._live_segments,
            allocator._next_address,
        ),
        "heads": sorted((block.address, block.size) for block in allocator._segment_heads.values()),
        "largest": allocator.largest_free_block(),
        "segments": allocator.segment_count(),
    }


def _both(events: list, settings: AllocatorSettings) -> tuple[tuple, tuple]:
    by_methods = CachingAllocator(settings)
    reserved_methods, _ = replay_by_methods(by_methods, events)
    inlined = CachingAllocator(settings)
    assert fast_path_applies(inlined)
    _, reserved_inlined = replay_best_fit(inlined, events)
    return (_state(by_methods), reserved_methods), (_state(inlined), reserved_inlined)


def _setup_events(setup: dict, max_layers=None) -> list:
    parsed = Setup.model_validate(setup)
    plan = Plan(effective_setup(parsed))
    stage = plan.stages[0]
    simulation = simulate_rank(plan, stage)
    return step_events(plan, stage, dict(simulation.account.parts), 8 * MIB, max_layers=max_layers)


STREAMS = [
    {"model": {"preset": "gpt2"}, "micro_batch_size": 4, "sequence_length": 512},
    {"model": {"preset": "gpt2"}, "precision": "amp-bf16", "activation_checkpointing": "full", "gradient_accumulation_steps": 2},
    {"model": {"preset": "llama-3.2-1b"}, "sequence_length": 1024, "parallelism": {"num_gpus": 8, "zero_stage": 3}},
    {"model": {"preset": "llama-3.2-1b"}, "finetuning": {"method": "lora"}, "optimizer": "adamw-8bit"},
    {"model": {"preset": "qwen2.5-0.5b"}, "parallelism": {"num_gpus": 4, "strategy": "fsdp"}, "micro_batch_size": 2},
]


@pytest.mark.parametrize("conf", INLINED_CONFS)
@pytest.mark.parametrize("setup", STREAMS, ids=lambda s: s["model"]["preset"])
def test_real_streams_leave_the_same_allocator(setup, conf):
    events = _setup_events(setup, max_layers=4)
    settings = AllocatorSettings(**parse_alloc_conf(conf))
    by_methods, inlined = _both(events, settings)
    assert by_methods == inlined


def _random_stream(seed: int, count: int = 3000) -> list:
    """Allocations and frees of random sizes (small, medium, large, oversize) on three streams."""
    rng = random.Random(seed)
    events, live, slot = [], [], 0
    for _ in range(count):
        if live and rng.random() < 0.45:
            freed = live.pop(rng.randrange(len(live)))
            events.append(("free", *freed))
            continue
        kind = rng.random()
        if kind < 0.4:
            size = rng.randint(1, 1 * MIB)
        elif kind < 0.7:
            size = rng.randint(1 * MIB, 12 * MIB)
        elif kind < 0.95:
            size = rng.randint(12 * MIB, 600 * MIB)
        else:
            size = rng.randint(1, 3) * GIB + rng.randint(0, 4096)
        stream = rng.choice((0, 0, 0, 1, 2))
        events.append(("alloc", slot, size, stream))
        live.append((slot, size, stream))
        slot += 1
        if rng.random() < 0.01:
            events.append(("step_end", 0, 0, 0))
    return events


@pytest.mark.parametrize("conf", INLINED_CONFS)
@pytest.mark.parametrize("seed", range(6))
def test_random_streams_leave_the_same_allocator(seed, conf):
    events = _random_stream(seed)
    settings = AllocatorSettings(**parse_alloc_conf(conf))
    by_methods, inlined = _both(events, settings)
    assert by_methods == inlined


def test_replay_events_takes_the_inlined_path_only_where_it_applies():
    assert fast_path_applies(CachingAllocator())
    for conf, fraction in (("expandable_segments:True", None), ("garbage_collection_threshold:0.8", 0.9), ("", 0.5)):
        settings = AllocatorSettings(**parse_alloc_conf(conf), memory_limit_bytes=int(fraction * 80 * GIB) if fraction else None)
        assert not fast_path_applies(CachingAllocator(settings)), conf
    assert not fast_path_applies(CachingAllocator(AllocatorSettings(capacity_bytes=GIB)))
    events = _setup_events(STREAMS[1])
    assert replay_events(events) == replay_events(events, inline=False)


def test_a_stream_too_wide_for_packed_keys_goes_through_the_methods():
    huge = [("alloc", 1, 4096, 0), ("alloc", 0, 1 << 62, 0), ("alloc", 2, 4096, 0), ("free", 0, 1 << 62, 0)]
    assert replay_best_fit(CachingAllocator(), huge) is None
    assert replay_events(huge) == replay_events(huge, inline=False)
    many = [("alloc", slot, 1 << 61, 0) for slot in range(3)]  # the third segment's address passes 2**62
    assert replay_best_fit(CachingAllocator(), many) is None
    assert replay_events(many) == replay_events(many, inline=False)


REPEATED = STREAMS + [
    {"model": {"preset": "llama-3.2-1b"}, "activation_checkpointing": "full", "parallelism": {"num_gpus": 8, "strategy": "fsdp"},
     "gradient_accumulation_steps": 4},
    {"model": {"preset": "qwen2.5-0.5b"}, "finetuning": {"method": "qlora"}, "precision": "bf16-mixed"},
    {"model": {"preset": "gpt2"}, "parallelism": {"num_gpus": 8, "pipeline_parallel_size": 2, "strategy": "ddp"},
     "gradient_accumulation_steps": 2},
]


@pytest.mark.parametrize("setup", REPEATED, ids=lambda s: s["model"]["preset"])
def test_a_repeated_step_is_the_step_built_again(setup):
    """step_events lays out the first step and repeats it (its slots again); building each is the same
    stream but for the slot numbers."""
    parsed = Setup.model_validate(setup)
    plan = Plan(effective_setup(parsed))
    for stage in plan.stages:
        parts = dict(simulate_rank(plan, stage).account.parts)
        for steps in (2, 3):
            repeated = step_events(plan, stage, parts, 8 * MIB, steps=steps, max_layers=4)
            built = step_events(plan, stage, parts, 8 * MIB, steps=steps, max_layers=4, repeat_steps=False)
            assert _renumbered(repeated) == _renumbered(built)
            assert replay_events(repeated) == replay_events(built)


def _renumbered(events: list) -> list:
    """The stream with each allocation numbered in order and each free naming that number."""
    numbers: dict = {}
    out = []
    for op, slot, nbytes, stream in events:
        if op == "alloc":
            numbers[slot] = len(out)
            out.append((op, numbers[slot], nbytes, stream))
        elif op == "free":
            out.append((op, numbers.pop(slot), nbytes, stream))
        else:
            out.append((op, slot, nbytes, stream))
    return out


def test_a_gpu_of_the_same_architecture_reuses_the_replay_and_gets_the_same_figures(monkeypatch):
    """Without expandable segments the device's size is no input of the replay: h100 -> h200 replays nothing."""
    import trainmem
    from trainmem.cuda import memory, replay

    setup = {"model": {"preset": "llama-3.2-1b"}, "sequence_length": 1536, "gpu": "h100-sxm-80gb"}
    memory._REPLAY_CACHE.clear()
    trainmem.estimate(setup, suggestions=False)
    calls = []
    original = replay.replay_events
    monkeypatch.setattr(memory, "replay_events", lambda *args, **kwargs: calls.append(1) or original(*args, **kwargs))
    reused = trainmem.estimate({**setup, "gpu": "h200"}, suggestions=False)
    assert calls == []
    memory._REPLAY_CACHE.clear()
    fresh = trainmem.estimate({**setup, "gpu": "h200"}, suggestions=False)
    assert calls and reused.model_dump_json() == fresh.model_dump_json()
    # expandable segments size their address space by the device: those are replayed again
    expandable = {**setup, "runtime": {"cuda_alloc_conf": "expandable_segments:True"}}
    trainmem.estimate(expandable, suggestions=False)
    calls.clear()
    trainmem.estimate({**expandable, "gpu": "h200"}, suggestions=False)
    assert calls
