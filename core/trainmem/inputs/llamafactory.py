"""LLaMA-Factory YAML (``llamafactory-cli train``): model, method, dataset and TrainingArguments keys in one file.

Defaults read from LLaMA-Factory 0.9.5 (``hparams/*.py``): ``stage`` sft, ``finetuning_type``
lora, ``lora_rank`` 8, ``lora_target`` all, ``lora_dropout`` 0, ``cutoff_len`` 2048,
``quantization_type`` nf4 with ``double_quantization``, ``flash_attn`` auto. Gradient
checkpointing is **on** unless ``disable_gradient_checkpointing`` (``model_args.py``; enabled in
``model/model_utils/checkpointing.py``). The base loads in the compute dtype (bf16 with
``bf16``), and trainable parameters are cast to fp32 unless ``pure_bf16`` (``model/adapter.py``);
``packing`` defaults on only for ``stage: pt``. TrainingArguments keys take transformers 5.24's
defaults (``per_device_train_batch_size`` 8).
"""

from __future__ import annotations

from .model_ref import read_model_reference
from .record import Contribution, InputError, Recorder
from .trainer_args import (
    ATTENTION_NAMES,
    TrainerDefaults,
    lora_targets,
    number,
    positive_int,
    read_batch_and_precision,
    read_compile,
    read_fsdp,
    read_liger,
)

LLAMAFACTORY_VERSION = "LLaMA-Factory 0.9.5"
ATTENTION = {
    "auto": "sdpa",
    "disabled": "eager",
    "sdpa": "sdpa",
    "fa2": "flash_attention_2",
    "fa3": "flash_attention_2",
}
NOT_MODELLED = {
    "use_unsloth": "Unsloth's kernels: assumed the Hugging Face model's memory",
    "use_unsloth_gc": "Unsloth's offloaded checkpointing: assumed checkpoints kept on the GPU",
    "upcast_layernorm": "fp32 norm weights: assumed the training dtype",
    "upcast_lmhead_output": "fp32 lm_head output: the loss upcasts the logits anyway",
    "use_galore": "GaLore's low-rank optimizer states: assumed full AdamW states",
    "use_apollo": "APOLLO's low-rank optimizer states: assumed full AdamW states",
    "use_badam": "BAdam trains one block at a time: assumed every parameter trains",
    "use_adam_mini": "Adam-mini keeps one second moment per block: assumed AdamW's two states",
    "use_llama_pro": "LLaMA Pro expanded blocks: assumed the model as given",
    "freeze_trainable_layers": "freeze tuning: assumed full fine-tuning",
    "freeze_trainable_modules": "freeze tuning: assumed full fine-tuning",
    "freeze_extra_modules": "freeze tuning: assumed full fine-tuning",
    "shift_attn": "S²-Attn: assumed full attention",
    "mixture_of_depths": "assumed every layer computes every token",
    "use_kt": "KTransformers offload: assumed the model on the GPU",
    "enable_fp8": "fp8 training: assumed the bf16 recipe",
    "fp8": "fp8 training: assumed the bf16 recipe",
    "sequence_parallel_size": "sequence parallelism: assumed none",
}
GALORE_KEYS = (
    "galore_target",
    "galore_rank",
    "galore_update_interval",
    "galore_scale",
    "galore_proj_type",
    "galore_layerwise",
    "apollo_target",
    "apollo_rank",
    "apollo_scale",
    "badam_mode",
    "badam_switch_mode",
    "badam_switch_interval",
    "badam_update_ratio",
)


def read_llamafactory(rec: Recorder) -> None:
    refuse_non_training(rec)
    if rec.get("model_name_or_path") is not None:
        read_model_reference(rec, "model_name_or_path")
    stage = str(rec.get("stage", "sft"))
    rec.facts["trainer"] = stage
    if rec.has("stage"):
        if stage in ("sft", "pt"):
            rec.neutral("stage", f"{stage}: one row per example")
        elif stage in ("dpo", "kto", "rm"):
            mode = {"rm": "reward"}.get(stage, stage)
            rec.modelled("stage", f"{stage}: training.mode = {mode} (LLaMA-Factory runs TRL's trainer)")
            rec.facts["training_mode"] = mode
            if stage in ("dpo", "kto"):
                rec.notes.append(PREFERENCE_LOGITS_NOTE.format(file=rec.file, stage=stage))
                refuse_kto_single_example(rec, stage)
        elif stage == "ppo":
            raise InputError(
                f"{rec.file}: stage: ppo (LLaMA-Factory's PPO: TRL's legacy PPOTrainer with a value head on the policy, "
                "the reward_model adapter and generation in one process) is not modelled; allowed stages: pt, sft, rm, "
                "dpo, kto (PPO is modelled as verl runs it: give a verl config)"
            )
        else:
            rec.unmodelled("stage", f"{stage}: reward heads, value models and reference models are not counted")
    checkpointing_on = rec.get("disable_gradient_checkpointing") is not True
    if rec.get("disable_gradient_checkpointing") is not None:
        rec.modelled("disable_gradient_checkpointing", "decides activation checkpointing")
    defaults = TrainerDefaults(
        f"{LLAMAFACTORY_VERSION} (gradient checkpointing on by default)", checkpointing_on, False, 2048, "cutoff_len"
    )
    if rec.get("pure_bf16") is True:
        rec.set("pure_bf16", "precision", "bf16-pure", "no AMP, no fp32 copies")
        for key in ("bf16", "fp16"):
            if rec.get(key) is not None:
                rec.modelled(key, "pure_bf16 decides the precision")
    elif rec.get("pure_bf16") is not None:
        rec.neutral("pure_bf16", "off")
    read_batch_and_precision(rec, defaults)
    if rec.get("cutoff_len") is not None:
        rec.set("cutoff_len", "sequence_length", positive_int(rec, "cutoff_len"), "every row assumed this long")
    else:
        rec.default("sequence_length", 2048, "cutoff_len", f"{LLAMAFACTORY_VERSION} hparams/data_args.py")
    read_method(rec)
    read_features(rec)
    low_rank_on = rec.get("use_galore") or rec.get("use_apollo") or rec.get("use_badam")
    for key in GALORE_KEYS:
        if rec.get(key) is not None:
            if low_rank_on:
                rec.unmodelled(key, "a setting of the low-rank/block optimizer above: not modelled")
            else:
                rec.neutral(key, "its optimizer is off")
    rec.finish()


PREFERENCE_LOGITS_NOTE = (
    "{file}: stage {stage}: LLaMA-Factory's own {stage} trainer takes the whole logits in fp32 "
    "(train/{stage}/trainer.py: model(...).logits.to(torch.float32)) where trainmem simulates TRL 1.16's fused "
    "log-prob head, which keeps none: the estimate is low by about the fp32 logits and their gradient (not modelled)"
)


def refuse_non_training(rec: Recorder) -> None:
    """``llamafactory-cli export`` configs (``export_dir``: merge the adapters, quantise, save) run no training step."""
    if rec.get("export_dir") is not None and rec.get("do_train") is not True:
        raise InputError(
            f"{rec.file}: export_dir: an export (merge) config, which llamafactory-cli export runs without a training "
            "step; give the training config (do_train: true) instead"
        )


def refuse_kto_single_example(rec: Recorder, stage: str) -> None:
    """(Refused in :mod:`.merge`, where the command line's micro-batch is known.) LLaMA-Factory builds KTO's KL examples in its dataset (``kl_input_ids``) and bypasses KTOTrainer.__init__, so it
    trains one example per device; trainmem's KTO step is TRL's, which forms the KL batch inside the micro-batch."""
    if stage == "kto":
        rec.facts["kto_kl_from_dataset"] = True  # merge refuses one example per micro-batch with this file's words


def read_method(rec: Recorder) -> None:
    method = str(rec.get("finetuning_type", "lora"))
    bits = rec.get("quantization_bit")
    if method not in ("lora", "full"):
        rec.unmodelled("finetuning_type", f"{method!r}: assumed {'LoRA' if method == 'oft' else 'full fine-tuning'}")
        method = "lora" if method == "oft" else "full"
    if method == "lora":
        rec.facts["base_dtype"] = (
            "bf16"
            if rec.get("bf16") is True or rec.get("pure_bf16") is True
            else "fp16"
            if rec.get("fp16") is True
            else "bf16"
        )
    name = "qlora" if method == "lora" and bits else method
    if rec.seen("finetuning_type"):
        rec.contributions.append(Contribution("finetuning.method", name, rec.file, "finetuning_type"))
    elif rec.has("finetuning_type"):
        rec.set("finetuning_type", "finetuning.method", name)
    else:
        rec.default("finetuning.method", name, "finetuning_type", f"{LLAMAFACTORY_VERSION} (finetuning_type lora)")
    if bits is not None:
        if bits not in (4, 8) or method != "lora":
            rec.unmodelled("quantization_bit", f"{bits}-bit base with {method}: assumed an unquantized base")
        else:
            rec.set("quantization_bit", "finetuning.quantization.bits", bits)
            if rec.get("quantization_method", "bitsandbytes") not in ("bitsandbytes", "bnb"):
                rec.unmodelled("quantization_method", f"{rec.get('quantization_method')}: assumed bitsandbytes storage")
            elif rec.get("quantization_method") is not None:
                rec.modelled("quantization_method", "bitsandbytes, as trainmem models the quantized base")
            if rec.get("quantization_type") is not None:
                rec.set("quantization_type", "finetuning.quantization.quant_type", str(rec.get("quantization_type")))
            if rec.get("double_quantization") is not None:
                rec.set(
                    "double_quantization", "finetuning.quantization.double_quant", bool(rec.get("double_quantization"))
                )
    if method != "lora":
        for key in ("lora_rank", "lora_target", "lora_dropout", "additional_target", "use_dora"):
            if rec.get(key) is not None:
                rec.neutral(key, f"finetuning_type is {method}")
        return
    if rec.get("lora_rank") is not None:
        rec.set("lora_rank", "finetuning.lora.r", positive_int(rec, "lora_rank"))
    else:
        rec.default("finetuning.lora.r", 8, "lora_rank", f"{LLAMAFACTORY_VERSION} hparams/finetuning_args.py")
    if rec.get("lora_target") is not None:
        rec.set("lora_target", "finetuning.lora.target_modules", lora_targets(rec.get("lora_target")))
    else:
        rec.default("finetuning.lora.target_modules", "all-linear", "lora_target", f"{LLAMAFACTORY_VERSION} (all)")
    if rec.get("lora_dropout") is not None:
        rec.set("lora_dropout", "finetuning.lora.lora_dropout", number(rec, "lora_dropout"))
    else:
        rec.default(
            "finetuning.lora.lora_dropout", 0.0, "lora_dropout", f"{LLAMAFACTORY_VERSION} hparams/finetuning_args.py"
        )
    from .peft_features import read_modules_to_save, read_use_dora

    read_modules_to_save(rec, "additional_target")  # LoraConfig(modules_to_save=finetuning_args.additional_target)
    read_use_dora(rec, "use_dora")


def read_features(rec: Recorder) -> None:
    for key in ("packing", "neat_packing"):
        if rec.get(key) is True:
            rec.modelled(
                key,
                "packed rows of cutoff_len tokens, as trainmem counts"
                + (
                    "; no cross-attention between samples (block-diagonal mask) is not modelled"
                    if key == "neat_packing"
                    else ""
                ),
            )
        elif rec.get(key) is not None:
            rec.neutral(key, "off: rows padded, trainmem assumes each row cutoff_len tokens (an upper bound)")
    key = "flash_attn" if rec.get("flash_attn") is not None else "attn"  # newer LLaMA-Factory spells it attn
    value = rec.get(key)
    if value is not None:
        attention = ATTENTION.get(str(value).lower()) or ATTENTION_NAMES.get(str(value))
        if attention is None:
            rec.unmodelled(key, f"{value!r}: assumed sdpa")
        else:
            rec.set(
                key, "attention", attention, "auto: transformers picks SDPA" if str(value).lower() == "auto" else ""
            )
    else:
        rec.default("attention", "sdpa", "flash_attn", f"{LLAMAFACTORY_VERSION} (flash_attn auto: SDPA)")
    if rec.get("enable_liger_kernel") is not None:
        read_liger(rec, "enable_liger_kernel")
    if rec.get("torch_compile") is not None:
        read_compile(rec, "torch_compile")
    deepspeed = rec.get("deepspeed")
    if deepspeed is not None:
        rec.modelled("deepspeed", "reads the DeepSpeed config it names")
        rec.link("deepspeed", "deepspeed", deepspeed)
    read_fsdp(rec)
    for key, assumption in NOT_MODELLED.items():
        if rec.get(key) not in (None, False, 0, "") and not rec.seen(key):
            rec.unmodelled(key, assumption)
        elif rec.get(key) is not None and not rec.seen(key):
            rec.neutral(key, "off")
    if rec.get("use_reentrant_gc") is not None:
        rec.neutral("use_reentrant_gc", "either way checkpointing keeps one input per layer")
    if rec.get("quantization_bit") is None and rec.get("quantization_type") is not None:
        rec.neutral("quantization_type", "no quantization_bit")
