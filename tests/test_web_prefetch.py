"""The bridge's kept answers (issue 14: web/py/trainmem_web.py prefetch): a prefetched or recent setup
is answered from the bridge's LRU, byte for byte what a new compute gives; errors are never kept."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "web" / "py"))

import trainmem_web  # noqa: E402

from trainmem.cuda import memory  # noqa: E402

SETUP = {"model": {"preset": "llama-3.1-8b"}, "micro_batch_size": 1, "sequence_length": 1024,
         "parallelism": {"num_gpus": 8, "strategy": "zero", "zero_stage": 2}, "gpu": "h100-sxm-80gb"}  # fmt: skip


@pytest.fixture(autouse=True)
def empty_lru():
    trainmem_web._ANSWERS.clear()
    yield
    trainmem_web._ANSWERS.clear()


def fresh_answer(text: str) -> str:
    """What compute gives with nothing kept anywhere (the replay caches cleared too)."""
    trainmem_web._ANSWERS.clear()
    memory._REPLAY_CACHE.clear()
    memory._EVENTS_CACHE.clear()
    return trainmem_web.compute(text, False)


def test_a_prefetched_setup_is_answered_byte_for_byte_as_computed():
    text = json.dumps({**SETUP, "micro_batch_size": 2})
    assert trainmem_web.prefetch(text) is True
    assert text in trainmem_web._ANSWERS
    kept = trainmem_web.compute(text, False)
    assert kept is trainmem_web._ANSWERS[text]  # from the LRU, not computed again
    assert kept == fresh_answer(text)
    assert json.loads(kept)["report"]["ranks"][0]["cuda"]["replayed"]


def test_only_the_replayed_answer_without_suggestions_is_kept():
    text = json.dumps(SETUP)
    trainmem_web.prefetch(text)
    fast = json.loads(trainmem_web.compute(text, False, 0.05))["report"]
    assert not fast["ranks"][fast["heaviest_rank"]]["cuda"]["replayed"]  # the fast answer is still the fast one
    assert json.loads(trainmem_web.compute(text, True))["report"]["suggestions"] is not None


@pytest.mark.parametrize("text", ["{", json.dumps({**SETUP, "micro_batch_size": 0}), None, 7])
def test_errors_and_non_text_are_not_kept(text):
    assert trainmem_web.prefetch(text) is False
    assert not trainmem_web._ANSWERS
    assert not json.loads(trainmem_web.compute(text, False))["ok"]


def test_the_lru_keeps_the_most_recent_answers(monkeypatch):
    monkeypatch.setattr(trainmem_web, "ANSWERS_KEPT", 2)
    texts = [json.dumps({**SETUP, "micro_batch_size": n}) for n in (1, 2, 3)]
    trainmem_web.prefetch(texts[0])
    trainmem_web.prefetch(texts[1])
    trainmem_web.compute(texts[0], False)  # used again: now the most recent
    trainmem_web.prefetch(texts[2])
    assert list(trainmem_web._ANSWERS) == [texts[0], texts[2]]


def test_a_long_text_is_answered_but_not_kept(monkeypatch):
    monkeypatch.setattr(trainmem_web, "MAX_KEPT_SETUP_CHARS", 10)
    text = json.dumps(SETUP)
    assert trainmem_web.prefetch(text) is False
    assert json.loads(trainmem_web.compute(text, False))["ok"] and not trainmem_web._ANSWERS
