"""``trainmem validate``: every corpus case, predicted by ``trainmem.estimate`` vs measured.

For each measured case (``trainmem/data/corpus.jsonl``, see :mod:`trainmem.measure`) the
recorded setup, which names the kernels that actually ran, is given to
``trainmem.estimate``, and the prediction is compared with the measurement:

* peak allocated bytes: ``report.peak_allocated_bytes`` vs the measured peak;
* per category: the sum of ``part.bytes`` over ``report.parts`` with ``part.allocated``
  and that category, vs the measured bytes of the category at the peak. A category is
  *significant* when it holds more than 1% of the measured peak; only significant
  categories count towards the category target.
* ties: when two moments of the step are within 0.5% of each other (say the start of
  backward and the optimizer step), which one is "the peak" flips on a few bytes, and so
  does the breakdown. If the phase the prediction names as its peak has a measured phase
  peak within 0.5% of the measured peak, categories are compared at that phase's measured
  peak instead (the case is marked as a tie).

Relative error = (predicted − measured) / measured. The summary gives the median, the
90th percentile (nearest rank) and the maximum of |peak error|, and the largest
|category error| among significant categories. Targets: median ≤ 2%, max ≤ 5%, every
significant category within 5%; ``--check`` exits 1 when a target is missed.
Comparing with the committed corpus needs no torch.

Cases measured on a real GPU are held to their own gate (:mod:`trainmem.cuda.gate`: allocated,
reserved, total and the upper bound's record); the table above covers the others.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from .cuda.gate import format_cuda_table, is_cuda_case, validate_cuda
from .measure.corpus import load_corpus
from .measure.record import Measurement
from .report import CATEGORIES
from .units import MIB

SIGNIFICANT_FRACTION = 0.01
TIE_FRACTION = 0.005
MEDIAN_TARGET = 0.02
MAX_TARGET = 0.05
CATEGORY_TARGET = 0.05


@dataclass(frozen=True)
class CategoryComparison:
    category: str
    measured_bytes: int
    predicted_bytes: int
    relative_error: Optional[float]  # None when nothing was measured but something predicted
    significant: bool


@dataclass(frozen=True)
class CaseComparison:
    id: str
    measured_peak_bytes: int
    predicted_peak_bytes: int
    relative_error: float
    categories: list[CategoryComparison]
    categories_at: str  # "peak", or e.g. "optimizer (tie)" when compared at a tied phase peak

    @property
    def worst_category_error(self) -> float:
        errors = [abs(c.relative_error) for c in self.categories if c.significant and c.relative_error is not None]
        return max(errors, default=0.0)


@dataclass(frozen=True)
class Summary:
    cases: int
    median_abs_error: float
    p90_abs_error: float
    max_abs_error: float
    max_category_abs_error: float
    worst_case: str
    meets_targets: bool


def relative_error(predicted: int, measured: int) -> Optional[float]:
    """(predicted − measured) / measured; None when measured is 0."""
    if measured == 0:
        return None if predicted else 0.0
    return (predicted - measured) / measured


def predicted_by_category(report: Any) -> dict[str, int]:
    """Bytes per category from ``report.parts`` (allocated parts only)."""
    totals = {category: 0 for category in CATEGORIES}
    for part in report.parts:
        if part.allocated and part.category in totals:
            totals[part.category] += part.bytes
    return totals


def compare(measurement: Measurement, report: Any) -> CaseComparison:
    """One case: the measured peak and categories against a Report-shaped prediction."""
    peak = measurement.peak_allocated_bytes
    predicted = predicted_by_category(report)
    breakdown, categories_at = measured_breakdown_for(measurement, report)
    categories = []
    for category in CATEGORIES:
        measured = getattr(breakdown, category)
        categories.append(
            CategoryComparison(
                category=category,
                measured_bytes=measured,
                predicted_bytes=predicted[category],
                relative_error=relative_error(predicted[category], measured),
                significant=measured > SIGNIFICANT_FRACTION * peak,
            )
        )
    error = relative_error(report.peak_allocated_bytes, peak)
    return CaseComparison(
        id=measurement.id,
        measured_peak_bytes=peak,
        predicted_peak_bytes=report.peak_allocated_bytes,
        relative_error=error if error is not None else math.inf,
        categories=categories,
        categories_at=categories_at,
    )


def measured_breakdown_for(measurement: Measurement, report: Any) -> tuple[Any, str]:
    """The measured breakdown to compare categories with: at the peak, or at a tied phase peak, or at the
    tied high-water mark of the segment the prediction names (e.g. ``layer 3 backward`` against the measured
    ``backward layers.3``, when the measured peak is in the neighbouring ``backward head``)."""
    predicted_phase = getattr(getattr(report, "peak", None), "phase", None)
    if predicted_phase and predicted_phase != measurement.peak.phase:
        tied = measurement.phase_peaks.get(predicted_phase)
        if tied is not None and tied.bytes >= (1 - TIE_FRACTION) * measurement.peak_allocated_bytes:
            return tied.breakdown, f"{predicted_phase} (tie)"
    segment = _tied_segment(measurement, report)
    if segment is not None:
        return segment
    return measurement.breakdown, "peak"


def _measured_label(predicted_label: str) -> Optional[str]:
    """The measured timeline's segment (trainmem.measure.step's markers) a predicted moment falls in."""
    import re

    label = predicted_label.split(" (micro-batch")[0]
    layer = re.fullmatch(r"layer (\d+) (forward|backward)", label)
    if layer:
        return f"{layer.group(2)} layers.{layer.group(1)}"
    named = {"embedding": "forward embeddings", "embedding backward": "backward embeddings", "loss": "loss"}
    if label in named:
        return named[label]
    if label in ("loss backward", "reduce bucket"):
        return "backward head"
    return None


def _tied_segment(measurement: Measurement, report: Any) -> Optional[tuple[Any, str]]:
    timeline, peak = getattr(report, "timeline", None), getattr(report, "peak", None)
    if timeline is None or peak is None or peak.phase != measurement.peak.phase:
        return None
    wanted = _measured_label(timeline.labels[peak.index])
    if wanted is None or wanted == measurement.peak.label:
        return None
    later = timeline.micro_batches[peak.index] > 1
    measured = measurement.timeline
    positions = [i for i, label in enumerate(measured.labels) if label == wanted]
    if not positions:
        return None
    at = positions[-1] if later else positions[0]
    values = {category: getattr(measured, category)[at] for category in CATEGORIES}
    if sum(values.values()) < (1 - TIE_FRACTION) * measurement.peak_allocated_bytes:
        return None
    return type(measurement.breakdown)(**values), f"{wanted} (tie)"


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile: the smallest value with at least ``fraction`` of the values at or below it."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def summarize(comparisons: Sequence[CaseComparison]) -> Summary:
    errors = [abs(c.relative_error) for c in comparisons]
    worst = max(comparisons, key=lambda c: abs(c.relative_error), default=None)
    median = statistics.median(errors) if errors else 0.0
    maximum = max(errors, default=0.0)
    category = max((c.worst_category_error for c in comparisons), default=0.0)
    return Summary(
        cases=len(comparisons),
        median_abs_error=median,
        p90_abs_error=percentile(errors, 0.9),
        max_abs_error=maximum,
        max_category_abs_error=category,
        worst_case=worst.id if worst else "",
        meets_targets=median <= MEDIAN_TARGET and maximum <= MAX_TARGET and category <= CATEGORY_TARGET,
    )


def report_for_rank(report: Any, measurement: Measurement) -> Any:
    """What to compare a measured rank with: the whole report, or, for a pipeline-parallel run, the
    report's rank of the measured rank's stage (ranks are first, middle, last stage)."""
    ranks = getattr(report, "ranks", None)
    pipeline = measurement.setup.parallelism.pipeline_parallel_size
    if pipeline == 1 or not ranks or len(ranks) == 1:
        return report
    from .parallel.pipelining import report_rank_of

    stage = measurement.rank // (measurement.world_size // pipeline)
    setup = measurement.setup
    return ranks[min(len(ranks) - 1, report_rank_of(setup.parallelism, setup.gradient_accumulation_steps, stage))]


def validate(
    measurements: Iterable[Measurement], estimate: Callable[[Any], Any]
) -> tuple[list[CaseComparison], Summary]:
    """Compare every measurement with ``estimate(measurement.setup)`` (its stage's rank under pipelining)."""
    comparisons = [
        compare(measurement, report_for_rank(estimate(measurement.setup), measurement)) for measurement in measurements
    ]
    return comparisons, summarize(comparisons)


# ---------------------------------------------------------------------- output


def _percent(value: Optional[float]) -> str:
    if value is None:
        return "n/a"
    if math.isinf(value):
        return "inf"
    return f"{100 * value:+.1f}%"


def format_table(comparisons: Sequence[CaseComparison], summary: Summary) -> str:
    """The comparison table (MiB) and the summary; category columns show the error, '·' when insignificant."""
    name_width = max([len(c.id) for c in comparisons] + [4])
    short = {
        "parameters": "params",
        "gradients": "grads",
        "optimizer_states": "states",
        "activations": "acts",
        "overhead": "ovh",
    }
    header = f"{'case':<{name_width}}  {'measured':>10}  {'predicted':>10}  {'error':>7}  " + "  ".join(
        f"{short[c]:>7}" for c in CATEGORIES
    )
    lines = [header, "-" * len(header)]
    for comparison in comparisons:
        cells = [_percent(c.relative_error) if c.significant else "·" for c in comparison.categories]
        lines.append(
            f"{comparison.id:<{name_width}}  {comparison.measured_peak_bytes / MIB:>10.1f}  "
            f"{comparison.predicted_peak_bytes / MIB:>10.1f}  {_percent(comparison.relative_error):>7}  "
            + "  ".join(f"{cell:>7}" for cell in cells)
            + (f"  categories at {comparison.categories_at}" if comparison.categories_at != "peak" else "")
        )
    lines += [
        "",
        f"{summary.cases} cases (MiB; category columns: relative error where the category is > 1% of the peak)",
        f"peak |error|: median {100 * summary.median_abs_error:.2f}% (target ≤ {100 * MEDIAN_TARGET:.0f}%), "
        f"p90 {100 * summary.p90_abs_error:.2f}%, max {100 * summary.max_abs_error:.2f}% "
        f"(target ≤ {100 * MAX_TARGET:.0f}%, worst: {summary.worst_case or '-'})",
        f"largest significant category |error|: {100 * summary.max_category_abs_error:.2f}% "
        f"(target ≤ {100 * CATEGORY_TARGET:.0f}%)",
        "targets met" if summary.meets_targets else "targets NOT met",
    ]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    from .cli import OneLineParser

    parser = OneLineParser(
        prog="trainmem validate",
        description="Compare trainmem.estimate with the committed measurements of real training steps.",
    )
    parser.add_argument("--corpus", type=Path, help="corpus JSON-lines file (default: the packaged corpus)")
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="the packaged distributed corpus (multi-rank DDP, FSDP2, DTensor TP and DeepSpeed runs, one line per rank)",
    )
    parser.add_argument("--case", action="append", default=[], help="only this case id (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the comparisons and summary as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 when an accuracy target is missed")
    return parser


def main(argv: Optional[list[str]] = None, estimate: Optional[Callable[[Any], Any]] = None) -> int:
    arguments = build_parser().parse_args(argv)
    from .measure.corpus import default_corpus_path

    corpus = arguments.corpus or (default_corpus_path(distributed=True) if arguments.distributed else None)
    measurements = load_corpus(corpus)
    if arguments.case:
        wanted = set(arguments.case)
        unknown = wanted - {m.id for m in measurements}
        if unknown:
            print(f"trainmem validate: no such case(s): {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        measurements = [m for m in measurements if m.id in wanted]
    if estimate is None:
        import trainmem

        estimate = getattr(trainmem, "estimate", None)
        if estimate is None:
            print("trainmem validate: trainmem.estimate is not available in this build", file=sys.stderr)
            return 2
    cpu_cases = [m for m in measurements if not is_cuda_case(m)]
    comparisons, summary = validate(cpu_cases, estimate)
    cuda_comparisons, cuda_summary = validate_cuda(measurements, estimate)
    if arguments.json:
        cuda_cases = [{**asdict(c), "bound_held": c.bound_held} for c in cuda_comparisons]
        print(
            json.dumps(
                {
                    "cases": [asdict(c) for c in comparisons],
                    "summary": asdict(summary),
                    "cuda": {"cases": cuda_cases, "summary": asdict(cuda_summary)},
                },
                indent=2,
            )
        )
    else:
        print(format_table(comparisons, summary))
        print()
        print(format_cuda_table(cuda_comparisons, cuda_summary))
    met = summary.meets_targets and cuda_summary.meets_targets
    return 1 if arguments.check and not met else 0
