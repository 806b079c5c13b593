"""What kind of file a document is, from its content (or the user's ``--from``).

Each rule looks for keys only that kind of file has; the first match wins, in this order
(LLaMA-Factory before TRL because LLaMA-Factory files also carry TrainingArguments):

=============  ==================================================================================
verl           verl's PPO/GRPO trainer config: ``actor_rollout_ref`` (YAML, or a script's ``key=value`` overrides)
torchtune      a torchtune recipe config: a component (``model``, ``optimizer``, ...) whose ``_component_`` is torchtune's
setup          a trainmem setup: a ``model`` and only Setup fields
model          a Hugging Face config.json: ``model_type`` with ``hidden_size``/``n_embd``/...
peft           PEFT adapter_config.json: ``peft_type``, or ``r`` with ``target_modules``
deepspeed      ``zero_optimization``, ``train_micro_batch_size_per_gpu``, ``train_batch_size``
accelerate     ``distributed_type`` or ``compute_environment`` (accelerate config)
axolotl        ``base_model``, ``micro_batch_size``, ``sequence_len``, ``adapter``
llamafactory   ``finetuning_type``, ``cutoff_len``, ``lora_target``, ``export_dir``, ``template``
trl            TrainingArguments / TRL configs: ``per_device_train_batch_size``, ``model_name_or_path``, ...
=============  ==================================================================================
"""

from __future__ import annotations

from typing import Any

KINDS = ("trl", "deepspeed", "accelerate", "axolotl", "llamafactory", "peft", "model", "setup", "torchtune", "verl")
KIND_ALIASES = {
    "hf": "trl",
    "transformers": "trl",
    "ds": "deepspeed",
    "llama-factory": "llamafactory",
    "config": "model",
    "tune": "torchtune",
}

_MODEL_SHAPE_KEYS = ("hidden_size", "n_embd", "d_model", "num_hidden_layers", "n_layer", "text_config")
_TRAINER_KEYS = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "model_name_or_path",
    "output_dir",
    "optim",
    "max_seq_length",
    "max_length",
    "learning_rate",
    "num_train_epochs",
    "gradient_checkpointing",
    "deepspeed",
    "fsdp",
)


def normalise_kind(kind: str) -> str:
    key = kind.strip().lower()
    key = KIND_ALIASES.get(key, key)
    if key not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; allowed: {', '.join(KINDS)}")
    return key


def detect_kind(data: Any) -> str | None:
    """The kind of a parsed file, or None when nothing matches."""
    if not isinstance(data, dict):
        return None
    keys = set(data)
    from ..setup import Setup

    if isinstance(data.get("actor_rollout_ref"), dict):
        return "verl"
    if any(isinstance(v, dict) and str(v.get("_component_", "")).startswith("torchtune.") for v in data.values()):
        return "torchtune"
    if "model" in keys and keys <= set(Setup.model_fields):
        return "setup"
    if "model_type" in keys and keys & set(_MODEL_SHAPE_KEYS):
        return "model"
    if "peft_type" in keys or {"r", "target_modules"} <= keys:
        return "peft"
    if keys & {"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size"}:
        return "deepspeed"
    if keys & {"distributed_type", "compute_environment"}:
        return "accelerate"
    if keys & {"base_model", "micro_batch_size", "sequence_len", "adapter", "lora_target_linear"}:
        return "axolotl"
    if (
        keys & {"finetuning_type", "cutoff_len", "lora_target", "quantization_bit", "export_dir"}
        or {"stage", "template"} <= keys
        or {"model_name_or_path", "template"} <= keys  # TRL has no `template`; LLaMA-Factory's chat template
    ):
        return "llamafactory"
    if keys & set(_TRAINER_KEYS):
        return "trl"
    if isinstance(data.get("bf16"), dict) or isinstance(data.get("fp16"), dict):
        return "deepspeed"
    return None
