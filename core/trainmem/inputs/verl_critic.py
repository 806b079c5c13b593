"""verl's ``critic.*`` (PPO with ``algorithm.adv_estimator: gae``): the value model of ``training.mode: ppo``.

Read from verl 0.9.1 (``verl/trainer/config/critic/critic.yaml``, ``dp_critic.yaml`` and the generated
``_generated_ppo_trainer.yaml``; the engine in ``verl/workers/engine/fsdp/transformer_impl.py``):

* ``critic.model.path``: the critic's model (a preset other than the actor's sets ``training.critic_model``);
* ``critic.ppo_micro_batch_size_per_gpu`` (or the deprecated global ``ppo_micro_batch_size`` ÷ data-parallel
  ranks; with ``use_dynamic_bsz``, ``ppo_max_token_len_per_gpu`` tokens, 32,768 by default): rows per critic
  forward/backward; ``critic.ppo_mini_batch_size`` (the actor's by default) × ``rollout.n`` ÷ ranks ÷ micro:
  its accumulation steps;
* ``critic.model.enable_gradient_checkpointing``: ``training.critic_activation_checkpointing``;
* ``critic.fsdp.param_offload`` / ``optimizer_offload`` (verl 0.9.1; older configs spell them
  ``critic.model.fsdp_config.*``): the critic's states wait on the host outside its phase
  (``BaseEngineCtx._context_switch``); the actor's ``fsdp_config.param_offload`` / ``optimizer_offload`` do the
  same for the actor during the critic's phase.

The critic is simulated with the actor's precision, optimizer, FSDP version and padding
(verl's defaults are the same); a critic key that differs from the actor's is named as not modelled.
"""

from __future__ import annotations

from .record import Contribution, InputError, Recorder

CRITIC = "critic"


def read_critic(rec: Recorder) -> None:
    """The critic's keys of a ``gae`` config, as ``training.critic_*`` contributions and key entries."""
    from .verl import ACTOR, MODEL, ROLLOUT, _preset_for_path, boolean, number, text, value

    _critic_model(rec, MODEL, _preset_for_path, value)
    _critic_batch(rec, ACTOR, ROLLOUT, number, boolean)
    for name, field in (("param_offload", "critic_param_offload"), ("optimizer_offload", "critic_optimizer_offload")):
        for section in (f"{CRITIC}.fsdp", f"{CRITIC}.model.fsdp_config"):
            key = f"{section}.{name}"
            if rec.has(key):
                on = boolean(rec, key, False)
                rec.set(key, f"training.{field}", on, "the critic's states wait on the host outside its own phase" if on else "off")
        actor_key = f"{ACTOR}.fsdp_config.{name}"
        if boolean(rec, actor_key, False):
            rec.contributions.append(Contribution(f"training.actor_{name}", True, rec.file, actor_key))
    if boolean(rec, f"{CRITIC}.fsdp.offload_policy", False):
        rec.unmodelled(f"{CRITIC}.fsdp.offload_policy", "FSDP2's CPUOffloadPolicy for the critic: assumed off")
    elif rec.has(f"{CRITIC}.fsdp.offload_policy"):
        rec.neutral(f"{CRITIC}.fsdp.offload_policy", "off")
    key = f"{CRITIC}.model.enable_gradient_checkpointing"
    checkpointing = boolean(rec, key)
    if checkpointing is not None:
        rec.set(key, "training.critic_activation_checkpointing", "full" if checkpointing else "none")
    for key, actor_key, default, what in (
        (f"{CRITIC}.model.use_remove_padding", f"{MODEL}.use_remove_padding", True, "padding removal"),
    ):
        _same_as_actor(rec, key, boolean(rec, key, default), boolean(rec, actor_key, default), what)
    for key, actor_key, default, what in (
        (f"{CRITIC}.fsdp.model_dtype", f"{ACTOR}.fsdp_config.model_dtype", "fp32", "weight dtype"),
        (f"{CRITIC}.strategy", f"{ACTOR}.strategy", "fsdp", "FSDP version"),
        (f"{CRITIC}.optim.optimizer", f"{ACTOR}.optim.optimizer", "AdamW", "optimizer"),
    ):
        mine, actors = text(rec, key, default), text(rec, actor_key, default)
        _same_as_actor(rec, key, str(mine).lower(), str(actors).lower(), what)
    rank = number(rec, f"{CRITIC}.model.lora_rank", 0, low=0)
    if rank:
        rec.unmodelled(f"{CRITIC}.model.lora_rank", f"LoRA of rank {rank} on the critic: assumed full fine-tuning (an upper bound)")
    elif rec.has(f"{CRITIC}.model.lora_rank"):
        rec.neutral(f"{CRITIC}.model.lora_rank", "0: full fine-tuning")
    if number(rec, f"{CRITIC}.ulysses_sequence_parallel_size", 1) > 1:
        rec.unmodelled(f"{CRITIC}.ulysses_sequence_parallel_size", "Ulysses sequence parallelism: assumed every rank holds whole rows")
    for name in ("forward_micro_batch_size", "forward_micro_batch_size_per_gpu", "forward_max_token_len_per_gpu"):
        if rec.has(f"{CRITIC}.{name}"):
            rec.neutral(f"{CRITIC}.{name}", "the values pass under no_grad: trainmem runs it in chunks of the critic's micro-batch")
    for section in (f"{CRITIC}.optim", f"{CRITIC}.fsdp", f"{CRITIC}.model.fsdp_config", f"{CRITIC}.model", CRITIC):
        rec.finish(section, AS_THE_ACTOR)


AS_THE_ACTOR = frozenset(
    {"cliprange_value", "ppo_epochs", "enable", "strategy", "dtype", "hf_config_path", "lora_alpha", "target_modules",
     "exclude_modules", "ppo_max_token_len_per_gpu", "reshard_after_forward", "fsdp_size", "forward_prefetch", "qat",
     "pad_to_length", "pad_to_length_bucket", "use_torch_compile", "entropy_checkpointing",
     "entropy_from_logits_with_chunking", "ulysses_sequence_parallel_size", "lora", "mtp", "tiled_mlp", "use_liger",
     "use_fused_kernels", "enable_activation_offload", "optimizer_impl", "use_remove_padding"}
)
"""Critic keys read as memory-neutral here: they qualify what the critic shares with the actor (its FSDP unit
settings, kernels and schedule), or have no memory of their own in the critic's step (the value head has no
vocabulary to fuse)."""


def _critic_model(rec: Recorder, actor_model: str, preset_for_path, value) -> None:
    key = f"{CRITIC}.model.path"
    path = value(rec, key)
    if path is None:
        return
    if not isinstance(path, str) or not path.strip():
        raise InputError(f"{rec.file}: {key}: must be a Hub id or a local folder, got {path!r}")
    actor_path = value(rec, f"{actor_model}.path")
    preset, how = preset_for_path(path.strip())
    actor_preset = preset_for_path(actor_path.strip())[0] if isinstance(actor_path, str) and actor_path.strip() else None
    if path == actor_path or (preset is not None and preset == actor_preset):
        rec.modelled(key, "the actor's model: the critic is its copy with a value head (score, hidden → 1)")
    elif preset is not None:
        rec.set(key, "training.critic_model", preset, how)
    else:
        rec.unmodelled(key, f"{path!r}: no preset matches; the critic is assumed the actor's architecture")


def _critic_batch(rec: Recorder, actor: str, rollout: str, number, boolean) -> None:
    from .verl import value

    micro_key = f"{CRITIC}.ppo_micro_batch_size_per_gpu"
    prompt = number(rec, "data.max_prompt_length", 512)
    response = number(rec, "data.max_response_length", 512)
    gpus = number(rec, "trainer.n_gpus_per_node", 8) * number(rec, "trainer.nnodes", 1)
    n = number(rec, f"{rollout}.n", 1)
    micro = number(rec, micro_key)
    dynamic = boolean(rec, f"{CRITIC}.use_dynamic_bsz", boolean(rec, f"{actor}.use_dynamic_bsz", False))
    if micro is None and dynamic:
        tokens_key = f"{CRITIC}.ppo_max_token_len_per_gpu"
        tokens = number(rec, tokens_key, 32768)
        micro = max(1, tokens // (prompt + response))
        rec.contributions.append(Contribution("training.critic_micro_batch_size", micro, rec.file, tokens_key))
        rec.modelled(tokens_key, f"training.critic_micro_batch_size = {micro}: {tokens:,} tokens per micro-batch ÷ {prompt + response:,} per row")
        if rec.has(f"{CRITIC}.use_dynamic_bsz"):
            rec.modelled(f"{CRITIC}.use_dynamic_bsz", "token-balanced critic micro-batches")
    elif micro is None and number(rec, f"{CRITIC}.ppo_micro_batch_size") is not None:
        micro = max(1, number(rec, f"{CRITIC}.ppo_micro_batch_size") // gpus)
        rec.set(f"{CRITIC}.ppo_micro_batch_size", "training.critic_micro_batch_size", micro, f"the global micro-batch ÷ {gpus} data-parallel ranks (deprecated key)")
    elif micro is not None:
        rec.set(micro_key, "training.critic_micro_batch_size", micro, "completions per critic forward/backward on each GPU")
        if rec.has(f"{CRITIC}.use_dynamic_bsz"):
            rec.neutral(f"{CRITIC}.use_dynamic_bsz", "off" if not dynamic else "the micro-batch is given")
    else:  # the actor's micro-batch and accumulation (training.critic_micro_batch_size unset)
        for name in ("ppo_micro_batch_size_per_gpu", "ppo_mini_batch_size", "use_dynamic_bsz"):
            if rec.has(f"{CRITIC}.{name}"):
                rec.neutral(f"{CRITIC}.{name}", "no critic micro-batch in the file: the critic's update assumed the actor's micro-batches")
        return
    mini_key = f"{CRITIC}.ppo_mini_batch_size"
    mini = number(rec, mini_key, number(rec, f"{actor}.ppo_mini_batch_size", 256))
    completions = mini * n
    if completions % gpus:
        raise InputError(f"{rec.file}: {mini_key}: {mini} prompts × rollout.n {n} must split evenly over {gpus} data-parallel ranks, as verl asserts")
    per_gpu = completions // gpus
    if not dynamic and (per_gpu < micro or per_gpu % micro):
        raise InputError(
            f"{rec.file}: {mini_key}: {mini} prompts × rollout.n {n} over {gpus} data-parallel ranks must be a whole "
            f"multiple of the critic's micro-batch ({micro}), as verl asserts"
        )
    steps = max(1, -(-per_gpu // micro))
    rec.contributions.append(Contribution("training.critic_gradient_accumulation_steps", steps, rec.file, mini_key, default=not rec.has(mini_key), label="verl 0.9.1 (the actor's ppo_mini_batch_size)"))
    if rec.has(mini_key) and value(rec, mini_key) is not None:
        rec.modelled(mini_key, f"training.critic_gradient_accumulation_steps = {steps}: {mini} × {n} completions ÷ {gpus} ranks ÷ micro-batch {micro}")


def _same_as_actor(rec: Recorder, key: str, mine, actors, what: str) -> None:
    if not rec.has(key):
        return
    if mine == actors:
        rec.modelled(key, f"the actor's {what}: the critic is simulated with it")
    else:
        rec.unmodelled(key, f"{mine}: the critic is simulated with the actor's {what} ({actors})")
