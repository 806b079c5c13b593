"""Hugging Face ``TrainingArguments`` and TRL configs (``SFTConfig``, ``DPOConfig``, ``GRPOConfig``, ...), JSON or YAML.

Which trainer a file is for decides its defaults and what a batch counts; it is read from
the keys the file uses (a TRL CLI / alignment-handbook recipe mixes ``ModelConfig`` and the
trainer's config in one file):

* ``num_generations``/``max_completion_length``/``reward_funcs`` -> GRPO;
* ``beta`` with ``max_prompt_length``, ``loss_type``, ``rpo_alpha`` or ``precompute_ref_log_probs``
  -> a preference trainer (DPO/ORPO: chosen and rejected rows together);
* any other TRL key (``max_length``, ``packing``, ``model_name_or_path``, ``use_peft``, ...) -> SFT;
* otherwise plain ``TrainingArguments`` (transformers defaults: no checkpointing, fp32).
"""

from __future__ import annotations

from .record import Contribution, Recorder
from .trainer_args import (
    TRANSFORMERS_DEFAULTS,
    TRL_DPO_DEFAULTS,
    TRL_GRPO_DEFAULTS,
    TRL_SFT_DEFAULTS,
    TRL_VERSION,
    positive_int,
    read_batch_and_precision,
    read_compile,
    read_fsdp,
    read_liger,
    read_trl_model_keys,
)

_TRL_KEYS = {
    "max_length",
    "max_seq_length",
    "packing",
    "padding_free",
    "dataset_text_field",
    "model_name_or_path",
    "use_peft",
    "lora_r",
    "completion_only_loss",
    "assistant_only_loss",
    "dataset_name",
    "model_init_kwargs",
}


def trainer_kind(data: dict) -> str:
    keys = set(data)
    if keys & {"num_generations", "max_completion_length", "reward_funcs", "reward_weights"}:
        return "grpo"
    if "beta" in keys and keys & {"max_prompt_length", "loss_type", "rpo_alpha", "precompute_ref_log_probs"}:
        return "preference"
    if keys & _TRL_KEYS:
        return "sft"
    return "trainer"


def framework_label(data: dict) -> str:
    return {
        "grpo": TRL_GRPO_DEFAULTS.label,
        "preference": TRL_DPO_DEFAULTS.label + " / ORPOConfig",
        "sft": TRL_SFT_DEFAULTS.label,
        "trainer": TRANSFORMERS_DEFAULTS.label,
    }[trainer_kind(data)]


def read_trl(rec: Recorder) -> None:
    kind = trainer_kind(rec.data)
    defaults = {"grpo": TRL_GRPO_DEFAULTS, "preference": TRL_DPO_DEFAULTS, "sft": TRL_SFT_DEFAULTS}.get(
        kind, TRANSFORMERS_DEFAULTS
    )
    rec.facts["trainer"] = kind
    read_batch_and_precision(rec, defaults)
    read_sequence(rec, kind, defaults)
    read_trl_model_keys(rec)
    read_trainer_features(rec)
    read_preference_keys(rec, kind)


def read_sequence(rec: Recorder, kind: str, defaults) -> None:
    if kind == "grpo":
        prompt = rec.get("max_prompt_length")
        completion = rec.get("max_completion_length")
        completion = positive_int(rec, "max_completion_length") if completion is not None else 512
        if prompt is None:
            rec.notes.append(
                f"{rec.file}: GRPO prompts are not bounded (max_prompt_length unset): trainmem assumed 512 prompt tokens "
                f"+ {completion} completion tokens per row"
            )
            prompt = 512
        else:
            prompt = positive_int(rec, "max_prompt_length")
        key = "max_completion_length" if rec.has("max_completion_length") else "max_prompt_length"
        if rec.has(key):
            rec.set(key, "sequence_length", prompt + completion, "prompt + completion tokens per row")
            for other in ("max_prompt_length", "max_completion_length"):
                if other != key and rec.has(other):
                    rec.modelled(other, "part of sequence_length")
        else:
            rec.default("sequence_length", prompt + completion, "max_completion_length", f"{TRL_VERSION} GRPOConfig")
        return
    keys = [k for k in ("max_length", "max_seq_length") if rec.get(k) is not None]
    if keys:
        rec.set(
            keys[0],
            "sequence_length",
            positive_int(rec, keys[0]),
            "every row assumed this long (padding or packing fills it)",
        )
        for other in keys[1:]:
            rec.set(other, "sequence_length", positive_int(rec, other))
    elif defaults.sequence_length is not None:
        rec.default("sequence_length", defaults.sequence_length, "max_length", defaults.label)
    if kind == "preference" and rec.has("max_prompt_length"):
        rec.modelled("max_prompt_length", "within max_length")


def read_trainer_features(rec: Recorder) -> None:
    """Keys every TrainingArguments file may carry: packing, DeepSpeed, FSDP, compile, Liger."""
    packing = rec.get("packing")
    padding_free = rec.get("padding_free")
    if packing is True and padding_free is not False:
        rec.set(
            "packing",
            "batch",
            "packed",
            "TRL 1.16 'bfd' packing trains padding-free: the micro-batch flattened into one row with position_ids "
            "restarts (trainmem.packing); several sequences per row assumed",
        )
    elif packing is True:
        rec.modelled("packing", "packed rows are full: micro-batch × max_length tokens, as trainmem assumes")
    elif packing is not None:
        rec.neutral("packing", "off: rows are padded; trainmem assumes each row max_length tokens (an upper bound)")
    if rec.get("packing_strategy") is not None:
        rec.neutral("packing_strategy")
    if padding_free is True and packing is not True:
        rec.set(
            "padding_free",
            "batch",
            "packed",
            "DataCollatorWithFlattening: the micro-batch in one row with position_ids restarts; every sequence "
            "assumed max_length tokens (an upper bound)",
        )
    elif padding_free is True:
        rec.modelled("padding_free", "with packing: one flattened row (batch = packed)")
    elif padding_free is not None:
        rec.neutral("padding_free", "off")
    deepspeed = rec.get("deepspeed")
    if deepspeed is not None:
        rec.modelled("deepspeed", "reads the DeepSpeed config it names")
        rec.link("deepspeed", "deepspeed", deepspeed)
    read_fsdp(rec)
    for key in ("torch_compile",):
        if rec.get(key) is not None:
            read_compile(rec, key)
    for key in ("use_liger_kernel", "use_liger"):
        if rec.get(key) is not None:
            read_liger(rec, key)
    for key, assumption in (
        ("auto_find_batch_size", "the batch size it settles on is not predicted: assumed per_device_train_batch_size"),
        ("torch_empty_cache_steps", "assumed the caching allocator keeps its cache"),
        ("use_cpu", "trains on the CPU: trainmem still reports GPU memory"),
        ("half_precision_backend", "assumed the default (PyTorch autocast)"),
        ("fsdp_min_num_params", "assumed one FSDP unit per decoder layer"),
        ("activation_offloading", "activations offloaded to the CPU: assumed kept on the GPU (an upper bound)"),
    ):
        if rec.get(key) not in (None, False, 0, "auto"):
            rec.unmodelled(key, assumption)
        elif key in rec.data and rec.get(key) is not None:
            rec.neutral(key, "off")


def read_preference_keys(rec: Recorder, kind: str) -> None:
    """A preference config runs DPOTrainer's step (``training.mode`` dpo): chosen and rejected rows in one
    forward, a reference model unless PEFT or precomputed log-probs remove it. ORPO/CPO/SimPO configs have
    the same keys; the note says to set the mode for them (no reference model)."""
    if kind == "grpo":
        rec.facts["training_mode"] = "grpo"
        for key in ("num_generations", "max_prompt_length", "max_completion_length"):
            if rec.get(key) is not None:
                rec.contributions.append(Contribution(f"training.{key}", positive_int(rec, key), rec.file, key))
        for key in ("beta", "vllm_gpu_memory_utilization"):
            if isinstance(rec.get(key), (int, float)) and not isinstance(rec.get(key), bool):
                rec.set(key, f"training.{key}", float(rec.get(key)))
        for key in ("use_vllm", "vllm_enable_sleep_mode"):
            if isinstance(rec.get(key), bool):
                rec.set(key, f"training.{key}", rec.get(key))
        if rec.get("vllm_mode") in ("colocate", "server"):
            rec.set("vllm_mode", "training.vllm_mode", rec.get("vllm_mode"))
        return
    if kind != "preference":
        return
    rec.facts["training_mode"] = "dpo"
    if isinstance(rec.get("beta"), (int, float)) and not isinstance(rec.get("beta"), bool):
        rec.set("beta", "training.beta", float(rec.get("beta")))
    if isinstance(rec.get("precompute_ref_log_probs"), bool):
        rec.set("precompute_ref_log_probs", "training.precompute_ref_log_probs", rec.get("precompute_ref_log_probs"))
    if isinstance(rec.get("loss_type"), str):
        rec.set("loss_type", "training.loss_type", rec.get("loss_type"))
    rec.notes.append(
        f"{rec.file}: a preference config (beta with DPO keys): trainmem simulates TRL 1.16's DPOTrainer "
        "(chosen and rejected rows in one forward, a reference model unless PEFT or precomputed log-probs); "
        "for ORPO, CPO or SimPO (no reference model) set training.mode"
    )
