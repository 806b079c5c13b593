"""The accounting of a tracker's event log (no torch needed): categories, peak, timeline."""

from __future__ import annotations

import subprocess
import sys

from trainmem.measure.accounting import MAX_TIMELINE_POINTS, StepLog, account, categorize
from trainmem.measure.events import (
    ALLOC,
    FREE,
    MARK,
    ROLE_ALLOCATED,
    ROLE_AUTOCAST_WEIGHT_COPY,
    ROLE_INPUT,
    ROLE_OPTIMIZER_STATE,
    ROLE_PARAMETER,
    Segment,
    StorageInfo,
)
from trainmem.measure.record import PART_AUTOCAST_WEIGHT_COPIES, PART_INPUTS

SEGMENTS = [
    Segment("start", "start", 0),
    Segment("forward", "forward layers.0", 1),
    Segment("loss", "loss", 1),
    Segment("backward", "backward head", 1),
    Segment("optimizer", "optimizer", 0),
    Segment("zero_grad", "zero_grad", 0),
]


def storage(nbytes: int, segment: int, role: str = ROLE_ALLOCATED, op: str = "aten.mm") -> StorageInfo:
    return StorageInfo(nbytes=nbytes, op=op, segment=segment, dtype="float32", shape=(nbytes // 4,), role=role)


def small_step() -> StepLog:
    """weights 100, state 200, batch 8; forward saves 50 and makes an autocast copy of 20;
    the loss makes 40; backward makes a gradient of 100 (later p.grad) and frees the rest;
    the optimizer makes a temporary of 30 and replaces nothing; zero_grad frees the gradient."""
    storages = [
        storage(100, 0, ROLE_PARAMETER, "(existing)"),  # 0 weights
        storage(200, 0, ROLE_OPTIMIZER_STATE, "(existing)"),  # 1 optimizer state
        storage(8, 0, ROLE_INPUT, "(existing)"),  # 2 batch
        storage(50, 1),  # 3 saved activation
        storage(20, 1, ROLE_AUTOCAST_WEIGHT_COPY, "aten._to_copy"),  # 4 autocast copy
        storage(40, 2, op="aten._log_softmax"),  # 5 loss transient
        storage(100, 3),  # 6 gradient, stolen into p.grad
        storage(30, 4, op="aten.mul"),  # 7 optimizer temporary
    ]
    events = [
        (ALLOC, 0, 100), (ALLOC, 1, 200), (ALLOC, 2, 8),
        (MARK, 1, 0), (ALLOC, 3, 50), (ALLOC, 4, 20),
        (MARK, 2, 0), (ALLOC, 5, 40),
        (MARK, 3, 0), (ALLOC, 6, 100), (FREE, 5, 40), (FREE, 3, 50), (FREE, 4, 20),
        (MARK, 4, 0), (ALLOC, 7, 30), (FREE, 7, 30),
        (MARK, 5, 0), (FREE, 6, 100),
    ]  # fmt: skip
    return StepLog(storages=storages, events=events, segments=SEGMENTS, gradient_storages={6})


def test_categories_follow_what_each_storage_finally_is():
    categories, parts = categorize(small_step())
    assert categories == [
        "parameters", "optimizer_states", "activations", "activations",
        "parameters", "activations", "gradients", "overhead",
    ]  # fmt: skip
    assert parts[4] == PART_AUTOCAST_WEIGHT_COPIES
    assert parts[2] == PART_INPUTS


def test_peak_is_the_highest_running_total_with_its_breakdown():
    result = account(small_step())
    # after the gradient is allocated: 100 + 200 + 8 + 50 + 20 + 40 + 100 = 518
    assert result.peak_allocated_bytes == 518
    assert result.breakdown.total == 518
    assert result.breakdown.parameters == 120
    assert result.breakdown.gradients == 100
    assert result.breakdown.activations == 98
    assert result.peak.phase == "backward"
    assert result.peak.label == "backward head"
    assert result.parts == {PART_AUTOCAST_WEIGHT_COPIES: 20, PART_INPUTS: 8}
    assert result.start_bytes == 308
    assert result.end_bytes == 308


def test_phase_peaks_and_timeline():
    result = account(small_step())
    assert result.phase_peaks["forward"].bytes == 378
    assert result.phase_peaks["loss"].bytes == 418
    assert result.phase_peaks["backward"].bytes == 518
    assert result.phase_peaks["optimizer"].bytes == 100 + 200 + 8 + 100 + 30
    assert result.phase_peaks["optimizer"].breakdown.overhead == 30
    assert result.phase_peaks["zero_grad"].bytes == 408
    timeline = result.timeline
    assert timeline.labels == ["start", "forward layers.0", "loss", "backward head", "optimizer", "zero_grad"]
    assert timeline.totals()[timeline.peak_index] == 518
    assert max(timeline.totals()) == result.peak_allocated_bytes


def test_peak_tensors_name_the_transients_alive_at_the_peak():
    result = account(small_step())
    ops = [(tensor.op, tensor.bytes) for tensor in result.peak_tensors]
    assert ("aten._log_softmax", 40) in ops
    assert all(tensor.category != "optimizer_states" for tensor in result.peak_tensors)
    by_op = {(entry.category, entry.op): entry.bytes for entry in result.peak_by_op}
    assert by_op[("parameters", "aten._to_copy")] == 20


def test_resized_storage_counts_at_its_new_size():
    storages = [storage(0, 1, op="aten.empty")]
    events = [(MARK, 1, 0), (ALLOC, 0, 0), (FREE, 0, 0), (ALLOC, 0, 64), (FREE, 0, 64)]
    result = account(StepLog(storages=storages, events=events, segments=SEGMENTS))
    assert result.peak_allocated_bytes == 64


def test_long_timelines_are_merged_to_the_limit_keeping_the_peak():
    layers = 150
    segments = [Segment("start", "start", 0)]
    segments += [Segment("forward", f"forward layers.{i}", 1) for i in range(layers)]
    segments += [Segment("backward", f"backward layers.{i}", 1) for i in reversed(range(layers))]
    storages, events = [], []
    for position in range(1, len(segments)):
        events.append((MARK, position, 0))
        if position <= layers:
            storages.append(storage(10, position))
            events.append((ALLOC, len(storages) - 1, 10))
        else:
            events.append((FREE, 2 * layers - position, 10))
    result = account(StepLog(storages=storages, events=events, segments=segments))
    timeline = result.timeline
    assert len(timeline.labels) <= MAX_TIMELINE_POINTS
    assert max(timeline.totals()) == result.peak_allocated_bytes == 10 * layers
    assert timeline.labels[1] == "forward layers.0..1"


def test_reading_measurements_needs_no_torch():
    code = (
        "import sys, trainmem, trainmem.measure, trainmem.measure.corpus, trainmem.measure.accounting, "
        "trainmem.measure.cli, trainmem.validate; trainmem.measure.load_corpus; "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
