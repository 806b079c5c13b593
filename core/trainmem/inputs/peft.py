"""PEFT ``adapter_config.json`` (a saved ``LoraConfig``), read as PEFT 0.21 writes it.

``r``, ``target_modules`` (a list, a regex string, or ``all-linear``), ``lora_dropout``,
``modules_to_save`` (trained full copies) and ``use_dora`` (magnitude vectors and saved weight
norms) are modelled; ``layers_to_transform`` and a non-empty ``rank_pattern`` are not, and say so.
"""

from __future__ import annotations

from .model_ref import read_model_reference
from .peft_features import read_modules_to_save, read_use_dora
from .record import Recorder
from .trainer_args import lora_targets, number, positive_int


def read_peft(rec: Recorder) -> None:
    peft_type = str(rec.get("peft_type", "LORA")).upper()
    if peft_type != "LORA":
        rec.unmodelled("peft_type", f"{peft_type}: only LoRA adapters are modelled; assumed LoRA")
    else:
        rec.set("peft_type", "finetuning.method", "lora") if rec.has("peft_type") else None
        if not rec.has("peft_type"):
            rec.contributions.append(_method(rec))
    if rec.get("r") is not None:
        rec.set("r", "finetuning.lora.r", positive_int(rec, "r"))
    targets = rec.get("target_modules")
    if targets is not None:
        if isinstance(targets, str) and targets.strip().lower() not in ("all-linear", "all_linear"):
            rec.unmodelled("target_modules", f"regex {targets!r}: assumed PEFT's default targets for the model type")
        else:
            rec.set("target_modules", "finetuning.lora.target_modules", lora_targets(targets))
    if rec.get("lora_dropout") is not None:
        rec.set("lora_dropout", "finetuning.lora.lora_dropout", number(rec, "lora_dropout"))
    if rec.get("base_model_name_or_path"):
        read_model_reference(rec, "base_model_name_or_path")
    read_modules_to_save(rec, "modules_to_save")
    read_use_dora(rec, "use_dora")
    for key, assumption in (
        ("layers_to_transform", "assumed adapters on every layer"),
        ("rank_pattern", "assumed rank r everywhere"),
        ("exclude_modules", "assumed the listed targets"),
        ("trainable_token_indices", "trained token rows are not counted"),
        ("target_parameters", "adapters on parameters (not modules) are not counted"),
        ("lora_bias", "adapter biases are not counted"),
        ("use_qalora", "QA-LoRA: assumed plain LoRA"),
        ("layer_replication", "assumed the model's own layers"),
        ("use_bdlora", "assumed plain LoRA"),
    ):
        value = rec.get(key)
        if value not in (None, False, [], {}):
            rec.unmodelled(key, assumption)
        elif key in rec.data:
            rec.neutral(key, "off")
    bias = rec.get("bias")
    if bias not in (None, "none"):
        rec.unmodelled("bias", f"{bias}: trained biases are not counted")
    elif "bias" in rec.data:
        rec.neutral("bias")
    rec.finish()


def _method(rec: Recorder):
    from .record import Contribution

    return Contribution("finetuning.method", "lora", rec.file, "(adapter_config.json)")
