"""torchtune recipe configs (tests/data/trainer_files/torchtune, copied from the torchtune 0.6.1 wheel): each read into
the Setup it describes, every key classed, and bad values refused in one line naming the key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trainmem import inputs
from trainmem.cli import main
from trainmem.inputs.detect import detect_kind

yaml = pytest.importorskip("yaml")

DATA = Path(__file__).parent / "data" / "trainer_files" / "torchtune"
LLAMA_MLP = ["q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
TOY_PHI3 = {  # a small Phi-3-shaped config.json standing in for Phi-4 14B (microsoft/phi-4 has no preset)
    "model_type": "phi3",
    "vocab_size": 1024,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "max_position_embeddings": 4096,
}

TOY_QWEN3 = {  # a small qwen3 config.json standing in for Qwen3-8B (no preset)
    "model_type": "qwen3",
    "vocab_size": 32000,
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 3,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": 4096,
    "head_dim": 32,
}
WITH_CONFIG = {
    "phi4/14B_lora_single_device.yaml": ("microsoft/phi-4", TOY_PHI3, ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]),
    "qwen3/8B_lora_single_device.yaml": ("Qwen/Qwen3-8B", TOY_QWEN3, LLAMA_MLP),
}
"""Builders whose checkpoint has no preset: the read asks for its config.json, and reads it when given."""

EXAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "llama3_1/8B_full.yaml": (
        {},
        {
            "model.preset": "llama-3.1-8b",
            "finetuning.method": "full",
            "micro_batch_size": 2,
            "gradient_accumulation_steps": 1,
            "precision": "bf16-pure",
            "optimizer.name": "adamw",
            "optimizer.implementation": "fused",
            "loss": "chunked",
            "loss_chunks": 8,
            "activation_checkpointing": "full",
            "parallelism.strategy": "fsdp",
            "parallelism.fsdp_version": 2,
        },
    ),
    "llama3_1/8B_full_single_device.yaml": (
        {},
        {"optimizer.name": "paged-adamw-8bit", "parallelism.strategy": "ddp", "activation_checkpointing": "full"},
    ),
    "llama3_1/70B_full.yaml": (
        {"parallelism": {"num_gpus": 8}},
        {
            "model.preset": "llama-3.1-70b",
            "parallelism.strategy": "fsdp",
            "parallelism.offload_parameters": True,
            "parallelism.offload_optimizer": True,
            "optimizer.implementation": None,
        },
    ),
    "llama3_1/8B_lora_single_device.yaml": (
        {},
        {
            "finetuning.method": "lora",
            "finetuning.lora.r": 8,
            "finetuning.lora.lora_dropout": 0.0,
            "finetuning.lora.target_modules": LLAMA_MLP,
            "gradient_accumulation_steps": 8,
            "sequence_length": 2048,
        },
    ),
    "llama3_1/8B_qlora_single_device.yaml": (
        {},
        {
            "finetuning.method": "qlora",
            "finetuning.quantization.bits": 4,
            "finetuning.quantization.quant_type": "nf4",
            "finetuning.quantization.double_quant": True,
            "finetuning.lora.target_modules": LLAMA_MLP,
            "gradient_accumulation_steps": 8,
        },
    ),
    "llama3_1/8B_lora_dpo.yaml": (
        {"parallelism": {"num_gpus": 2}},
        {
            "training.mode": "dpo",
            "training.beta": 0.1,
            "micro_batch_size": 4,
            "sequence_length": 1024,
            "parallelism.strategy": "fsdp",
            "parallelism.fsdp_version": 2,
            "finetuning.method": "lora",
        },
    ),
    "llama3_1/8B_lora_dpo_single_device.yaml": (  # lora_dpo_single_device.py
        {},
        {
            "training.mode": "dpo",
            "micro_batch_size": 4,
            "sequence_length": 1024,
            "gradient_accumulation_steps": 8,
            "parallelism.num_gpus": 1,
            "finetuning.method": "lora",
            "precision": "bf16-pure",
        },
    ),
    "llama3_1/8B_full_dpo.yaml": (
        {},
        {"training.mode": "dpo", "training.beta": 0.05, "finetuning.method": "full", "sequence_length": 1024},
    ),
    "llama3_2/1B_full_single_device.yaml": (
        {},
        {"model.preset": "llama-3.2-1b", "micro_batch_size": 4, "activation_checkpointing": "none", "optimizer.name": "paged-adamw-8bit"},
    ),
    "llama3_2/3B_lora_single_device.yaml": (
        {},
        {"model.preset": "llama-3.2-3b", "finetuning.lora.r": 64, "micro_batch_size": 4},
    ),
    "qwen2_5/7B_lora_single_device.yaml": (
        {},
        {"model.preset": "qwen2.5-7b", "finetuning.lora.target_modules": LLAMA_MLP, "loss": "chunked"},
    ),
    "gemma2/2B_qlora_single_device.yaml": (
        {},
        {"model.preset": "gemma-2-2b", "finetuning.method": "qlora", "finetuning.lora.r": 64, "micro_batch_size": 4},
    ),
    "phi3/mini_lora_single_device.yaml": (
        {},
        {"model.preset": "phi-3-mini", "finetuning.lora.target_modules": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]},
    ),
    "mistral/7B_full_low_memory.yaml": (
        {},
        {"model.preset": "mistral-7b", "optimizer.name": "paged-adamw", "activation_checkpointing": "full"},
    ),
}


def field(setup: Any, path: str) -> Any:
    value: Any = setup
    for part in path.split("."):
        value = getattr(value, part)
    return value


REFUSED = {"mistral/7B_full_ppo_low_memory.yaml": "reward_and_value_model: torchtune's ppo_full_finetune_single_device.py"}
"""torchtune's RL recipes: not trainmem's RL step, refused in one line naming the key that tells them apart."""


def test_every_real_file_is_covered_and_sourced():
    files = {str(p.relative_to(DATA)) for p in DATA.rglob("*.yaml")}
    assert files == set(EXAMPLES) | set(WITH_CONFIG) | set(REFUSED)
    assert len(files) >= 12
    sources = (DATA.parent / "SOURCES.md").read_text()
    assert all(f"| torchtune/{name} | pytorch/torchtune | recipes/configs/{name} |" in sources for name in files)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_real_file_gives_the_setup_it_describes(name):
    overrides, expected = EXAMPLES[name]
    setup, keys = inputs.read(DATA / name, overrides=overrides)
    for path, value in expected.items():
        assert field(setup, path) == value, path
    assert keys.files[0].kind == "torchtune"
    unknown = [e.key for e in keys.entries if "unknown to trainmem" in e.detail]
    assert not unknown, f"keys neither modelled nor listed as memory-neutral: {unknown}"
    assert all(e.detail for e in keys.entries if e.status != "memory-neutral")


def test_detected_by_its_components():
    data = yaml.safe_load((DATA / "llama3_1/8B_lora_single_device.yaml").read_text())
    assert detect_kind(data) == "torchtune"
    assert detect_kind({"model": {"_component_": "mypkg.models.thing"}, "batch_size": 2}) != "torchtune"


@pytest.mark.parametrize("name", sorted(WITH_CONFIG))
def test_builder_without_preset_asks_for_its_config(tmp_path, capsys, name):
    hub_id, toy, targets = WITH_CONFIG[name]
    code = main(["estimate", str(DATA / name)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "model._component_" in err and hub_id in err and "config.json" in err
    config = tmp_path / "config.json"
    config.write_text(json.dumps(toy))
    setup, keys = inputs.read(DATA / name, config)
    assert setup.model.hf_config["model_type"] == toy["model_type"]
    assert setup.finetuning.lora.target_modules == targets
    assert setup.finetuning.method == "lora" and setup.precision == "bf16-pure"


def test_not_modelled_switches_say_what_was_assumed():
    _, keys = inputs.read(DATA / "mistral/7B_full_low_memory.yaml")
    entries = {e.key: e for e in keys.entries}
    assert entries["optimizer_in_bwd"].status == "not modelled"
    assert "upper bound" in entries["optimizer_in_bwd"].detail
    assert entries["enable_activation_offloading"].status == "not modelled"
    _, keys = inputs.read(DATA / "llama3_1/8B_lora_single_device.yaml")
    defaults = {e.key: e for e in keys.entries if e.default}
    assert "trainmem's assumption" in defaults["tokenizer.max_seq_len"].detail  # max_seq_len: null


def test_multi_gpu_flag_makes_the_run_fsdp2_only_when_no_strategy_is_given():
    setup, keys = inputs.read(DATA / "llama3_1/8B_lora_single_device.yaml")
    assert setup.parallelism.strategy == "ddp" and setup.parallelism.num_gpus == 1
    setup, keys = inputs.read(DATA / "llama3_1/8B_lora_single_device.yaml", overrides={"parallelism": {"num_gpus": 4}})
    assert setup.parallelism.strategy == "fsdp" and setup.parallelism.fsdp_version == 2
    assert any("FSDP2" in note for note in keys.notes)
    setup, _ = inputs.read(
        DATA / "llama3_1/8B_lora_single_device.yaml",
        overrides={"parallelism": {"num_gpus": 4, "strategy": "zero", "zero_stage": 2}},
    )
    assert setup.parallelism.strategy == "zero"


def test_estimate_reads_a_recipe_from_the_command_line(capsys):
    code = main(["estimate", str(DATA / "llama3_2/1B_full_single_device.yaml"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["inputs"]["files"][0]["kind"] == "torchtune"
    assert out["setup"]["precision"] == "bf16-pure"


BASE = (DATA / "llama3_2/1B_full_single_device.yaml").read_text()
LORA = (DATA / "llama3_2/3B_lora_single_device.yaml").read_text()


@pytest.mark.parametrize(
    "text, fragment",
    [
        (BASE.replace("dtype: bf16", "dtype: fp16"), "dtype: torchtune trains in bf16 or fp32"),
        (BASE.replace("batch_size: 4", "batch_size: -4"), "batch_size: must be a positive integer"),
        (BASE.replace("batch_size: 4", "batch_size: .inf"), "batch_size is not a finite number"),
        (BASE.replace("enable_activation_checkpointing: False", "enable_activation_checkpointing: maybe"), "enable_activation_checkpointing: must be true or false"),
        (BASE.replace("_component_: torchtune.models.llama3_2.llama3_2_1b", "_component_: 7"), "model._component_: must name a torchtune model builder"),
        (LORA.replace("lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']", "lora_attn_modules: ['o_proj']"), "model.lora_attn_modules: unknown module 'o_proj'"),
        (LORA.replace("lora_rank: 64", "lora_rank: 2.5"), "model.lora_rank: must be a positive integer"),
        (LORA.replace("lora_dropout: 0.0", "lora_dropout: 3"), "model.lora_dropout: must be a number from 0 to below 1"),
        (LORA.replace("  lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']\n", ""), "model.lora_attn_modules: a LoRA builder needs it"),
    ],
)
def test_bad_values_name_the_key(tmp_path, capsys, text, fragment):
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    code = main(["estimate", str(path)])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith("trainmem: error: ") and captured.err.count("\n") == 1, captured.err
    assert "recipe.yaml: " in captured.err
    assert fragment in captured.err


def test_from_torchtune_reads_a_file_whatever_it_holds():
    setup, keys = inputs.read_texts({"r.yaml": BASE}, kind="torchtune")
    assert keys.files[0].kind == "torchtune" and setup.model.preset == "llama-3.2-1b"
    setup, keys = inputs.read_texts({"r.yaml": BASE}, kind="tune")
    assert keys.files[0].kind == "torchtune"


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_rl_recipes_are_refused_in_one_line(name, capsys):
    from trainmem.cli import main

    code = main(["estimate", str(DATA / name), "--preset", "mistral-7b"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("trainmem: error: ")
    assert REFUSED[name] in err


def test_grpo_recipe_keys_are_refused(tmp_path, capsys):
    from trainmem.cli import main

    path = tmp_path / "grpo.yaml"
    path.write_text("model: {_component_: torchtune.models.llama3_2.llama3_2_3b}\ngrpo_samples: 16\nbatch_size: 1\n")
    code = main(["estimate", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "grpo_samples: torchtune's dev/grpo_full_finetune_distributed.py" in err
