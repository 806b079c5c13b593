"""Write a Setup as the file a trainer runs: a DeepSpeed config, an Accelerate config, an Axolotl YAML or a TRL config.

Each writer returns the file's text and the notes on what that format cannot carry (the
number of GPUs is the launcher's business in a trainer file; DeepSpeed and Accelerate configs
name no model). Read back by :func:`trainmem.inputs.read_texts`, a written file gives the same
values for every field in :data:`CARRIES` (tests/test_inputs_writers.py checks the round trip).
"""

from __future__ import annotations

import json
from typing import Any

from .. import __version__
from ..setup import Setup
from .hub import hub_id_for_preset
from .record import InputError

FORMATS = ("deepspeed", "accelerate", "axolotl", "trl")
FILENAMES = {
    "deepspeed": "ds_config.json",
    "accelerate": "accelerate_config.yaml",
    "axolotl": "axolotl.yaml",
    "trl": "sft_config.yaml",
}

_COMMON_TRAINER = [
    "micro_batch_size",
    "gradient_accumulation_steps",
    "sequence_length",
    "precision",
    "activation_checkpointing",
    "attention",
    "loss",
    "optimizer",
    "finetuning.method",
    "finetuning.lora.r",
    "finetuning.lora.target_modules",
    "finetuning.lora.lora_dropout",
    "finetuning.lora.modules_to_save",
    "finetuning.lora.use_dora",
    "batch",
    "finetuning.quantization.bits",
    "finetuning.quantization.quant_type",
    "finetuning.quantization.double_quant",
    "model",
    "parallelism.strategy",
    "parallelism.zero_stage",
    "parallelism.offload_optimizer",
    "parallelism.offload_parameters",
    "parallelism.fsdp_sharding_strategy",
]
CARRIES = {
    "deepspeed": [
        "micro_batch_size",
        "gradient_accumulation_steps",
        "precision",
        "parallelism.strategy",
        "parallelism.zero_stage",
        "parallelism.offload_optimizer",
        "parallelism.offload_parameters",
        "parallelism.num_gpus",
    ],
    "accelerate": [
        "parallelism.num_gpus",
        "parallelism.gpus_per_node",
        "parallelism.strategy",
        "parallelism.zero_stage",
        "parallelism.offload_optimizer",
        "parallelism.offload_parameters",
        "parallelism.fsdp_sharding_strategy",
        "precision",
    ],
    "axolotl": _COMMON_TRAINER,
    "trl": _COMMON_TRAINER,
}
"""Setup fields each format carries; the rest must come from elsewhere (flags, another file)."""


def carries(setup: Setup, file_format: str) -> list[str]:
    """The fields a ``file_format`` file written for ``setup`` gives back when read."""
    fields = list(CARRIES[file_format])
    if file_format == "accelerate" and setup.precision == "bf16-pure":
        fields.remove("precision")  # the training script's model dtype, not the launcher's mixed_precision
    return fields


TRAINER_OPTIMIZERS = {
    ("adamw", "fused"): "adamw_torch_fused",
    ("adamw", None): "adamw_torch",
    ("adamw", "foreach"): "adamw_torch",
    ("adamw", "for-loop"): "adamw_torch",
    ("adamw-amsgrad", "fused"): "adamw_torch_fused",
    ("adamw-amsgrad", None): "adamw_torch",
    ("adamw-8bit", None): "adamw_bnb_8bit",
    ("paged-adamw-8bit", None): "paged_adamw_8bit",
    ("paged-adamw", None): "paged_adamw_32bit",
    ("adafactor", None): "adafactor",
    ("lion", None): "lion_32bit",
    ("lion-8bit", None): "lion_8bit",
    ("sgd", None): "sgd",
}


def write(setup: Setup, file_format: str) -> tuple[str, list[str]]:
    """The text of ``setup`` as a ``file_format`` file, and notes on what it leaves out."""
    writer = {
        "deepspeed": write_deepspeed,
        "accelerate": write_accelerate,
        "axolotl": write_axolotl,
        "trl": write_trl,
    }.get(file_format)
    if writer is None:
        raise InputError(f"emit: unknown format {file_format!r}; allowed: {', '.join(FORMATS)}")
    return writer(setup)


# --------------------------------------------------------------------------- DeepSpeed and Accelerate


def deepspeed_config(setup: Setup, notes: list[str]) -> dict[str, Any]:
    parallel = setup.parallelism
    if parallel.strategy != "zero":
        notes.append(f"the setup uses {parallel.strategy}, not ZeRO: written as zero_optimization.stage 0")
    if setup.precision in ("bf16-pure", "amp-bf16", "amp-fp16", "bf16-master-weights-fp32-grads", "fp8-mixed"):
        notes.append(
            f"precision {setup.precision}: DeepSpeed runs its own recipe (16-bit weights, fp32 master weights)"
        )
    zero: dict[str, Any] = {"stage": parallel.zero_stage if parallel.strategy == "zero" else 0}
    if parallel.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if parallel.offload_parameters:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    zero["contiguous_gradients"] = True
    data_parallel = parallel.data_parallel_size
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": setup.micro_batch_size,
        "gradient_accumulation_steps": setup.gradient_accumulation_steps,
        "train_batch_size": setup.micro_batch_size * setup.gradient_accumulation_steps * data_parallel,
        "gradient_clipping": "auto",
        "bf16": {"enabled": setup.precision.startswith(("bf16", "amp-bf16"))},
        "fp16": {"enabled": setup.precision.startswith(("fp16", "amp-fp16"))},
        "zero_optimization": zero,
    }
    return config


def write_deepspeed(setup: Setup) -> tuple[str, list[str]]:
    notes = ["a DeepSpeed config names no model or sequence length: the trainer file gives them"]
    return json.dumps(deepspeed_config(setup, notes), indent=2) + "\n", notes


def write_accelerate(setup: Setup) -> tuple[str, list[str]]:
    notes = ["an Accelerate config carries the launch (GPUs, sharding, precision), not the batch or the model"]
    parallel = setup.parallelism
    machines = max(1, -(-parallel.num_gpus // parallel.gpus_per_node))
    distributed = {"ddp": "MULTI_GPU" if parallel.num_gpus > 1 else "NO", "zero": "DEEPSPEED", "fsdp": "FSDP"}[
        parallel.strategy
    ]
    config: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": distributed,
        "mixed_precision": _accelerate_precision(setup, notes),
        "num_machines": machines,
        "num_processes": parallel.num_gpus,
        "machine_rank": 0,
        "main_training_function": "main",
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": False,
    }
    if parallel.strategy == "zero":
        config["deepspeed_config"] = {
            "zero_stage": parallel.zero_stage,
            "offload_optimizer_device": "cpu" if parallel.offload_optimizer else "none",
            "offload_param_device": "cpu" if parallel.offload_parameters else "none",
            "zero3_init_flag": parallel.zero_stage == 3,
        }
    if parallel.strategy == "fsdp":
        if parallel.offload_optimizer != parallel.offload_parameters:
            notes.append(
                "FSDP offloads parameters and optimizer together (CPUOffload): written as fsdp_offload_params "
                f"{parallel.offload_parameters}"
            )
        config["fsdp_config"] = {
            "fsdp_version": 1,
            "fsdp_sharding_strategy": parallel.fsdp_sharding_strategy,
            "fsdp_offload_params": parallel.offload_parameters,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_backward_prefetch": "BACKWARD_PRE",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_activation_checkpointing": setup.activation_checkpointing == "full",
        }
    return _yaml(config, "accelerate launch --config_file accelerate_config.yaml train.py"), notes


def _accelerate_precision(setup: Setup, notes: list[str]) -> str:
    if setup.precision == "fp8-mixed":
        return "fp8"
    if setup.precision.startswith(("bf16", "amp-bf16")):
        if setup.precision == "bf16-pure":
            notes.append("bf16-pure: load the model in bf16 in the training script; mixed_precision only sets autocast")
        return "bf16"
    if setup.precision.startswith(("fp16", "amp-fp16")):
        return "fp16"
    return "no"


# --------------------------------------------------------------------------- trainer files


def write_trl(setup: Setup) -> tuple[str, list[str]]:
    notes = ["the number of GPUs is the launcher's (accelerate launch / torchrun), not the config's"]
    config: dict[str, Any] = {"model_name_or_path": _hub_id(setup, notes)}
    if setup.precision == "bf16-pure":
        config["dtype"] = "bfloat16"
    elif setup.precision not in ("fp32",):
        config["dtype"] = "float32"
    if setup.attention != "sdpa":
        config["attn_implementation"] = {"sdpa-math": "sdpa"}.get(setup.attention, setup.attention)
    config.update(_trl_peft(setup))
    config.update(
        {
            "dataset_name": "REPLACE_WITH_A_DATASET",
            "output_dir": "outputs",
            "per_device_train_batch_size": setup.micro_batch_size,
            "gradient_accumulation_steps": setup.gradient_accumulation_steps,
            "max_length": setup.sequence_length,
            "bf16": setup.precision.startswith(("bf16", "amp-bf16")),
            "fp16": setup.precision.startswith(("fp16", "amp-fp16")),
            "gradient_checkpointing": setup.activation_checkpointing == "full",
        }
    )
    config.update(_optimizer(setup, notes, "optim"))
    if setup.batch == "packed":
        config["packing"] = True  # TRL 1.16: 'bfd' packing, padding-free
    if setup.loss == "liger":
        config["use_liger_kernel"] = True
    elif setup.loss == "chunked":
        notes.append("loss 'chunked' (torchtune's chunked cross-entropy) has no TRL key: written without it")
    config.update(_trainer_parallelism(setup, notes))
    _common_notes(setup, notes)
    return _yaml(config, "trl sft --config sft_config.yaml"), notes


def _trl_peft(setup: Setup) -> dict[str, Any]:
    finetuning = setup.finetuning
    if finetuning.method == "full":
        return {}
    lora = finetuning.lora
    out: dict[str, Any] = {"use_peft": True, "lora_r": lora.r, "lora_dropout": lora.lora_dropout}
    if lora.target_modules is not None:
        out["lora_target_modules"] = lora.target_modules
    if lora.modules_to_save:
        out["lora_modules_to_save"] = list(lora.modules_to_save)
    if lora.use_dora:
        out["use_dora"] = True
    if finetuning.method == "qlora":
        quantization = finetuning.quantization
        out[f"load_in_{quantization.bits}bit"] = True
        if quantization.bits == 4:
            out["bnb_4bit_quant_type"] = quantization.quant_type
            out["use_bnb_nested_quant"] = quantization.double_quant
    return out


def write_axolotl(setup: Setup) -> tuple[str, list[str]]:
    notes = ["the number of GPUs is the launcher's (accelerate launch / torchrun), not the config's"]
    finetuning = setup.finetuning
    config: dict[str, Any] = {"base_model": _hub_id(setup, notes)}
    if finetuning.method != "full":
        lora = finetuning.lora
        quantization = finetuning.quantization
        qlora = finetuning.method == "qlora"
        config["adapter"] = "qlora" if qlora and quantization.bits == 4 else "lora"
        config["load_in_4bit"] = qlora and quantization.bits == 4
        config["load_in_8bit"] = qlora and quantization.bits == 8
        config["lora_r"] = lora.r
        config["lora_alpha"] = 2 * lora.r
        config["lora_dropout"] = lora.lora_dropout
        if lora.target_modules == "all-linear":
            config["lora_target_linear"] = True
        elif lora.target_modules is not None:
            config["lora_target_modules"] = list(lora.target_modules)
        if lora.modules_to_save:
            config["lora_modules_to_save"] = list(lora.modules_to_save)
        if lora.use_dora:
            config["peft_use_dora"] = True
        if qlora and quantization.bits == 4 and (quantization.quant_type, quantization.double_quant) != ("nf4", True):
            notes.append(
                "Axolotl's QLoRA uses NF4 with double quantisation: other bitsandbytes settings are not written"
            )
    config.update(
        {
            "datasets": [{"path": "REPLACE_WITH_A_DATASET", "type": "alpaca"}],
            "output_dir": "./outputs",
            "sequence_len": setup.sequence_length,
            "pad_to_sequence_len": True,
            "micro_batch_size": setup.micro_batch_size,
            "gradient_accumulation_steps": setup.gradient_accumulation_steps,
            "num_epochs": 1,
            "learning_rate": 0.0002 if finetuning.method != "full" else 0.00002,
        }
    )
    config.update(_optimizer(setup, notes, "optimizer"))
    config.update(_axolotl_precision(setup, notes))
    config["gradient_checkpointing"] = setup.activation_checkpointing == "full"
    config["attn_implementation"] = {"sdpa-math": "sdpa"}.get(setup.attention, setup.attention)
    if setup.batch == "packed":
        config["sample_packing"] = True
    if setup.loss == "chunked":
        notes.append("loss 'chunked' (torchtune's chunked cross-entropy) has no Axolotl key: written without it")
    if setup.loss == "liger":
        config["plugins"] = ["axolotl.integrations.liger.LigerPlugin"]
        config["liger_fused_linear_cross_entropy"] = True
    config.update(_trainer_parallelism(setup, notes, axolotl=True))
    _common_notes(setup, notes)
    return _yaml(config, "axolotl train axolotl.yaml"), notes


def _axolotl_precision(setup: Setup, notes: list[str]) -> dict[str, Any]:
    if setup.precision.startswith(("fp16", "amp-fp16")):
        return {"bf16": False, "fp16": True}
    if setup.precision == "fp32":
        return {"bf16": False, "fp16": False}
    if setup.precision in ("bf16-mixed", "amp-bf16") and setup.parallelism.strategy != "zero":
        notes.append(
            "Axolotl loads the base in bf16 under bf16: true, so the run is bf16-pure, not "
            f"{setup.precision} (fp32 weights)"
        )
    return {"bf16": True}


def _optimizer(setup: Setup, notes: list[str], key: str) -> dict[str, Any]:
    name = setup.optimizer.name
    implementation = setup.optimizer.implementation
    trainer_name = TRAINER_OPTIMIZERS.get((name, implementation)) or TRAINER_OPTIMIZERS.get((name, None))
    out: dict[str, Any] = {}
    if trainer_name is None:
        trainer_name = "adamw_torch" if name.startswith("adam") else "sgd"
        notes.append(f"optimizer {name}: no trainer name carries it; written as {trainer_name}")
    elif TRAINER_OPTIMIZERS.get((name, implementation)) is None and implementation is not None:
        notes.append(f"optimizer implementation {implementation}: {trainer_name} picks its own")
    out[key] = trainer_name
    if name.endswith("-amsgrad"):
        out["optim_args" if key == "optim" else "optim_args"] = "amsgrad=True"
    return out


def _trainer_parallelism(setup: Setup, notes: list[str], axolotl: bool = False) -> dict[str, Any]:
    parallel = setup.parallelism
    if parallel.strategy == "zero":
        return {"deepspeed": deepspeed_config(setup, [])}
    if parallel.strategy == "fsdp":
        if parallel.offload_optimizer != parallel.offload_parameters:
            notes.append(
                f"FSDP offloads parameters and optimizer together: written as offload {parallel.offload_parameters}"
            )
        options = [parallel.fsdp_sharding_strategy.lower(), "auto_wrap"] + (
            ["offload"] if parallel.offload_parameters else []
        )
        if axolotl:
            return {
                "fsdp": options,
                "fsdp_config": {
                    "fsdp_transformer_layer_cls_to_wrap": "auto",
                    "fsdp_state_dict_type": "SHARDED_STATE_DICT",
                },
            }
        return {"fsdp": " ".join(options)}
    return {}


def _common_notes(setup: Setup, notes: list[str]) -> None:
    if setup.finetuning.frozen:
        notes.append(f"finetuning.frozen {setup.finetuning.frozen}: no trainer key carries frozen groups")
    if setup.parallelism.tensor_parallel_size > 1 or setup.parallelism.pipeline_parallel_size > 1:
        notes.append("tensor and pipeline parallelism are not written (Megatron-style runs use other launchers)")


def _hub_id(setup: Setup, notes: list[str]) -> str:
    model = setup.model
    preset = getattr(model, "preset", None)
    if preset is not None:
        return hub_id_for_preset(preset)
    notes.append("the model is a config.json or an architecture, not a preset: replace REPLACE_WITH_MODEL_ID")
    return "REPLACE_WITH_MODEL_ID"


def _yaml(config: dict[str, Any], command: str) -> str:
    import yaml

    header = f"# Written by trainmem {__version__}. Run: {command}\n"
    return header + yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
