"""trainmem validate: the comparison of predictions with the corpus (stub predictions, no torch)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import trainmem
from trainmem import validate
from trainmem.measure.corpus import load_corpus
from trainmem.report import CATEGORIES

CORPUS = load_corpus()


def stub_report(measurement, scale: float = 1.0, extra_context: int = 0):
    """A Report-shaped prediction: the measured breakdown times ``scale``, plus a non-allocated part."""
    parts = [
        SimpleNamespace(category=category, bytes=int(getattr(measurement.breakdown, category) * scale), allocated=True)
        for category in CATEGORIES
    ]
    parts.append(SimpleNamespace(category="overhead", bytes=extra_context, allocated=False))
    return SimpleNamespace(peak_allocated_bytes=int(measurement.peak_allocated_bytes * scale), parts=parts)


def estimator(scale: float = 1.0, extra_context: int = 0):
    by_setup = {}
    for measurement in CORPUS:
        other = by_setup.setdefault(measurement.setup.model_dump_json(), measurement)
        # A real and a fake-tensor run of one setup (CLIP's b=32 pair) must have measured the same step.
        assert (other.peak_allocated_bytes, other.breakdown) == (measurement.peak_allocated_bytes, measurement.breakdown), (
            f"{other.id} and {measurement.id} share a setup but not their measurement"
        )
    return lambda setup: stub_report(by_setup[setup.model_dump_json()], scale, extra_context)


def test_a_perfect_prediction_meets_every_target(capsys):
    comparisons, summary = validate.validate(CORPUS, estimator(extra_context=10**9))
    assert summary.cases == len(CORPUS)
    assert summary.max_abs_error == summary.median_abs_error == 0.0
    assert summary.meets_targets
    assert all(c.relative_error == 0 for comparison in comparisons for c in comparison.categories if c.significant)


def test_errors_are_relative_to_the_measurement():
    comparisons, summary = validate.validate(CORPUS[:3], estimator(scale=1.1))
    assert summary.max_abs_error == pytest.approx(0.1, abs=1e-6)
    assert summary.p90_abs_error == pytest.approx(0.1, abs=1e-6)
    assert not summary.meets_targets
    first = comparisons[0].categories[CATEGORIES.index("parameters")]
    assert first.relative_error == pytest.approx(0.1, abs=1e-6)


def test_small_categories_do_not_count_towards_the_target():
    measurement = CORPUS[0]
    report = stub_report(measurement)
    report.parts.append(
        SimpleNamespace(category="overhead", bytes=measurement.peak_allocated_bytes // 200, allocated=True)
    )
    comparison = validate.compare(measurement, report)
    overhead = comparison.categories[CATEGORIES.index("overhead")]
    if measurement.breakdown.overhead <= 0.01 * measurement.peak_allocated_bytes:
        assert not overhead.significant
        assert comparison.worst_category_error == 0.0


def test_percentile_is_nearest_rank():
    values = [0.01 * step for step in range(1, 11)]
    assert validate.percentile(values, 0.9) == pytest.approx(0.09)
    assert validate.percentile(values, 1.0) == pytest.approx(0.10)
    assert validate.percentile([], 0.9) == 0.0


def test_main_prints_every_case_and_the_summary(capsys):
    assert validate.main([], estimate=estimator()) == 0
    output = capsys.readouterr().out
    for measurement in CORPUS:
        assert measurement.id in output
    assert "median 0.00%" in output and "targets met" in output


def test_main_check_fails_when_targets_are_missed(capsys):
    assert validate.main(["--check"], estimate=estimator(scale=0.9)) == 1
    assert validate.main([], estimate=estimator(scale=0.9)) == 0
    assert "targets NOT met" in capsys.readouterr().out


def test_main_selects_cases_and_reports_unknown_ones(capsys):
    wanted = CORPUS[1].id
    assert validate.main(["--case", wanted, "--json"], estimate=estimator()) == 0
    assert f'"id": "{wanted}"' in capsys.readouterr().out
    assert validate.main(["--case", "no-such-case"], estimate=estimator()) == 2


def test_main_without_an_estimate_says_so(monkeypatch, capsys):
    monkeypatch.delattr(trainmem, "estimate", raising=False)
    assert validate.main([]) == 2
    assert "trainmem.estimate" in capsys.readouterr().err


def test_a_tie_between_two_moments_compares_categories_at_the_predicted_one():
    # the end of backward and the optimizer step of this case are 12 bytes apart
    measurement = next(case for case in CORPUS if case.id == "gpt2-12m-fp32-adamw-b1-s128")
    optimizer = measurement.phase_peaks["optimizer"]
    assert measurement.peak.phase == "backward"
    assert optimizer.bytes >= (1 - validate.TIE_FRACTION) * measurement.peak_allocated_bytes
    parts = [
        SimpleNamespace(category=category, bytes=getattr(optimizer.breakdown, category), allocated=True)
        for category in CATEGORIES
    ]
    predicted_at_optimizer = SimpleNamespace(
        peak_allocated_bytes=optimizer.bytes, parts=parts, peak=SimpleNamespace(phase="optimizer")
    )
    comparison = validate.compare(measurement, predicted_at_optimizer)
    assert comparison.categories_at == "optimizer (tie)"
    assert comparison.worst_category_error == 0.0
    # a phase whose measured peak is well below the peak is no tie
    far = SimpleNamespace(peak_allocated_bytes=optimizer.bytes, parts=parts, peak=SimpleNamespace(phase="forward"))
    assert validate.compare(measurement, far).categories_at == "peak"
