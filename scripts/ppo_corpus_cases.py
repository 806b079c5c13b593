"""Corpus cases of verl's PPO (``training.mode: ppo``) and of its critic alone (``mode: critic``), appended to
corpus_cases.CASES. The measured steps are ``trainmem.measure.critic`` (CriticStep, PPOStep): the critic is
``AutoModelForTokenClassification`` with one label and verl's clipped value loss; the PPO round is GRPO's
measured round (TRL's fused log-prob head with the entropy, hence ``log_prob_head: fused``) with the critic's
values pass and update between the log-prob passes and the actor's update. Ids start with ``verl-``.
"""

from __future__ import annotations

from typing import Any

from small_models import LLAMA_14M

FUSED = {"log_prob_head": "fused", "log_prob_entropy": True}


def ppo_cases(case: Any) -> list[dict[str, Any]]:
    def with_training(case_id: str, model: Any, training: dict[str, Any], **options: Any) -> dict[str, Any]:
        defined = case(case_id, model, **options)
        defined["setup"]["training"] = training
        return defined

    # fmt: off
    return [
        with_training("verl-critic-llama14m-ampbf16-b8-s512", LLAMA_14M, {"mode": "critic"}, batch=8, seq=512,
                      precision="amp-bf16",
                      description="verl's critic alone under autocast: score (hidden → 1, bias) on every token, the "
                                  "clipped value loss; the activations peak."),
        with_training("verl-critic-llama14m-fp32-b2-s256", LLAMA_14M, {"mode": "critic"}, batch=2, seq=256,
                      description="verl's critic alone: the value model's optimizer step peaks (AdamW's for-loop temporaries)."),
        with_training("verl-ppo-llama14m-fp32-g2-b2-p64-c32", LLAMA_14M,
                      {"mode": "ppo", "use_vllm": False, "num_generations": 2, "max_prompt_length": 64,
                       "max_completion_length": 32, **FUSED}, batch=2, seq=128,
                      description="PPO: actor and critic resident; generation, the critic's values pass and update, "
                                  "then the actor's update, whose fused head's backward peaks."),
        with_training("verl-ppo-llama14m-v4k-fp32-critic8-b1x8-p1016-c8", {**LLAMA_14M, "vocab_size": 4096},
                      {"mode": "ppo", "use_vllm": False, "num_generations": 2, "max_prompt_length": 1016,
                       "max_completion_length": 8, "critic_micro_batch_size": 8, "critic_gradient_accumulation_steps": 1,
                       **FUSED}, batch=1, seq=128, accumulation=8,
                      description="PPO whose critic phase peaks: 8 completions per critic micro-batch against the actor's 1, the actor's weights and optimizer states resident under the critic's activations."),
    ]
    # fmt: on
