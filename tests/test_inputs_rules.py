"""Rules of the trainer-file readers: detection, framework defaults, what a batch counts, "auto", the tables."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

import trainmem
from trainmem import inputs
from trainmem.catalogs import optimizers, presets
from trainmem.cli import main
from trainmem.inputs.detect import detect_kind
from trainmem.inputs.hub import hub_ids, preset_for_hub_id
from trainmem.inputs.optimizer_names import _table, trainer_optimizer
from trainmem.inputs.render import render_key_report

yaml = pytest.importorskip("yaml")  # trainer files are YAML; PyYAML is a runtime dependency


def read(**texts):
    return inputs.read_texts({name.replace("_", ".", 1): text for name, text in texts.items()})


def defaults_of(keys):
    return {e.key: e.detail for e in keys.entries if e.default}


# --------------------------------------------------------------------------- tables


def test_every_preset_has_a_hub_id_and_every_hub_id_a_preset():
    assert {p.hf_id.lower() for p in presets().values()} <= set(hub_ids())
    assert set(hub_ids().values()) <= set(presets())
    assert preset_for_hub_id("META-LLAMA/Llama-3.1-8B") == "llama-3.1-8b"
    assert preset_for_hub_id("https://huggingface.co/Qwen/Qwen2.5-7B-Instruct") == "qwen2.5-7b"
    assert preset_for_hub_id("Qwen/Qwen3-8B") is None


def transformers_optimizer_names() -> set[str]:
    """OptimizerNames' values, read from transformers' source (importing it would import torch: slow)."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("transformers is not installed")
    source = (Path(list(spec.submodule_search_locations)[0]) / "training_args.py").read_text()
    body = source.split("class OptimizerNames", 1)[1].split("\nclass ", 1)[0].split("\ndef ", 1)[0]
    return set(re.findall(r'^\s+[A-Z0-9_]+ = "([a-z0-9_]+)"', body, flags=re.MULTILINE))


def test_every_transformers_optimizer_name_is_mapped():
    names = transformers_optimizer_names()
    assert len(names) > 30
    assert names <= set(_table()), sorted(names - set(_table()))
    assert {entry.optimizer for entry in _table().values()} <= set(optimizers())


def test_optimizer_names_that_change_memory():
    assert trainer_optimizer("adamw_torch_fused").implementation == "fused"
    assert trainer_optimizer("adamw_bnb_8bit").optimizer == "adamw-8bit"
    assert trainer_optimizer("paged_adamw_32bit").optimizer == "paged-adamw"
    assert trainer_optimizer("lion_32bit").optimizer == "lion"
    assert trainer_optimizer("adafactor").optimizer == "adafactor"
    assert trainer_optimizer("adamw_torch", amsgrad=True).optimizer == "adamw-amsgrad"
    galore = trainer_optimizer("galore_adamw")
    assert not galore.modelled and "assumed" in galore.note


def test_amsgrad_keeps_a_third_state_and_the_same_temporaries():
    setup = {"model": "llama-3.2-1b", "sequence_length": 256}
    plain = trainmem.estimate({**setup, "optimizer": "adamw"}, suggestions=False)
    ams = trainmem.estimate({**setup, "optimizer": "adamw-amsgrad"}, suggestions=False)
    assert ams.breakdown.optimizer_states * 2 == plain.breakdown.optimizer_states * 3
    assert optimizers()["adamw-amsgrad"].temporaries == optimizers()["adamw"].temporaries


# --------------------------------------------------------------------------- detection


@pytest.mark.parametrize(
    "data, kind",
    [
        ({"model": "gpt2", "micro_batch_size": 2}, "setup"),
        ({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2}, "model"),
        ({"peft_type": "LORA", "r": 8}, "peft"),
        ({"zero_optimization": {"stage": 2}}, "deepspeed"),
        ({"bf16": {"enabled": True}}, "deepspeed"),
        ({"distributed_type": "FSDP"}, "accelerate"),
        ({"base_model": "x", "micro_batch_size": 1}, "axolotl"),
        ({"model_name_or_path": "x", "finetuning_type": "lora"}, "llamafactory"),
        ({"model_name_or_path": "x", "per_device_train_batch_size": 1}, "trl"),
        ({"colour": "blue"}, None),
    ],
)
def test_detect_kind(data, kind):
    assert detect_kind(data) == kind


def test_from_overrides_detection():
    setup, keys = inputs.read_texts({"x.yaml": "model_name_or_path: gpt2\nmax_length: 128\n"}, kind="trl")
    assert keys.files[0].kind == "trl" and setup.sequence_length == 128


# --------------------------------------------------------------------------- defaults and what a batch counts


def test_trl_defaults_apply_and_are_reported_with_their_version():
    setup, keys = read(sft_yaml="model_name_or_path: gpt2\ndataset_name: x\n")
    assert setup.micro_batch_size == 8 and setup.sequence_length == 1024
    assert setup.precision == "bf16-mixed" and setup.activation_checkpointing == "full"
    defaults = defaults_of(keys)
    assert "TRL 1.16 SFTConfig" in defaults["gradient_checkpointing"]
    assert "transformers 5.24" in defaults["per_device_train_batch_size"]


def test_plain_training_arguments_keep_transformers_defaults():
    setup, keys = inputs.read_texts(
        {"args.json": json.dumps({"output_dir": "o", "per_device_train_batch_size": 2})}, overrides={"model": "gpt2"}
    )
    assert keys.files[0].framework.startswith("transformers 5.24")
    assert setup.precision == "fp32" and setup.activation_checkpointing == "none"
    assert setup.optimizer.name == "adamw" and setup.optimizer.implementation == "fused"


def test_llamafactory_turns_gradient_checkpointing_on_by_default():
    setup, keys = read(lf_yaml="model_name_or_path: gpt2\nfinetuning_type: full\n")
    assert setup.activation_checkpointing == "full"
    assert "LLaMA-Factory 0.9.5" in defaults_of(keys)["gradient_checkpointing"]
    setup, _ = read(lf_yaml="model_name_or_path: gpt2\nfinetuning_type: full\ndisable_gradient_checkpointing: true\n")
    assert setup.activation_checkpointing == "none"


def test_axolotl_defaults():
    setup, keys = read(ax_yaml="base_model: gpt2\n")
    assert (setup.sequence_length, setup.micro_batch_size, setup.activation_checkpointing) == (512, 1, "none")
    assert setup.optimizer.implementation == "fused"
    assert all("Axolotl 0.19.0" in d for d in defaults_of(keys).values())


def test_preference_configs_run_the_dpo_step_on_pairs():
    """A micro-batch counts pairs, as TRL's per_device_train_batch_size does; the DPO mode forwards
    chosen and rejected rows together (trainmem.training)."""
    setup, keys = read(
        dpo_yaml="model_name_or_path: gpt2\nbeta: 0.2\nmax_prompt_length: 128\n"
        "per_device_train_batch_size: 3\nmax_length: 512\nprecompute_ref_log_probs: true\n"
    )
    assert setup.micro_batch_size == 3 and setup.training.mode == "dpo"
    assert setup.training.beta == 0.2 and setup.training.precompute_ref_log_probs is True
    assert any("training.mode = dpo" in note for note in keys.notes)


def test_grpo_counts_prompt_and_completion_tokens():
    setup, keys = read(
        grpo_yaml="model_name_or_path: gpt2\nnum_generations: 4\nmax_prompt_length: 256\n"
        "max_completion_length: 768\nper_device_train_batch_size: 4\n"
    )
    assert setup.sequence_length == 1024 and setup.micro_batch_size == 4
    assert setup.training.mode == "grpo" and setup.training.num_generations == 4
    assert (setup.training.max_prompt_length, setup.training.max_completion_length) == (256, 768)


def test_a_base_loaded_in_bf16_is_bf16_pure_outside_deepspeed():
    text = "model_name_or_path: gpt2\ndtype: bfloat16\nbf16: true\n"
    setup, keys = read(sft_yaml=text)
    assert setup.precision == "bf16-pure" and any("loaded in bf16" in n for n in keys.notes)
    setup, _ = read(sft_yaml=text + "deepspeed:\n  zero_optimization:\n    stage: 2\n")
    assert setup.precision == "bf16-mixed" and setup.parallelism.zero_stage == 2


def test_liger_maps_to_the_liger_loss():
    setup, keys = read(sft_yaml="model_name_or_path: gpt2\nuse_liger_kernel: true\n")
    assert setup.loss == "liger"
    assert "RMSNorm" in next(e.detail for e in keys.entries if e.key == "use_liger_kernel")


@pytest.mark.parametrize(
    "extra, key",
    [
        ("torch_compile: true\n", "torch_compile"),
    ],
)
def test_unmodelled_features_say_what_was_assumed(extra, key):
    _, keys = read(sft_yaml="model_name_or_path: gpt2\n" + extra)
    entry = next(e for e in keys.entries if e.key == key)
    assert entry.status == "not modelled" and ("assumed" in entry.detail or "not counted" in entry.detail)


# --------------------------------------------------------------------------- DeepSpeed "auto" and merging


def test_deepspeed_auto_is_filled_from_the_trainer_defaults():
    setup, keys = inputs.read_texts(
        {
            "sft.yaml": "model_name_or_path: gpt2\ndeepspeed: ds.json\ngradient_accumulation_steps: 4\n",
            "ds.json": json.dumps(
                {
                    "train_micro_batch_size_per_gpu": "auto",
                    "gradient_accumulation_steps": "auto",
                    "bf16": {"enabled": "auto"},
                    "zero_optimization": {"stage": 3},
                }
            ),
        }
    )
    assert (setup.micro_batch_size, setup.gradient_accumulation_steps, setup.precision) == (8, 4, "bf16-mixed")
    autos = {e.key: e.detail for e in keys.entries if e.value == "auto"}
    assert "TRL 1.16 SFTConfig default" in autos["bf16.enabled"]
    assert keys.files[1].linked_from == "sft.yaml: deepspeed"


def test_deepspeed_train_batch_size_gives_the_number_of_ranks():
    setup, keys = inputs.read_texts(
        {
            "ds.json": json.dumps(
                {
                    "train_batch_size": 64,
                    "train_micro_batch_size_per_gpu": 2,
                    "gradient_accumulation_steps": 4,
                    "zero_optimization": {"stage": 1},
                    "bf16": {"enabled": True},
                }
            )
        },
        overrides={"model": "gpt2"},
    )
    assert setup.parallelism.num_gpus == 8
    assert any("train_batch_size 64" in note for note in keys.notes)


def test_a_quantization_config_makes_a_qlora_run():
    config = {
        "model_type": "llama",
        "vocab_size": 1000,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "quantization_config": {
            "quant_method": "bitsandbytes",
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "fp4",
            "bnb_4bit_use_double_quant": False,
            "bnb_4bit_compute_dtype": "float16",
        },
    }
    setup, keys = inputs.read_texts({"config.json": json.dumps(config)})
    quantization = setup.finetuning.quantization
    assert setup.finetuning.method == "qlora"
    assert (quantization.quant_type, quantization.double_quant, quantization.compute_dtype) == ("fp4", False, "fp16")
    assert "quantization_config" not in setup.model.hf_config


def test_adapter_and_config_together():
    config = {
        "model_type": "llama",
        "vocab_size": 1000,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
    }
    adapter = {
        "peft_type": "LORA",
        "r": 4,
        "target_modules": ["q_proj"],
        "lora_dropout": 0.0,
        "base_model_name_or_path": "someone/private-model",
    }
    setup, _ = inputs.read_texts({"config.json": json.dumps(config), "adapter_config.json": json.dumps(adapter)})
    assert setup.finetuning.method == "lora" and setup.finetuning.lora.r == 4
    assert setup.model.hf_config["hidden_size"] == 64


def test_flags_override_files_and_say_so():
    setup, keys = inputs.read_texts(
        {"sft.yaml": "model_name_or_path: gpt2\nper_device_train_batch_size: 2\n"}, overrides={"micro_batch_size": 5}
    )
    assert setup.micro_batch_size == 5
    assert any("overrides sft.yaml: per_device_train_batch_size" in note for note in keys.notes)


# --------------------------------------------------------------------------- the CLI


def test_cli_prints_the_key_table_and_json_carries_it(tmp_path, capsys):
    trainer = tmp_path / "sft.yaml"
    trainer.write_text(
        "model_name_or_path: openai-community/gpt2\nmax_length: 256\nlearning_rate: 1.0e-5\ntorch_compile: true\n"
    )
    assert main(["estimate", str(trainer)]) == 0
    out = capsys.readouterr().out
    assert "Read from your files" in out and "not modelled" in out and "learning_rate" in out
    assert main(["estimate", str(trainer), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["setup"]["sequence_length"] == 256
    statuses = {e["key"]: e["status"] for e in data["inputs"]["entries"]}
    assert statuses["learning_rate"] == "memory-neutral" and statuses["torch_compile"] == "not modelled"
    assert statuses["max_length"] == "modelled"


def test_a_setup_json_is_still_a_setup(tmp_path, capsys):
    path = tmp_path / "setup.json"
    path.write_text(json.dumps({"model": {"preset": "gpt2"}, "micro_batch_size": 3}))
    assert main(["estimate", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["setup"]["micro_batch_size"] == 3 and "inputs" not in data


def test_render_counts_each_status():
    _, keys = read(sft_yaml="model_name_or_path: gpt2\nlearning_rate: 1.0\n")
    text = render_key_report(keys)
    assert f"{keys.count('memory-neutral')} memory-neutral" in text and "sft.yaml" in text


def test_axolotl_base_model_as_a_local_folder(tmp_path):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "vocab_size": 1000,
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
            }
        )
    )
    trainer = tmp_path / "axolotl.yaml"
    trainer.write_text("base_model: ./my-model\nadapter: lora\nlora_r: 4\nlora_target_linear: true\n")
    setup, keys = inputs.read(trainer)
    assert setup.model.hf_config["hidden_size"] == 64 and setup.finetuning.lora.r == 4
    assert keys.files[1].kind == "model" and keys.files[1].linked_from.endswith("axolotl.yaml: base_model")


def test_a_file_given_twice_is_read_once(tmp_path):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}))
    trainer = tmp_path / "sft.yaml"
    trainer.write_text("model_name_or_path: gpt2\ndeepspeed: ds.json\nper_device_train_batch_size: 2\n")
    setup, keys = inputs.read(trainer, ds)
    assert [f.kind for f in keys.files] == ["trl", "deepspeed"]
    assert setup.micro_batch_size == 2 and setup.parallelism.zero_stage == 2


def test_axolotl_qlora_upcast_of_unquantized_parameters_is_reported():
    _, keys = inputs.read(Path(__file__).parent / "data/trainer_files/axolotl/qlora-1b.yml")
    note = next(n for n in keys.notes if "prepare_model_for_kbit_training" in n)
    assert "262,735,872 unquantized parameters" in note and "not modelled" in note


def test_a_plain_launcher_config_yields_to_the_trainers_deepspeed():
    setup, keys = inputs.read_texts(
        {
            "accelerate.yaml": "distributed_type: MULTI_GPU\nnum_processes: 4\nmixed_precision: bf16\n",
            "sft.yaml": "model_name_or_path: gpt2\ndeepspeed:\n  zero_optimization:\n    stage: 2\n",
        }
    )
    assert (setup.parallelism.strategy, setup.parallelism.zero_stage, setup.parallelism.num_gpus) == ("zero", 2, 4)
    assert not [e for e in keys.entries if e.default and e.key == "distributed_type"]


def test_read_takes_texts_too():
    setup, keys = inputs.read({"sft.yaml": "model_name_or_path: gpt2\nmax_length: 64\n"})
    assert setup.sequence_length == 64 and keys.files[0].name == "sft.yaml"
