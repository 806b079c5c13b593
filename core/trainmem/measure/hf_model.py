"""Build the real model a Setup describes, from its config alone (no weights downloaded).

* ``model``: a preset's or a user's Hugging Face config dict (with ``model_type``), or an
  :class:`~trainmem.architecture.Architecture` turned back into a Llama or GPT-2 config;
  ``use_cache`` is set to False (a training step keeps no KV cache).
* ``attention``: ``eager`` -> ``attn_implementation="eager"``; ``sdpa`` and ``sdpa-math``
  -> ``"sdpa"`` (the runner forces SDPA's math backend for ``sdpa-math``).
* ``precision``: ``fp32``, ``amp-bf16`` and ``amp-fp16`` keep fp32 weights (autocast does
  the rest); ``bf16-pure`` casts the whole model with ``model.to(torch.bfloat16)``.
* ``finetuning.method == "lora"``: ``peft.get_peft_model(model, LoraConfig(r,
  target_modules, lora_dropout))`` with peft's defaults otherwise (``target_modules=None``
  lets peft pick its default for the model type; its ``autocast_adapter_dtype=True``
  keeps adapters in fp32 on a bf16 base).
* ``activation_checkpointing == "full"``: transformers'
  ``activation_checkpointing_enable({"use_reentrant": False})`` on the base model, after
  LoRA (as the HF Trainer does); it also makes the embedding output require grad.

For FakeTensor runs the model is built on the meta device (construction and peft's
``.to()`` calls work there, unlike under FakeTensorMode) and then materialised as fake
tensors by :func:`trainmem.measure.fake.materialize`.
"""

from __future__ import annotations

from typing import Any

import torch

from ..architecture import Architecture
from ..catalogs import presets
from ..setup import ArchitectureModel, HFConfigModel, PresetModel, Setup

ATTENTION_IMPLEMENTATION = {"eager": "eager", "sdpa": "sdpa", "sdpa-math": "sdpa"}
REPLAYABLE_PRECISIONS = ("fp32", "amp-bf16", "amp-fp16", "bf16-pure")


def hf_config_dict(setup: Setup) -> dict[str, Any]:
    """The Hugging Face config fields of the setup's model (``model_type`` included)."""
    model = setup.model
    if isinstance(model, PresetModel):
        config = dict(presets()[model.preset].config)
    elif isinstance(model, HFConfigModel):
        assert isinstance(model.hf_config, dict)
        config = dict(model.hf_config)
    elif isinstance(model, ArchitectureModel):
        config = config_from_architecture(model.architecture)
    else:
        raise ValueError(
            "a model given only by num_parameters cannot be built; give a preset, hf_config or architecture"
        )
    if "model_type" not in config and isinstance(config.get("text_config"), dict):
        config = dict(config["text_config"])
    config["use_cache"] = False
    return config


def config_from_architecture(architecture: Architecture) -> dict[str, Any]:
    """A GPT-2 or Llama config.json equivalent to a custom Architecture (other shapes raise)."""
    unsupported = [
        name
        for name, present in (
            ("experts", architecture.is_moe),
            ("qk_norm", architecture.qk_norm),
            ("norms_per_layer=4", architecture.norms_per_layer == 4),
            ("scale_embeddings", architecture.scale_embeddings),
            ("softcapping", bool(architecture.final_logit_softcapping or architecture.attn_logit_softcapping)),
        )
        if present
    ]
    if unsupported:
        raise ValueError(f"cannot build an architecture with {', '.join(unsupported)}; give its hf_config instead")
    if architecture.position_embedding == "learned":
        if architecture.mlp != "plain" or architecture.norm != "layernorm" or not architecture.fused_qkv:
            raise ValueError(
                "learned positions are built as GPT-2, which needs mlp='plain', norm='layernorm', fused_qkv"
            )
        return {
            "model_type": "gpt2",
            "vocab_size": architecture.vocab_size,
            "n_embd": architecture.hidden_size,
            "n_layer": architecture.num_hidden_layers,
            "n_head": architecture.num_attention_heads,
            "n_inner": architecture.intermediate_size,
            "n_positions": architecture.max_position_embeddings,
            "activation_function": architecture.hidden_act,
            "embd_pdrop": architecture.embedding_dropout,
            "attn_pdrop": architecture.attention_dropout,
            "resid_pdrop": architecture.residual_dropout,
            "tie_word_embeddings": architecture.tie_word_embeddings,
        }
    if architecture.attention_qkv_bias != architecture.attention_output_bias:
        raise ValueError("Llama's attention_bias puts a bias on q, k, v and o together; the architecture splits them")
    if architecture.fused_qkv or architecture.fused_gate_up or architecture.mlp != "gated":
        raise ValueError("rope architectures are built as Llama: separate q/k/v and gate/up projections, gated MLP")
    if architecture.residual_dropout or architecture.embedding_dropout:
        raise ValueError("Llama has no residual or embedding dropout")
    return {
        "model_type": "llama",
        "vocab_size": architecture.vocab_size,
        "hidden_size": architecture.hidden_size,
        "intermediate_size": architecture.intermediate_size,
        "num_hidden_layers": architecture.num_hidden_layers,
        "num_attention_heads": architecture.num_attention_heads,
        "num_key_value_heads": architecture.kv_heads,
        "head_dim": architecture.resolved_head_dim,
        "hidden_act": architecture.hidden_act,
        "max_position_embeddings": architecture.max_position_embeddings,
        "tie_word_embeddings": architecture.tie_word_embeddings,
        "attention_bias": architecture.attention_qkv_bias,
        "mlp_bias": architecture.mlp_bias,
        "attention_dropout": architecture.attention_dropout,
        "rms_norm_eps": 1e-5,
    }


def build_model(setup: Setup, *, on_meta: bool) -> torch.nn.Module:
    """The model in training mode, with the setup's precision, LoRA adapters and checkpointing."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from .causal_lm_classes import register_causal_lms

    register_causal_lms()
    fields = hf_config_dict(setup)
    if setup.training.mode == "reward":  # TRL RewardTrainer: a sequence-classification model with one output
        from transformers import AutoModelForSequenceClassification as AutoModelForCausalLM  # noqa: N814

        fields.update(num_labels=1, pad_token_id=0)
    if setup.training.mode == "critic":  # verl's critic: a token-classification model with one output, no dropout
        from transformers import AutoModelForTokenClassification as AutoModelForCausalLM  # noqa: N814

        fields.update(num_labels=1, classifier_dropout=0.0)
    implementation = ATTENTION_IMPLEMENTATION.get(setup.attention)
    if implementation is None:
        raise ValueError(f"attention {setup.attention!r} cannot be measured here; use eager, sdpa or sdpa-math")
    if setup.vision_stack() is not None:  # a vision-language model (measure/vlm.py)
        from .vlm import build_vlm

        model = build_vlm(setup, fields, implementation, on_meta)
        if setup.activation_checkpointing == "full":
            base_model(model).gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        return model
    from .vision_encoders import dual_encoder_config

    fields = dual_encoder_config(fields)  # a CLIP / SigLIP vision tower is built by its dual model's classifier
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    architecture = setup.architecture()
    model_class, extra = AutoModelForCausalLM, {}
    if architecture is not None and architecture.encoder_layers:  # an encoder-decoder (measure/seq2seq.py)
        from transformers import AutoModelForSeq2SeqLM

        model_class = AutoModelForSeq2SeqLM
        if architecture.num_mel_bins:  # Whisper: AutoModelForSpeechSeq2Seq's WhisperForConditionalGeneration
            from transformers import AutoModelForSpeechSeq2Seq

            model_class = AutoModelForSpeechSeq2Seq
        if getattr(config, "decoder_start_token_id", None) is None:  # _shift_right needs it; T5 checkpoints set 0
            config.decoder_start_token_id = 0
    if architecture is not None and architecture.task != "causal_lm":  # an encoder's task head (measure/tasks.py)
        from . import tasks

        model_class, extra = tasks.model_class(architecture.task), tasks.build_kwargs(architecture)
        config.num_labels = architecture.num_labels
    if on_meta:
        with torch.device("meta"):
            model = model_class.from_config(config, attn_implementation=implementation, dtype=torch.float32, **extra)
    else:
        model = model_class.from_config(config, attn_implementation=implementation, dtype=torch.float32, **extra)
    if setup.precision == "bf16-pure":
        model = model.to(torch.bfloat16)
    if setup.finetuning.method == "lora":
        model = _add_lora(model, setup)
    if setup.activation_checkpointing == "full":
        base_model(model).activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model


def _peft_task_type(setup: Setup) -> "str | None":
    """``CAUSAL_LM``, or the task type of an encoder's head (``trainmem.tasks.peft_task_type``)."""
    from ..tasks import peft_task_type

    architecture = setup.architecture()
    return "CAUSAL_LM" if architecture is None else peft_task_type(architecture)


def _add_lora(model: torch.nn.Module, setup: Setup) -> torch.nn.Module:
    from peft import LoraConfig, get_peft_model

    lora = setup.finetuning.lora
    targets = lora.target_modules
    target = targets if targets is None or isinstance(targets, str) else list(targets)
    config = LoraConfig(
        r=lora.r,
        target_modules=target,
        lora_dropout=lora.lora_dropout,
        task_type="SEQ_2_SEQ_LM" if getattr(model.config, "is_encoder_decoder", False) else _peft_task_type(setup),
        modules_to_save=list(lora.modules_to_save) or None,
        use_dora=lora.use_dora,
    )
    return get_peft_model(model, config)


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers PreTrainedModel inside a peft wrapper (or the model itself)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's decoder blocks in order (GPT-2's ``transformer.h``, Llama's ``model.layers``)."""
    config = base_model(model).config
    vision = getattr(config, "vision_config", None)
    if vision is not None and type(base_model(model)).__name__.endswith("ForImageClassification"):
        count = vision.num_hidden_layers  # CLIP / SigLIP classifiers build only their vision tower
    else:
        count = config.get_text_config().num_hidden_layers
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == count:
            return list(module)
    raise ValueError(f"found no ModuleList of {count} decoder layers")


def lora_target_modules(model: torch.nn.Module) -> list[str] | None:
    """The module names peft adapted (last name component, as target_modules match), sorted; None without LoRA."""
    if not getattr(model, "peft_config", None):
        return None
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules() if hasattr(module, "lora_A")})


def lora_adapter_dtype(model: torch.nn.Module) -> str | None:
    for name, parameter in model.named_parameters():
        if "lora_" in name:
            return str(parameter.dtype).removeprefix("torch.")
    return None
