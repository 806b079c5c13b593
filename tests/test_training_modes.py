"""The ``training`` part of a Setup (TRL 1.16 post-training modes) and how each mode changes the step."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from small_models import LLAMA_14M

import trainmem
from trainmem.errors import one_line
from trainmem.setup import Setup
from trainmem.training import Training, modes


def small(**fields):
    return {"model": {"hf_config": LLAMA_14M}, "micro_batch_size": 2, "sequence_length": 256, "precision": "fp32",
            "runtime": {"device": "cpu"}, **fields}


def parts(report):
    return {(part.category, part.name): part.bytes for part in report.parts}


# ---------------------------------------------------------------------- the Setup part


def test_the_default_is_todays_supervised_step():
    plain = trainmem.estimate(small(), suggestions=False)
    explicit = trainmem.estimate(small(training={"mode": "sft"}), suggestions=False)
    assert Setup.model_validate(small()).training == Training()
    assert plain.peak_allocated_bytes == explicit.peak_allocated_bytes
    assert plain.timeline == explicit.timeline


def test_every_mode_has_its_trl_defaults_as_data():
    table = modes()
    assert set(table) == {"sft", "dpo", "kto", "orpo", "cpo", "simpo", "reward", "gkd", "grpo", "rloo", "ppo", "critic"}
    assert Training(mode="dpo").resolved("beta") == 0.1
    assert Training(mode="grpo").resolved("beta") == 0.0  # TRL 1.16 GRPOConfig.beta
    assert Training(mode="grpo").resolved("vllm_gpu_memory_utilization") == 0.3
    assert Training(mode="grpo").resolved("loss_type") == "dapo"


@pytest.mark.parametrize(
    "training, field, words",
    [
        ({"mode": "dpo", "num_generations": 4}, "num_generations", "not a field of mode 'dpo'"),
        ({"mode": "grpo", "reference_model": "separate"}, "reference_model", "beta 0"),
        ({"mode": "grpo", "beta": 0.04, "reference_model": "none"}, "reference_model", "needs the reference"),
        ({"mode": "dpo", "loss_type": "dapo"}, "loss_type", "allowed: sigmoid"),
        ({"mode": "orpo", "reference_model": "auto"}, "reference_model", "not a field of mode 'orpo'"),
        ({"mode": "gkd", "teacher": "llama-9"}, "teacher", "unknown preset"),
    ],
)
def test_a_bad_training_field_is_one_error_naming_it(training, field, words):
    with pytest.raises(ValueError) as caught:
        Setup.model_validate(small(training=training))
    line = one_line(caught.value)
    assert line.startswith(f"training.{field}: ") and words in line


def test_a_generation_longer_than_the_model_is_refused():
    with pytest.raises(ValueError, match="max_position_embeddings"):
        Setup.model_validate(small(training={"mode": "grpo", "max_prompt_length": 4000, "max_completion_length": 200}))


def test_the_cli_prints_one_line_and_exits_2(tmp_path):
    path = tmp_path / "setup.json"
    path.write_text(json.dumps(small(training={"mode": "dpo", "num_generations": 4})))
    run = subprocess.run([sys.executable, "-m", "trainmem", "estimate", str(path)], capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "trainmem: error: training.num_generations: is not a field of mode 'dpo' (it belongs to: grpo, rloo, ppo)"
    ]


# ---------------------------------------------------------------------- DPO


def test_dpo_runs_chosen_and_rejected_as_one_batch_of_twice_the_rows():
    report = trainmem.estimate(small(training={"mode": "dpo"}), suggestions=False)
    assert parts(report)[("activations", "input batch")] == 2 * 2 * 256 * 8
    assert report.setup.micro_batch_size == 2  # the user's pairs; the plan runs 4 rows


def test_dpo_keeps_a_reference_copy_unless_peft_or_precomputed():
    full = parts(trainmem.estimate(small(training={"mode": "dpo"}), suggestions=False))
    assert full[("parameters", "reference model")] == full[("parameters", "weights")]
    lora = small(training={"mode": "dpo"}, finetuning={"method": "lora", "lora": {"r": 8}})
    assert ("parameters", "reference model") not in parts(trainmem.estimate(lora, suggestions=False))
    separate = small(training={"mode": "dpo", "reference_model": "separate"}, finetuning={"method": "lora"})
    assert ("parameters", "reference model") in parts(trainmem.estimate(separate, suggestions=False))
    pre = trainmem.estimate(small(training={"mode": "dpo", "precompute_ref_log_probs": True}), suggestions=False)
    assert ("parameters", "reference model") not in parts(pre)
    assert "reference" not in pre.timeline.phases


def test_the_reference_forward_is_its_own_moment_of_the_timeline():
    report = trainmem.estimate(small(training={"mode": "dpo"}), suggestions=False)
    timeline = report.timeline
    index = timeline.phases.index("reference")
    assert timeline.labels[index] == "reference forward"
    assert timeline.phases[index - 1] == "loss" and timeline.phases[index + 1] == "backward"


def test_trl_scores_tokens_without_the_logits_tensor():
    """TRL 1.16's fused log-prob head tiles the vocabulary: at 8B and 4096 tokens no rows × seq × vocab tensor."""
    setup = {"model": "llama-3-8b", "micro_batch_size": 1, "sequence_length": 4096, "precision": "bf16-pure",
             "finetuning": {"method": "lora"}, "activation_checkpointing": "full", "gpu": "h100-sxm-80gb"}
    sft = parts(trainmem.estimate(setup, suggestions=False))
    dpo = parts(trainmem.estimate({**setup, "training": {"mode": "dpo"}}, suggestions=False))
    logits_fp32 = 2 * 4096 * 128256 * 4
    assert sft.get(("activations", "logits and loss temporaries"), 0) > logits_fp32 / 2
    assert dpo.get(("activations", "logits and loss temporaries"), 0) < logits_fp32 / 8


# ---------------------------------------------------------------------- GRPO


def grpo(**training):
    return small(micro_batch_size=2, training={"mode": "grpo", "num_generations": 2, "max_prompt_length": 64,
                                               "max_completion_length": 128, **training})


def test_grpo_generation_and_training_are_separate_peaks():
    report = trainmem.estimate(grpo(), suggestions=False)
    timeline = report.timeline
    totals = [sum(column[i] for column in (timeline.parameters, timeline.gradients, timeline.optimizer_states,
                                          timeline.activations, timeline.overhead)) for i in range(len(timeline.labels))]
    generation = timeline.phases.index("generation")
    assert timeline.labels[generation] == "generation (transformers generate)"
    assert report.peak_allocated_bytes == max(totals)  # the peak is one moment, not generation + training
    assert parts(report)[("activations", "input batch")] == 2 * (64 + 128) * 8


def test_grpo_with_beta_0_has_no_reference_and_with_beta_a_reference_pass():
    none = trainmem.estimate(grpo(), suggestions=False)
    assert ("parameters", "reference model") not in parts(none)
    assert "reference" not in none.timeline.phases
    with_ref = trainmem.estimate(grpo(beta=0.04), suggestions=False)
    assert ("parameters", "reference model") in parts(with_ref)
    assert with_ref.timeline.labels[with_ref.timeline.phases.index("reference")] == "reference log-probs"
    lora = trainmem.estimate(grpo(beta=0.04) | {"finetuning": {"method": "lora"}}, suggestions=False)
    assert ("parameters", "reference model") not in parts(lora)  # the base with adapters disabled
    assert "reference" in lora.timeline.phases


def test_a_colocated_vllm_takes_its_share_unless_it_sleeps():
    setup = {"model": "llama-3.2-1b", "micro_batch_size": 8, "precision": "bf16-pure", "gpu": "h100-sxm-80gb",
             "training": {"mode": "grpo", "use_vllm": True, "max_prompt_length": 256, "max_completion_length": 512}}
    awake = trainmem.estimate(setup, suggestions=False)
    share = parts(awake)[("overhead", "vLLM engine (colocated)")]
    assert share == int(80 * 2**30 * 0.3) or abs(share - 0.3 * awake.fit.capacity_bytes) < 2**20
    asleep = trainmem.estimate({**setup, "training": {**setup["training"], "vllm_enable_sleep_mode": True}},
                               suggestions=False)
    assert ("overhead", "vLLM engine (colocated)") not in parts(asleep) or asleep.peak.phase == "generation"
    index = asleep.timeline.phases.index("generation")
    assert asleep.timeline.overhead[index] >= share


def test_the_generation_batch_must_divide_into_groups():
    with pytest.raises(ValueError) as caught:
        Setup.model_validate(grpo(num_generations=8))
    assert one_line(caught.value).startswith("training.num_generations: ")


def test_rloo_runs_grpos_program_with_a_reference_by_default():
    report = trainmem.estimate(small(micro_batch_size=2, training={"mode": "rloo", "max_prompt_length": 64,
                                                                    "max_completion_length": 64}), suggestions=False)
    assert Training(mode="rloo").resolved("beta") == 0.05  # TRL 1.16 RLOOConfig
    assert ("parameters", "reference model") in parts(report)
    assert {"generation", "reference"} <= set(report.timeline.phases)


def test_what_is_not_modelled_is_said_in_the_report():
    gkd = trainmem.estimate(small(training={"mode": "gkd"}), suggestions=False)
    assert any("on-policy" in warning for warning in gkd.warnings)
    assert ("parameters", "teacher model") in parts(gkd)
    orpo = trainmem.estimate(small(training={"mode": "orpo"}), suggestions=False)
    assert not any("selective_log_softmax" in warning for warning in orpo.warnings)
    assert ("parameters", "reference model") not in parts(orpo)


def test_gkd_holds_a_teacher_and_runs_its_forward_before_the_loss():
    report = trainmem.estimate(small(micro_batch_size=1, sequence_length=128, training={"mode": "gkd"}), suggestions=False)
    assert parts(report)[("parameters", "teacher model")] == parts(report)[("parameters", "weights")]
    timeline = report.timeline
    index = timeline.labels.index("teacher forward")
    assert timeline.phases[index + 1] == "loss"
    with pytest.raises(ValueError) as caught:
        Setup.model_validate(small(training={"mode": "gkd", "teacher": "llama-3-8b"}))
    assert one_line(caught.value).startswith("training.teacher: ")


def test_kto_runs_the_kl_batch_under_no_grad_before_the_policy_forward():
    report = trainmem.estimate(small(training={"mode": "kto"}), suggestions=False)
    timeline = report.timeline
    index = timeline.labels.index("KL forward")
    assert timeline.phases[index] == "reference" and timeline.phases[index + 1] == "forward"
    assert "reference" in timeline.phases[timeline.phases.index("loss"):]  # the reference's KL and batch passes
    assert parts(report)[("activations", "KL batch ids")] == 2 * 256 * 8
    apo = trainmem.estimate(small(training={"mode": "kto", "loss_type": "apo_zero_unpaired"}), suggestions=False)
    assert "KL forward" not in apo.timeline.labels
    assert ("activations", "KL batch ids") not in parts(apo)
    assert not any("KL batch" in warning for warning in report.warnings)


def test_kto_with_a_kl_term_needs_two_examples_per_micro_batch():
    with pytest.raises(ValueError) as caught:
        trainmem.estimate(small(micro_batch_size=1, training={"mode": "kto"}), suggestions=False)
    assert one_line(caught.value).startswith("micro_batch_size: ")
    trainmem.estimate(small(micro_batch_size=1, training={"mode": "kto", "loss_type": "apo_zero_unpaired"}), suggestions=False)


@pytest.mark.parametrize("precision", ["fp32", "bf16-pure", "amp-bf16"])
def test_orpo_keeps_the_full_logits_and_a_chosen_half_log_softmax(precision):
    """The odds-ratio head (training.odds_ratio) replaces the supervised head; in fp32 it keeps the (2b, s, V)
    logits, a chosen-half log-softmax and three logits-sized gradients: more than the supervised step's."""
    orpo = trainmem.estimate(small(precision=precision, training={"mode": "orpo"}), suggestions=False)
    sft = trainmem.estimate(small(precision=precision, micro_batch_size=4), suggestions=False)
    assert orpo.peak_allocated_bytes != sft.peak_allocated_bytes
    if precision == "fp32":
        assert orpo.peak_allocated_bytes > sft.peak_allocated_bytes
    cpo = trainmem.estimate(small(precision=precision, training={"mode": "cpo"}), suggestions=False)
    assert abs(cpo.peak_allocated_bytes - orpo.peak_allocated_bytes) < 1024  # the same tensors, other scalars
