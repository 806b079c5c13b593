"""The RL round's no-grad log-prob passes: when the old policy's are recomputed, and in forwards of how many rows.

Rules from TRL 1.16 (GRPOTrainer._generate_and_score_completions, RLOOTrainer) and verl 0.9.1
(RayPPOTrainer.fit, workers/engine_workers.py); measured in the corpus by
``trl-grpo-llama14m-fp32-beta004-it2-lp8-ref4-b1x8-p64-c64`` and ``trl-rloo-llama14m-fp32-g2-b2-p64-c64``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmem import estimate, inputs
from trainmem.setup import Setup

VERL = Path(__file__).parent / "data" / "trainer_files" / "verl" / "examples" / "grpo_trainer"
QWEN = {"model": {"preset": "qwen2.5-7b"}}
TINY = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 192, "intermediate_size": 512, "num_hidden_layers": 4,
        "num_attention_heads": 6, "num_key_value_heads": 2}


def rl_setup(**training) -> Setup:
    return Setup.model_validate({
        "model": {"hf_config": TINY}, "micro_batch_size": 1, "gradient_accumulation_steps": 8, "precision": "fp32",
        "runtime": {"device": "cpu"},
        "training": {"mode": "grpo", "num_generations": 2, "max_prompt_length": 64, "max_completion_length": 64, **training},
    })


def labels(setup: Setup) -> list[str]:
    return estimate(setup).ranks[0].timeline.labels


@pytest.mark.parametrize(
    "training, recomputed",
    [
        ({}, False),  # TRL GRPO, num_iterations 1, transformers' generate: no importance sampling
        ({"num_iterations": 2}, True),
        ({"use_vllm": True}, True),  # vllm_importance_sampling_correction (default true)
        ({"mode": "rloo"}, True),  # RLOOTrainer always recomputes them
        ({"mode": "rloo", "old_log_probs": False}, False),
        ({"mode": "ppo", "use_vllm": False}, True),  # verl always (unless rollout_correction.bypass_mode)
    ],
)
def test_when_the_old_policy_log_probs_are_recomputed(training, recomputed):
    assert ("old-policy log-probs" in labels(rl_setup(**training))) is recomputed


def test_a_larger_log_prob_micro_batch_raises_that_pass_alone():
    def pass_bytes(**training):
        report = estimate(rl_setup(num_iterations=2, beta=0.04, **training))
        timeline = report.ranks[0].timeline
        return {label: timeline.activations[i] for i, label in enumerate(timeline.labels) if "log-probs" in label}

    base = pass_bytes()
    wider = pass_bytes(log_prob_micro_batch_size=8)
    assert wider["old-policy log-probs"] > base["old-policy log-probs"]
    assert wider["reference log-probs"] == base["reference log-probs"]
    assert pass_bytes(ref_log_prob_micro_batch_size=8)["reference log-probs"] > base["reference log-probs"]


def test_the_fields_belong_to_the_rl_modes():
    with pytest.raises(ValueError, match="belongs to: grpo, rloo, ppo"):
        Setup.model_validate({"model": {"preset": "gpt2"}, "training": {"mode": "dpo", "log_prob_micro_batch_size": 4}})


def test_verl_reads_each_pass_micro_batch():
    setup, keys = inputs.read(VERL / "run_qwen2-7b.sh", overrides=QWEN)
    training = setup.training
    assert (training.old_log_probs, training.log_prob_micro_batch_size, training.ref_log_prob_micro_batch_size) == (True, 40, 40)
    report = estimate(setup)
    assert "old-policy log-probs" in report.ranks[0].timeline.labels


def test_verl_dynamic_batching_sizes_the_passes_by_tokens():
    setup, _ = inputs.read(VERL / "run_qwen2-7b_seq_balance.sh", overrides=QWEN)
    # log_prob_max_token_len_per_gpu follows the actor's 24,000 tokens: ÷ 1,536 tokens per row
    assert setup.training.log_prob_micro_batch_size == 24000 // 1536


def test_verl_bypass_mode_skips_the_recompute():
    text = (
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct "
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 actor_rollout_ref.actor.ppo_mini_batch_size=16 "
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 algorithm.rollout_correction.bypass_mode=true "
        "trainer.n_gpus_per_node=8\n"
    )
    setup, keys = inputs.read_texts({"run.sh": text})
    assert setup.training.old_log_probs is False
    assert "old-policy log-probs" not in estimate(setup).ranks[0].timeline.labels
