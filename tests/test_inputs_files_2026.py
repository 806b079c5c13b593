"""Real trainer files of 2025–2026 (tests/data/trainer_files_2026/SOURCES.md): every file gives a report or is refused
in one line naming the file and the key, and the key fields of a dozen of them are pinned to what their framework runs.

A file whose base model is a Hub id no preset matches (Qwen3 dense, Gemma 3 1B, GLM-4-32B, ...) is refused in one line
that asks for the model's config.json; the spot tests add a small qwen3 config.json to read the rest of the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import trainmem
from trainmem import inputs

pytest.importorskip("yaml")

DATA = Path(__file__).parent / "data" / "trainer_files_2026"
TOY_QWEN3 = {
    "model_type": "qwen3",
    "vocab_size": 32000,
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 3,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": 40960,
    "head_dim": 32,
}
ALONE = {"model": {"preset": "llama-3.2-1b"}, "micro_batch_size": 2, "gradient_accumulation_steps": 1}
"""A DeepSpeed or Accelerate file names no model and leaves the batch to the trainer: the command line gives them."""


def collected() -> list[str]:
    rows = (DATA / "SOURCES.md").read_text().splitlines()
    return [row.split("|")[1].strip() for row in rows if row.startswith("| ") and not row.startswith("| file here")]


def overrides_for(name: str) -> dict[str, Any]:
    alone = "/deepspeed" in name or "accelerate" in name
    return ALONE if alone else {}


REFUSED = {
    # the Hub id matches no preset: the line asks for the model's config.json
    "axolotl/qwen3-32b-qlora.yaml": "base_model: 'Qwen/Qwen3-32B' matches no preset",
    "axolotl/qwen3-8b-lora-fused-attn-compile.yaml": "matches no preset",
    "axolotl/qwen3-qlora-fsdp.yaml": "matches no preset",
    "axolotl/qwen3-reward-model.yaml": "matches no preset",
    "axolotl/gpt-oss-120b-fft-fsdp2-offload.yaml": "'axolotl-ai-co/gpt-oss-120b-dequantized' matches no preset",
    "axolotl/llama4-scout-qlora-single-h100-flex.yaml": "matches no preset",
    "axolotl/llama4-scout-qlora-flexattn-fsdp2.yaml": "matches no preset",
    "axolotl/gemma-3-1b-qlora.yml": "'google/gemma-3-1b-it' matches no preset",
    "axolotl/glm4-qlora-32b.yaml": "'THUDM/GLM-4-32B-0414' matches no preset",
    "axolotl/mistral-dpo-qlora.yml": "'mistralai/Mistral-7B-Instruct-v0.2' matches no preset",
    "llamafactory/examples/train_lora/qwen3_lora_dpo.yaml": "matches no preset",
    "llamafactory/examples/train_lora/qwen3_lora_kto.yaml": "per_device_train_batch_size: 1: LLaMA-Factory's KTO",
    "llamafactory/examples/train_lora/qwen3_lora_reward.yaml": "matches no preset",
    "llamafactory/examples/train_qlora/qwen3_lora_sft_otfq.yaml": "matches no preset",
    "llamafactory/examples/train_qlora/llama3_lora_sft_awq.yaml": "'TechxGenus/Meta-Llama-3-8B-Instruct-AWQ' matches no",
    "llamafactory/examples/train_full/qwen3_full_sft.yaml": "matches no preset",
    "llamafactory/examples/train_lora/qwen3_lora_sft_ds3.yaml": "matches no preset",
    "llamafactory/examples/train_full/qwen3_full_sft_fsdp2.yaml": "matches no preset",
    "llamafactory/examples/train_full/qwen3_full_sft_compile.yaml": "matches no preset",
    "verl/examples/grpo_trainer/run_qwen3-1.7b.sh": "'Qwen/Qwen3-1.7B' matches no preset",
    "verl/examples/grpo_trainer/run_deepseek7b_llm.sh": "'deepseek-ai/deepseek-llm-7b-chat' matches no preset",
    "torchtune/qwen3/8B_full.yaml": "model._component_: 'Qwen/Qwen3-8B' matches no preset",
    "torchtune/qwen3/1.7B_lora_single_device.yaml": "matches no preset",
    # what trainmem does not model, refused rather than estimated as something else
    "axolotl/mistral-small-3.1-24B-lora.yml": "lora_target_modules: 'language_model.model.layers.",
    "llamafactory/examples/train_lora/llama3_lora_ppo.yaml": "stage: ppo (LLaMA-Factory's PPO",
    "llamafactory/examples/merge_lora/qwen3_lora_sft.yaml": "export_dir: an export (merge) config",
    "verl/examples/grpo_trainer/run_qwen2-7b_megatron.sh": "actor_rollout_ref.actor.megatron: a Megatron actor",
    "torchtune/llama3_2/1B_lora_single_device_grpo.yaml": "reward_functions: torchtune's grpo_finetune_single_device",
    # a DeepSpeed file alone whose "auto" precision nothing fills
    "axolotl/deepspeed_configs/zero1.json": 'bf16.enabled: "auto" is filled from the trainer',
    "llamafactory/examples/deepspeed/ds_z3_partial_offload_config.json": 'bf16.enabled: "auto"',
    "llamafactory/examples/deepspeed/ds_z0_config.json": 'bf16.enabled: "auto"',
    "llamafactory/examples/deepspeed/ds_z3_config.json": 'bf16.enabled: "auto"',
}


def test_enough_files_are_collected_and_sourced():
    names = collected()
    assert len(names) >= 40
    assert len(set(names)) == len(names)
    on_disk = {str(p.relative_to(DATA)) for p in DATA.rglob("*") if p.is_file() and p.name != "SOURCES.md"}
    assert on_disk == set(names)
    assert set(REFUSED) <= set(names)


@pytest.mark.parametrize("name", collected())
def test_each_file_gives_a_report_or_a_one_line_refusal(name):
    try:
        setup, keys = inputs.read(DATA / name, overrides=overrides_for(name))
        report = trainmem.estimate(setup)
    except ValueError as error:
        message = str(error)
        assert "\n" not in message
        assert name in REFUSED, f"refused: {message}"
        assert REFUSED[name] in message
        assert Path(name).name in message or message.startswith("model")
        return
    assert name not in REFUSED, f"expected a refusal ({REFUSED.get(name)})"
    assert report.peak_total_bytes > 0
    unknown = [e.key for e in keys.entries if "unknown to trainmem" in e.detail]
    assert not unknown, f"keys neither read nor listed as memory-neutral: {unknown}"


def test_the_cli_refuses_in_one_line(capsys):
    from trainmem.cli import main

    code = main(["estimate", str(DATA / "llamafactory/examples/train_lora/llama3_lora_ppo.yaml")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("trainmem: error: ")


def read(name: str, *more: Any, gpus: int = 0, **fields: Any):
    """The file (and ``more`` files) read with the command line's fields on top (``gpus``: --gpus)."""
    patch = {**overrides_for(name), **fields}
    if gpus:
        patch["parallelism"] = {"num_gpus": gpus}
    return inputs.read(DATA / name, *more, overrides=patch)


def field(setup: Any, path: str) -> Any:
    value: Any = setup
    for part in path.split("."):
        value = getattr(value, part)
    return value


@pytest.fixture()
def toy_qwen3(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TOY_QWEN3))
    return path


SPOT: dict[str, dict[str, Any]] = {
    # Axolotl lists CutCrossEntropyPlugin: cut_cross_entropy defaults to true; gradient_checkpointing: offload
    "axolotl/qwen3-32b-qlora.yaml": {
        "loss": "chunked",
        "finetuning.method": "qlora",
        "finetuning.quantization.bits": 4,
        "finetuning.lora.r": 16,
        "batch": "packed",
        "activation_checkpointing": "full",
        "precision": "bf16-pure",
        "optimizer.name": "adamw-8bit",
    },
    # FSDP1 with fsdp_offload_params: FSDP's CPUOffload moves parameters, gradients and the optimizer step off the GPU
    "axolotl/qwen3-qlora-fsdp.yaml": {
        "parallelism.strategy": "fsdp",
        "parallelism.offload_parameters": True,
        "parallelism.offload_optimizer": True,
        "finetuning.lora.target_modules": "all-linear",
        "finetuning.lora.lora_dropout": 0.05,
    },
    # torch_compile is named, not modelled; lora with load_in_4bit: false
    "axolotl/qwen3-8b-lora-fused-attn-compile.yaml": {
        "finetuning.method": "lora",
        "finetuning.lora.r": 32,
        "sequence_length": 4096,
        "gradient_accumulation_steps": 4,
        "optimizer.implementation": "fused",
    },
}


@pytest.mark.parametrize("name", sorted(SPOT))
def test_spot_fields_with_a_qwen3_config(name, toy_qwen3):
    setup, keys = read(name, toy_qwen3)
    for path, value in SPOT[name].items():
        assert field(setup, path) == value, path


def test_cut_cross_entropy_plugin_turns_the_chunked_loss_on(toy_qwen3):
    _, keys = read("axolotl/qwen3-32b-qlora.yaml", toy_qwen3)
    entry = next(e for e in keys.entries if e.key == "plugins")
    assert entry.status == "modelled" and "cut_cross_entropy defaults to true" in entry.detail
    kernels = {e.key: e for e in keys.entries if e.key.startswith("lora_") and e.key.endswith("_kernel")}
    assert {k: e.status for k, e in kernels.items()} == dict.fromkeys(kernels, "not modelled") and len(kernels) == 3
    setup, _ = read("axolotl/glm-45-air-qlora.yaml")
    assert setup.loss == "chunked"
    entry = next(e for e in _.entries if e.key == "quantize_moe_experts")
    assert entry.status == "not modelled" and "upper bound" in entry.detail


def test_gpt_oss_fsdp2_full_fine_tuning_keeps_fp32_shards():
    """Accelerate upcasts trainable bf16 parameters to fp32 before FSDP shards them (mixed precision on)."""
    setup, keys = read("axolotl/gpt-oss-20b-fft-fsdp2.yaml", gpus=8)
    assert setup.model.preset == "gpt-oss-20b"
    assert setup.parallelism.strategy == "fsdp" and setup.parallelism.fsdp_version == 2
    assert setup.precision == "bf16-mixed"
    assert setup.parallelism.fsdp_reshard_after_forward is not False
    assert setup.loss == "chunked" and setup.batch == "packed"
    assert setup.optimizer.name == "adamw-8bit"
    assert any("upcasts the trainable parameters to fp32" in note for note in keys.notes)
    report = trainmem.estimate(setup)
    assert "fsdp-mixed" in report.model_dump_json()
    quantization = {e.key: e.status for e in keys.entries if e.key.startswith("model_quantization_config")}
    assert quantization == {"model_quantization_config": "modelled", "model_quantization_config_kwargs": "modelled"}
    assert next(e for e in keys.entries if e.key == "flash_attention").status == "modelled"


def test_gpt_oss_zero3_takes_the_linked_config_and_its_auto_bucket():
    setup, keys = read("axolotl/gpt-oss-20b-fft-deepspeed-zero3.yaml", gpus=8)
    assert setup.parallelism.strategy == "zero" and setup.parallelism.zero_stage == 3
    assert setup.precision == "bf16-mixed"  # DeepSpeed keeps fp32 master weights
    assert setup.parallelism.zero_reduce_bucket_size == 2880**2  # "auto": hidden_size² (HF integration)
    assert setup.attention == "flash_attention_2"  # the second attn_implementation wins, as YAML loaders do
    assert {f.kind for f in keys.files} == {"axolotl", "deepspeed"}


def test_deepspeed_optimizer_section_replaces_the_trainer_optim(toy_qwen3):
    setup, keys = read("axolotl/qwen3-reward-model.yaml", toy_qwen3, sequence_length=4096)
    assert setup.optimizer.name == "adamw" and setup.optimizer.implementation == "fused"
    assert any("replaces" in n and "adamw-8bit" in n for n in keys.notes)
    assert setup.training.mode == "reward"
    assert setup.parallelism.zero_stage == 1


def test_explicit_reduce_bucket_size_is_read():
    setup, keys = read("llamafactory/examples/deepspeed/ds_z3_fp8_config.json")
    assert setup.parallelism.zero_reduce_bucket_size == 12845056
    assert setup.parallelism.offload_optimizer is True
    assert next(e for e in keys.entries if e.key == "fp8").status == "not modelled"


def test_accelerate_no_distribution_starts_one_process():
    setup, keys = read("trl/examples/accelerate_configs/single_gpu.yaml")
    assert setup.parallelism.num_gpus == 1  # num_processes: 8, but distributed_type NO: simple_launcher
    assert setup.precision == "bf16-mixed"
    setup, _ = read("trl/examples/accelerate_configs/multi_gpu.yaml")
    assert (setup.parallelism.num_gpus, setup.parallelism.strategy, setup.precision) == (8, "ddp", "fp32")


def test_accelerate_parallelism_config_sizes_are_named():
    setup, keys = read("trl/examples/accelerate_configs/context_parallel_2gpu.yaml")
    entry = next(e for e in keys.entries if e.key.endswith("parallelism_config_cp_size"))
    assert entry.status == "not modelled" and "upper bound" in entry.detail
    assert setup.parallelism.strategy == "fsdp" and setup.parallelism.num_gpus == 2
    setup, keys = read("trl/examples/accelerate_configs/fsdp2_sharding_2gpus.yaml")
    assert setup.activation_checkpointing == "full"  # fsdp_activation_checkpointing
    assert all(e.status == "memory-neutral" for e in keys.entries if e.key.startswith("parallelism_config"))
    setup, _ = read("trl/examples/accelerate_configs/deepspeed_zero1.yaml")
    assert (setup.parallelism.num_gpus, setup.parallelism.zero_stage) == (3, 1)


def test_llamafactory_preference_and_reward_stages(toy_qwen3):
    setup, keys = read("llamafactory/examples/train_lora/qwen3_lora_dpo.yaml", toy_qwen3)
    assert setup.training.mode == "dpo" and setup.finetuning.lora.r == 8
    assert any("logits.to(torch.float32)" in n for n in keys.notes)
    setup, _ = read("llamafactory/examples/train_lora/qwen3_lora_reward.yaml", toy_qwen3)
    assert setup.training.mode == "reward"
    with pytest.raises(ValueError, match="per_device_train_batch_size: 1: LLaMA-Factory's KTO"):
        read("llamafactory/examples/train_lora/qwen3_lora_kto.yaml", toy_qwen3)
    setup, _ = read("llamafactory/examples/train_lora/qwen3_lora_kto.yaml", toy_qwen3, micro_batch_size=2)
    assert setup.training.mode == "kto"


def test_llamafactory_otfq_and_partial_offload(toy_qwen3):
    setup, keys = read("llamafactory/examples/train_qlora/qwen3_lora_sft_otfq.yaml", toy_qwen3)
    assert setup.finetuning.method == "qlora" and setup.finetuning.quantization.bits == 4
    assert next(e for e in keys.entries if e.key == "quantization_method").status == "modelled"
    setup, keys = read("llamafactory/examples/train_full/qwen3_full_sft.yaml", toy_qwen3)
    assert setup.parallelism.zero_stage == 3 and setup.parallelism.offload_optimizer is True
    assert setup.loss == "liger" and setup.sequence_length == 131072
    assert setup.parallelism.zero_reduce_bucket_size == 256**2


def test_llamafactory_fsdp_accelerate_config_with_trainer_file():
    setup, _ = inputs.read(
        DATA / "llamafactory/examples/train_full/qwen2_5_full_sft_fsdp_offload.yaml",
        DATA / "llamafactory/examples/accelerate/fsdp_v2_offload_config.yaml",
        overrides={"sequence_length": 4096},
    )
    assert setup.model.preset.startswith("qwen2.5-7b")
    assert setup.parallelism.strategy == "fsdp" and setup.parallelism.fsdp_version == 2
    assert setup.parallelism.offload_parameters is True
    assert setup.precision == "bf16-mixed" and setup.loss == "liger"


def test_axolotl_kto_dpo_and_fsdp1_full(tmp_path):
    setup, _ = read("axolotl/llama3-qlora-1b-kto.yaml")
    assert setup.training.mode == "kto" and setup.micro_batch_size == 2 and setup.finetuning.method == "qlora"
    setup, keys = read("axolotl/llama3-fft-8b-fsdp.yml")
    assert setup.parallelism.strategy == "fsdp"  # no fsdp_version: trainmem's default (transformers 5.24's, 2)
    assert setup.precision == "bf16-mixed" and setup.activation_checkpointing == "none"
    assert setup.sequence_length == 8192 and setup.optimizer.name == "adamw"


def test_verl_deprecated_global_micro_batch(toy_qwen3):
    setup, keys = read("verl/examples/grpo_trainer/run_deepseek7b_llm.sh", toy_qwen3)
    assert setup.training.mode == "grpo" and setup.training.num_generations == 5
    assert setup.micro_batch_size == 16  # ppo_micro_batch_size 128 / 8 ranks
    assert setup.gradient_accumulation_steps == 10  # 256 × 5 / 8 / 16
    statuses = {e.key: e.status for e in keys.entries}
    assert statuses["actor_rollout_ref.actor.fsdp_config.grad_offload"] == "memory-neutral"
    assert statuses["actor_rollout_ref.rollout.log_prob_micro_batch_size"] == "not modelled"


def test_torchtune_qwen3_moe_and_dpo():
    setup, _ = read("torchtune/qwen3/30B_A3B_full.yaml", gpus=4)
    assert setup.model.preset == "qwen3-30b-a3b"
    assert setup.parallelism.strategy == "fsdp" and setup.precision == "bf16-pure" and setup.loss == "chunked"
    setup, _ = read("torchtune/llama3_2/3B_lora_dpo_single_device.yaml")
    assert setup.training.mode == "dpo" and setup.finetuning.lora.r == 8 and setup.micro_batch_size == 4


def _fuzz_module():
    import importlib.util
    import sys

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "fuzz_trainer_files.py"
    spec = importlib.util.spec_from_file_location("fuzz_trainer_files_2026", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_a_seeded_fuzz_sample_of_these_files_is_read_or_refused_in_one_line(monkeypatch):
    """benchmarks/fuzz_trainer_files.py --data tests/data/trainer_files_2026 (1,500 cases, seed 1, found the two
    crashes pinned below)."""
    fuzz = _fuzz_module()
    monkeypatch.setattr(fuzz, "DATA", DATA)
    result = fuzz.summary(fuzz.fuzz(fuzz.sample_cases(100, seed=3), estimate=False))
    assert result["crashes"] == []
    assert result["files"] > 20


def test_wrong_typed_dropout_and_precision_flag_are_refused_naming_the_key():
    """Found by the fuzz: float({...}) and a dict in a set raised TypeError."""
    text = (DATA / "axolotl/qwen3-qlora-fsdp.yaml").read_text().replace("lora_dropout: 0.05", "lora_dropout: {x: 1}")
    with pytest.raises(ValueError, match=r"lora_dropout: must be a number, got \{'x': 1\}"):
        inputs.read_texts({"qlora-fsdp.yaml": text}, overrides={"model": {"preset": "gpt2"}})
    config = json.loads((DATA / "axolotl/deepspeed_configs/zero3_bf16.json").read_text())
    config["bf16"]["enabled"] = {"x": 1}
    with pytest.raises(ValueError, match='bf16.enabled: must be true, false or "auto"'):
        inputs.read_texts({"zero3.json": json.dumps(config)}, overrides=ALONE)


def test_fsdp_true_and_a_wrong_typed_fsdp():
    """transformers 5.24 takes fsdp=True (options in fsdp_config); a number there raised TypeError (found by the fuzz)."""
    text = (DATA / "axolotl/llama3-fft-8b-fsdp.yml").read_text()
    setup, _ = inputs.read_texts({"fft.yml": text.replace("fsdp:\n  - full_shard\n  - auto_wrap\n", "fsdp: true\n")})
    assert setup.parallelism.strategy == "fsdp" and setup.parallelism.fsdp_sharding_strategy == "FULL_SHARD"
    with pytest.raises(ValueError, match="fsdp: must be true, false, a list of FSDP options"):
        inputs.read_texts({"fft.yml": text.replace("fsdp:\n  - full_shard\n  - auto_wrap\n", "fsdp: 0.37\n")})
