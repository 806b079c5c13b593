"""Real trainer files from the projects' own repositories (tests/data/trainer_files/SOURCES.md), each read into a
Setup whose fields are checked against what the file says (and the framework's documented defaults)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trainmem import inputs

yaml = pytest.importorskip("yaml")  # trainer files are YAML; PyYAML is a runtime dependency

DATA = Path(__file__).parent / "data" / "trainer_files"
TOY_QWEN3 = {  # a small qwen3 config.json, standing in for the Qwen3 models no preset covers
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
MODEL = {"model": {"preset": "llama-3.2-1b"}}
"""Accelerate and DeepSpeed files name no model; the command line gives one (--preset)."""
BATCH = {"micro_batch_size": 2, "gradient_accumulation_steps": 1}
"""A DeepSpeed file's "auto" batch sizes come from the trainer; alone, the command line gives them."""
ALL7 = ["gate_proj", "down_proj", "up_proj", "q_proj", "v_proj", "k_proj", "o_proj"]

# file -> (overrides, expected Setup fields by dotted path)
EXAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "axolotl/lora-1b.yml": (
        {},
        {
            "model.preset": "llama-3.2-1b",
            "finetuning.method": "lora",
            "finetuning.lora.r": 16,
            "finetuning.lora.lora_dropout": 0.05,
            "finetuning.lora.target_modules": ALL7,
            "sequence_length": 2048,
            "micro_batch_size": 2,
            "gradient_accumulation_steps": 2,
            "optimizer.name": "adamw-8bit",
            "activation_checkpointing": "full",
            "attention": "flash_attention_2",
            "precision": "bf16-pure",
        },
    ),
    "axolotl/qlora-1b.yml": (
        {},
        {
            "finetuning.method": "qlora",
            "finetuning.quantization.bits": 4,
            "finetuning.lora.r": 32,
            "micro_batch_size": 2,
            "gradient_accumulation_steps": 4,
            "attention": "flash_attention_2",
            "finetuning.quantization.quant_type": "nf4",
            "finetuning.quantization.double_quant": True,
        },
    ),
    "axolotl/fft-8b.yaml": (
        {},
        {
            "model.preset": "llama-3-8b",
            "finetuning.method": "full",
            "sequence_length": 8192,
            "micro_batch_size": 1,
            "gradient_accumulation_steps": 8,
            "optimizer.name": "paged-adamw-8bit",
            "activation_checkpointing": "full",
        },
    ),
    "axolotl/fft-8b-liger-fsdp.yaml": (
        {},
        {
            "model.preset": "llama-3.1-8b",
            "parallelism.strategy": "fsdp",
            "parallelism.fsdp_sharding_strategy": "FULL_SHARD",
            "parallelism.offload_parameters": True,
            "parallelism.offload_optimizer": True,
            "loss": "liger",
            "optimizer.name": "adamw",
            "optimizer.implementation": "fused",
            "micro_batch_size": 2,
            "gradient_accumulation_steps": 4,
            "sequence_length": 4096,
            "attention": "flash_attention_2",
        },
    ),
    "axolotl/qlora-fsdp-70b.yaml": (
        {},
        {
            "model.preset": "llama-3-70b",
            "finetuning.method": "qlora",
            "finetuning.lora.r": 8,
            "finetuning.lora.target_modules": "all-linear",
            "sequence_length": 512,
            "micro_batch_size": 1,
            "gradient_accumulation_steps": 4,
            "optimizer.name": "adamw",
            "parallelism.strategy": "fsdp",
        },
    ),
    "axolotl/instruct-dpo-lora-8b.yml": (
        {},
        {
            "model.preset": "llama-3-8b",
            "finetuning.method": "qlora",
            "finetuning.quantization.bits": 8,
            "finetuning.lora.r": 32,
            "sequence_length": 4096,
            "micro_batch_size": 2,
            "training.mode": "dpo",
            "gradient_accumulation_steps": 4,
        },
    ),
    "axolotl/lora-8b.yml": (
        {},
        {
            "model.preset": "llama-3-8b",
            "finetuning.quantization.bits": 8,
            "finetuning.lora.target_modules": "all-linear",
            "micro_batch_size": 2,
            "sequence_length": 4096,
            "optimizer.name": "adamw-8bit",
        },
    ),
    "axolotl/fft_optimized.yml": (
        {},
        {
            "model.preset": "llama-2-7b",
            "finetuning.method": "full",
            "sequence_length": 4096,
            "micro_batch_size": 1,
            "gradient_accumulation_steps": 1,
            "optimizer.name": "adamw-8bit",
            "attention": "flash_attention_2",
        },
    ),
    "axolotl/gemma2-qlora.yml": (
        {},
        {
            "model.preset": "gemma-2-9b",
            "finetuning.method": "qlora",
            "finetuning.lora.r": 32,
            "micro_batch_size": 1,
            "gradient_accumulation_steps": 4,
            "sequence_length": 2048,
        },
    ),
    "axolotl/deepspeed_configs/zero2.json": (
        {**MODEL, **BATCH, "precision": "bf16-mixed"},
        {"parallelism.strategy": "zero", "parallelism.zero_stage": 2, "parallelism.offload_optimizer": True},
    ),
    "axolotl/deepspeed_configs/zero3_bf16.json": (
        {**MODEL, **BATCH},
        {"parallelism.zero_stage": 3, "precision": "bf16-mixed", "parallelism.offload_parameters": False},
    ),
    "axolotl/deepspeed_configs/zero3_bf16_cpuoffload_all.json": (
        {**MODEL, **BATCH},
        {"parallelism.zero_stage": 3, "parallelism.offload_optimizer": True, "parallelism.offload_parameters": True},
    ),
    "llamafactory/examples/train_lora/llama3_lora_sft.yaml": (
        {},
        {
            "model.preset": "llama-3-8b",
            "finetuning.method": "lora",
            "finetuning.lora.r": 8,
            "finetuning.lora.target_modules": "all-linear",
            "sequence_length": 2048,
            "micro_batch_size": 1,
            "gradient_accumulation_steps": 8,
            "precision": "bf16-pure",
            "activation_checkpointing": "full",
            "optimizer.implementation": "fused",
        },
    ),
    "llamafactory/examples/train_lora/llama3_lora_dpo.yaml": (
        {},
        {"finetuning.method": "lora", "micro_batch_size": 1, "training.mode": "dpo", "gradient_accumulation_steps": 8},
    ),
    "llamafactory/examples/train_lora/llama3_lora_sft_ds3.yaml": (
        {},
        {
            "parallelism.strategy": "zero",
            "parallelism.zero_stage": 3,
            "micro_batch_size": 1,
            "gradient_accumulation_steps": 2,
            "precision": "bf16-mixed",
            "finetuning.lora.r": 8,
        },
    ),
    "llamafactory/examples/train_qlora/llama3_lora_sft_otfq.yaml": (
        {},
        {
            "finetuning.method": "qlora",
            "finetuning.quantization.bits": 4,
            "finetuning.lora.r": 8,
            "gradient_accumulation_steps": 8,
        },
    ),
    "llamafactory/examples/train_full/llama3_full_sft.yaml": (
        {},
        {
            "finetuning.method": "full",
            "parallelism.zero_stage": 3,
            "gradient_accumulation_steps": 2,
            "precision": "bf16-mixed",
            "activation_checkpointing": "full",
        },
    ),
    "llamafactory/examples/train_full/qwen2_5_full_sft_fsdp.yaml": (
        {},
        {
            "model.preset": "qwen2.5-7b",
            "precision": "bf16-pure",
            "loss": "liger",
            "attention": "flash_attention_2",
            "sequence_length": 32768,
            "micro_batch_size": 1,
            "gradient_accumulation_steps": 2,
        },
    ),
    "llamafactory/examples/extras/galore/llama3_full_sft.yaml": (
        {},
        {"finetuning.method": "full", "precision": "bf16-pure", "sequence_length": 1024, "micro_batch_size": 1},
    ),
    "llamafactory/examples/accelerate/fsdp_config.yaml": (
        MODEL,
        {
            "parallelism.strategy": "fsdp",
            "parallelism.num_gpus": 2,
            "parallelism.offload_parameters": True,
            "parallelism.offload_optimizer": True,
            "precision": "fp16-mixed",
        },
    ),
    "llamafactory/examples/deepspeed/ds_z2_config.json": (
        {**MODEL, **BATCH, "precision": "bf16-mixed"},
        {"parallelism.zero_stage": 2, "parallelism.offload_optimizer": False},
    ),
    "llamafactory/examples/deepspeed/ds_z2_offload_config.json": (
        {**MODEL, **BATCH, "precision": "bf16-mixed"},
        {"parallelism.zero_stage": 2, "parallelism.offload_optimizer": True},
    ),
    "llamafactory/examples/deepspeed/ds_z3_config.json": (
        {**MODEL, **BATCH, "precision": "bf16-mixed"},
        {"parallelism.zero_stage": 3, "parallelism.offload_parameters": False},
    ),
    "llamafactory/examples/deepspeed/ds_z3_offload_config.json": (
        {**MODEL, **BATCH, "precision": "bf16-mixed"},
        {"parallelism.zero_stage": 3, "parallelism.offload_parameters": True, "parallelism.offload_optimizer": True},
    ),
    "accelerate/examples/config_yaml_templates/deepspeed.yaml": (
        {**MODEL, "micro_batch_size": 2},
        {
            "parallelism.strategy": "zero",
            "parallelism.zero_stage": 1,
            "parallelism.num_gpus": 2,
            "precision": "fp16-mixed",
            "gradient_accumulation_steps": 1,
            "optimizer.name": "adamw",
            "optimizer.implementation": None,
        },
    ),
    "accelerate/examples/config_yaml_templates/fsdp.yaml": (
        MODEL,
        {
            "parallelism.strategy": "fsdp",
            "parallelism.fsdp_sharding_strategy": "FULL_SHARD",
            "precision": "bf16-mixed",
            "parallelism.num_gpus": 2,
            "parallelism.offload_parameters": False,
            "activation_checkpointing": "none",
        },
    ),
    "accelerate/examples/config_yaml_templates/multi_gpu.yaml": (
        MODEL,
        {"parallelism.strategy": "ddp", "parallelism.num_gpus": 2, "precision": "bf16-mixed"},
    ),
    "accelerate/examples/config_yaml_templates/single_gpu.yaml": (
        MODEL,
        {"parallelism.num_gpus": 1, "precision": "bf16-mixed"},
    ),
    "accelerate/examples/config_yaml_templates/multi_node.yaml": (
        MODEL,
        {"parallelism.strategy": "ddp", "parallelism.num_gpus": 8, "parallelism.gpus_per_node": 4},
    ),
    "accelerate/examples/deepspeed_config_templates/zero_stage1_config.json": (
        {**MODEL, "micro_batch_size": 2},
        {"parallelism.zero_stage": 1, "precision": "fp16-mixed", "gradient_accumulation_steps": 1},
    ),
    "accelerate/examples/deepspeed_config_templates/zero_stage3_offload_config.json": (
        {**MODEL, "micro_batch_size": 2},
        {
            "parallelism.zero_stage": 3,
            "parallelism.offload_parameters": True,
            "parallelism.offload_optimizer": True,
            "precision": "fp16-mixed",
            "optimizer.implementation": "fused",
        },
    ),
    "trl/examples/accelerate_configs/deepspeed_zero2.yaml": (
        MODEL,
        {"parallelism.zero_stage": 2, "parallelism.num_gpus": 8, "precision": "fp32", "gradient_accumulation_steps": 1},
    ),
    "trl/examples/accelerate_configs/deepspeed_zero3.yaml": (
        MODEL,
        {"parallelism.zero_stage": 3, "parallelism.num_gpus": 8, "precision": "fp16-mixed"},
    ),
    "trl/examples/accelerate_configs/fsdp2.yaml": (
        MODEL,
        {
            "parallelism.strategy": "fsdp",
            "parallelism.fsdp_sharding_strategy": "FULL_SHARD",
            "precision": "bf16-mixed",
            "parallelism.num_gpus": 8,
        },
    ),
    "trl/examples/accelerate_configs/fsdp_qlora.yaml": (
        MODEL,
        {"parallelism.strategy": "fsdp", "parallelism.offload_parameters": True, "parallelism.num_gpus": 8},
    ),
    "trl/examples/cli_configs/example_config.yaml": (
        {},
        {
            "model.preset": "qwen2.5-0.5b",
            "micro_batch_size": 8,
            "sequence_length": 1024,
            "precision": "bf16-mixed",
            "activation_checkpointing": "full",
            "optimizer.name": "adamw",
            "optimizer.implementation": "fused",
        },
    ),
    "alignment-handbook/recipes/zephyr-7b-beta/sft/config_qlora.yaml": (
        {},
        {
            "model.preset": "mistral-7b",
            "finetuning.method": "qlora",
            "finetuning.lora.r": 16,
            "finetuning.lora.lora_dropout": 0.05,
            "micro_batch_size": 4,
            "gradient_accumulation_steps": 2,
            "sequence_length": 2048,
            "attention": "flash_attention_2",
            "precision": "bf16-pure",
            "finetuning.quantization.double_quant": False,
            "finetuning.lora.target_modules": [
                "q_proj",
                "k_proj",
                "v_proj",
                "o_proj",
                "gate_proj",
                "up_proj",
                "down_proj",
            ],
        },
    ),
    "alignment-handbook/recipes/zephyr-7b-beta/dpo/config_full.yaml": (
        {},
        {
            "model.preset": "mistral-7b",
            "micro_batch_size": 8,
            "training.mode": "dpo",
            "gradient_accumulation_steps": 2,
            "sequence_length": 1024,
            "optimizer.name": "adamw",
            "optimizer.implementation": None,
            "activation_checkpointing": "full",
            "precision": "bf16-mixed",
        },
    ),
    "alignment-handbook/recipes/llama3-8b/orpo/config_v1.0.yaml": (
        {},
        {
            "model.preset": "llama-3-8b",
            "micro_batch_size": 4,
            "sequence_length": 2048,
            "optimizer.name": "adamw-8bit",
            "attention": "flash_attention_2",
            "precision": "bf16-pure",
        },
    ),
    "alignment-handbook/recipes/accelerate_configs/deepspeed_zero3.yaml": (
        MODEL,
        {
            "parallelism.zero_stage": 3,
            "parallelism.offload_optimizer": True,
            "parallelism.offload_parameters": True,
            "parallelism.num_gpus": 1,
            "precision": "bf16-mixed",
        },
    ),
    "deepspeed/training/tensor_parallel/hf_integration/configs/ds_config.json": (
        {**MODEL, **BATCH, "precision": "bf16-mixed"},
        {"parallelism.zero_stage": 2, "optimizer.name": "adamw", "optimizer.implementation": "fused"},
    ),
    "transformers/training_args.json": (
        {"model": {"preset": "gpt2"}},
        {
            "micro_batch_size": 4,
            "precision": "fp32",
            "activation_checkpointing": "none",
            "optimizer.implementation": "fused",
            "gradient_accumulation_steps": 1,
        },
    ),
    "trl/sft_config.json": (
        {"model": {"preset": "gpt2"}},
        {"micro_batch_size": 8, "sequence_length": 1024, "precision": "bf16-mixed", "activation_checkpointing": "full"},
    ),
    "trl/dpo_config.json": (
        {"model": {"preset": "gpt2"}},
        {
            "micro_batch_size": 8,
            "training.mode": "dpo",
            "sequence_length": 1024,
            "precision": "bf16-mixed",
            "activation_checkpointing": "full",
        },
    ),
    "peft/tinyllama-adapter_config.json": (
        {},
        {
            "model.preset": "tinyllama-1.1b",
            "finetuning.method": "lora",
            "finetuning.lora.r": 16,
            "finetuning.lora.lora_dropout": 0.05,
        },
    ),
    "peft/llama2-adapter_config.json": (
        {"model": {"preset": "llama-2-7b"}},
        {
            "finetuning.lora.r": 64,
            "finetuning.lora.target_modules": ["q_proj", "v_proj"],
            "finetuning.lora.lora_dropout": 0.1,
        },
    ),
}
WITH_TOY_QWEN3 = {
    "llamafactory/examples/train_lora/qwen3_lora_sft.yaml": {
        "finetuning.method": "lora",
        "finetuning.lora.r": 8,
        "gradient_accumulation_steps": 8,
        "sequence_length": 2048,
    },
    "llamafactory/examples/train_full/hparam_sweep/qwen3_full_sft_opt_adafactor.yaml": {
        "optimizer.name": "adafactor",
        "parallelism.zero_stage": 3,
        "loss": "liger",
        "sequence_length": 32768,
        "attention": "flash_attention_2",
    },
}


OWN_TEST_FILES = ("torchtune", "verl")
"""Folders whose files have a test file of their own (tests/test_inputs_torchtune.py, tests/test_inputs_verl.py)."""


def field(setup: Any, path: str) -> Any:
    value: Any = setup
    for part in path.split("."):
        value = getattr(value, part)
    return value


def test_enough_real_files_are_covered():
    files = {
        str(p.relative_to(DATA))
        for p in DATA.rglob("*")
        if p.suffix in (".json", ".yaml", ".yml") and p.relative_to(DATA).parts[0] not in OWN_TEST_FILES
    }
    assert files == set(EXAMPLES) | set(WITH_TOY_QWEN3)
    assert len(files) >= 30
    sources = (DATA / "SOURCES.md").read_text()
    assert all(f"| {name} |" in sources for name in files)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_real_file_gives_the_setup_it_describes(name):
    overrides, expected = EXAMPLES[name]
    setup, keys = inputs.read(DATA / name, overrides=overrides)
    for path, value in expected.items():
        assert field(setup, path) == value, path
    assert keys.files[0].name.endswith(name)
    assert keys.entries, "every key is reported"
    unknown = [e.key for e in keys.entries if "unknown to trainmem" in e.detail]
    assert not unknown, f"keys neither modelled nor listed as memory-neutral: {unknown}"


@pytest.mark.parametrize("name", sorted(WITH_TOY_QWEN3))
def test_config_json_gives_the_model_a_hub_id_cannot(name, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TOY_QWEN3))
    setup, keys = inputs.read(DATA / name, config)
    assert setup.model.hf_config["model_type"] == "qwen3"
    for path, value in WITH_TOY_QWEN3[name].items():
        assert field(setup, path) == value, path
    assert "model" in [f.kind for f in keys.files]


def test_every_key_of_every_file_is_classed():
    for name, (overrides, _) in EXAMPLES.items():
        _, keys = inputs.read(DATA / name, overrides=overrides)
        statuses = {e.status for e in keys.entries}
        assert statuses <= {"modelled", "memory-neutral", "not modelled"}
        assert all(e.detail for e in keys.entries if e.status != "memory-neutral"), name


def test_linked_deepspeed_config_is_read_from_the_repository_root():
    """LLaMA-Factory names examples/deepspeed/ds_z3_config.json relative to where its trainer starts."""
    _, keys = inputs.read(DATA / "llamafactory/examples/train_full/llama3_full_sft.yaml")
    kinds = {f.kind: f for f in keys.files}
    assert kinds["deepspeed"].name.endswith("examples/deepspeed/ds_z3_config.json")
    assert kinds["deepspeed"].linked_from.endswith("llama3_full_sft.yaml: deepspeed")
    autos = {e.key: e.detail for e in keys.entries if e.value == "auto"}
    assert "micro_batch_size = 1" in autos["train_micro_batch_size_per_gpu"]
    assert "hidden_size² = 16,777,216" in autos["zero_optimization.reduce_bucket_size"]


def test_not_modelled_features_are_reported_with_their_assumption():
    _, keys = inputs.read(DATA / "llamafactory/examples/extras/galore/llama3_full_sft.yaml")
    galore = {e.key: e for e in keys.entries if e.key.startswith(("use_galore", "galore_"))}
    assert galore["use_galore"].status == "not modelled"
    assert "assumed full AdamW states" in galore["use_galore"].detail
    _, keys = inputs.read(DATA / "axolotl/lora-8b.yml")
    entry = next(e for e in keys.entries if e.key == "lora_modules_to_save")
    assert entry.status == "modelled" and "trained full copies" in entry.detail
