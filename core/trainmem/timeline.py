"""A running account of allocated bytes by category and part, sampled into a timeline.

The step simulation (``simulate.py``) moves bytes in and out of named parts as events
happen; at each event it records a point: the state plus the event's transient high-water
memory. The point with the highest total is the peak, and the parts at that point are the
breakdown the report shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Optional

from .report import CATEGORIES, Category, Phase

PartKey = tuple[Category, str]


class Point(NamedTuple):
    label: str
    phase: Phase
    micro_batch: int
    totals: tuple[int, int, int, int, int]


@dataclass
class MemoryAccount:
    """Bytes alive right now, by (category, part name), and the points recorded so far.

    Category totals are kept up to date on every change, so recording a point costs only
    the transient parts of its event.
    """

    parts: dict[PartKey, int] = field(default_factory=dict)
    details: dict[PartKey, str] = field(default_factory=dict)
    points: list[Point] = field(default_factory=list)
    peak_total: int = -1
    peak_index: int = 0
    peak_parts: dict[PartKey, int] = field(default_factory=dict)
    totals: list[int] = field(default_factory=lambda: [0, 0, 0, 0, 0])

    def set(self, category: Category, name: str, nbytes: int, detail: Optional[str] = None) -> None:
        key = (category, name)
        self.totals[_CATEGORY_INDEX[category]] += nbytes - self.parts.get(key, 0)
        if nbytes:
            self.parts[key] = nbytes
        else:
            self.parts.pop(key, None)
        if detail is not None:
            self.details[key] = detail

    def add(self, category: Category, name: str, nbytes: int, detail: Optional[str] = None) -> None:
        if nbytes or detail is not None:
            self.set(category, name, self.parts.get((category, name), 0) + nbytes, detail)

    def get(self, category: Category, name: str) -> int:
        return self.parts.get((category, name), 0)

    def _effective(
        self, transient: Optional[dict[PartKey, int]], steps: int = 0, delta: Optional[dict[PartKey, int]] = None
    ) -> dict[PartKey, int]:
        """The transient changes as they apply: a negative one (memory released during the event)
        takes at most what the part holds (after ``steps`` × ``delta``)."""
        effective = {}
        for key, nbytes in (transient or {}).items():
            if nbytes < 0:
                held = self.parts.get(key, 0) + steps * (delta or {}).get(key, 0)
                nbytes = -min(-nbytes, held)
            if nbytes:
                effective[key] = nbytes
        return effective

    def record(
        self, label: str, phase: Phase, micro_batch: int, transient: Optional[dict[PartKey, int]] = None
    ) -> None:
        """Sample the current state plus ``transient`` bytes that exist only during this event
        (negative for memory released before the event's high-water mark)."""
        changes = self._effective(transient)
        totals = list(self.totals)
        for (category, _), nbytes in changes.items():
            totals[_CATEGORY_INDEX[category]] += nbytes
        total = sum(totals)
        self.points.append(Point(label, phase, micro_batch, tuple(totals)))  # type: ignore[arg-type]
        if total > self.peak_total:
            self.peak_total = total
            self.peak_index = len(self.points) - 1
            parts = dict(self.parts)
            for key, nbytes in changes.items():
                parts[key] = parts.get(key, 0) + nbytes
            self.peak_parts = {key: value for key, value in parts.items() if value}

    def record_series(
        self,
        labels: list[str],
        phase: Phase,
        micro_batch: int,
        transient: dict[PartKey, int],
        delta: dict[PartKey, int],
    ) -> None:
        """Record one point per label for a run of identical events (the layers of a model).

        Before event k the state is the current one plus k × ``delta``; each point adds
        ``transient``. After the run, the state has moved by len(labels) × ``delta``. This
        is what calling :meth:`record` and :meth:`add` per event would do, without the
        per-event bookkeeping.
        """
        count = len(labels)
        if not count:
            return
        step = [0, 0, 0, 0, 0]
        for (category, _), nbytes in delta.items():
            step[_CATEGORY_INDEX[category]] += nbytes
        # Negative transients release part of what the run's own events hold: clamp on the first event.
        changes = self._effective(transient)
        base = list(self.totals)
        for (category, _), nbytes in changes.items():
            base[_CATEGORY_INDEX[category]] += nbytes
        first_index = len(self.points)
        base_total, step_total = sum(base), sum(step)
        b0, b1, b2, b3, b4 = base
        s0, s1, s2, s3, s4 = step
        self.points.extend(
            [
                Point(label, phase, micro_batch, (b0 + k * s0, b1 + k * s1, b2 + k * s2, b3 + k * s3, b4 + k * s4))
                for k, label in enumerate(labels)
            ]
        )
        # The total is linear in k, so the highest point of the run is its first or its last.
        best_k, best_total = -1, self.peak_total
        for k in (0, count - 1):
            total = base_total + k * step_total
            if total > best_total:
                best_k, best_total = k, total
        if best_k >= 0:
            self.peak_total = best_total
            self.peak_index = first_index + best_k
            parts = dict(self.parts)
            for key, nbytes in delta.items():
                parts[key] = parts.get(key, 0) + best_k * nbytes
            for key, nbytes in changes.items():
                parts[key] = parts.get(key, 0) + nbytes
            self.peak_parts = {key: value for key, value in parts.items() if value}
        for (category, name), nbytes in delta.items():
            self.add(category, name, count * nbytes)


_CATEGORY_INDEX = {category: index for index, category in enumerate(CATEGORIES)}
