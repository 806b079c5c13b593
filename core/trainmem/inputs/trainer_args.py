"""Hugging Face ``TrainingArguments`` keys, shared by the TRL and LLaMA-Factory readers.

Defaults are read from the sources of the pinned versions:

* transformers 5.24 ``training_args.py``: ``per_device_train_batch_size`` 8,
  ``gradient_accumulation_steps`` 1, ``bf16``/``fp16`` False, ``gradient_checkpointing`` False
  (now an alias of ``activation_checkpointing``), ``optim`` ``adamw_torch_fused`` (torch >= 2.8);
* TRL 1.16 ``trainer/base_config.py``: every TRL config turns ``gradient_checkpointing`` on and
  ``bf16`` on unless ``fp16`` is set; ``SFTConfig``/``DPOConfig`` ``max_length`` 1024;
  ``GRPOConfig`` ``max_completion_length`` 512.

What a "batch" counts differs by trainer (TRL 1.16): DPO and ORPO forward the chosen and the
rejected completion of each pair together (``dpo_trainer.py`` concatenates them along the batch),
so the readers set ``training.mode`` and a micro-batch counts pairs; GRPO's ``per_device_train_batch_size`` counts completions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from .optimizer_names import trainer_optimizer
from .record import InputError, Recorder

TRANSFORMERS_VERSION = "transformers 5.24"
TRL_VERSION = "TRL 1.16"


@dataclass(frozen=True)
class TrainerDefaults:
    """The defaults a trainer applies to keys a file leaves out."""

    label: str
    checkpointing: bool
    bf16: bool
    sequence_length: Optional[int]
    sequence_key: str = "max_length"


TRANSFORMERS_DEFAULTS = TrainerDefaults(f"{TRANSFORMERS_VERSION} TrainingArguments", False, False, None)
TRL_SFT_DEFAULTS = TrainerDefaults(f"{TRL_VERSION} SFTConfig", True, True, 1024)
TRL_DPO_DEFAULTS = TrainerDefaults(f"{TRL_VERSION} DPOConfig", True, True, 1024)
TRL_GRPO_DEFAULTS = TrainerDefaults(f"{TRL_VERSION} GRPOConfig", True, True, None)

ATTENTION_NAMES = {
    "flash_attention_2": "flash_attention_2",
    "flash_attention_3": "flash_attention_2",
    "kernels-community/flash-attn": "flash_attention_2",
    "kernels-community/vllm-flash-attn3": "flash_attention_2",
    "sdpa": "sdpa",
    "eager": "eager",
    "flex_attention": "sdpa",
}
"""attn_implementation values (transformers 5.24 modeling_utils) -> Setup.attention. FlashAttention 3 and flex
attention keep no s×s scores either: trainmem models them as their closest kernel (flash / sdpa)."""


def read_batch_and_precision(rec: Recorder, defaults: TrainerDefaults) -> None:
    """per_device_train_batch_size, gradient_accumulation_steps, bf16/fp16, checkpointing, optimizer."""
    if rec.has("per_device_train_batch_size"):
        size = positive_int(rec, "per_device_train_batch_size")
        rec.set("per_device_train_batch_size", "micro_batch_size", size)
    else:
        rec.default("micro_batch_size", 8, "per_device_train_batch_size", f"{TRANSFORMERS_VERSION} TrainingArguments")
    if rec.has("gradient_accumulation_steps"):
        rec.set(
            "gradient_accumulation_steps",
            "gradient_accumulation_steps",
            positive_int(rec, "gradient_accumulation_steps"),
        )
    else:
        rec.default(
            "gradient_accumulation_steps", 1, "gradient_accumulation_steps", f"{TRANSFORMERS_VERSION} TrainingArguments"
        )
    read_precision_flags(rec, defaults)
    read_checkpointing(rec, defaults.checkpointing, defaults.label)
    read_optimizer(rec)


def read_precision_flags(rec: Recorder, defaults: TrainerDefaults) -> None:
    if rec.seen("bf16") or rec.seen("fp16"):
        return  # another key (LLaMA-Factory's pure_bf16) decided the precision
    bf16, fp16 = rec.get("bf16"), rec.get("fp16")
    for key, value in (("bf16", bf16), ("fp16", fp16)):
        if value is not None and not isinstance(value, bool) and value != "auto":
            raise InputError(f"{rec.file}: {key}: must be true or false, got {value!r}")
    if bf16 is True and fp16 is True:
        raise InputError(f"{rec.file}: bf16: bf16 and fp16 are both true; keep one")
    rec.facts["bf16"] = bf16
    rec.facts["fp16"] = fp16
    if bf16 is None and fp16 is None:
        rec.default("precision", "bf16-mixed" if defaults.bf16 else "fp32", "bf16", defaults.label)
        return
    precision = "bf16-mixed" if bf16 in (True, "auto") else "fp16-mixed" if fp16 is True else "fp32"
    detail = "bf16 'auto': assumed the GPU supports bf16 (Ampere or newer)" if bf16 == "auto" else ""
    key = "bf16" if bf16 is not None else "fp16"
    rec.set(key, "precision", precision, detail)
    other = "fp16" if key == "bf16" else "bf16"
    if rec.get(other) is not None:
        rec.modelled(other, f"read together with {key}")


def read_checkpointing(rec: Recorder, default_on: bool, label: str) -> None:
    keys = [k for k in ("activation_checkpointing", "gradient_checkpointing") if rec.get(k) is not None]
    if keys:
        value = rec.get(keys[0])
        if value not in (True, False):
            rec.set(
                keys[0],
                "activation_checkpointing",
                "full",
                f"{value!r}: offloaded checkpoints are not modelled, assumed kept on the GPU",
            )
        else:
            rec.set(keys[0], "activation_checkpointing", "full" if value else "none")
        for other in keys[1:]:
            rec.modelled(other, f"alias of {keys[0]}")
    else:
        rec.default("activation_checkpointing", "full" if default_on else "none", "gradient_checkpointing", label)
    for kwargs_key in ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"):
        kwargs = rec.get(kwargs_key)
        if isinstance(kwargs, dict) and set(kwargs) - {"use_reentrant"}:
            rec.unmodelled(kwargs_key, f"{sorted(set(kwargs) - {'use_reentrant'})}: assumed every layer checkpointed")
        elif kwargs is not None:
            rec.neutral(kwargs_key, "use_reentrant: either way checkpointing keeps one input per layer")


def read_optimizer(rec: Recorder, key: str = "optim") -> None:
    name = rec.get(key)
    amsgrad = "amsgrad=true" in str(rec.get("optim_args", "")).replace(" ", "").lower()
    if rec.get("optim_args") is not None:
        rec.modelled("optim_args", "amsgrad=True: a third optimizer state") if amsgrad else rec.neutral("optim_args")
    if name is None:
        entry = trainer_optimizer("adamw_torch_fused", amsgrad)
        rec.default(
            "optimizer",
            {"name": entry.optimizer, "implementation": entry.implementation},
            key,
            f"{TRANSFORMERS_VERSION} TrainingArguments (adamw_torch_fused)",
        )
        return
    set_optimizer(rec, key, str(name), amsgrad)


def set_optimizer(rec: Recorder, key: str, name: str, amsgrad: bool = False) -> None:
    entry = trainer_optimizer(name, amsgrad)
    if entry is None:
        rec.unmodelled(key, f"{name!r} is not an optimizer trainmem knows: assumed AdamW")
        return
    value = {"name": entry.optimizer, "implementation": entry.implementation}
    if entry.modelled:
        rec.set(key, "optimizer", value, entry.note)
    else:
        rec.unmodelled(key, f"{entry.note} (optimizer = {entry.optimizer})")
        rec.contributions.append(contribution(rec, "optimizer", value, key))


def read_attention(rec: Recorder, key: str) -> None:
    value = rec.get(key)
    attention = ATTENTION_NAMES.get(str(value))
    if attention is None:
        rec.unmodelled(key, f"{value!r}: unknown attention implementation, assumed sdpa")
    else:
        rec.set(key, "attention", attention)


def read_liger(rec: Recorder, key: str) -> None:
    if rec.get(key) is True:
        rec.set(
            key,
            "loss",
            "liger",
            "Liger's fused linear cross-entropy (chunked by its own rule, from its source; not measured: Liger "
            "needs Triton); its RMSNorm, SwiGLU and RoPE kernels are not modelled",
        )
    else:
        rec.neutral(key)


def read_compile(rec: Recorder, key: str) -> None:
    if rec.get(key) is True:
        rec.unmodelled(key, "torch.compile may fuse away saved tensors: assumed eager-mode memory (an upper bound)")
    else:
        rec.neutral(key)


def read_fsdp(rec: Recorder, fsdp_key: str = "fsdp", config_key: str = "fsdp_config") -> None:
    """TrainingArguments ``fsdp`` ("full_shard auto_wrap offload" or a list) and ``fsdp_config``."""
    value = rec.get(fsdp_key)
    if value is True:  # transformers 5.24: fsdp=True, everything else in fsdp_config (FULL_SHARD by default)
        options = ["full_shard"]
    elif isinstance(value, str):
        options = value.split()
    elif value is None or value is False or isinstance(value, list):
        options = list(value or [])
    else:
        raise InputError(
            f"{rec.file}: {fsdp_key}: must be true, false, a list of FSDP options (full_shard, shard_grad_op, "
            f"hybrid_shard, no_shard, auto_wrap, offload) or a string of them, got {short(value)}"
        )
    options = [str(o).lower() for o in options]
    config = rec.get(config_key) if isinstance(rec.get(config_key), dict) else {}
    version = config.get("fsdp_version", config.get("version"))
    if not options and not config:
        if rec.get(fsdp_key) is not None:
            rec.neutral(fsdp_key, "no FSDP")
        return
    if not options and version is None:
        rec.neutral(config_key, "fsdp_config without fsdp: FSDP is off")
        return
    strategy = "FULL_SHARD"
    for option, name in (
        ("shard_grad_op", "SHARD_GRAD_OP"),
        ("hybrid_shard", "HYBRID_SHARD"),
        ("no_shard", "NO_SHARD"),
    ):
        if option in options:
            strategy = name
    if options:
        rec.set(fsdp_key, "parallelism.strategy", "fsdp")
    read_fsdp_config(rec, config_key, config, strategy, explicit_strategy=bool(options))
    if "offload" in options:
        rec.contributions.append(contribution(rec, "parallelism.offload_parameters", True, fsdp_key))
        rec.contributions.append(contribution(rec, "parallelism.offload_optimizer", True, fsdp_key))


def read_fsdp_config(rec: Recorder, section: str, config: dict, strategy: str, explicit_strategy: bool) -> None:
    """fsdp_config keys, with or without their ``fsdp_`` prefix (Accelerate, TrainingArguments, Axolotl)."""
    from .fsdp import apply_fsdp_config

    apply_fsdp_config(rec, section, config, strategy, explicit_strategy)


def read_trl_model_keys(rec: Recorder) -> None:
    """TRL ModelConfig / alignment-handbook keys: the model, its dtype, attention, PEFT and bitsandbytes."""
    from .model_ref import read_model_reference

    for key in ("model_name_or_path", "model_id"):
        if rec.get(key) is not None:
            read_model_reference(rec, key)
    init = rec.get("model_init_kwargs") if isinstance(rec.get("model_init_kwargs"), dict) else {}
    for key in ("attn_implementation", "model_init_kwargs.attn_implementation"):
        if rec.get(key) is not None:
            read_attention(rec, key)
    if rec.get("use_flash_attention_2") is True:
        rec.set("use_flash_attention_2", "attention", "flash_attention_2")
    for key in ("torch_dtype", "dtype", "model_init_kwargs.torch_dtype", "model_init_kwargs.dtype"):
        if rec.get(key) is not None:
            dtype = str(rec.get(key)).removeprefix("torch.")
            rec.facts["base_dtype"] = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(dtype, dtype)
            rec.modelled(key, f"weights loaded in {dtype}: decides the precision recipe (see the notes)")
    if init:
        rec.finish("model_init_kwargs", frozenset({"trust_remote_code", "revision", "device_map", "use_cache"}))
    read_peft_keys(rec)


def read_peft_keys(rec: Recorder) -> None:
    """TRL ModelConfig's LoRA and bitsandbytes fields (use_peft, lora_r, load_in_4bit, ...)."""
    lora = rec.get("use_peft") is True  # TRL 1.16 ModelConfig: use_peft defaults to False; lora_* alone do nothing
    quantized = rec.get("load_in_4bit") is True or rec.get("load_in_8bit") is True
    if rec.get("use_peft") is not None:
        if lora:
            rec.set("use_peft", "finetuning.method", "qlora" if quantized else "lora")
        else:
            rec.neutral("use_peft", "no adapters")
    if not lora:
        for key in ("lora_r", "lora_dropout", "lora_target_modules", "lora_modules_to_save", "use_dora"):
            if rec.get(key) is not None:
                rec.neutral(key, "use_peft is off")
        if quantized:
            raise InputError(f"{rec.file}: load_in_4bit: a quantized base trains only adapters; set use_peft: true")
        return
    if rec.get("lora_r") is not None:
        rec.set("lora_r", "finetuning.lora.r", positive_int(rec, "lora_r"))
    else:
        rec.default("finetuning.lora.r", 16, "lora_r", f"{TRL_VERSION} ModelConfig")
    if rec.get("lora_dropout") is not None:
        rec.set("lora_dropout", "finetuning.lora.lora_dropout", number(rec, "lora_dropout"))
    else:
        rec.default("finetuning.lora.lora_dropout", 0.05, "lora_dropout", f"{TRL_VERSION} ModelConfig")
    targets = rec.get("lora_target_modules")
    if targets is not None:
        rec.set("lora_target_modules", "finetuning.lora.target_modules", lora_targets(targets))
    from .peft_features import read_modules_to_save, read_use_dora

    read_modules_to_save(rec, "lora_modules_to_save")
    read_use_dora(rec, "use_dora")
    read_bitsandbytes_keys(rec)


def read_bitsandbytes_keys(rec: Recorder) -> None:
    for key, bits in (("load_in_4bit", 4), ("load_in_8bit", 8)):
        if rec.get(key) is True:
            rec.set(key, "finetuning.quantization.bits", bits)
        elif rec.get(key) is not None:
            rec.neutral(key, "off")
    if rec.get("bnb_4bit_quant_type") is not None:
        rec.set("bnb_4bit_quant_type", "finetuning.quantization.quant_type", str(rec.get("bnb_4bit_quant_type")))
    if rec.get("use_bnb_nested_quant") is not None:
        rec.set("use_bnb_nested_quant", "finetuning.quantization.double_quant", bool(rec.get("use_bnb_nested_quant")))
    elif rec.get("load_in_4bit") is True:
        rec.default("finetuning.quantization.double_quant", False, "use_bnb_nested_quant", f"{TRL_VERSION} ModelConfig")


def lora_targets(value: Any) -> Any:
    """PEFT target_modules from a list, a comma-separated string, 'all-linear' or LLaMA-Factory's 'all'."""
    if isinstance(value, str):
        if value.strip().lower() in ("all", "all-linear", "all_linear"):
            return "all-linear"
        return [t.strip() for t in value.split(",") if t.strip()]
    if not isinstance(value, (list, tuple)):  # left for Setup to refuse, naming finetuning.lora.target_modules
        return value  # (iterating an integer raised TypeError: found by benchmarks/fuzz_trainer_files.py)
    return [str(t) for t in value]


def number(rec: Recorder, key: str) -> float:
    """A number the file gives (YAML/JSON int or float; a string or an object is refused, naming the key)."""
    value = rec.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{rec.file}: {key}: must be a number, got {short(value)}")
    return float(value)


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def positive_int(rec: Recorder, key: str) -> int:
    value = rec.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 1:
        raise InputError(f"{rec.file}: {key}: must be a positive integer, got {value!r}")
    return int(value)


def contribution(rec: Recorder, setup_field: str, value: Any, key: str):
    from .record import Contribution

    return Contribution(setup_field, value, rec.file, key)
