"""The tracker's event log, as plain data (no torch): storages, segments and events.

An event is a tuple ``(kind, index, bytes)``: ``(ALLOC, storage index, bytes)`` when a
storage is first seen, ``(FREE, storage index, bytes)`` when it dies, and ``(MARK, segment
index, 0)`` when the step crosses a module boundary or phase. Keeping the log as data lets
:mod:`trainmem.measure.accounting` decide categories after the step and lets tests build
logs by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

ALLOC, FREE, MARK = 0, 1, 2
"""Event kinds: (ALLOC, storage index, bytes), (FREE, storage index, bytes), (MARK, segment index, 0)."""

ROLE_ALLOCATED = "allocated"
ROLE_PARAMETER = "parameter"
ROLE_OPTIMIZER_STATE = "optimizer_state"
ROLE_GRADIENT = "gradient"
ROLE_INPUT = "input"
ROLE_AUTOCAST_WEIGHT_COPY = "autocast_weight_copy"


@dataclass
class StorageInfo:
    """One storage seen during the step."""

    nbytes: int
    op: str
    segment: int
    dtype: str
    shape: tuple[int, ...]
    role: str


@dataclass(frozen=True)
class Segment:
    """A stretch of the step between two markers, e.g. phase 'forward', label 'forward layers.3'."""

    phase: str
    label: str
    micro_batch: int
