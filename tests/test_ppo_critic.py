"""PPO with a critic (training.mode ppo, verl 0.9.1's adv_estimator gae) and the critic's update alone (mode critic):
the value model's inventory, its phase spliced into the actor's step, the offload flags, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import trainmem
from trainmem import inputs
from trainmem.plan import Plan
from trainmem.setup import Setup

TINY = {
    "model_type": "llama", "vocab_size": 4096, "hidden_size": 192, "intermediate_size": 512, "num_hidden_layers": 4,
    "num_attention_heads": 6, "num_key_value_heads": 2, "max_position_embeddings": 4096, "tie_word_embeddings": False,
}


def ppo(**training) -> dict:
    return {
        "model": {"hf_config": TINY}, "micro_batch_size": 1, "gradient_accumulation_steps": 8, "precision": "fp32",
        "optimizer": {"name": "adamw", "implementation": "for-loop"}, "runtime": {"device": "cpu"},
        "training": {"mode": "ppo", "use_vllm": False, "num_generations": 2, "max_prompt_length": 256,
                     "max_completion_length": 128, "log_prob_head": "fused", "log_prob_entropy": True, **training},
    }


def estimate(setup: dict):
    return trainmem.estimate(setup, suggestions=False)


def parts(report) -> dict:
    return {(part.category, part.name): part.bytes for part in report.parts}


def test_the_critic_is_a_value_head_model():
    setup = Setup.model_validate({**ppo(), "training": {"mode": "critic"}, "sequence_length": 256})
    plan = Plan(setup)
    names = [tensor.name for tensor in plan.inventory.head]
    assert "score.weight" in names and "score.bias" in names and "lm_head.weight" not in names
    causal = Plan(Setup.model_validate({**ppo(), "training": {"mode": "sft"}, "sequence_length": 256}))
    assert plan.num_parameters == causal.num_parameters - 4096 * 192 + 192 + 1


def test_ppo_holds_both_models_and_peaks_in_the_larger_phase():
    grpo = estimate({**ppo(), "training": {**ppo()["training"], "mode": "grpo"}})
    actor_heavy = estimate(ppo())
    found = parts(actor_heavy)
    assert found[("parameters", "critic weights")] == found[("parameters", "weights")] - (4096 * 192 - 192 - 1) * 4
    assert found[("optimizer_states", "critic optimizer states")] > 0
    assert actor_heavy.peak_allocated_bytes > grpo.peak_allocated_bytes
    assert not actor_heavy.peak.label.startswith("critic")
    critic_heavy = estimate(ppo(critic_micro_batch_size=8, critic_gradient_accumulation_steps=1))
    assert critic_heavy.peak.label.startswith("critic: ") and "critic" in critic_heavy.peak.description
    assert ("activations", "critic saved for backward") in parts(critic_heavy)
    assert any(warning.startswith("PPO's critic") for warning in critic_heavy.warnings)


def test_the_critic_phase_sits_between_the_log_prob_passes_and_the_actor_update():
    labels = estimate(ppo(beta=0.04)).ranks[0].timeline.labels
    values = labels.index("critic: values pass (no_grad)")
    assert labels.index("reference log-probs") < values < labels.index("critic: optimizer step")
    assert labels.index("critic: zero_grad") < labels.index("embedding (micro-batch 1)")


def test_offloaded_states_leave_the_other_phase():
    plain = parts(estimate(ppo()))
    critic_offloaded = estimate(ppo(critic_param_offload=True, critic_optimizer_offload=True))
    assert not critic_offloaded.peak.label.startswith("critic")
    assert ("parameters", "critic weights") in plain and ("parameters", "critic weights") not in parts(critic_offloaded)
    assert ("optimizer_states", "critic optimizer states") not in parts(critic_offloaded)
    heavy = dict(critic_micro_batch_size=8, critic_gradient_accumulation_steps=1)
    actor_offloaded = estimate(ppo(**heavy, actor_param_offload=True, actor_optimizer_offload=True))
    assert actor_offloaded.peak.label.startswith("critic: ")
    assert ("parameters", "weights") not in parts(actor_offloaded)
    assert actor_offloaded.peak_allocated_bytes < estimate(ppo(**heavy)).peak_allocated_bytes


def test_the_critic_follows_its_own_checkpointing():
    heavy = dict(critic_micro_batch_size=8, critic_gradient_accumulation_steps=1)
    full = estimate(ppo(**heavy, critic_activation_checkpointing="full"))
    none = estimate(ppo(**heavy))
    assert full.peak_allocated_bytes < none.peak_allocated_bytes


@pytest.mark.parametrize(
    "setup, field, words",
    [
        (ppo(critic_model="llama-9"), "training.critic_model", "unknown preset"),
        ({**ppo(), "training": {"mode": "grpo", "critic_micro_batch_size": 2}}, "training.critic_micro_batch_size", "not a field of mode 'grpo'"),
        ({**ppo(), "training": {"mode": "critic"}, "model": {"preset": "qwen2.5-0.5b"}}, "training.mode", "tied-embedding"),
        ({**ppo(), "loss": "chunked"}, "loss", "value head"),
        (ppo(critic_micro_batch_size=0), "training.critic_micro_batch_size", ""),
    ],
)
def test_bad_input_is_one_line_naming_the_field(tmp_path, setup, field, words):
    path = tmp_path / "setup.json"
    path.write_text(json.dumps(setup))
    run = subprocess.run([sys.executable, "-m", "trainmem", "estimate", str(path)], capture_output=True, text=True)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"trainmem: error: {field}: ") and words in lines[0], lines


def test_a_tied_model_gets_an_untied_critic():
    report = estimate({**ppo(), "model": {"preset": "qwen2.5-0.5b"}, "micro_batch_size": 1, "gradient_accumulation_steps": 2,
                       "training": {**ppo()["training"], "max_prompt_length": 64, "max_completion_length": 32}})
    found = parts(report)
    assert found[("parameters", "critic weights")] == pytest.approx(found[("parameters", "weights")], rel=1e-5)


def test_verl_critic_keys(tmp_path):
    text = (
        "actor_rollout_ref: {model: {path: Qwen/Qwen2.5-0.5B-Instruct}, actor: {ppo_micro_batch_size_per_gpu: 2, "
        "ppo_mini_batch_size: 8, fsdp_config: {param_offload: true, optimizer_offload: true}}, rollout: {n: 1, name: vllm}}\n"
        "critic: {ppo_micro_batch_size_per_gpu: 4, model: {path: Qwen/Qwen2.5-0.5B-Instruct, enable_gradient_checkpointing: false}, "
        "fsdp: {param_offload: true, optimizer_offload: false}}\n"
        "algorithm: {adv_estimator: gae}\ntrainer: {n_gpus_per_node: 2}\n"
    )
    setup, keys = inputs.read_texts({"ppo.yaml": text})
    training = setup.training
    assert training.mode == "ppo"
    assert (training.critic_micro_batch_size, training.critic_gradient_accumulation_steps) == (4, 1)  # the actor's mini-batch: 8 prompts × 1 / 2 GPUs / 4
    assert training.critic_param_offload is True and training.critic_optimizer_offload is False
    assert training.actor_param_offload is True and training.actor_optimizer_offload is True
    assert training.critic_activation_checkpointing == "none"
    statuses = {e.key: e.status for e in keys.entries}
    assert statuses["critic.fsdp.param_offload"] == "modelled"
    assert not [e.key for e in keys.entries if "unknown to trainmem" in e.detail]
    grpo, _ = inputs.read_texts({"g.yaml": text.replace("adv_estimator: gae", "adv_estimator: grpo")})
    assert grpo.training.mode == "grpo" and grpo.training.critic_micro_batch_size is None
