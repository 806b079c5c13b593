"""torchtune recipe configs (``tune run <recipe> --config FILE``): YAML whose components name a ``_component_``.

Read from torchtune 0.6.1 (``recipes/*.py``, ``torchtune/models/*/_model_builders.py``,
``torchtune/modules/loss``); the catalog of builders, optimizers and losses is data
(``data/torchtune_components.json``):

* ``model._component_`` names a builder (``torchtune.models.llama3_1.lora_llama3_1_8b``): the
  builder without its ``lora_``/``qlora_`` prefix gives the checkpoint (a preset through
  ``data/hub_ids.json``), the prefix the method; the LoRA builders take ``lora_attn_modules``
  (``q_proj``, ``k_proj``, ``v_proj``, ``output_proj``), ``apply_lora_to_mlp`` and
  ``apply_lora_to_output`` (default False), ``lora_rank`` (8), ``lora_dropout`` (0.0),
  ``use_dora`` and ``quantize_base`` (True for ``qlora_``: torchao's NF4Tensor, block 64 with its
  scales quantized in blocks of 256 — bitsandbytes' NF4 with double quantization, byte for byte);
* ``dtype`` bf16 or fp32: the recipes build the model in that dtype and train it there, no
  autocast and no fp32 master copy (``training.get_dtype``; fp16 is refused by the recipes), so
  bf16 is trainmem's ``bf16-pure``;
* ``batch_size`` (per device), ``gradient_accumulation_steps``, ``tokenizer.max_seq_len``
  (``null``: no truncation), ``dataset.packed`` (rows packed to ``max_seq_len``);
* ``enable_activation_checkpointing`` (recipes' default False), ``enable_activation_offloading``,
  ``optimizer_in_bwd``, ``compile`` (default False), ``fsdp_cpu_offload`` and
  ``fsdp_reshard_after_forward`` (distributed recipes: FSDP2 ``fully_shard``).

A config does not say how many processes ``tune run --nproc_per_node N`` starts; a distributed
recipe's keys (``fsdp_cpu_offload``, ``custom_sharded_layers``, ...) make the run FSDP2, and
``--gpus N`` above 1 does too for the rest (the merge's rule).
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib import resources
from typing import Any

from .hub import preset_for_hub_id
from .record import Contribution, InputError, Recorder

TORCHTUNE_VERSION = "torchtune 0.6.1"
DISTRIBUTED_KEYS = (
    "fsdp_cpu_offload",
    "fsdp_reshard_after_forward",
    "custom_sharded_layers",
    "tensor_parallel_dim",
    "tensor_parallel_plan",
    "data_parallel_shard_dim",
    "data_parallel_replicate_dim",
)
"""Keys only torchtune's distributed recipes read (full_finetune_distributed.py, lora_finetune_distributed.py)."""
NOT_MODELLED = {
    "enable_activation_offloading": "activations offloaded to the CPU (torchtune OffloadActivations): assumed kept on the GPU (an upper bound)",
    "optimizer_in_bwd": "the optimizer steps each parameter during backward and frees its gradient: assumed every gradient alive until the optimizer step (an upper bound)",
    "compile": "torch.compile may fuse away saved tensors: assumed eager-mode memory (an upper bound)",
    "ac_mode": "selective activation checkpointing: assumed what enable_activation_checkpointing says",
    "ac_option": "selective activation checkpointing: assumed what enable_activation_checkpointing says",
    "tensor_parallel_plan": "tensor parallelism: assumed none (give --tp)",
    "data_parallel_replicate_dim": "HSDP replicas: assumed one FSDP group over every GPU",
    "quantizer": "quantization-aware training fake-quantizes in the forward: assumed plain bf16 layers",
    "teacher_model": "knowledge distillation's teacher (kd recipes): its weights and logits are not counted",
    "kd_loss": "the distillation loss over teacher and student logits: not counted",
    "policy_model": "torchtune's PPO recipe (policy, reference, reward and value models): not modelled; give the model with --preset",
    "ref_policy_model": "PPO's reference policy: not counted",
    "reward_and_value_model": "PPO's reward and value models: not counted",
}


@cache
def catalog() -> dict[str, Any]:
    text = resources.files("trainmem").joinpath("data").joinpath("torchtune_components.json").read_text(encoding="utf-8")
    return json.loads(text)


RL_RECIPES = (
    ("reward_and_value_model", "ppo_full_finetune_single_device.py: the policy and the value model (reward_and_value_model) train in one "
     "backward through PPOLoss, beside a frozen reference policy and a frozen reward model (four models at once)"),
    ("grpo_samples", "dev/grpo_full_finetune_distributed.py: GRPO generates grpo_samples completions per prompt with torchtune's own "
     "generation loop and scores them with reward functions"),
    ("reward_functions", "grpo_finetune_single_device.py: GRPO generates num_generations completions per prompt with torchtune's "
     "own generation loop (KV cache) and scores them with the reward_functions it lists"),
)
"""torchtune's RL recipes, told apart by a key only they read. Neither is trainmem's RL step (verl's phased PPO,
TRL's GRPO): refused in one line rather than estimated as something else."""


def refuse_rl_recipes(rec: Recorder) -> None:
    for key, recipe in RL_RECIPES:
        if rec.get(key) is not None:
            raise InputError(
                f"{rec.file}: {key}: torchtune's {recipe}; not modelled (trainmem models verl's PPO and TRL's GRPO: "
                "give the run as a verl or TRL config, or training.mode ppo/grpo in a setup)"
            )


def read_torchtune(rec: Recorder) -> None:
    refuse_rl_recipes(rec)
    for section in ("model", "optimizer", "loss", "tokenizer", "dataset"):
        if section in rec.data and rec.data[section] is not None and not isinstance(rec.data[section], dict):
            raise InputError(f"{rec.file}: {section}: must be a mapping with a _component_, got {_kind(rec.data[section])}")
    read_model(rec)
    read_batch(rec)
    read_precision(rec)
    read_optimizer(rec)
    read_loss(rec)
    read_memory_keys(rec)
    read_distributed(rec)
    for section in ("model", "optimizer", "loss", "tokenizer", "dataset"):
        rec.finish(section)
    rec.finish()


# -- the model ------------------------------------------------------------------------------------


def read_model(rec: Recorder) -> None:
    key = "model._component_"
    component = rec.get(key)
    if component is None:
        return  # the merge asks for the model
    if not isinstance(component, str) or not component.strip():
        raise InputError(f"{rec.file}: {key}: must name a torchtune model builder (torchtune.models.<family>.<builder>), got {component!r}")
    builder = component.strip().rsplit(".", 1)[-1]
    method = "qlora" if builder.startswith("qlora_") else "lora" if builder.startswith("lora_") else "full"
    base = builder.removeprefix("qlora_").removeprefix("lora_")
    entry = catalog()["builders"].get(base)
    if entry is None:
        rec.modelled(key, f"builder {builder!r} is not in data/torchtune_components.json; the model comes from a config.json or a flag")
        rec.facts.setdefault("unresolved_models", []).append((key, builder))
    else:
        hub_id = entry["hub_id"]
        preset = entry.get("preset") or preset_for_hub_id(hub_id)
        if preset is not None:
            detail = f"builder {base} = {hub_id} (data/torchtune_components.json)" + (f"; {entry['note']}" if entry.get("note") else "")
            rec.set(key, "model", {"preset": preset}, detail)
        else:
            rec.modelled(key, f"builder {base} = {hub_id}: no preset matches; the model comes from a config.json or a flag")
            rec.facts.setdefault("unresolved_models", []).append((key, hub_id))
    if rec.get("model.quantize_base") is not None:
        quantized = _boolean(rec, "model.quantize_base")
        if method != "full":
            method = "qlora" if quantized else "lora"
        rec.modelled("model.quantize_base", "the frozen base in NF4 (QLoRA)" if quantized else "a 16-bit base")
    if method == "full":
        for name in ("lora_attn_modules", "apply_lora_to_mlp", "apply_lora_to_output", "lora_rank", "lora_alpha", "lora_dropout", "use_dora"):
            if rec.get(f"model.{name}") is not None:
                rec.neutral(f"model.{name}", "the builder has no adapters")
        rec.contributions.append(Contribution("finetuning.method", "full", rec.file, key))
        return
    rec.contributions.append(Contribution("finetuning.method", method, rec.file, key))
    if method == "qlora":
        rec.contributions.append(Contribution("finetuning.quantization.bits", 4, rec.file, key))
        rec.default("finetuning.quantization.quant_type", "nf4", key, f"{TORCHTUNE_VERSION} (torchao NF4Tensor)")
        rec.default("finetuning.quantization.double_quant", True, key, f"{TORCHTUNE_VERSION} (torchao NF4Tensor: scales quantized in blocks of 256)")
    read_lora(rec, entry or {})


def read_lora(rec: Recorder, entry: dict[str, Any]) -> None:
    names = catalog()["fused_lora_modules"].get(entry.get("family", ""), catalog()["lora_modules"])
    attention = rec.get("model.lora_attn_modules")
    if attention is None:
        raise InputError(f"{rec.file}: model.lora_attn_modules: a LoRA builder needs it (a list of q_proj, k_proj, v_proj, output_proj)")
    if isinstance(attention, str):
        attention = [attention]
    if not isinstance(attention, list) or not all(isinstance(n, str) for n in attention):
        raise InputError(f"{rec.file}: model.lora_attn_modules: must be a list of q_proj, k_proj, v_proj, output_proj; got {attention!r}")
    unknown = [n for n in attention if n not in names["attention"]]
    if unknown:
        raise InputError(
            f"{rec.file}: model.lora_attn_modules: unknown module {unknown[0]!r}; allowed: {', '.join(names['attention'])}"
        )
    targets = list(dict.fromkeys(names["attention"][n] for n in attention))
    if _boolean(rec, "model.apply_lora_to_mlp"):
        targets += [n for n in names["mlp"] if n not in targets]
        rec.modelled("model.apply_lora_to_mlp", f"adapters on {', '.join(names['mlp'])} (torchtune w1, w3, w2)")
    elif rec.has("model.apply_lora_to_mlp"):
        rec.neutral("model.apply_lora_to_mlp", "off")
    if _boolean(rec, "model.apply_lora_to_output"):
        targets.append(names["output"])
        rec.modelled("model.apply_lora_to_output", f"an adapter on {names['output']}")
    elif rec.has("model.apply_lora_to_output"):
        rec.neutral("model.apply_lora_to_output", "off")
    detail = "torchtune names mapped to the Hugging Face modules" + (f"; {names['note']}" if names.get("note") else "")
    rec.set("model.lora_attn_modules", "finetuning.lora.target_modules", targets, detail)
    if rec.get("model.lora_rank") is not None:
        rec.set("model.lora_rank", "finetuning.lora.r", _positive_int(rec, "model.lora_rank"))
    else:
        rec.default("finetuning.lora.r", 8, "model.lora_rank", f"{TORCHTUNE_VERSION} LoRA builders")
    if rec.get("model.lora_dropout") is not None:
        rec.set("model.lora_dropout", "finetuning.lora.lora_dropout", _fraction(rec, "model.lora_dropout"))
    else:
        rec.default("finetuning.lora.lora_dropout", 0.0, "model.lora_dropout", f"{TORCHTUNE_VERSION} LoRA builders")
    if rec.get("model.use_dora") is not None:
        if _boolean(rec, "model.use_dora"):
            rec.set("model.use_dora", "finetuning.lora.use_dora", True, "DoRA's magnitude vectors")
        else:
            rec.neutral("model.use_dora", "off")
    if rec.get("model.lora_alpha") is not None:
        rec.neutral("model.lora_alpha", "a scale: no memory")


# -- batch, precision, optimizer, loss -----------------------------------------------------------


def read_batch(rec: Recorder) -> None:
    if rec.get("batch_size") is not None:
        rec.set("batch_size", "micro_batch_size", _positive_int(rec, "batch_size"), "per device")
    if rec.get("gradient_accumulation_steps") is not None:
        rec.set("gradient_accumulation_steps", "gradient_accumulation_steps", _positive_int(rec, "gradient_accumulation_steps"))
    else:
        rec.default("gradient_accumulation_steps", 1, "gradient_accumulation_steps", f"{TORCHTUNE_VERSION} recipes")
    length = rec.get("tokenizer.max_seq_len")
    if length is not None:
        rec.set("tokenizer.max_seq_len", "sequence_length", _positive_int(rec, "tokenizer.max_seq_len"), "every row assumed this long (padding or packing fills it)")
    else:
        if rec.has("tokenizer"):
            rec.mark("tokenizer.max_seq_len")
        rec.default("sequence_length", 2048, "tokenizer.max_seq_len", "trainmem's assumption (max_seq_len null: rows as long as the longest sample; give --seq-len)")
    packed = rec.get("dataset.packed")
    if packed is not None and _boolean(rec, "dataset.packed"):
        rec.set(
            "dataset.packed",
            "batch",
            "packed",
            "PackedDataset: several samples per row of max_seq_len tokens with position ids restarting; trainmem "
            "counts the micro-batch's tokens in one packed row (trainmem.packing)",
        )
    elif packed is not None:
        rec.neutral("dataset.packed", "off: rows padded to the batch's longest sample")


def read_precision(rec: Recorder) -> None:
    dtype = rec.get("dtype")
    if dtype is None:
        rec.default("precision", "fp32", "dtype", f"{TORCHTUNE_VERSION} training.get_dtype (no dtype: fp32)")
        return
    name = str(dtype).lower().removeprefix("torch.")
    precision = {"bf16": "bf16-pure", "bfloat16": "bf16-pure", "fp32": "fp32", "float32": "fp32"}.get(name)
    if precision is None:
        raise InputError(f"{rec.file}: dtype: torchtune trains in bf16 or fp32 (its recipes refuse fp16); got {dtype!r}")
    rec.set("dtype", "precision", precision, "weights, gradients and optimizer states in this dtype, no autocast" if precision == "bf16-pure" else "")


def read_optimizer(rec: Recorder) -> None:
    component = rec.get("optimizer._component_")
    if component is None:
        return
    entry = catalog()["optimizers"].get(str(component).strip())
    if entry is None:
        rec.unmodelled("optimizer._component_", f"{component!r} is not an optimizer trainmem knows: assumed AdamW")
        return
    name = entry["optimizer"]
    implementation = None
    if name in ("adamw", "adam", "sgd"):
        fused, foreach = rec.get("optimizer.fused"), rec.get("optimizer.foreach")
        if fused is not None and _boolean(rec, "optimizer.fused"):
            implementation = "fused"
            rec.modelled("optimizer.fused", "fused=True: one kernel, no temporaries")
        elif foreach is not None and not _boolean(rec, "optimizer.foreach"):
            implementation = "for-loop"
        for option in ("fused", "foreach"):
            if rec.get(f"optimizer.{option}") is not None and not rec.seen(f"optimizer.{option}"):
                rec.modelled(f"optimizer.{option}", "decides the implementation")
    if name == "sgd":
        momentum = rec.get("optimizer.momentum")
        if isinstance(momentum, (int, float)) and not isinstance(momentum, bool) and momentum > 0:
            name = "sgd-momentum"
            rec.modelled("optimizer.momentum", "a momentum buffer per parameter")
    if name in ("adamw", "adam") and rec.get("optimizer.amsgrad") is True:
        name += "-amsgrad"
        rec.modelled("optimizer.amsgrad", "a third optimizer state")
    value = {"name": name, "implementation": implementation}
    detail = entry["note"] + ("" if implementation else " (torch picks foreach on CUDA)" if name.startswith(("adam", "sgd")) else "")
    rec.set("optimizer._component_", "optimizer", value, detail)


def read_loss(rec: Recorder) -> None:
    component = rec.get("loss._component_")
    if component is None:
        return
    entry = catalog()["losses"].get(str(component).strip())
    if entry is None:
        rec.unmodelled("loss._component_", f"{component!r}: assumed the standard cross-entropy over fp32 logits")
        return
    if "loss" in entry:
        rec.set("loss._component_", "loss", entry["loss"], entry["note"])
        chunks = rec.get("loss.num_output_chunks")
        if chunks is not None:
            rec.set("loss.num_output_chunks", "loss_chunks", _positive_int(rec, "loss.num_output_chunks"))
        elif entry["loss"] == "chunked":
            rec.default("loss_chunks", 8, "loss.num_output_chunks", f"{TORCHTUNE_VERSION} (num_output_chunks 8)")
        return
    mode = entry["mode"]
    rec.facts["training_mode"] = mode
    rec.facts["trainer"] = mode
    rec.modelled("loss._component_", f"training.mode = {mode}: {entry['note']}")
    beta = rec.get("loss.beta")
    if beta is not None:
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 <= beta <= 1000:
            raise InputError(f"{rec.file}: loss.beta: must be a number from 0 to 1000, got {beta!r}")
        rec.set("loss.beta", "training.beta", float(beta))
    if entry.get("loss_type"):
        rec.contributions.append(Contribution("training.loss_type", entry["loss_type"], rec.file, "loss._component_"))
    if rec.get("ref_checkpointer") is not None:
        rec.modelled("ref_checkpointer", "a reference model loaded next to the policy (full_dpo_distributed.py)")


# -- memory switches and the distributed recipes ---------------------------------------------------


def read_memory_keys(rec: Recorder) -> None:
    checkpointing = rec.get("enable_activation_checkpointing")
    if checkpointing is not None:
        on = _boolean(rec, "enable_activation_checkpointing")
        rec.set("enable_activation_checkpointing", "activation_checkpointing", "full" if on else "none", "every decoder layer" if on else "")
    else:
        rec.default("activation_checkpointing", "none", "enable_activation_checkpointing", f"{TORCHTUNE_VERSION} recipes (default False)")
    for key, assumption in NOT_MODELLED.items():
        if key not in rec.data or rec.seen(key):
            continue
        value = rec.get(key)
        if key == "tensor_parallel_plan" and rec.get("tensor_parallel_dim") in (None, 1):
            rec.neutral(key, "tensor_parallel_dim 1: no tensor parallelism")
        elif value is None:
            rec.neutral(key, "empty: the default applies")
        elif value is False or value == "" or (not isinstance(value, bool) and value in (0, 1)):
            rec.neutral(key, "off")
        else:
            rec.unmodelled(key, assumption)


def read_distributed(rec: Recorder) -> None:
    present = [key for key in DISTRIBUTED_KEYS if key in rec.data]
    rec.facts["multi_gpu_strategy"] = "fsdp"
    if not present:
        return
    rec.contributions.append(Contribution("parallelism.strategy", "fsdp", rec.file, present[0]))
    rec.contributions.append(Contribution("parallelism.fsdp_version", 2, rec.file, present[0]))
    offload = rec.get("fsdp_cpu_offload")
    if offload is not None:
        if _boolean(rec, "fsdp_cpu_offload"):
            rec.set("fsdp_cpu_offload", "parallelism.offload_parameters", True, "FSDP2 CPUOffloadPolicy: parameters, gradients and the optimizer step on the host")
            rec.contributions.append(Contribution("parallelism.offload_optimizer", True, rec.file, "fsdp_cpu_offload"))
        else:
            rec.neutral("fsdp_cpu_offload", "off")
    reshard = rec.get("fsdp_reshard_after_forward")
    if reshard is not None:
        strategy = "FULL_SHARD" if _boolean(rec, "fsdp_reshard_after_forward") else "SHARD_GRAD_OP"
        rec.set("fsdp_reshard_after_forward", "parallelism.fsdp_sharding_strategy", strategy)
    if rec.get("custom_sharded_layers") is not None:
        rec.modelled("custom_sharded_layers", "embeddings and output sharded as their own FSDP units, as trainmem gathers them")
    dim = rec.get("tensor_parallel_dim")
    if dim is not None:
        if _positive_int(rec, "tensor_parallel_dim") > 1:
            rec.set("tensor_parallel_dim", "parallelism.tensor_parallel_size", int(dim), "DTensor tensor parallelism")
            rec.contributions.append(Contribution("parallelism.tensor_parallel_flavor", "dtensor", rec.file, "tensor_parallel_dim"))
        else:
            rec.neutral("tensor_parallel_dim", "no tensor parallelism")
    if rec.get("data_parallel_shard_dim") is not None:
        rec.neutral("data_parallel_shard_dim", "-1: every GPU in one FSDP group" if rec.get("data_parallel_shard_dim") == -1 else "")


# -- values ---------------------------------------------------------------------------------------


def _boolean(rec: Recorder, key: str, default: bool = False) -> bool:
    value = rec.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    raise InputError(f"{rec.file}: {key}: must be true or false, got {value!r}")


def _positive_int(rec: Recorder, key: str) -> int:
    value = rec.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or int(value) != value or value < 1:
        raise InputError(f"{rec.file}: {key}: must be a positive integer, got {value!r}")
    return int(value)


def _fraction(rec: Recorder, key: str) -> float:
    value = rec.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise InputError(f"{rec.file}: {key}: must be a number from 0 to below 1, got {value!r}")
    return float(value)


def _kind(value: Any) -> str:
    return {str: "text", int: "a number", float: "a number", list: "a list", bool: "true/false"}.get(type(value), type(value).__name__)
