"""verl PPO/GRPO trainer configs (``python -m verl.trainer.main_ppo``): the Hydra YAML, or a script's ``key=value`` overrides.

Read from verl 0.9.1 (``verl/trainer/config/ppo_trainer.yaml`` and its generated whole,
``_generated_ppo_trainer.yaml``; ``verl/trainer/ppo/ray_trainer.py``; ``verl/workers``). What maps
onto trainmem's RL step (``training.mode: grpo``, TRL's GRPO program: a generation round, the
reference's log-prob pass, the policy's update; README "Post-training"):

* the policy: ``actor_rollout_ref.model.path`` (a Hub id, or a local folder named like one),
  ``model.lora_rank``/``target_modules`` (LoRA when the rank is above 0), ``enable_gradient_checkpointing``,
  ``use_remove_padding`` (rows unpadded into one packed row, flash-attention varlen);
* the update: ``actor.ppo_micro_batch_size_per_gpu`` completions per forward/backward; verl scales
  ``ppo_mini_batch_size`` (prompts) by ``rollout.n`` and divides it over the data-parallel ranks,
  and accumulates gradients over ``mini / micro`` micro-batches (``ray_trainer.py``); with
  ``use_dynamic_bsz`` a micro-batch holds up to ``ppo_max_token_len_per_gpu`` tokens;
* ``actor.strategy`` fsdp/fsdp2 (FSDP1/FSDP2; megatron is refused: trainmem's RL step is modelled
  over FSDP), ``fsdp_config.model_dtype`` (fp32 sharded weights with bf16 compute: FSDP mixed
  precision, trainmem's ``bf16-mixed``), ``fsdp_config.offload_policy`` (FSDP2 CPUOffloadPolicy);
* the reference: a KL term (``actor.use_kl_loss`` with ``kl_loss_coef``, or
  ``algorithm.use_kl_in_reward`` with ``kl_ctrl.kl_coef``) is trainmem's ``beta``; without one
  verl builds no reference model; a LoRA policy's reference is its base with adapters disabled;
* generation: ``rollout.name`` vllm/sglang colocated on the training GPUs (``hybrid_engine``),
  taking ``rollout.gpu_memory_utilization`` of each GPU; ``free_cache_engine`` sleeps the engine
  during training; ``rollout.n`` completions per prompt; ``data.max_prompt_length`` and
  ``max_response_length``;
* ``trainer.n_gpus_per_node`` × ``trainer.nnodes`` GPUs.

Not modelled (each named in the key report): verl's
``param_offload``/``optimizer_offload`` (they move states to the host *between* phases; during the
update they are on the GPU, as trainmem counts them), Ulysses sequence parallelism, activation
offloading. The whole logits verl computes for the log-probs unless ``use_fused_kernels`` are counted
(``training.log_prob_head: logits``, with the entropy when ``entropy_coeff`` ≠ 0: :mod:`trainmem.training.verl_logits`),
and PPO's critic (``adv_estimator: gae``) is ``training.mode: ppo`` (:mod:`.verl_critic`).

OmegaConf interpolations the generated file carries (``${oc.select:a.b,default}``, ``${a.b}``,
``${.sibling}``) are resolved against the file; other values that stay symbolic (a script's
``$VAR``) count as absent, with an entry saying so.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from .hub import hub_ids, preset_for_hub_id
from .record import Contribution, InputError, Recorder

VERL_VERSION = "verl 0.9.1"
A = "actor_rollout_ref"
ACTOR, ROLLOUT, MODEL, REF = f"{A}.actor", f"{A}.rollout", f"{A}.model", f"{A}.ref"
MISSING = object()
_INTERPOLATION = re.compile(r"^\$\{(?:oc\.select:)?\s*([^,}]+?)\s*(?:,\s*(.*))?\}$")
RL_ESTIMATORS = ("grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "opo", "grpo_passk", "gpg", "rloo_vectorized", "grpo_vectorized", "optimal_token_baseline", "tir_optimal_token_baseline", "gdpo")
ROLLOUT_ENGINES = ("vllm", "sglang", "trtllm")


def read_verl(rec: Recorder) -> None:
    for section in (A, ACTOR, ROLLOUT, MODEL, REF, "data", "trainer", "algorithm"):
        value = rec.get(section)
        if value is not None and not isinstance(value, dict):
            raise InputError(f"{rec.file}: {section}: must be a mapping of keys, got {type(value).__name__}")
    rec.facts["trainer"] = "verl"
    read_model(rec)
    read_algorithm(rec)
    read_gpus_and_batch(rec)
    read_strategy(rec)
    read_rollout(rec)
    read_log_prob_head(rec)
    read_log_prob_passes(rec)
    read_not_modelled(rec)
    rec.notes.append(
        f"{rec.file}: trainmem simulates the actor's step as TRL 1.16's GRPO program (generation, the reference's "
        "log-probs, the policy's update) with verl's log-prob head (the whole logits unless "
        "actor_rollout_ref.model.use_fused_kernels; training.verl_logits)"
        + ("; PPO's critic updates in its own phase (training.critic)" if rec.facts.get("training_mode") == "ppo" else "")
    )
    engine = frozenset({"dtype", "nnodes", "n_gpus_per_node", "tensor_model_parallel_size", "seed", "name", "qat"})
    reference = frozenset(
        {"strategy", "model_dtype", "dtype", "param_offload", "optimizer_offload", "offload_policy", "reshard_after_forward",
         "fsdp_size", "forward_prefetch", "ulysses_sequence_parallel_size", "use_torch_compile", "entropy_checkpointing",
         "entropy_from_logits_with_chunking", "pad_to_length", "qat", "log_prob_micro_batch_size", "pad_to_length_bucket"}
    )
    if rec.has(f"{ACTOR}.fsdp_config.dtype"):
        rec.modelled(f"{ACTOR}.fsdp_config.dtype", "the compute (gathered weights') dtype of FSDP mixed precision")
    for section, extra in (
        (f"{ACTOR}.optim", frozenset()),
        (f"{ACTOR}.fsdp_config", frozenset({"pad_to_length_bucket", "ulysses_sequence_parallel_size", "use_torch_compile", "entropy_checkpointing", "entropy_from_logits_with_chunking", "pad_to_length", "strategy"})),
        (ACTOR, frozenset({"ppo_micro_batch_size", "qat"})),
        (f"{REF}.fsdp_config", reference),
        (REF, reference),
        (ROLLOUT, engine),
        (MODEL, frozenset({"lora", "tiled_mlp"})),
        (A, frozenset()),
        ("data", frozenset()),
        ("trainer", frozenset()),
        ("algorithm", frozenset()),
    ):
        rec.finish(section, extra)
    rec.finish()


# -- values ---------------------------------------------------------------------------------------


def value(rec: Recorder, key: str, default: Any = None, depth: int = 0) -> Any:
    """The key's value with OmegaConf interpolations resolved; ``default`` when absent, null or symbolic."""
    raw = _lookup(rec.data, key)
    if isinstance(raw, str) and raw.startswith("${") and depth < 8:
        match = _INTERPOLATION.match(raw.strip())
        if match is None:
            return default
        target, fallback = match.group(1), match.group(2)
        if target.startswith("."):
            target = key.rsplit(".", 1)[0] + target
        resolved = value(rec, target, MISSING, depth + 1)
        if resolved is MISSING or resolved is None:
            return _scalar(fallback) if fallback is not None else default
        return resolved
    if isinstance(raw, str) and ("$" in raw or raw == "???"):
        if not rec.seen(key) and key in _flat_keys(rec):
            rec.unmodelled(key, f"{raw!r} is a shell variable or a required value trainmem cannot see: assumed verl's default")
        return default
    return default if raw is None else raw


def _scalar(text: str) -> Any:
    text = text.strip()
    lowered = text.lower()
    if lowered in ("null", "none", "~"):
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip("'\"")


def _lookup(data: Any, key: str) -> Any:
    for part in key.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def _flat_keys(rec: Recorder) -> set[str]:
    return rec.facts.setdefault("_verl_keys", set(_walk(rec.data)))


def _walk(data: Any, prefix: str = "") -> list[str]:
    out = []
    if isinstance(data, dict):
        for name, child in data.items():
            key = f"{prefix}.{name}" if prefix else str(name)
            out.append(key)
            out += _walk(child, key)
    return out


def number(rec: Recorder, key: str, default: Any = None, *, integer: bool = True, low: float = 1, high: float = 1e12) -> Any:
    result = value(rec, key, default)
    if result is None:
        return None
    if (
        isinstance(result, bool)
        or not isinstance(result, (int, float))
        or result != result
        or not low <= result <= high
        or (integer and int(result) != result)
    ):
        what = "a positive integer" if integer and low == 1 else f"a number from {low:g} to {high:g}"
        raise InputError(f"{rec.file}: {key}: must be {what}, got {result!r}")
    return int(result) if integer else float(result)


def boolean(rec: Recorder, key: str, default: Optional[bool] = None) -> Optional[bool]:
    result = value(rec, key, default)
    if result is None or isinstance(result, bool):
        return result
    if isinstance(result, str) and result.lower() in ("true", "false"):
        return result.lower() == "true"
    raise InputError(f"{rec.file}: {key}: must be true or false, got {result!r}")


def text(rec: Recorder, key: str, default: Optional[str] = None, allowed: tuple[str, ...] = ()) -> Optional[str]:
    result = value(rec, key, default)
    if result is None:
        return None
    if not isinstance(result, str) or (allowed and result.lower() not in allowed):
        listed = f"one of {', '.join(allowed)}" if allowed else "a text"
        raise InputError(f"{rec.file}: {key}: must be {listed}, got {result!r}")
    return result.lower() if allowed else result


# -- the model -------------------------------------------------------------------------------------


def read_model(rec: Recorder) -> None:
    key = f"{MODEL}.path"
    path = value(rec, key)
    if path is not None:
        if not isinstance(path, str) or not path.strip():
            raise InputError(f"{rec.file}: {key}: must be a Hub id or a local folder, got {path!r}")
        hf_config_path = value(rec, f"{MODEL}.hf_config_path")
        preset, how = _preset_for_path(path.strip())
        if preset is not None:
            rec.set(key, "model", {"preset": preset}, how)
        else:
            rec.modelled(key, f"{path!r}: no preset matches; add the model's config.json as another file (or --preset NAME)")
            rec.facts.setdefault("unresolved_models", []).append((key, path))
        if hf_config_path is not None:
            rec.neutral(f"{MODEL}.hf_config_path", "read the config.json it names as another file")
    rank = number(rec, f"{MODEL}.lora_rank", 0, low=0)
    if rank:
        rec.set(f"{MODEL}.lora_rank", "finetuning.method", "lora", f"LoRA of rank {rank} (PEFT)")
        rec.contributions.append(Contribution("finetuning.lora.r", rank, rec.file, f"{MODEL}.lora_rank"))
        targets = value(rec, f"{MODEL}.target_modules", "all-linear")
        if isinstance(targets, str):
            targets = "all-linear" if targets.lower() in ("all-linear", "all_linear", "all") else [t.strip() for t in targets.split(",") if t.strip()]
        if not (targets == "all-linear" or isinstance(targets, list) and targets and all(isinstance(t, str) for t in targets)):
            raise InputError(f"{rec.file}: {MODEL}.target_modules: must be all-linear or a list of module names, got {targets!r}")
        if rec.has(f"{MODEL}.target_modules"):
            rec.set(f"{MODEL}.target_modules", "finetuning.lora.target_modules", targets)
        else:
            rec.default("finetuning.lora.target_modules", targets, f"{MODEL}.target_modules", f"{VERL_VERSION} (all-linear)")
        rec.default("finetuning.lora.lora_dropout", 0.0, f"{MODEL}.lora_rank", f"{VERL_VERSION} (LoraConfig without dropout)")
        if value(rec, f"{MODEL}.exclude_modules") is not None:
            rec.unmodelled(f"{MODEL}.exclude_modules", "assumed adapters on every target module")
        rec.facts["lora"] = True
    else:
        if rec.has(f"{MODEL}.lora_rank"):
            rec.neutral(f"{MODEL}.lora_rank", "0: full fine-tuning")
        rec.default("finetuning.method", "full", f"{MODEL}.lora_rank", f"{VERL_VERSION} (lora_rank 0)")
        for name in ("target_modules", "lora_alpha", "exclude_modules"):
            if rec.has(f"{MODEL}.{name}"):
                rec.neutral(f"{MODEL}.{name}", "lora_rank is 0")
    checkpointing = boolean(rec, f"{MODEL}.enable_gradient_checkpointing")
    if checkpointing is not None:
        rec.set(f"{MODEL}.enable_gradient_checkpointing", "activation_checkpointing", "full" if checkpointing else "none")
    else:
        rec.default("activation_checkpointing", "full", f"{MODEL}.enable_gradient_checkpointing", f"{VERL_VERSION} (true)")
    unpadded = boolean(rec, f"{MODEL}.use_remove_padding", True)
    if unpadded:
        key = f"{MODEL}.use_remove_padding"
        detail = (
            "rows unpadded into one packed row for flash-attention varlen (trainmem.packing); every row assumed "
            "prompt + response tokens long (an upper bound)"
        )
        if rec.has(key):
            rec.set(key, "batch", "packed", detail)
        else:
            rec.default("batch", "packed", key, f"{VERL_VERSION} (use_remove_padding true)")
        rec.default("attention", "flash_attention_2", key, f"{VERL_VERSION} (remove padding runs flash-attention varlen)")
    elif rec.has(f"{MODEL}.use_remove_padding"):
        rec.neutral(f"{MODEL}.use_remove_padding", "off: padded rows")
    if rec.has(f"{MODEL}.lora_alpha") and rank:
        rec.neutral(f"{MODEL}.lora_alpha", "a scale: no memory")


def _preset_for_path(path: str) -> tuple[Optional[str], str]:
    """A Hub id, or a local folder whose last name is a known Hub id's (``~/models/Qwen2.5-7B-Instruct``)."""
    preset = preset_for_hub_id(path)
    if preset is not None:
        return preset, f"Hub id {path!r} (data/hub_ids.json)"
    name = path.rstrip("/").rsplit("/", 1)[-1].lower()
    for hub_id, candidate in hub_ids().items():
        if hub_id.rsplit("/", 1)[-1] == name:
            return candidate, f"a local folder named like {hub_id!r}: assumed that model (data/hub_ids.json)"
    return None, ""


# -- algorithm, batch, GPUs ------------------------------------------------------------------------


def read_algorithm(rec: Recorder) -> None:
    key = "algorithm.adv_estimator"
    estimator = text(rec, key, "gae")
    rec.facts["training_mode"] = "ppo" if estimator == "gae" else "grpo"
    if estimator == "gae":
        detail = (
            "gae: PPO with a critic (training.mode ppo): the actor's RL step and the critic's update (critic.*), "
            "each its own phase (inputs.verl_critic, training.critic)"
        )
        rec.modelled(key, detail) if rec.has(key) else rec.default("training.mode", "ppo", key, f"{VERL_VERSION} (adv_estimator gae)")
    elif rec.has(key):
        rec.modelled(key, f"{estimator}: no critic; training.mode = grpo (TRL's GRPO program: the same actor step)")
    kl_loss = boolean(rec, f"{ACTOR}.use_kl_loss", False)
    kl_reward = boolean(rec, "algorithm.use_kl_in_reward", False)
    beta = 0.0
    if kl_loss:
        beta = number(rec, f"{ACTOR}.kl_loss_coef", 0.001, integer=False, low=0, high=1000)
        rec.set(f"{ACTOR}.use_kl_loss", "training.beta", beta, f"kl_loss_coef {beta:g}: the reference model's log-probs")
        if rec.has(f"{ACTOR}.kl_loss_coef"):
            rec.modelled(f"{ACTOR}.kl_loss_coef", "training.beta")
        if rec.has("algorithm.use_kl_in_reward") and not kl_reward:
            rec.neutral("algorithm.use_kl_in_reward", "off")
    elif kl_reward:
        beta = number(rec, "algorithm.kl_ctrl.kl_coef", 0.001, integer=False, low=0, high=1000)
        rec.set("algorithm.use_kl_in_reward", "training.beta", beta, "a KL penalty in the reward: the reference model's log-probs")
    else:
        for name in (f"{ACTOR}.use_kl_loss", "algorithm.use_kl_in_reward"):
            if rec.has(name):
                rec.neutral(name, "off")
        rec.contributions.append(Contribution("training.beta", 0.0, rec.file, f"{ACTOR}.use_kl_loss", default=True, label=f"{VERL_VERSION} (no KL term: no reference model)"))
        for name in (f"{ACTOR}.kl_loss_coef", f"{ACTOR}.kl_loss_type", "algorithm.kl_ctrl", "algorithm.kl_penalty"):
            if rec.has(name):
                rec.neutral(name, "no KL term")
    if beta and boolean(rec, f"{REF}.fsdp_config.param_offload", False) and not rec.facts.get("lora"):
        rec.unmodelled(
            f"{REF}.fsdp_config.param_offload",
            "the reference's weights wait on the host outside its log-prob pass: trainmem counts them on the GPU for "
            "the whole step (an upper bound)",
        )


def read_gpus_and_batch(rec: Recorder) -> None:
    per_node = number(rec, "trainer.n_gpus_per_node", 8)
    nodes = number(rec, "trainer.nnodes", 1)
    gpus = per_node * nodes
    if rec.has("trainer.n_gpus_per_node") or rec.has("trainer.nnodes"):
        key = "trainer.n_gpus_per_node" if rec.has("trainer.n_gpus_per_node") else "trainer.nnodes"
        rec.set(key, "parallelism.num_gpus", gpus, f"{per_node} per node × {nodes} node(s)")
        other = "trainer.nnodes" if key == "trainer.n_gpus_per_node" else "trainer.n_gpus_per_node"
        if rec.has(other):
            rec.modelled(other, "part of parallelism.num_gpus")
    else:
        rec.default("parallelism.num_gpus", gpus, "trainer.n_gpus_per_node", f"{VERL_VERSION} (8 GPUs per node, 1 node)")
    if nodes > 1:
        rec.contributions.append(Contribution("parallelism.gpus_per_node", per_node, rec.file, "trainer.nnodes"))
    prompt = number(rec, "data.max_prompt_length", 512)
    response = number(rec, "data.max_response_length", 512)
    for name, length, setup_field in (
        ("data.max_prompt_length", prompt, "training.max_prompt_length"),
        ("data.max_response_length", response, "training.max_completion_length"),
    ):
        if rec.has(name):
            rec.set(name, setup_field, length)
        else:
            rec.default(setup_field, length, name, f"{VERL_VERSION} ({length})")
    rec.contributions.append(
        Contribution("sequence_length", prompt + response, rec.file, "data.max_response_length", default=not rec.has("data.max_response_length") and not rec.has("data.max_prompt_length"), label=f"{VERL_VERSION} (512 + 512)")
    )
    n = number(rec, f"{ROLLOUT}.n", 1)
    if rec.has(f"{ROLLOUT}.n"):
        rec.set(f"{ROLLOUT}.n", "training.num_generations", n, "completions per prompt")
    else:
        rec.default("training.num_generations", n, f"{ROLLOUT}.n", f"{VERL_VERSION} (1)")
    sequence_parallel = number(rec, f"{ACTOR}.ulysses_sequence_parallel_size", 1)
    if sequence_parallel > 1:
        rec.unmodelled(f"{ACTOR}.ulysses_sequence_parallel_size", "Ulysses sequence parallelism: assumed every rank holds whole rows")
    data_parallel = max(1, gpus // sequence_parallel)
    if rec.has("data.train_batch_size"):
        rec.modelled("data.train_batch_size", "prompts per step: the engine's memory is its gpu_memory_utilization, whatever the batch")
    micro_key = f"{ACTOR}.ppo_micro_batch_size_per_gpu"
    micro = number(rec, micro_key)
    dynamic = boolean(rec, f"{ACTOR}.use_dynamic_bsz", False)
    if micro is None and dynamic:
        tokens_key = f"{ACTOR}.ppo_max_token_len_per_gpu"
        tokens = number(rec, tokens_key, 16384)
        micro = max(1, tokens // (prompt + response))
        rec.set(f"{ACTOR}.use_dynamic_bsz", "micro_batch_size", micro, f"ppo_max_token_len_per_gpu {tokens:,} tokens per micro-batch ÷ {prompt + response:,} tokens per row")
        rec.mark(tokens_key)
    elif micro is None and number(rec, f"{ACTOR}.ppo_micro_batch_size") is not None:
        total = number(rec, f"{ACTOR}.ppo_micro_batch_size")
        micro = max(1, total // data_parallel)
        rec.set(f"{ACTOR}.ppo_micro_batch_size", "micro_batch_size", micro, f"the global micro-batch ÷ {data_parallel} data-parallel ranks (deprecated key)")
    elif micro is not None:
        rec.set(micro_key, "micro_batch_size", micro, "completions per forward/backward on each GPU")
        if dynamic is False and rec.has(f"{ACTOR}.use_dynamic_bsz"):
            rec.neutral(f"{ACTOR}.use_dynamic_bsz", "off")
    else:
        rec.auto(micro_key, "micro_batch_size", "not set (null), and no use_dynamic_bsz or ppo_micro_batch_size gives it")
        for name in ("ppo_mini_batch_size", "use_dynamic_bsz", "ppo_max_token_len_per_gpu", "ppo_micro_batch_size"):
            if rec.has(f"{ACTOR}.{name}"):
                rec.neutral(f"{ACTOR}.{name}", "no micro-batch in the file: gradient accumulation not derived (1 assumed)")
        return
    mini = number(rec, f"{ACTOR}.ppo_mini_batch_size", 256)
    per_gpu = mini * n // data_parallel if mini * n % data_parallel == 0 else None
    if dynamic and per_gpu is not None:
        steps = -(-per_gpu // micro)
        detail = f"{mini} × {n} completions ÷ {data_parallel} ranks in micro-batches of up to {micro} (token-balanced)"
        if rec.has(f"{ACTOR}.ppo_mini_batch_size"):
            rec.set(f"{ACTOR}.ppo_mini_batch_size", "gradient_accumulation_steps", steps, detail)
        else:
            rec.default("gradient_accumulation_steps", steps, f"{ACTOR}.ppo_mini_batch_size", f"{VERL_VERSION} (ppo_mini_batch_size 256)")
        return
    if per_gpu is None or per_gpu < micro or per_gpu % micro:
        raise InputError(
            f"{rec.file}: {ACTOR}.ppo_mini_batch_size: {mini} prompts × rollout.n {n} over {data_parallel} data-parallel "
            f"ranks must be a whole multiple of the micro-batch ({micro}), as verl asserts"
        )
    steps = per_gpu // micro
    key = f"{ACTOR}.ppo_mini_batch_size"
    if rec.has(key):
        rec.set(key, "gradient_accumulation_steps", steps, f"{mini} × {n} completions ÷ {data_parallel} ranks ÷ micro-batch {micro}")
    else:
        rec.default("gradient_accumulation_steps", steps, key, f"{VERL_VERSION} (ppo_mini_batch_size 256)")


def read_strategy(rec: Recorder) -> None:
    key = f"{ACTOR}.strategy"
    megatron = f"{ACTOR}.megatron"
    if not rec.has(key) and isinstance(rec.get(megatron), dict):
        # a megatron section is the mark of ppo_megatron_trainer.yaml (--config-name), whose actor.strategy is megatron
        raise InputError(
            f"{rec.file}: {megatron}: a Megatron actor (ppo_megatron_trainer.yaml); trainmem models verl's FSDP actor; "
            "allowed actor strategies: fsdp, fsdp2"
        )
    strategy = text(rec, key, "fsdp", allowed=("fsdp", "fsdp2", "megatron", "veomni", "torchtitan"))
    if strategy not in ("fsdp", "fsdp2"):
        raise InputError(f"{rec.file}: {key}: {strategy}: trainmem models verl's FSDP actor; allowed: fsdp, fsdp2")
    version = 2 if strategy == "fsdp2" else 1
    if rec.has(key):
        rec.set(key, "parallelism.strategy", "fsdp", f"FSDP{version}")
    else:
        rec.default("parallelism.strategy", "fsdp", key, f"{VERL_VERSION} (fsdp)")
    rec.contributions.append(Contribution("parallelism.fsdp_version", version, rec.file, key))
    config = f"{ACTOR}.fsdp_config"
    reshard = boolean(rec, f"{config}.reshard_after_forward", True)
    rec.contributions.append(Contribution("parallelism.fsdp_sharding_strategy", "FULL_SHARD" if reshard else "SHARD_GRAD_OP", rec.file, f"{config}.reshard_after_forward"))
    if rec.has(f"{config}.reshard_after_forward"):
        rec.modelled(f"{config}.reshard_after_forward", f"parallelism.fsdp_sharding_strategy = {'FULL_SHARD' if reshard else 'SHARD_GRAD_OP'}")
    if boolean(rec, f"{config}.offload_policy", False):
        if version != 2:
            rec.unmodelled(f"{config}.offload_policy", "FSDP2's CPUOffloadPolicy under FSDP1: ignored by verl, assumed off")
        else:
            rec.set(f"{config}.offload_policy", "parallelism.offload_parameters", True, "FSDP2 CPUOffloadPolicy: parameters, gradients and the optimizer step on the host")
            rec.contributions.append(Contribution("parallelism.offload_optimizer", True, rec.file, f"{config}.offload_policy"))
    for name, what in (("param_offload", "the sharded weights"), ("optimizer_offload", "the optimizer states")):
        if boolean(rec, f"{config}.{name}", False):
            rec.unmodelled(
                f"{config}.{name}",
                f"verl moves {what} to the host between phases (before generation) and back for the update: "
                "trainmem counts them on the GPU for the whole step, as they are during the update",
            )
        elif rec.has(f"{config}.{name}"):
            rec.neutral(f"{config}.{name}", "off")
    if rec.has(f"{config}.offload_policy") and not rec.seen(f"{config}.offload_policy"):
        rec.neutral(f"{config}.offload_policy", "off")
    dtype = text(rec, f"{config}.model_dtype", "fp32")
    precision = {"fp32": "bf16-mixed", "float32": "bf16-mixed", "bf16": "bf16-pure", "bfloat16": "bf16-pure"}.get(dtype.lower())
    if precision is None:
        raise InputError(f"{rec.file}: {config}.model_dtype: must be fp32 or bf16, got {dtype!r}")
    detail = "fp32 sharded weights and optimizer states, bf16 compute (FSDP MixedPrecision)" if precision == "bf16-mixed" else "bf16 weights and optimizer states"
    if rec.has(f"{config}.model_dtype"):
        rec.set(f"{config}.model_dtype", "precision", precision, detail)
    else:
        rec.default("precision", precision, f"{config}.model_dtype", f"{VERL_VERSION} (actor model_dtype fp32, bf16 compute)")
    optimizer = text(rec, f"{ACTOR}.optim.optimizer", "AdamW")
    implementation = text(rec, f"{ACTOR}.optim.optimizer_impl", "torch.optim")
    if optimizer.lower() in ("adamw", "adam") and implementation == "torch.optim":
        name = optimizer.lower()
        if rec.has(f"{ACTOR}.optim.optimizer"):
            rec.set(f"{ACTOR}.optim.optimizer", "optimizer", {"name": name}, "torch.optim (foreach on CUDA)")
        else:
            rec.default("optimizer", {"name": name}, f"{ACTOR}.optim.optimizer", f"{VERL_VERSION} (torch.optim.AdamW)")
        if rec.has(f"{ACTOR}.optim.optimizer_impl"):
            rec.modelled(f"{ACTOR}.optim.optimizer_impl", "torch.optim")
    else:
        rec.unmodelled(f"{ACTOR}.optim.optimizer", f"{implementation}.{optimizer}: assumed AdamW")


def read_rollout(rec: Recorder) -> None:
    key = f"{ROLLOUT}.name"
    name = text(rec, key, "vllm")
    name = name.lower() if isinstance(name, str) else name
    if name in ROLLOUT_ENGINES:
        colocated = boolean(rec, f"{A}.hybrid_engine", True)
        detail = f"{name}: an inference engine colocated on the training GPUs (hybrid engine)"
        if name != "vllm":
            detail += f"; {name} reserves its fraction of memory as vLLM does (modelled as vLLM)"
        rec.set(key, "training.use_vllm", True, detail) if rec.has(key) else rec.default("training.use_vllm", True, key, f"{VERL_VERSION} (vllm)")
        rec.contributions.append(Contribution("training.vllm_mode", "colocate" if colocated else "server", rec.file, key))
        utilization = number(rec, f"{ROLLOUT}.gpu_memory_utilization", 0.5, integer=False, low=0.01, high=1)
        if rec.has(f"{ROLLOUT}.gpu_memory_utilization"):
            rec.set(f"{ROLLOUT}.gpu_memory_utilization", "training.vllm_gpu_memory_utilization", utilization)
        else:
            rec.default("training.vllm_gpu_memory_utilization", utilization, f"{ROLLOUT}.gpu_memory_utilization", f"{VERL_VERSION} (0.5)")
        sleep = boolean(rec, f"{ROLLOUT}.free_cache_engine", True)
        if rec.has(f"{ROLLOUT}.free_cache_engine"):
            rec.set(f"{ROLLOUT}.free_cache_engine", "training.vllm_enable_sleep_mode", sleep, "the engine sleeps during the update" if sleep else "")
        else:
            rec.default("training.vllm_enable_sleep_mode", sleep, f"{ROLLOUT}.free_cache_engine", f"{VERL_VERSION} (free_cache_engine true)")
        if rec.has(f"{A}.hybrid_engine"):
            rec.modelled(f"{A}.hybrid_engine", "colocate" if colocated else "server")
        tp = number(rec, f"{ROLLOUT}.tensor_model_parallel_size", 2)
        if rec.has(f"{ROLLOUT}.tensor_model_parallel_size"):
            rec.modelled(f"{ROLLOUT}.tensor_model_parallel_size", f"{tp}: the engine's weights split over {tp} GPUs, inside its memory fraction")
    elif name == "hf":
        rec.set(key, "training.use_vllm", False, "transformers' generate (trainmem.inference.generation)")
    else:
        raise InputError(f"{rec.file}: {key}: must be one of vllm, sglang, trtllm, hf; got {name!r}")


def read_log_prob_head(rec: Recorder) -> None:
    """``use_fused_kernels`` (model's, or the actor's interpolation of it): verl's fused log-prob kernel, else the
    whole logits (training.log_prob_head); ``entropy_coeff`` / ``calculate_entropy``: the entropy in the update."""
    fused = boolean(rec, f"{ACTOR}.use_fused_kernels", boolean(rec, f"{MODEL}.use_fused_kernels", False))
    head = "fused" if fused else "logits"
    detail = "verl's fused log-prob kernel: no whole logits (TRL's fused head's memory)" if fused else "off: the whole (tokens × vocabulary) logits, then logprobs_from_logits"
    for key in (f"{MODEL}.use_fused_kernels", f"{ACTOR}.use_fused_kernels"):
        if rec.has(key):
            rec.set(key, "training.log_prob_head", head, detail)
            detail = "the same"
    if not rec.has(f"{MODEL}.use_fused_kernels") and not rec.has(f"{ACTOR}.use_fused_kernels"):
        rec.default("training.log_prob_head", head, f"{MODEL}.use_fused_kernels", f"{VERL_VERSION} (use_fused_kernels false)")
    coefficient = number(rec, f"{ACTOR}.entropy_coeff", 0, integer=False, low=-1e6, high=1e6)
    calculate = boolean(rec, f"{ACTOR}.calculate_entropy", False)
    entropy = bool(coefficient) or bool(calculate)
    keys = [k for k in (f"{ACTOR}.entropy_coeff", f"{ACTOR}.calculate_entropy") if rec.has(k)]
    if keys:
        rec.set(keys[0], "training.log_prob_entropy", entropy, "the entropy from the logits in the update" if entropy else "no entropy in the update")
        for key in keys[1:]:
            rec.modelled(key, "training.log_prob_entropy")
    else:
        rec.default("training.log_prob_entropy", False, f"{ACTOR}.entropy_coeff", f"{VERL_VERSION} (entropy_coeff 0)")


NOT_MODELLED = {
    f"{MODEL}.enable_activation_offload": ((False,), "activations offloaded to the host: assumed kept on the GPU (an upper bound)"),
    f"{MODEL}.use_liger": ((False,), "Liger's kernels on the model: assumed the Hugging Face kernels' memory"),
    f"{MODEL}.tiled_mlp.enabled": ((False,), "the MLP computed in tiles: assumed whole"),
    f"{ACTOR}.use_torch_compile": ((False, True), "torch.compile of the log-prob/entropy helpers: assumed eager-mode memory"),
    f"{ACTOR}.entropy_checkpointing": ((False,), "recomputed entropy: assumed kept"),
    f"{ACTOR}.entropy_from_logits_with_chunking": ((False,), "chunked entropy: assumed computed whole"),
    f"{ACTOR}.use_prefix_grouper": ((False,), "shared prompt prefixes: assumed every row holds its prompt"),
    f"{ACTOR}.pad_to_length": ((False,), "rows padded to a bucket: assumed prompt + response tokens"),
    f"{ACTOR}.fsdp_config.forward_prefetch": ((False,), "assumed no forward prefetch"),
    f"{ACTOR}.fsdp_config.fsdp_size": ((-1,), "HSDP (FSDP groups smaller than the world): assumed one FSDP group over every GPU"),
    f"{ACTOR}.fsdp_config.qat.enable": ((False,), "quantization-aware training: assumed plain bf16 layers"),
    f"{ACTOR}.ppo_epochs": ((1,), "passes over each batch: the memory of one pass"),
    f"{ACTOR}.freeze_vision_tower": ((False,), "a frozen vision tower: assumed a text model"),
    f"{ACTOR}.use_remove_padding": ((False, True), "follows model.use_remove_padding"),
    f"{ACTOR}.ulysses_sequence_parallel_size": ((1,), "Ulysses sequence parallelism: assumed every rank holds whole rows"),
    # an older verl's global spellings (divided by the data-parallel ranks, as ppo_micro_batch_size)
    f"{REF}.log_prob_micro_batch_size": ((), "the reference's global log-prob micro-batch (deprecated key): the pass assumed in forwards of the update's micro-batch"),
    f"{ROLLOUT}.log_prob_micro_batch_size": ((), "the old policy's global log-prob micro-batch (deprecated key): the pass assumed in forwards of the update's micro-batch"),
    f"{ACTOR}.fsdp_config.grad_offload": ((False,), "an older verl's gradient offload to the host: assumed the gradients stay on the GPU"),
}


def read_log_prob_passes(rec: Recorder) -> None:
    """The no-grad passes before the update (verl 0.9.1 ``RayPPOTrainer.fit``): the old policy's log-probs, always
    recomputed (``_compute_old_log_prob``) unless ``algorithm.rollout_correction.bypass_mode``, and the
    reference's; each in forwards of its own micro-batch (``engine_workers.py``: ``infer_micro_batch_size_per_gpu``
    = ``rollout.log_prob_micro_batch_size_per_gpu``, the reference's ``ref.log_prob_micro_batch_size_per_gpu``), or
    with ``log_prob_use_dynamic_bsz`` (default: the actor's ``use_dynamic_bsz``) up to
    ``log_prob_max_token_len_per_gpu`` tokens (default: the actor's ``ppo_max_token_len_per_gpu``, 16384)."""
    bypass_key = "algorithm.rollout_correction.bypass_mode"
    bypass = boolean(rec, bypass_key, False)
    if rec.has(bypass_key):
        rec.set(bypass_key, "training.old_log_probs", not bypass,
                "the rollout's log-probs stand in for the old policy's: no recompute" if bypass else "the old policy's log-probs are recomputed")
    else:
        rec.default("training.old_log_probs", True, f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu", f"{VERL_VERSION} (old log-probs recomputed)")
    prompt = number(rec, "data.max_prompt_length", 512)
    response = number(rec, "data.max_response_length", 512)
    actor_dynamic = boolean(rec, f"{ACTOR}.use_dynamic_bsz", False)
    actor_tokens = number(rec, f"{ACTOR}.ppo_max_token_len_per_gpu", 16384)
    for section, field, what in ((ROLLOUT, "training.log_prob_micro_batch_size", "the old policy's"),
                                 (REF, "training.ref_log_prob_micro_batch_size", "the reference's")):
        micro_key = f"{section}.log_prob_micro_batch_size_per_gpu"
        dynamic_key = f"{section}.log_prob_use_dynamic_bsz"
        tokens_key = f"{section}.log_prob_max_token_len_per_gpu"
        dynamic = boolean(rec, dynamic_key, actor_dynamic)
        if dynamic:
            tokens = number(rec, tokens_key, actor_tokens)
            rows = max(1, tokens // (prompt + response))
            source = tokens_key if rec.has(tokens_key) else dynamic_key if rec.has(dynamic_key) else f"{ACTOR}.use_dynamic_bsz"
            rec.set(source, field, rows, f"{what} log-prob pass: {tokens:,} tokens per forward ÷ {prompt + response:,} tokens per row")
            for key in (dynamic_key, tokens_key, micro_key):
                if rec.has(key) and key != source:
                    rec.modelled(key, field)
            continue
        rows = number(rec, micro_key)
        if rows is not None:
            rec.set(micro_key, field, rows, f"completions per forward of {what} log-prob pass on each GPU")
        elif rec.has(micro_key):
            rec.auto(micro_key, field, f"not set (null): {what} log-prob pass assumed in forwards of the update's micro-batch")
        for key in (dynamic_key, tokens_key):
            if rec.has(key):
                rec.neutral(key, "dynamic batching off" if key == dynamic_key else "not used without dynamic batching")


def read_not_modelled(rec: Recorder) -> None:
    for key, (off, assumption) in NOT_MODELLED.items():
        if rec.seen(key) or _lookup(rec.data, key) is None:
            continue
        raw = value(rec, key)
        if raw is None or any(raw is o or (not isinstance(raw, bool) and not isinstance(o, bool) and raw == o) for o in off):
            rec.neutral(key, "off" if raw is False else "the default")
        else:
            rec.unmodelled(key, assumption)
    for key in (f"{ACTOR}.kl_loss", "algorithm.in_reward_kl"):
        if isinstance(rec.get(key), dict) and not rec.seen(key):
            rec.unmodelled(
                key,
                "an older verl's spelling of the KL settings, not read: the reference model follows "
                "actor.use_kl_loss / algorithm.use_kl_in_reward",
            )
    critic = "critic"
    if isinstance(rec.get(critic), dict) and not rec.seen(critic):
        if text(rec, "algorithm.adv_estimator", "gae") == "gae":
            from .verl_critic import read_critic

            read_critic(rec)
        else:
            rec.neutral(critic, "no critic without gae")
