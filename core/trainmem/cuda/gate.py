"""The CUDA corpus gate: predicted vs measured allocated, reserved and total memory, and the upper bound's record.

A CUDA case is a corpus measurement taken on a real GPU (``environment.device == "cuda"``, not
fake, with ``cuda`` figures). For each one:

* **allocated**: ``report.peak_allocated_bytes`` vs ``torch.cuda.max_memory_allocated``;
* **reserved**: ``report.peak_reserved_bytes`` vs ``torch.cuda.max_memory_reserved``;
* **total**: ``report.peak_total_bytes`` vs ``cudaMemGetInfo`` used right after the step (the cache
  still held, so it is the reserved peak plus everything outside the allocator);
* **bound held**: the upper bound the fit verdict uses ≥ the measured total (≥ the measured
  reserved when no total was recorded) — the share of cases where it held is the number that
  says how often a "fits" would have been an out-of-memory error (the xMem / VeritasEst metric).

Targets (issue 13): allocated within the CPU gate's maximum (5%), reserved and total within 5%,
and the bound holding in every case. Until a GPU run has filled the corpus the gate has no case.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence

from ..units import MIB

ALLOCATED_TARGET = 0.05
RESERVED_TARGET = 0.05
TOTAL_TARGET = 0.05
BOUND_RATE_TARGET = 1.0


def is_cuda_case(measurement: Any) -> bool:
    environment = measurement.environment
    return environment.device == "cuda" and not environment.fake and measurement.cuda is not None


@dataclass(frozen=True)
class CudaCaseComparison:
    id: str
    gpu_name: str
    measured_allocated_bytes: int
    predicted_allocated_bytes: int
    measured_reserved_bytes: int
    predicted_reserved_bytes: int
    measured_total_bytes: Optional[int]
    predicted_total_bytes: int
    upper_bound_bytes: int

    @property
    def allocated_error(self) -> float:
        return _relative(self.predicted_allocated_bytes, self.measured_allocated_bytes)

    @property
    def reserved_error(self) -> float:
        return _relative(self.predicted_reserved_bytes, self.measured_reserved_bytes)

    @property
    def total_error(self) -> Optional[float]:
        if self.measured_total_bytes is None:
            return None
        return _relative(self.predicted_total_bytes, self.measured_total_bytes)

    @property
    def bound_held(self) -> bool:
        measured = self.measured_total_bytes if self.measured_total_bytes is not None else self.measured_reserved_bytes
        return self.upper_bound_bytes >= measured


@dataclass(frozen=True)
class CudaSummary:
    cases: int
    max_allocated_abs_error: float
    max_reserved_abs_error: float
    max_total_abs_error: float
    bound_held_rate: float
    meets_targets: bool


def _relative(predicted: int, measured: int) -> float:
    return (predicted - measured) / measured if measured else 0.0


def compare_cuda(measurement: Any, report: Any) -> CudaCaseComparison:
    cuda = measurement.cuda
    return CudaCaseComparison(
        id=measurement.id,
        gpu_name=cuda.gpu_name or measurement.environment.device_name,
        measured_allocated_bytes=cuda.max_memory_allocated,
        predicted_allocated_bytes=report.peak_allocated_bytes,
        measured_reserved_bytes=cuda.max_memory_reserved,
        predicted_reserved_bytes=report.peak_reserved_bytes,
        measured_total_bytes=cuda.device_used_bytes,
        predicted_total_bytes=report.peak_total_bytes,
        upper_bound_bytes=report.upper_bound_bytes,
    )


def summarize_cuda(comparisons: Sequence[CudaCaseComparison]) -> CudaSummary:
    if not comparisons:
        return CudaSummary(0, 0.0, 0.0, 0.0, 1.0, True)
    allocated = max(abs(c.allocated_error) for c in comparisons)
    reserved = max(abs(c.reserved_error) for c in comparisons)
    totals = [abs(c.total_error) for c in comparisons if c.total_error is not None]
    total = max(totals, default=0.0)
    rate = sum(c.bound_held for c in comparisons) / len(comparisons)
    meets = (
        allocated <= ALLOCATED_TARGET
        and reserved <= RESERVED_TARGET
        and total <= TOTAL_TARGET
        and rate >= BOUND_RATE_TARGET
    )
    return CudaSummary(len(comparisons), allocated, reserved, total, rate, meets)


def validate_cuda(
    measurements: Iterable[Any], estimate: Callable[[Any], Any]
) -> tuple[list[CudaCaseComparison], CudaSummary]:
    comparisons = [compare_cuda(m, estimate(m.setup)) for m in measurements if is_cuda_case(m)]
    return comparisons, summarize_cuda(comparisons)


def _pct(value: Optional[float]) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f}%"


def format_cuda_table(comparisons: Sequence[CudaCaseComparison], summary: CudaSummary) -> str:
    """Predicted vs measured allocated, reserved and total (MiB), and whether the upper bound held."""
    if not comparisons:
        return (
            "CUDA cases: none in the corpus yet (scripts/validate_cuda.py is prepared, not yet run on a GPU); "
            "the CUDA gate is empty."
        )
    width = max(len(c.id) for c in comparisons)
    header = (
        f"{'CUDA case':<{width}}  {'alloc meas':>10} {'pred':>10} {'err':>7}  {'resv meas':>10} {'pred':>10} "
        f"{'err':>7}  {'total meas':>10} {'pred':>10} {'err':>7}  {'bound':>10} held"
    )
    lines = [header, "-" * len(header)]
    for c in comparisons:
        total = f"{c.measured_total_bytes / MIB:>10.1f}" if c.measured_total_bytes is not None else f"{'-':>10}"
        lines.append(
            f"{c.id:<{width}}  {c.measured_allocated_bytes / MIB:>10.1f} {c.predicted_allocated_bytes / MIB:>10.1f} "
            f"{_pct(c.allocated_error):>7}  {c.measured_reserved_bytes / MIB:>10.1f} "
            f"{c.predicted_reserved_bytes / MIB:>10.1f} {_pct(c.reserved_error):>7}  {total} "
            f"{c.predicted_total_bytes / MIB:>10.1f} {_pct(c.total_error):>7}  {c.upper_bound_bytes / MIB:>10.1f} "
            f"{'yes' if c.bound_held else 'NO'}"
        )
    lines += [
        "",
        f"{summary.cases} CUDA cases: max |error| allocated {100 * summary.max_allocated_abs_error:.2f}% "
        f"(target ≤ {100 * ALLOCATED_TARGET:.0f}%), reserved {100 * summary.max_reserved_abs_error:.2f}% "
        f"(≤ {100 * RESERVED_TARGET:.0f}%), total {100 * summary.max_total_abs_error:.2f}% "
        f"(≤ {100 * TOTAL_TARGET:.0f}%); upper bound held in {100 * summary.bound_held_rate:.0f}% of cases "
        f"(target {100 * BOUND_RATE_TARGET:.0f}%)",
        "CUDA targets met" if summary.meets_targets else "CUDA targets NOT met",
    ]
    return "\n".join(lines)
