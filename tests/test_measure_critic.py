"""The measured steps of verl's critic and PPO (trainmem.measure.critic) against the prediction, on a model small
enough to run in seconds (slow: generation runs under the tracker)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")
pytestmark = [pytest.mark.torch, pytest.mark.slow]

import trainmem  # noqa: E402
from trainmem.measure.runner import check_replayable, measure  # noqa: E402
from trainmem.setup import Setup  # noqa: E402

TINY = {
    "model_type": "llama", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512, "tie_word_embeddings": False,
}
PPO = {"mode": "ppo", "use_vllm": False, "num_generations": 2, "max_prompt_length": 16, "max_completion_length": 8,
       "log_prob_head": "fused", "log_prob_entropy": True}


def setup(training, **fields):
    return {"model": {"hf_config": TINY}, "micro_batch_size": 2, "sequence_length": 64, "precision": "fp32",
            "runtime": {"device": "cpu"}, "training": training, **fields}


@pytest.mark.parametrize(
    "case",
    [setup({"mode": "critic"}), setup({"mode": "critic"}, precision="amp-bf16"), setup(PPO),
     setup({**PPO, "critic_micro_batch_size": 4, "critic_gradient_accumulation_steps": 1}, micro_batch_size=1,
           gradient_accumulation_steps=4)],
    ids=["critic", "critic-amp", "ppo", "ppo-critic-batch"],
)
def test_the_prediction_matches_the_measured_step(case):
    measured = measure(case, fake=False)
    predicted = trainmem.estimate(measured.setup, suggestions=False)
    assert abs(predicted.peak_allocated_bytes - measured.peak_allocated_bytes) <= 0.02 * measured.peak_allocated_bytes
    assert measured.start_bytes == measured.end_bytes


def test_the_logits_head_is_not_measurable_here():
    with pytest.raises(ValueError, match="log_prob_head 'logits'"):
        check_replayable(Setup.model_validate(setup({**PPO, "log_prob_head": "logits"})))
