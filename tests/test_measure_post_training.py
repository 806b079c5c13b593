"""The measured steps of TRL's post-training modes (trainmem.measure.post_training, .grpo) against the
prediction, on a model small enough to run in seconds."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")
pytestmark = [pytest.mark.torch, pytest.mark.slow]

import trainmem  # noqa: E402
from trainmem.measure.runner import measure  # noqa: E402

TINY = {
    "model_type": "llama",
    "vocab_size": 1000,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
}


def setup(training, **fields):
    return {"model": {"hf_config": TINY}, "micro_batch_size": 2, "sequence_length": 64, "precision": "fp32",
            "runtime": {"device": "cpu"}, "training": training, **fields}


@pytest.mark.parametrize(
    "training, fields",
    [
        ({"mode": "dpo"}, {}),
        ({"mode": "dpo", "precompute_ref_log_probs": True}, {}),
        ({"mode": "dpo"}, {"finetuning": {"method": "lora", "lora": {"r": 4, "target_modules": ["q_proj", "v_proj"]}}}),
        ({"mode": "kto"}, {}),
        ({"mode": "kto", "loss_type": "apo_zero_unpaired"}, {}),
        ({"mode": "orpo"}, {}),
        ({"mode": "cpo"}, {"precision": "amp-bf16"}),
        ({"mode": "simpo"}, {"precision": "bf16-pure"}),
        ({"mode": "reward"}, {}),
        ({"mode": "grpo", "num_generations": 2, "max_prompt_length": 16, "max_completion_length": 8, "beta": 0.04}, {}),
    ],
    ids=["dpo-copy", "dpo-precomputed", "dpo-peft", "kto", "kto-apo", "orpo", "cpo-amp", "simpo-bf16", "reward", "grpo"],
)
def test_the_prediction_matches_the_measured_step(training, fields):
    case = setup(training, **fields)
    measured = measure(case, fake=False)
    predicted = trainmem.estimate(measured.setup, suggestions=False)
    assert abs(predicted.peak_allocated_bytes - measured.peak_allocated_bytes) <= 0.02 * measured.peak_allocated_bytes
    assert set(measured.phase_peaks) == {"forward", "loss", "backward", "optimizer", "zero_grad"}
    assert measured.start_bytes == measured.end_bytes


def test_fake_and_real_dpo_steps_count_the_same_bytes():
    real = measure(setup({"mode": "dpo"}), fake=False)
    fake = measure(setup({"mode": "dpo"}), fake=True)
    assert real.peak_allocated_bytes == fake.peak_allocated_bytes


def test_fake_and_real_odds_ratio_steps_count_the_same_bytes():
    case = setup({"mode": "cpo"}, precision="amp-bf16")
    assert measure(case, fake=False).peak_allocated_bytes == measure(case, fake=True).peak_allocated_bytes
