"""FSDP settings, as Accelerate's ``fsdp_config``, ``TrainingArguments.fsdp_config`` and Axolotl spell them.

Keys are read with or without their ``fsdp_`` prefix. Sources: accelerate 1.15
``utils/dataclasses.py`` FullyShardedDataParallelPlugin (sharding strategies 1-5 by number,
``reshard_after_forward`` for FSDP2, where ``False`` keeps the gathered weights like
``SHARD_GRAD_OP``); ``CPUOffload(offload_params=True)`` keeps parameters and gradients in host
memory and runs the optimizer step there, so it offloads the optimizer states too.
"""

from __future__ import annotations

from typing import Any

from .record import Contribution, Recorder

SHARDING_BY_NUMBER = {1: "FULL_SHARD", 2: "SHARD_GRAD_OP", 3: "NO_SHARD", 4: "HYBRID_SHARD", 5: "HYBRID_SHARD_ZERO2"}
NEUTRAL = {"state_dict_type", "sync_module_states", "cpu_ram_efficient_loading", "use_orig_params", "limit_all_gathers"}


def apply_fsdp_config(
    rec: Recorder,
    section: str,
    config: dict[str, Any],
    strategy: str,
    explicit_strategy: bool,
    default_version: tuple[int, str] | None = None,
) -> None:
    """Record ``config`` (the dict at ``section``) as FSDP parallelism settings; ``default_version`` (version, source) is
    the FSDP version the framework takes when the config names none."""
    chosen = strategy
    strategy_key = None
    if default_version is not None and not any(n.removeprefix("fsdp_") == "version" for n in config):
        rec.default("parallelism.fsdp_version", default_version[0], f"{section}.fsdp_version", default_version[1])
    for name, value in config.items():
        key = f"{section}.{name}"
        short = name.removeprefix("fsdp_")
        if value is None:
            rec.neutral(key, "empty: the default applies")
        elif short == "sharding_strategy":
            text = SHARDING_BY_NUMBER.get(value, str(value).upper()) if isinstance(value, int) else str(value).upper()
            if text == "HYBRID_SHARD_ZERO2":
                rec.unmodelled(key, "HYBRID_SHARD_ZERO2: assumed HYBRID_SHARD (weights resharded after forward)")
                text = "HYBRID_SHARD"
            chosen, strategy_key = text, key
        elif short == "reshard_after_forward":
            chosen, strategy_key = ("FULL_SHARD" if value else "SHARD_GRAD_OP"), key
        elif short == "offload_params":
            if value:
                rec.set(
                    key,
                    "parallelism.offload_parameters",
                    True,
                    "CPUOffload keeps parameters and gradients on the host and steps the optimizer there",
                )
                rec.contributions.append(Contribution("parallelism.offload_optimizer", True, rec.file, key))
            else:
                rec.neutral(key, "off")
        elif short == "activation_checkpointing":
            rec.set(key, "activation_checkpointing", "full" if value else "none") if value else rec.neutral(key, "off")
        elif short == "version":
            if value not in (1, 2, "1", "2"):
                from .record import InputError

                raise InputError(f"{rec.file}: {key}: must be 1 or 2, got {value!r}")
            rec.set(key, "parallelism.fsdp_version", int(value), f"FSDP{value}")
        elif short == "backward_prefetch":
            if str(value).upper() == "BACKWARD_PRE":
                rec.modelled(key, "trainmem holds the current and the prefetched next layer gathered")
            else:
                rec.unmodelled(key, f"{value}: assumed BACKWARD_PRE (the current and the next layer gathered)")
        elif short == "forward_prefetch":
            rec.unmodelled(key, "assumed no forward prefetch") if value else rec.neutral(key, "off")
        elif short == "auto_wrap_policy":
            if str(value).upper() == "TRANSFORMER_BASED_WRAP":
                rec.modelled(key, "one FSDP unit per decoder layer, as trainmem gathers")
            else:
                rec.unmodelled(key, f"{value}: assumed one FSDP unit per decoder layer")
        elif short in ("transformer_layer_cls_to_wrap", "transformer_cls_names_to_wrap"):
            rec.modelled(key, "the decoder layer is the unit trainmem gathers")
        elif short in NEUTRAL:
            rec.neutral(key)
        elif short == "min_num_params":
            rec.unmodelled(key, "size-based wrapping: assumed one FSDP unit per decoder layer")
        else:
            rec.unmodelled(key, "unknown FSDP option: assumed not to change memory")
    rec.contributions.append(Contribution("parallelism.strategy", "fsdp", rec.file, strategy_key or section))
    if strategy_key is not None:
        rec.contributions.append(Contribution("parallelism.fsdp_sharding_strategy", chosen, rec.file, strategy_key))
        rec.modelled(strategy_key, f"parallelism.fsdp_sharding_strategy = {chosen}")
    elif explicit_strategy:
        rec.contributions.append(Contribution("parallelism.fsdp_sharding_strategy", chosen, rec.file, section))
