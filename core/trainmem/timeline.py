"""A running account of allocated bytes by category and part, sampled into a timeline.

The step simulation (``simulate.py``) moves bytes in and out of named parts as events
happen; at each event it records a point: the state plus the event's transient high-water
memory. The point with the highest total is the peak, and the parts at that point are the
breakdown the report shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .report import CATEGORIES, Category, Phase

PartKey = tuple[Category, str]


@dataclass
class Point:
    label: str
    phase: Phase
    micro_batch: int
    totals: tuple[int, int, int, int, int]


@dataclass
class MemoryAccount:
    """Bytes alive right now, by (category, part name), and the points recorded so far."""

    parts: dict[PartKey, int] = field(default_factory=dict)
    details: dict[PartKey, str] = field(default_factory=dict)
    points: list[Point] = field(default_factory=list)
    peak_total: int = -1
    peak_index: int = 0
    peak_parts: dict[PartKey, int] = field(default_factory=dict)

    def set(self, category: Category, name: str, nbytes: int, detail: Optional[str] = None) -> None:
        key = (category, name)
        if nbytes:
            self.parts[key] = nbytes
        else:
            self.parts.pop(key, None)
        if detail is not None:
            self.details[key] = detail

    def add(self, category: Category, name: str, nbytes: int, detail: Optional[str] = None) -> None:
        self.set(category, name, self.parts.get((category, name), 0) + nbytes, detail)

    def get(self, category: Category, name: str) -> int:
        return self.parts.get((category, name), 0)

    def record(self, label: str, phase: Phase, micro_batch: int,
               transient: Optional[dict[PartKey, int]] = None) -> None:
        """Sample the current state plus ``transient`` bytes that exist only during this event."""
        parts = self.parts
        if transient:
            parts = dict(parts)
            for key, nbytes in transient.items():
                if nbytes > 0:
                    parts[key] = parts.get(key, 0) + nbytes
        totals = [0, 0, 0, 0, 0]
        for (category, _), nbytes in parts.items():
            totals[_CATEGORY_INDEX[category]] += nbytes
        total = sum(totals)
        self.points.append(Point(label, phase, micro_batch, tuple(totals)))  # type: ignore[arg-type]
        if total > self.peak_total:
            self.peak_total = total
            self.peak_index = len(self.points) - 1
            self.peak_parts = dict(parts)


_CATEGORY_INDEX = {category: index for index, category in enumerate(CATEGORIES)}
