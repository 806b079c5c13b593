"""Hugging Face generate (trainmem.inference.generation) against the measured generation corpus
(trainmem/data/corpus_generation.jsonl, made by ``python -m trainmem.measure.generation --write``)."""

import dataclasses

import pytest

from trainmem.errors import FieldError
from trainmem.inference.generation import GenerationPhase, hf_generation_phase
from trainmem.inference.validate import (
    MAX_GATE,
    MEDIAN_GATE,
    generation_cases,
    load_generation_corpus,
    main,
    validate_generation,
)
from trainmem.plan import Plan
from trainmem.setup import Setup

CORPUS = load_generation_corpus()


def plan_for(case):
    return Plan(Setup.model_validate(case.setup_dict()))


def test_the_corpus_holds_every_case_of_the_grid():
    assert sorted(m.case.id for m in CORPUS) == sorted(c.id for c in generation_cases())
    assert len(CORPUS) >= 30
    peaks_at = {m.peak_forward == 0 for m in CORPUS}
    assert peaks_at == {True, False}  # both the prefill and a decode step are the peak somewhere


def test_peak_within_the_gate():
    result = validate_generation()
    assert result.median_abs_error <= MEDIAN_GATE, result.median_abs_error
    worst = max(result.results, key=lambda r: abs(r.error))
    assert result.max_abs_error <= MAX_GATE, (worst.id, worst.error)
    assert main([]) == 0


@pytest.mark.parametrize("measurement", CORPUS, ids=[m.case.id for m in CORPUS])
def test_kv_cache_is_byte_exact(measurement):
    case = measurement.case
    phase = hf_generation_phase(plan_for(case), case.batch_size, case.prompt_tokens, case.completion_tokens,
                                do_sample=case.do_sample)
    assert phase.kv_cache_bytes == measurement.kv_cache_bytes


def test_parts_sum_to_the_peak_and_name_the_cache():
    case = generation_cases()[0]
    phase = hf_generation_phase(plan_for(case), 4, 128, 512, do_sample=True)
    assert isinstance(phase, GenerationPhase)
    assert sum(phase.parts.values()) == phase.peak_bytes
    assert phase.peak_at == "last decode step" and "KV cache" in phase.parts and "sampling" in phase.parts
    with pytest.raises(dataclasses.FrozenInstanceError):
        phase.peak_bytes = 0  # type: ignore[misc]


def test_sampling_costs_more_than_greedy_at_the_same_shape():
    case = generation_cases()[0]
    plan = plan_for(case)
    greedy = hf_generation_phase(plan, 8, 16, 64)
    sampled = hf_generation_phase(plan, 8, 16, 64, do_sample=True)
    hotter = hf_generation_phase(plan, 8, 16, 64, do_sample=True, temperature=0.7)
    assert greedy.peak_bytes < sampled.peak_bytes < hotter.peak_bytes


@pytest.mark.parametrize(
    "arguments, field",
    [
        ((0, 16, 8), "batch_size"),
        ((1, 0, 8), "prompt_tokens"),
        ((1, 16, 0), "completion_tokens"),
        ((1, 2000, 100), "completion_tokens"),  # beyond max_position_embeddings (2048)
        ((1, 16.0, 8), "prompt_tokens"),
    ],
)
def test_bad_input_names_the_field(arguments, field):
    plan = plan_for(generation_cases()[0])
    with pytest.raises(FieldError) as error:
        hf_generation_phase(plan, *arguments)
    assert error.value.field == field


@pytest.mark.parametrize("keyword, value", [("top_k", -1), ("top_k", 2.5), ("temperature", 0), ("temperature", "hot")])
def test_bad_sampling_options_name_the_field(keyword, value):
    plan = plan_for(generation_cases()[0])
    with pytest.raises(FieldError) as error:
        hf_generation_phase(plan, 1, 8, 8, do_sample=True, **{keyword: value})
    assert error.value.field == keyword


def test_a_model_without_architecture_is_refused():
    plan = Plan(Setup.model_validate({"model": {"num_parameters": 1_000_000}, "micro_batch_size": 1, "sequence_length": 8}))
    with pytest.raises(FieldError) as error:
        hf_generation_phase(plan, 1, 8, 8)
    assert error.value.field == "model"


@pytest.mark.torch
def test_a_case_measures_again_to_the_byte():
    pytest.importorskip("transformers")
    from trainmem.measure.generation import measure_generation

    committed = next(m for m in CORPUS if m.case.id == "gen-qwen2-b1-p16-c8-sample")
    fresh = measure_generation(committed.case)
    assert (fresh.peak_bytes, fresh.peak_forward, fresh.kv_cache_bytes) == (
        committed.peak_bytes, committed.peak_forward, committed.kv_cache_bytes
    )
