"""The page's recompute (issue 14): the replayed answer that follows a fast one reuses the fast one's
setup, plan and step simulation (web/py/trainmem_web.py ``_LAST_SIMULATED``), byte for byte what a
compute from nothing gives."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "web" / "py"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import fuzz_setups  # noqa: E402
import trainmem_web  # noqa: E402

from trainmem.cuda import memory  # noqa: E402

SETUP = {"model": {"preset": "llama-3.1-8b"}, "micro_batch_size": 1, "sequence_length": 1024,
         "activation_checkpointing": "full", "parallelism": {"num_gpus": 8, "strategy": "zero", "zero_stage": 2},
         "gpu": "h100-sxm-80gb"}  # fmt: skip
PIPELINED = {"model": {"preset": "llama-3.1-8b"}, "sequence_length": 512, "gradient_accumulation_steps": 4,
             "parallelism": {"num_gpus": 8, "pipeline_parallel_size": 2, "strategy": "ddp"}}  # fmt: skip
ON_CPU = {"model": {"preset": "gpt2"}, "runtime": {"device": "cpu"}}


def forget() -> None:
    trainmem_web._ANSWERS.clear()
    trainmem_web._LAST_SIMULATED.clear()
    memory._REPLAY_CACHE.clear()
    memory._EVENTS_CACHE.clear()


@pytest.fixture(autouse=True)
def nothing_kept():
    forget()
    yield
    forget()


def from_nothing(text: str, suggestions: bool = False) -> str:
    forget()
    return trainmem_web.compute(text, suggestions)


@pytest.mark.parametrize("setup", [SETUP, PIPELINED, ON_CPU], ids=["zero2", "pipelined", "cpu"])
def test_the_replayed_answer_after_a_fast_one_is_the_answer_from_nothing(setup):
    text = json.dumps(setup)
    expected = from_nothing(text)
    expected_with_suggestions = from_nothing(text, True)
    forget()
    fast = trainmem_web.compute(text, False, 0.1)
    assert text in trainmem_web._LAST_SIMULATED  # what the replayed compute reuses
    assert trainmem_web.compute(text, False) == expected
    assert trainmem_web.compute(text, True) == expected_with_suggestions
    assert fast != expected or not json.loads(fast)["report"]["ranks"][0]["cuda"]


def test_only_the_last_setup_is_kept_and_another_text_is_computed_anew():
    a, b = json.dumps(SETUP), json.dumps({**SETUP, "micro_batch_size": 2})
    trainmem_web.compute(a, False, 0.1)
    trainmem_web.compute(b, False, 0.1)
    assert list(trainmem_web._LAST_SIMULATED) == [b]
    assert trainmem_web.compute(a, False) == from_nothing(a)


def test_invalid_setups_keep_nothing_and_answer_as_before():
    trainmem_web.compute(json.dumps(SETUP), False, 0.1)
    bad = json.dumps({**SETUP, "micro_batch_size": 0})
    answer = json.loads(trainmem_web.compute(bad, False, 0.1))
    assert not answer["ok"] and bad not in trainmem_web._LAST_SIMULATED
    assert trainmem_web.compute(bad, False) == from_nothing(bad)


def test_fuzzed_setups_fast_then_replayed_give_the_answers_from_nothing():
    """Seeded setups from benchmarks/fuzz_setups.py (valid-looking and hostile), as the page asks for them."""
    rng = random.Random(1414)
    for index in range(24):
        case = fuzz_setups.valid_looking(rng) if index % 3 else fuzz_setups.hostile(rng)
        text = fuzz_setups._json_text(case)
        expected = from_nothing(text)
        forget()
        trainmem_web.compute(text, False, 0.05)
        assert trainmem_web.compute(text, False) == expected, text
