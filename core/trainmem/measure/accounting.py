"""From the tracker's event log to the numbers of a Measurement: categories, peak, timeline.

Categories (the Report's five) are decided per storage, by what the storage finally is:

* ``parameters``: storages of model parameters and buffers, and the low-precision copies
  of them that autocast makes (an ``aten._to_copy`` of a parameter while autocast is on;
  reported as the part ``parameters/autocast_weight_copies``);
* ``gradients``: storages that were some parameter's ``.grad`` after a backward pass (the
  gradient an op computes in backward and autograd steals into ``p.grad`` counts as a
  gradient from the moment it is allocated);
* ``optimizer_states``: storages held in ``optimizer.state`` (at the start of the step or
  after ``optimizer.step()``);
* ``overhead``: anything else allocated during ``optimizer.step()`` or ``zero_grad()``
  (the optimizer's temporaries);
* ``activations``: everything else: saved tensors, transients, activation gradients, and
  the input batch (part ``activations/inputs``).

With categories fixed, the log is replayed once: a running total per category after each
event. The peak is the first event at which the total is highest; per-phase peaks and the
per-segment high-water marks (the timeline) fall out of the same pass. A second, partial
pass rebuilds the set of live storages at the peak to name its largest tensors.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, fields

from ..report import CATEGORIES, Breakdown
from .events import (
    ALLOC,
    FREE,
    MARK,
    ROLE_ALLOCATED,
    ROLE_AUTOCAST_WEIGHT_COPY,
    ROLE_GRADIENT,
    ROLE_INPUT,
    ROLE_OPTIMIZER_STATE,
    ROLE_PARAMETER,
    Segment,
    StorageInfo,
)
from .record import (
    PART_AUTOCAST_WEIGHT_COPIES,
    PART_INPUTS,
    MeasuredTimeline,
    OpBytes,
    PeakMoment,
    PeakTensor,
    PhasePeak,
)

PART_BUFFERS_BEFORE_STEP = "overhead/buffers allocated before the step"
"""Storages alive when a distributed step starts that are no parameter, gradient, optimizer state or input:
a framework's communication buckets (DDP's Reducer buckets are allocated in C++ and have no Python owner)."""
MAX_TIMELINE_POINTS = 200
PEAK_TENSORS = 8
PEAK_OPS = 12
OPTIMIZER_PHASES = ("optimizer", "zero_grad")
_CATEGORY_INDEX = {name: position for position, name in enumerate(CATEGORIES)}


@dataclass
class StepLog:
    """What the runner hands over: the tracker's log and which storages ended up as what."""

    storages: list[StorageInfo]
    events: list[tuple[int, int, int]]
    segments: list[Segment]
    gradient_storages: set[int] = field(default_factory=set)
    optimizer_state_storages: set[int] = field(default_factory=set)
    assigned: dict[int, tuple[str, str]] = field(default_factory=dict)
    """Storage index -> (category, part) decided by who owns the storage (a distributed framework's
    flat buffers, e.g. ("gradients", "gradients/deepspeed averaged_gradients")); takes precedence."""


@dataclass
class Accounting:
    """The numbers of a Measurement, computed from a StepLog."""

    peak_allocated_bytes: int
    breakdown: Breakdown
    parts: dict[str, int]
    peak: PeakMoment
    phase_peaks: dict[str, PhasePeak]
    start_bytes: int
    end_bytes: int
    timeline: MeasuredTimeline
    peak_tensors: list[PeakTensor]
    peak_by_op: list[OpBytes]

    def measurement_fields(self) -> dict[str, object]:
        """These numbers as keyword arguments of :class:`~trainmem.measure.record.Measurement` (same names)."""
        return {item.name: getattr(self, item.name) for item in fields(self)}


def categorize(log: StepLog) -> tuple[list[str], list[str]]:
    """The category and the part name ('' for none) of every storage in the log."""
    categories, parts = [], []
    for index, info in enumerate(log.storages):
        part = ""
        if index in log.assigned:
            category, part = log.assigned[index]
        elif info.role == ROLE_PARAMETER:
            category = "parameters"
        elif info.role == ROLE_AUTOCAST_WEIGHT_COPY:
            category, part = "parameters", PART_AUTOCAST_WEIGHT_COPIES
        elif info.role == ROLE_GRADIENT or index in log.gradient_storages:
            category = "gradients"
        elif info.role == ROLE_OPTIMIZER_STATE or index in log.optimizer_state_storages:
            category = "optimizer_states"
        elif log.segments[info.segment].phase in OPTIMIZER_PHASES:
            category = "overhead"
        else:
            category = "activations"
            if info.role == ROLE_INPUT:
                part = PART_INPUTS
        categories.append(category)
        parts.append(part)
    return categories, parts


def rebased_at_first_mark(log: StepLog) -> StepLog:
    """The log from its first marker on, with everything alive then allocated at the start.

    A distributed measurement tracks the whole run (model build, wrapping, warm-up) so that
    buffers a framework allocates before the step are seen; the step itself starts at the
    first marker. Storages alive then become allocations of the "start" segment.
    """
    first = next((position for position, (kind, _, _) in enumerate(log.events) if kind == MARK), len(log.events))
    alive: dict[int, int] = {}
    for kind, index, nbytes in log.events[:first]:
        if kind == ALLOC:
            alive[index] = nbytes
        elif kind == FREE:
            alive.pop(index, None)
    assigned = dict(log.assigned)
    for index in alive:
        log.storages[index].segment = 0
        if log.storages[index].role == ROLE_ALLOCATED and index not in assigned:
            assigned[index] = ("overhead", PART_BUFFERS_BEFORE_STEP)
    events = [(ALLOC, index, alive[index]) for index in sorted(alive)] + list(log.events[first:])
    return StepLog(
        storages=log.storages,
        events=events,
        segments=log.segments,
        gradient_storages=log.gradient_storages,
        optimizer_state_storages=log.optimizer_state_storages,
        assigned=assigned,
    )


def _breakdown(live: list[int]) -> Breakdown:
    return Breakdown(**dict(zip(CATEGORIES, live)))


def account(log: StepLog) -> Accounting:
    """Replay the log with final categories: peak, breakdown at the peak, phase peaks, timeline."""
    categories, part_names = categorize(log)
    category_index = [_CATEGORY_INDEX[name] for name in categories]
    live = [0] * len(CATEGORIES)
    total = 0
    peak_total, peak_event, peak_live, peak_segment = -1, -1, list(live), 0
    start_bytes = None
    segment = 0
    segment_high = {0: (0, list(live))}
    phase_high: dict[str, tuple[int, list[int], int]] = {}

    def raise_marks(event_index: int) -> None:
        nonlocal peak_total, peak_event, peak_live, peak_segment
        if total > segment_high[segment][0]:
            segment_high[segment] = (total, list(live))
        phase = log.segments[segment].phase
        if phase != "start" and total > phase_high.get(phase, (-1,))[0]:
            phase_high[phase] = (total, list(live), segment)
        if total > peak_total:
            peak_total, peak_event, peak_live, peak_segment = total, event_index, list(live), segment

    for event_index, (kind, index, nbytes) in enumerate(log.events):
        if kind == MARK:
            if start_bytes is None:
                start_bytes = total
            segment = index
            segment_high[segment] = (total, list(live))
            raise_marks(event_index)
        elif kind == ALLOC:
            live[category_index[index]] += nbytes
            total += nbytes
            raise_marks(event_index)
        elif kind == FREE:
            live[category_index[index]] -= nbytes
            total -= nbytes
    if start_bytes is None:
        start_bytes = total

    alive = _live_at(log, peak_event)
    parts: dict[str, int] = defaultdict(int)
    for index in alive:
        if part_names[index]:
            parts[part_names[index]] += alive[index]
    peak_info = log.segments[peak_segment]
    return Accounting(
        peak_allocated_bytes=peak_total,
        breakdown=_breakdown(peak_live),
        parts=dict(sorted(parts.items())),
        peak=PeakMoment(
            phase=peak_info.phase, label=peak_info.label, micro_batch=peak_info.micro_batch, event_index=peak_event
        ),
        phase_peaks={
            phase: PhasePeak(
                bytes=value,
                breakdown=_breakdown(values),
                label=log.segments[where].label,
                micro_batch=log.segments[where].micro_batch,
            )
            for phase, (value, values, where) in phase_high.items()
        },
        start_bytes=start_bytes,
        end_bytes=total,
        timeline=_timeline(log.segments, segment_high),
        peak_tensors=_peak_tensors(log, alive, categories),
        peak_by_op=_peak_by_op(log, alive, categories),
    )


def _live_at(log: StepLog, last_event: int) -> dict[int, int]:
    """Storage index -> bytes of every storage alive just after event ``last_event``."""
    alive: dict[int, int] = {}
    for kind, index, nbytes in log.events[: last_event + 1]:
        if kind == ALLOC:
            alive[index] = nbytes
        elif kind == FREE:
            alive.pop(index, None)
    return alive


def _is_transient(log: StepLog, categories: list[str], index: int) -> bool:
    """Memory that is not a per-parameter model state: activations, overhead, autocast weight copies."""
    return categories[index] in ("activations", "overhead") or log.storages[index].role == ROLE_AUTOCAST_WEIGHT_COPY


def _peak_tensors(log: StepLog, alive: dict[int, int], categories: list[str]) -> list[PeakTensor]:
    largest = sorted(
        (index for index in alive if _is_transient(log, categories, index)),
        key=lambda index: (-alive[index], index),
    )[:PEAK_TENSORS]
    tensors = []
    for index in largest:
        info = log.storages[index]
        where = log.segments[info.segment]
        tensors.append(
            PeakTensor(
                category=categories[index],
                bytes=alive[index],
                op=info.op,
                phase=where.phase,
                label=where.label,
                dtype=info.dtype,
                shape=list(info.shape),
            )
        )
    return tensors


def _peak_by_op(log: StepLog, alive: dict[int, int], categories: list[str]) -> list[OpBytes]:
    grouped: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for index, nbytes in alive.items():
        if _is_transient(log, categories, index):
            entry = grouped[(categories[index], log.storages[index].op)]
            entry[0] += nbytes
            entry[1] += 1
    ranked = sorted(grouped.items(), key=lambda item: (-item[1][0], item[0]))[:PEAK_OPS]
    return [OpBytes(category=category, op=op, bytes=nbytes, count=count) for (category, op), (nbytes, count) in ranked]


def _timeline(segments: list[Segment], highs: dict[int, tuple[int, list[int]]]) -> MeasuredTimeline:
    points = [
        (segments[index].label, segments[index].phase, segments[index].micro_batch, highs[index][0], highs[index][1])
        for index in sorted(highs)
    ]
    points = _merge_to_fit(points, MAX_TIMELINE_POINTS)
    columns = {name: [values[position] for *_, values in points] for position, name in enumerate(CATEGORIES)}
    totals = [point[3] for point in points]
    return MeasuredTimeline(
        labels=[point[0] for point in points],
        phases=[point[1] for point in points],
        micro_batches=[point[2] for point in points],
        peak_index=totals.index(max(totals)) if totals else 0,
        **columns,
    )


def _merge_to_fit(points: list, limit: int) -> list:
    """Merge neighbouring points of the same phase and micro-batch (keeping the higher) until ≤ limit."""
    while len(points) > limit:
        merged, position, changed = [], 0, False
        while position < len(points):
            current = points[position]
            if (
                position + 1 < len(points)
                and points[position + 1][1:3] == current[1:3]
                and current[1] in ("forward", "backward")
            ):
                following = points[position + 1]
                higher = current if current[3] >= following[3] else following
                label = _span_label(current[0], following[0])
                merged.append((label, current[1], current[2], higher[3], higher[4]))
                position += 2
                changed = True
            else:
                merged.append(current)
                position += 1
        points = merged
        if not changed:
            break
    return points


def _span_label(first: str, last: str) -> str:
    """'forward layers.0' + 'forward layers.1' -> 'forward layers.0..1'."""
    head, _, tail = last.rpartition(".")
    if first.startswith(head + ".") and tail.isdigit():
        return f"{first.split('..')[0]}..{tail}"
    return f"{first} .. {last}"
