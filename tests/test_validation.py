"""The accuracy gate: trainmem's predictions against every committed measurement.

The corpus (``trainmem/data/corpus.jsonl``) holds real training steps measured with
``trainmem.measure`` (torch 2.13 CPU, transformers, peft). Comparing against it needs no
torch, so this gate runs everywhere and fails when a prediction drifts. Targets (issue 3):
peak allocated memory within 2% median and 5% max, and each category holding more than 1%
of the peak within 5%.
"""

import pytest

import trainmem
from trainmem.measure.corpus import load_corpus
from trainmem.validate import CATEGORY_TARGET, MAX_TARGET, MEDIAN_TARGET, compare, summarize

CORPUS = load_corpus()


def test_the_corpus_is_large_enough():
    assert len(CORPUS) >= 40


@pytest.fixture(scope="module")
def comparisons():
    return [compare(measurement, trainmem.estimate(measurement.setup, suggestions=False)) for measurement in CORPUS]


def test_peak_error_targets(comparisons):
    summary = summarize(comparisons)
    assert summary.median_abs_error <= MEDIAN_TARGET
    assert summary.max_abs_error <= MAX_TARGET, summary.worst_case


def test_category_error_target(comparisons):
    worst = max(comparisons, key=lambda c: c.worst_category_error)
    assert worst.worst_category_error <= CATEGORY_TARGET, (worst.id, worst.categories)


@pytest.mark.parametrize("measurement", CORPUS, ids=[m.id for m in CORPUS])
def test_parameter_counts_are_exact(measurement):
    report = trainmem.estimate(measurement.setup, suggestions=False)
    assert report.num_parameters == measurement.num_parameters
    assert report.num_trainable_parameters == measurement.num_trainable_parameters
