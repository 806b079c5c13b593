"""verl PPO/GRPO configs (tests/data/trainer_files/verl): the trainer YAML of verl 0.9.1 and example launch scripts of
``key=value`` overrides, read into trainmem's RL step; bad values refused in one line naming the key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trainmem import inputs
from trainmem.cli import main
from trainmem.inputs.detect import detect_kind
from trainmem.inputs.hydra_overrides import parse_overrides
from trainmem.inputs.sources import parse_text

yaml = pytest.importorskip("yaml")

DATA = Path(__file__).parent / "data" / "trainer_files" / "verl"
SCRIPTS = DATA / "examples" / "grpo_trainer"
CONFIGS = DATA / "verl" / "trainer" / "config"
QWEN = {"model": {"preset": "qwen2.5-7b"}}
"""Qwen2-7B-Instruct and Qwen2.5-3B-Instruct have no preset: the command line gives a model of that size (--preset)."""

EXAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "examples/grpo_trainer/run_qwen2-7b.sh": (
        QWEN,
        {
            "training.mode": "grpo",
            "training.num_generations": 5,
            "training.beta": 0.001,
            "training.max_prompt_length": 512,
            "training.max_completion_length": 1024,
            "training.use_vllm": True,
            "training.vllm_mode": "colocate",
            "training.vllm_gpu_memory_utilization": 0.6,
            "training.vllm_enable_sleep_mode": True,
            "sequence_length": 1536,
            "micro_batch_size": 40,
            "gradient_accumulation_steps": 4,  # 256 prompts × 5 / 8 GPUs / 40
            "parallelism.num_gpus": 8,
            "parallelism.strategy": "fsdp",
            "parallelism.fsdp_version": 1,
            "precision": "bf16-mixed",
            "activation_checkpointing": "full",
            "batch": "packed",
            "finetuning.method": "full",
        },
    ),
    "examples/grpo_trainer/run_qwen2-7b_seq_balance.sh": (
        QWEN,
        {
            "micro_batch_size": 15,  # use_dynamic_bsz: 24,000 tokens per micro-batch / 1,536 per row
            "gradient_accumulation_steps": 11,
            "training.use_vllm": True,  # rollout_name="sglang" in the script
        },
    ),
    "examples/grpo_trainer/run_qwen2_5-3b_gsm8k_grpo_lora.sh": (
        QWEN,
        {
            "finetuning.method": "lora",
            "finetuning.lora.r": 64,
            "finetuning.lora.target_modules": "all-linear",
            "parallelism.num_gpus": 2,
            "gradient_accumulation_steps": 1,
            "micro_batch_size": 40,
        },
    ),
    "examples/ppo_trainer/run_gemma.sh": (
        {},
        {
            "model.preset": "gemma-2-2b",
            "training.mode": "ppo",  # adv_estimator gae (verl's default): the critic's phase too
            "training.critic_micro_batch_size": 4,
            "training.critic_gradient_accumulation_steps": 16,  # the actor's ppo_mini_batch_size 128 / 2 GPUs / 4
            "training.critic_activation_checkpointing": "none",  # critic.model.enable_gradient_checkpointing=False
            "training.critic_param_offload": False,  # critic.model.fsdp_config.param_offload (the older spelling)
            "micro_batch_size": 4,
            "gradient_accumulation_steps": 16,  # 128 prompts × 1 / 2 GPUs / 4
            "training.num_generations": 1,
            "training.beta": 0.0,
            "batch": "padded",
            "training.vllm_gpu_memory_utilization": 0.4,
            "sequence_length": 1536,
        },
    ),
    "verl/trainer/config/_generated_ppo_trainer.yaml": (
        {**QWEN, "micro_batch_size": 4},
        {"training.mode": "ppo", "training.beta": 0.0, "parallelism.num_gpus": 8, "sequence_length": 1024,
         "training.critic_activation_checkpointing": "full", "training.critic_micro_batch_size": None},
    ),
    "verl/trainer/config/ppo_trainer.yaml": (
        {**QWEN, "micro_batch_size": 4},
        {"training.mode": "ppo", "parallelism.strategy": "fsdp"},
    ),
}


def field(setup: Any, path: str) -> Any:
    value: Any = setup
    for part in path.split("."):
        value = getattr(value, part)
    return value


def test_every_real_file_is_covered_and_sourced():
    files = {str(p.relative_to(DATA)) for p in DATA.rglob("*") if p.is_file()}
    assert files == set(EXAMPLES)
    sources = (DATA.parent / "SOURCES.md").read_text()
    assert all(f"| verl/{name} | volcengine/verl | " in sources for name in files)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_real_file_gives_the_setup_it_describes(name):
    overrides, expected = EXAMPLES[name]
    setup, keys = inputs.read(DATA / name, overrides=overrides)
    for path, value in expected.items():
        assert field(setup, path) == value, path
    assert keys.files[0].kind == "verl"
    unknown = [e.key for e in keys.entries if "unknown to trainmem" in e.detail]
    assert not unknown, f"keys neither modelled nor listed as memory-neutral: {unknown}"


def test_what_does_not_map_is_named():
    _, keys = inputs.read(CONFIGS / "_generated_ppo_trainer.yaml", overrides={**QWEN, "micro_batch_size": 4})
    entries = {e.key: e for e in keys.entries}
    assert entries["algorithm.adv_estimator"].status == "modelled"  # gae: PPO with its critic (training.mode ppo)
    assert "critic" in entries["algorithm.adv_estimator"].detail
    assert entries["critic.fsdp.param_offload"].status == "modelled"
    _, keys = inputs.read(DATA / "examples/ppo_trainer/run_gemma.sh")
    entries = {e.key: e for e in keys.entries}
    assert entries["critic.ppo_micro_batch_size_per_gpu"].status == "modelled"
    assert entries["critic.model.path"].status == "modelled"  # the actor's model
    assert entries["algorithm.in_reward_kl"].status == "not modelled"
    _, keys = inputs.read(SCRIPTS / "run_qwen2-7b.sh", overrides=QWEN)
    entries = {e.key: e for e in keys.entries}
    assert entries["actor_rollout_ref.ref.fsdp_config.param_offload"].status == "not modelled"
    assert entries["actor_rollout_ref.actor.fsdp_config.param_offload"].status == "memory-neutral"  # False
    assert any("use_fused_kernels" in note for note in keys.notes)


def test_a_script_is_read_as_its_overrides():
    text = (SCRIPTS / "run_qwen2-7b_seq_balance.sh").read_text()
    data = parse_text("run.sh", text)
    assert detect_kind(data) == "verl"
    assert data["actor_rollout_ref"]["rollout"]["name"] == "sglang"  # rollout_name="sglang" # sglang or vllm
    assert data["trainer"]["logger"] == ["console", "wandb"]
    assert data["data"]["train_files"] == "$HOME/data/gsm8k/train.parquet"  # left symbolic
    assert parse_text("overrides.txt", "a.b=1\nactor_rollout_ref.model.path=x\n") == {
        "a": {"b": 1},
        "actor_rollout_ref": {"model": {"path": "x"}},
    }
    assert parse_overrides("GPUS=${1:-4}\npython3 -m x trainer.n_gpus_per_node=$GPUS +c.d=true", "s.sh") == {
        "trainer": {"n_gpus_per_node": 4},
        "c": {"d": True},
    }


def test_the_generated_config_needs_a_micro_batch(capsys):
    code = main(["estimate", str(CONFIGS / "_generated_ppo_trainer.yaml"), "--preset", "qwen2.5-7b"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "ppo_micro_batch_size_per_gpu: not set" in err and "--micro-batch-size" in err


def test_estimate_from_a_launch_script(capsys):
    code = main(["estimate", str(SCRIPTS / "run_qwen2-7b.sh"), "--preset", "qwen2.5-7b", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["inputs"]["files"][0]["kind"] == "verl"
    assert out["setup"]["training"]["mode"] == "grpo"


SCRIPT = (SCRIPTS / "run_qwen2-7b.sh").read_text()


@pytest.mark.parametrize(
    "text, fragment",
    [
        (SCRIPT.replace("rollout.name=vllm", "rollout.name=onnx"), "actor_rollout_ref.rollout.name: must be one of vllm"),
        (SCRIPT + " actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.strategy: megatron: trainmem models verl's FSDP actor"),
        (SCRIPT.replace("ppo_micro_batch_size_per_gpu=40", "ppo_micro_batch_size_per_gpu=-3"), "ppo_micro_batch_size_per_gpu: must be a positive integer"),
        (SCRIPT.replace("ppo_micro_batch_size_per_gpu=40", "ppo_micro_batch_size_per_gpu=48"), "ppo_mini_batch_size: 256 prompts × rollout.n 5"),
        (SCRIPT.replace("gpu_memory_utilization=0.6", "gpu_memory_utilization=7"), "gpu_memory_utilization: must be a number from 0.01 to 1"),
        (SCRIPT.replace("use_kl_loss=True", "use_kl_loss=maybe"), "actor_rollout_ref.actor.use_kl_loss: must be true or false"),
        (SCRIPT.replace("trainer.n_gpus_per_node=8", "trainer.n_gpus_per_node=eight"), "trainer.n_gpus_per_node: must be a positive integer"),
        ("set -x\n", "no key=value overrides found"),
    ],
)
def test_bad_values_name_the_key(tmp_path, capsys, text, fragment):
    path = tmp_path / "run.sh"
    path.write_text(text)
    code = main(["estimate", str(path), "--preset", "qwen2.5-7b"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith("trainmem: error: ") and captured.err.count("\n") == 1, captured.err
    assert "run.sh" in captured.err and fragment in captured.err


def test_yaml_config_is_detected_by_actor_rollout_ref():
    data = yaml.safe_load((CONFIGS / "ppo_trainer.yaml").read_text())
    assert detect_kind(data) == "verl"
    setup, keys = inputs.read_texts({"c.yaml": "actor_rollout_ref: {model: {path: Qwen/Qwen2.5-0.5B-Instruct}, actor: {ppo_micro_batch_size_per_gpu: 2, ppo_mini_batch_size: 2}, rollout: {n: 4, name: vllm}}\ntrainer: {n_gpus_per_node: 1}\n"})
    assert setup.model.preset == "qwen2.5-0.5b"
    assert setup.gradient_accumulation_steps == 4 and setup.training.num_generations == 4


def test_the_page_reads_both_kinds_as_whole_runs():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "web" / "py"))
    import trainmem_web

    recipe = (DATA.parent / "torchtune" / "llama3_2" / "1B_full_single_device.yaml").read_text()
    script = (SCRIPTS / "run_qwen2-7b.sh").read_text().replace("Qwen/Qwen2-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct")
    form = json.dumps({"model": {"preset": "gpt2"}, "gpu": "h100-sxm-80gb"})
    for name, text, preset in (("1B.yaml", recipe, "llama-3.2-1b"), ("run.sh", script, "qwen2.5-7b")):
        answer = json.loads(trainmem_web.read_files(json.dumps({name: text}), form))
        assert answer["ok"] and answer["mode"] == "run", answer
        assert answer["setup"]["model"] == {"preset": preset}
        assert answer["setup"]["gpu"] == "h100-sxm-80gb"
