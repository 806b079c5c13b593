"""Axolotl YAML.

Defaults read from Axolotl 0.19.0 (``utils/schemas/config.py``, ``training.py``, ``peft.py``):
``sequence_len`` 512, ``micro_batch_size`` 1, ``gradient_accumulation_steps`` 1, ``optimizer``
``adamw_torch_fused``, ``bf16`` "auto", ``gradient_checkpointing`` false, ``lora_dropout`` 0.0.
Axolotl loads the base model in ``torch_dtype``, which is bf16 when ``bf16`` is on
(``utils/config/__init__.py`` normalize_config), fp16 under ``load_in_8bit`` or ``fp16``;
QLoRA uses NF4 with double quantisation (``loaders/model.py``).
``sample_packing`` packs several samples into each row of ``sequence_len`` tokens (flash-attention
varlen), so a micro-batch holds micro_batch_size × sequence_len tokens, as trainmem counts.
RL trainers (``rl: dpo|ipo|orpo|kto|grpo``) run TRL's trainers, with TRL's notion of a batch.
With a quantized base (outside FSDP and ZeRO-3) Axolotl calls PEFT's
``prepare_model_for_kbit_training``, which casts every parameter that is not quantized
(embeddings, norms, lm_head) to fp32 (PEFT 0.21 ``utils/other.py``): trainmem counts them in
the training dtype and says by how much that falls short.
"""

from __future__ import annotations

from .model_ref import read_model_reference
from .optimizer_names import trainer_optimizer
from .record import Contribution, InputError, Recorder
from .trainer_args import ATTENTION_NAMES, lora_targets, number, positive_int, read_fsdp, read_liger, set_optimizer

AXOLOTL_VERSION = "Axolotl 0.19.0"
ATTENTION_FLAGS = {
    "flash_attention": "flash_attention_2",
    "sdp_attention": "sdpa",
    "xformers_attention": "sdpa",
    "flex_attention": "sdpa",
    "eager_attention": "eager",
}
ATTENTION_WORDS = {
    "flash": "flash_attention_2",
    "fa2": "flash_attention_2",
    "sdpa": "sdpa",
    "eager": "eager",
    "xformers": "sdpa",
    "flex": "sdpa",
    "flex_attention": "sdpa",
    "sage": "sdpa",
    "flash_attention_3": "flash_attention_2",
    "flash_attention_4": "flash_attention_2",
}
NOT_MODELLED = {
    "unfrozen_parameters": "assumed every parameter of the method trains",
    "liger_rope": "Liger's fused RoPE: assumed the Hugging Face kernel's memory",
    "liger_rms_norm": "Liger's fused RMSNorm: assumed the Hugging Face kernel's memory",
    "liger_glu_activation": "Liger's fused SwiGLU: assumed the Hugging Face kernel's memory",
    "liger_layer_norm": "Liger's fused LayerNorm: assumed the Hugging Face kernel's memory",
    "flash_attn_rms_norm": "flash-attn's fused RMSNorm: assumed the Hugging Face kernel's memory",
    "flash_attn_fuse_qkv": "fused QKV projection: assumed separate projections",
    "flash_attn_fuse_mlp": "fused MLP: assumed the Hugging Face MLP",
    "flash_attn_cross_entropy": "flash-attn's cross-entropy: assumed the standard fp32 loss",
    "s2_attention": "shifted sparse attention: assumed full attention",
    "activation_offloading": "offloaded activations: assumed kept on the GPU",
    "torch_compile": "torch.compile may fuse away saved tensors: assumed eager-mode memory",
    "fp8": "TorchAO fp8 training: assumed the bf16 recipe",
    "gptq": "GPTQ-quantised base: assumed a 16-bit base",
    "relora_steps": "ReLoRA: assumed plain LoRA",
    "sequence_parallel_degree": "Ulysses sequence parallelism: assumed none",
    "context_parallel_size": "context parallelism: assumed none (give --cp)",
    "tensor_parallel_size": "tensor parallelism: assumed none (give --tp)",
    "bnb_config_kwargs": "assumed NF4 with double quantisation",
    "lora_target_modules_exclude": "assumed the listed targets",
    "quantize_moe_experts": "Axolotl quantises the 3-D expert stacks to NF4 too: trainmem keeps them in the load dtype "
    "(bitsandbytes alone converts nn.Linear only), an upper bound on the expert weights",
    "lora_mlp_kernel": "Axolotl's fused LoRA MLP kernel (Triton) saves fewer tensors: assumed PEFT's LoRA memory",
    "lora_qkv_kernel": "Axolotl's fused LoRA QKV kernel (Triton) saves fewer tensors: assumed PEFT's LoRA memory",
    "lora_o_kernel": "Axolotl's fused LoRA output-projection kernel (Triton): assumed PEFT's LoRA memory",
    "fused_attn_kernel": "Axolotl's fused attention kernel: assumed the Hugging Face attention's memory",
    "use_kernels": "Hugging Face Hub kernels (the kernels library) replace modules: assumed the Hugging Face modules' memory",
    "llama4_linearized_experts": "a checkpoint with one nn.Linear per expert (bitsandbytes can quantise those): "
    "assumed fused experts in the load dtype",
    "dp_shard_size": "FSDP shard group size: assumed every GPU shards (give --gpus)",
    "model_config": "overrides of the model's config.json are not applied: assumed the model's own config",
}
CUT_CROSS_ENTROPY_PLUGIN = "CutCrossEntropyPlugin"
"""Listing ``axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin`` turns Cut Cross-Entropy on: its
``cut_cross_entropy`` argument defaults to true (Axolotl ``integrations/cut_cross_entropy/args.py``)."""


def read_axolotl(rec: Recorder) -> None:
    model_key = "base_model" if rec.has("base_model") else "base_model_config" if rec.has("base_model_config") else None
    if model_key:
        read_model_reference(rec, model_key)
    read_method(rec)
    read_batch(rec)
    read_precision(rec)
    read_attention(rec)
    read_parallelism(rec)
    read_model_quantization(rec)
    for key, assumption in NOT_MODELLED.items():
        value = rec.get(key)
        if rec.seen(key) or key not in rec.data:
            continue
        if value not in (None, False, [], {}, 0):
            rec.unmodelled(key, assumption)
        elif value is not None:
            rec.neutral(key, "off")
    rec.finish()


def read_method(rec: Recorder) -> None:
    adapter = rec.get("adapter")
    bits = 4 if rec.get("load_in_4bit") is True else 8 if rec.get("load_in_8bit") is True else None
    for key in ("load_in_4bit", "load_in_8bit"):
        if rec.get(key) is False:
            rec.neutral(key, "off")
    if adapter is None:
        if bits:
            raise InputError(
                f"{rec.file}: load_in_{bits}bit: a quantized base trains only adapters; set adapter: qlora"
            )
        for key in ("lora_r", "lora_dropout", "lora_target_modules", "lora_target_linear", "lora_modules_to_save", "peft_use_dora"):
            if rec.get(key) is not None:
                rec.neutral(key, "no adapter")
        return
    if adapter not in ("lora", "qlora"):
        rec.unmodelled("adapter", f"{adapter!r}: assumed LoRA")
        adapter = "lora"
    if adapter == "qlora" and bits is None:
        bits = 4
    method = "qlora" if bits else "lora"
    rec.set("adapter", "finetuning.method", method, "an 8-bit base (LLM.int8) with LoRA" if bits == 8 else "")
    if bits:
        rec.facts["kbit_upcast"] = True  # loaders/model.py _prepare_model_for_quantization
        key = f"load_in_{bits}bit" if rec.has(f"load_in_{bits}bit") else "adapter"
        rec.contributions.append(Contribution("finetuning.quantization.bits", bits, rec.file, key))
        if key != "adapter":
            rec.modelled(key, f"finetuning.quantization.bits = {bits}")
        if bits == 4:
            rec.default("finetuning.quantization.quant_type", "nf4", "adapter", f"{AXOLOTL_VERSION} loaders/model.py")
            rec.default("finetuning.quantization.double_quant", True, "adapter", f"{AXOLOTL_VERSION} loaders/model.py")
    if rec.get("lora_r") is not None:
        rec.set("lora_r", "finetuning.lora.r", positive_int(rec, "lora_r"))
    if rec.get("lora_dropout") is not None:
        rec.set("lora_dropout", "finetuning.lora.lora_dropout", number(rec, "lora_dropout"))
    else:
        rec.default("finetuning.lora.lora_dropout", 0.0, "lora_dropout", f"{AXOLOTL_VERSION} utils/schemas/peft.py")
    if rec.get("lora_target_linear") is True:
        rec.set("lora_target_linear", "finetuning.lora.target_modules", "all-linear")
        if rec.get("lora_target_modules"):
            rec.modelled("lora_target_modules", "lora_target_linear adds every linear layer")
    elif rec.get("lora_target_modules"):
        refuse_regex_targets(rec, "lora_target_modules")
        rec.set("lora_target_modules", "finetuning.lora.target_modules", lora_targets(rec.get("lora_target_modules")))
        if rec.get("lora_target_linear") is False:
            rec.neutral("lora_target_linear", "off")
    from .peft_features import read_modules_to_save, read_use_dora

    read_modules_to_save(rec, "lora_modules_to_save")
    read_use_dora(rec, "peft_use_dora")


def read_batch(rec: Recorder) -> None:
    for key, setup_field, default in (
        ("micro_batch_size", "micro_batch_size", 1),
        ("gradient_accumulation_steps", "gradient_accumulation_steps", 1),
        ("sequence_len", "sequence_length", 512),
    ):
        if rec.get(key) is not None:
            detail = "rows padded or packed to this length" if key == "sequence_len" else ""
            rec.set(key, setup_field, positive_int(rec, key), detail)
        else:
            rec.default(setup_field, default, key, f"{AXOLOTL_VERSION} utils/schemas")
    if rec.get("batch_size") is not None:
        rec.modelled("batch_size", "with micro_batch_size, decides gradient_accumulation_steps")
        if rec.get("gradient_accumulation_steps") is None and rec.get("micro_batch_size"):
            steps = max(1, int(rec.get("batch_size")) // int(rec.get("micro_batch_size")))
            rec.contributions.append(Contribution("gradient_accumulation_steps", steps, rec.file, "batch_size"))
    if rec.get("sample_packing") is True:
        rec.set(
            "sample_packing",
            "batch",
            "packed",
            "multipack bins of micro_batch_size × sequence_len tokens in one row, position_ids restarting at each "
            "sample (trainmem.packing); several samples per bin assumed",
        )
    elif rec.get("sample_packing") is not None:
        rec.neutral("sample_packing", "off")
    if rec.get("pad_to_sequence_len") is True or rec.get("sample_packing") is True:
        if rec.get("pad_to_sequence_len") is not None:
            rec.modelled("pad_to_sequence_len", "rows of sequence_len tokens, as trainmem assumes")
    elif rec.get("pad_to_sequence_len") is not None:
        rec.unmodelled(
            "pad_to_sequence_len",
            "off: rows padded to the longest in each batch; trainmem assumes sequence_len tokens (an upper bound)",
        )
    optimizer = rec.get("optimizer")
    arguments = rec.get("optim_args")
    amsgrad = (
        arguments.get("amsgrad") in (True, "True", "true")
        if isinstance(arguments, dict)
        else "amsgrad=true" in str(arguments or "").replace(" ", "").lower()
    )
    if arguments is not None:
        rec.modelled("optim_args", "amsgrad=True: a third optimizer state") if amsgrad else rec.neutral("optim_args")
    if optimizer is not None:
        set_optimizer(rec, "optimizer", str(optimizer), amsgrad)
    else:
        entry = trainer_optimizer("adamw_torch_fused")
        rec.default(
            "optimizer",
            {"name": entry.optimizer, "implementation": entry.implementation},
            "optimizer",
            f"{AXOLOTL_VERSION} utils/schemas/training.py",
        )
    checkpointing = rec.get("gradient_checkpointing")
    if checkpointing is None:
        rec.default(
            "activation_checkpointing", "none", "gradient_checkpointing", f"{AXOLOTL_VERSION} utils/schemas/config.py"
        )
    elif checkpointing in ("offload", "offload_disk"):
        rec.set(
            "gradient_checkpointing",
            "activation_checkpointing",
            "full",
            f"{checkpointing!r}: checkpoints offloaded off the GPU are not modelled, assumed kept on the GPU",
        )
    else:
        rec.set("gradient_checkpointing", "activation_checkpointing", "full" if checkpointing else "none")
    if rec.get("gradient_checkpointing_kwargs") is not None:
        rec.neutral("gradient_checkpointing_kwargs", "use_reentrant: either way one input per layer is kept")
    rl = rec.get("rl")
    if rl is not None:
        name = str(rl).lower()
        rec.facts["trainer"] = name
        mode = {"dpo": "dpo", "ipo": "dpo", "orpo": "orpo", "simpo": "simpo", "kto": "kto", "grpo": "grpo"}.get(name)
        if mode is not None:
            rec.facts["training_mode"] = mode
            if name == "ipo":
                rec.contributions.append(Contribution("training.loss_type", "ipo", rec.file, "rl"))
            rec.modelled("rl", f"{name}: training.mode = {mode} (TRL's trainer)")
        else:
            rec.unmodelled("rl", f"{name}: assumed one row per example")
    if rec.get("reward_model") is True and rl is None:
        # Axolotl core/builders: reward_model runs TRL's RewardTrainer on AutoModelForSequenceClassification (num_labels 1)
        rec.facts["trainer"] = "reward"
        rec.facts["training_mode"] = "reward"
        rec.modelled("reward_model", "training.mode = reward (TRL's RewardTrainer: chosen and rejected rows, a 1-label head)")
        for key in ("model_type", "num_labels"):
            if rec.get(key) is not None:
                rec.modelled(key, "the reward model's sequence-classification head (reward_model)")
    elif rec.get("reward_model") is not None:
        rec.neutral("reward_model", "off" if rec.get("reward_model") is False else "")


def read_precision(rec: Recorder) -> None:
    bf16, fp16 = rec.get("bf16"), rec.get("fp16")
    if rec.get("bfloat16") is True or rec.get("float16") is True:
        key = "bfloat16" if rec.get("bfloat16") is True else "float16"
        rec.set(
            key,
            "precision",
            "bf16-pure" if key == "bfloat16" else "fp16-mixed",
            "weights, gradients and optimizer states in 16 bits",
        )
        return
    if bf16 is True or bf16 == "auto" and fp16 is not True:
        rec.facts["base_dtype"] = "bf16"
        detail = "'auto': assumed the GPU supports bf16 (Ampere or newer)" if bf16 == "auto" else ""
        if bf16 is None:
            rec.default("precision", "bf16-mixed", "bf16", f"{AXOLOTL_VERSION} (bf16: auto)")
        else:
            rec.set("bf16", "precision", "bf16-mixed", (detail + "; " if detail else "") + "base loaded in bf16")
    elif fp16 is True:
        rec.facts["base_dtype"] = "fp16"
        rec.set("fp16", "precision", "fp16-mixed", "base loaded in fp16")
    elif bf16 is None and fp16 is None:
        rec.facts["base_dtype"] = "bf16"
        rec.default("precision", "bf16-mixed", "bf16", f"{AXOLOTL_VERSION} (bf16: auto, assumed a bf16 GPU)")
    else:
        rec.set("bf16", "precision", "fp32")
    if rec.get("load_in_8bit") is True:
        rec.facts.setdefault("base_dtype", "fp16")
    for key in ("bf16", "fp16"):
        if rec.get(key) is not None and not rec.seen(key):
            rec.modelled(key, "read with bf16/fp16")


def read_attention(rec: Recorder) -> None:
    for key in ("attn_implementation", "attention"):
        value = rec.get(key)
        if value is not None:
            attention = ATTENTION_NAMES.get(str(value)) or ATTENTION_WORDS.get(str(value).lower())
            if attention is None:
                rec.unmodelled(key, f"{value!r}: assumed sdpa")
            else:
                rec.set(key, "attention", attention)
            for flag in ATTENTION_FLAGS:
                if rec.get(flag) is not None:
                    rec.modelled(flag, f"{key} decides the attention kernel")
            return
    for key, attention in ATTENTION_FLAGS.items():
        if rec.get(key) is True:
            detail = "xformers keeps no s×s scores either: modelled as sdpa" if key == "xformers_attention" else ""
            rec.set(key, "attention", attention, detail)
            return
        if rec.get(key) is False:
            rec.neutral(key, "off")


def read_parallelism(rec: Recorder) -> None:
    deepspeed = rec.get("deepspeed")
    if deepspeed is not None:
        rec.modelled("deepspeed", "reads the DeepSpeed config it names")
        rec.link("deepspeed", "deepspeed", deepspeed)
    version = rec.get("fsdp_version")
    config = rec.get("fsdp_config")
    if rec.get("fsdp") or version is not None and isinstance(config, dict):
        if version is not None:
            if version not in (1, 2, "1", "2"):
                raise InputError(f"{rec.file}: fsdp_version: must be 1 or 2, got {version!r}")
            rec.set("fsdp_version", "parallelism.fsdp_version", int(version), f"FSDP{version}")
            rec.contributions.append(Contribution("parallelism.strategy", "fsdp", rec.file, "fsdp_version"))
        read_fsdp(rec)
        if not rec.get("fsdp") and isinstance(config, dict):
            from .fsdp import apply_fsdp_config

            apply_fsdp_config(rec, "fsdp_config", config, "FULL_SHARD", True)
    if rec.get("liger_fused_linear_cross_entropy") is not None:
        read_liger(rec, "liger_fused_linear_cross_entropy")
    for key in ("cut_cross_entropy", "chunked_cross_entropy"):
        if rec.get(key) is True:
            rec.set(key, "loss", "chunked", "the logits never whole: modelled as a chunked cross-entropy (loss_chunks)")
        elif rec.get(key) is not None:
            rec.neutral(key)
    plugins = rec.get("plugins")
    if (
        isinstance(plugins, list)
        and any(str(p).endswith(CUT_CROSS_ENTROPY_PLUGIN) for p in plugins)
        and rec.get("cut_cross_entropy") is None
        and rec.get("liger_fused_linear_cross_entropy") is not True
    ):
        rec.set(
            "plugins",
            "loss",
            "chunked",
            "CutCrossEntropyPlugin: cut_cross_entropy defaults to true (Axolotl integrations/cut_cross_entropy/args.py); "
            "the logits never whole: modelled as a chunked cross-entropy (loss_chunks)",
        )
    elif plugins is not None:
        rec.neutral("plugins", "the plugins' options are read as their own keys")


def read_model_quantization(rec: Recorder) -> None:
    """``model_quantization_config`` (a transformers quantization config class, e.g. gpt-oss's ``Mxfp4Config``) and its
    kwargs: with ``dequantize: true`` the checkpoint is dequantised on load (transformers ``Mxfp4Config``), so the
    weights sit in the load dtype, as trainmem counts them."""
    name = rec.get("model_quantization_config")
    if name is None:
        return
    kwargs = rec.get("model_quantization_config_kwargs")
    dequantize = isinstance(kwargs, dict) and kwargs.get("dequantize") is True
    if dequantize:
        rec.modelled("model_quantization_config", f"{name}, dequantize: true: weights dequantised to the load dtype on load")
        rec.modelled("model_quantization_config_kwargs", "dequantize: true, as trainmem counts the weights")
    else:
        rec.unmodelled("model_quantization_config", f"{name}: quantised weights assumed dequantised to the load dtype")
        if kwargs is not None:
            rec.modelled("model_quantization_config_kwargs", "read with model_quantization_config")


REGEX_CHARACTERS = frozenset("[]()|*+?^$\\{}")


def refuse_regex_targets(rec: Recorder, key: str) -> None:
    """A string ``target_modules`` is a regular expression to PEFT (``re.fullmatch`` against each module's path, PEFT 0.21
    ``tuners/tuners_utils.py`` check_target_module_exists); trainmem takes module names only, so a pattern is refused."""
    value = rec.get(key)
    if isinstance(value, str) and REGEX_CHARACTERS & set(value):
        shown = value if len(value) <= 60 else value[:57] + "..."
        raise InputError(
            f"{rec.file}: {key}: {shown!r} is a regular expression (PEFT full-matches it against module paths), "
            "which trainmem does not evaluate; list the module names instead (e.g. [q_proj, k_proj, v_proj, o_proj])"
        )
