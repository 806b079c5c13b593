"""Several files -> one Setup: contributions merged, contradictions refused, "auto" filled, framework rules applied.

Precedence, highest first: the command line's flags (``overrides``), values the files set,
a trainmem setup file among the inputs (``base``), the frameworks' defaults. Two files (or two
keys) that set one field to different values are a contradiction — as the Hugging Face DeepSpeed
integration refuses a ds_config whose batch size differs from the trainer's — and stop the read
with one line naming both. A ``config.json`` is more specific than a Hub id and gives the model
when both are present.

Rules that need more than one file, applied after merging:

* **the trainer**: a preference, reward or RL trainer sets ``training.mode`` (its micro-batch counts
  what TRL's ``per_device_train_batch_size`` counts: pairs, or completions for GRPO);
* **base dtype**: a base loaded in bf16 (Axolotl with bf16, LLaMA-Factory LoRA, TRL ``dtype:
  bfloat16``) outside DeepSpeed keeps its weights, gradients and optimizer states in bf16:
  trainmem models that as ``bf16-pure`` (``bf16-mixed`` would count fp32 weights);
* **data-parallel ranks** from DeepSpeed's ``train_batch_size`` (micro-batch × accumulation ×
  ranks) when no Accelerate config gives ``num_processes``.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..errors import format_validation_error
from ..patch import merge_patch
from ..setup import Setup
from .record import Contribution, InputError, InputFile, KeyEntry, KeyReport, Recorder, short_value

FLAGS = {
    "micro_batch_size": "--micro-batch-size",
    "gradient_accumulation_steps": "--grad-accum",
    "precision": "--precision",
    "sequence_length": "--seq-len",
}
KIND_ORDER = ("setup", "trl", "axolotl", "llamafactory", "torchtune", "verl", "deepspeed", "accelerate", "peft", "model")


def merge(
    recorders: list[Recorder], base: dict[str, Any], overrides: dict[str, Any], files: list[InputFile]
) -> tuple[Setup, KeyReport]:
    ordered = sorted(recorders, key=lambda r: KIND_ORDER.index(r.kind))
    contributions = [c for r in ordered for c in r.contributions]
    facts = _facts(ordered)
    replaced: list[str] = []
    chosen = _choose(contributions, replaced)
    entries = [e for r in recorders for e in r.entries]
    notes = [n for r in recorders for n in r.notes] + replaced
    flat_overrides = _flatten(overrides)
    flat_base = _flatten(base)
    entries += _fill_autos(recorders, chosen, flat_base, flat_overrides)
    present = {(e.file, e.key) for e in entries}  # a weak value a key of the file gave has its entry already
    entries += [
        _default_entry(c)
        for c in chosen.values()
        if c.default and c.field not in flat_overrides and c.field not in flat_base and (c.file, c.key) not in present
    ]
    values = {field: c.value for field, c in chosen.items() if not (c.default and field in flat_base)}
    notes += _apply_rules(values, facts, chosen, flat_overrides)
    _report_unresolved_model(values, facts, base, overrides)
    for field, value in flat_overrides.items():
        if field in chosen and not chosen[field].default and chosen[field].value != value:
            c = chosen[field]
            notes.append(
                f"{field}: the command line's {short_value(value)} overrides {c.file}: {c.key} = {short_value(c.value)}"
            )
    if (
        "parallelism.num_gpus" not in values
        and "parallelism.num_gpus" not in flat_overrides
        and "parallelism.num_gpus" not in flat_base
    ):
        strategy = values.get("parallelism.strategy")
        if strategy in ("zero", "fsdp"):
            notes.append("the number of GPUs is not in the files: trainmem assumed 1 (give --gpus N)")
    merged = _merge_setups(base, _nest(values))
    setup_dict = _merge_setups(merged, overrides)
    try:
        setup = Setup.model_validate(setup_dict)
    except ValidationError as error:
        raise InputError(_locate(error, chosen)) from None
    entries = _hidden_size_autos(entries, setup)
    setup = _auto_reduce_bucket(setup, facts, flat_overrides, flat_base)
    notes += _kbit_upcast_note(setup, facts)
    return setup, KeyReport(files=files, entries=entries, notes=notes)


MODEL_SHAPES = ("preset", "hf_config", "architecture", "num_parameters")


def _merge_setups(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``patch`` over ``base`` as a JSON merge patch, except that a model given in another shape (a
    config.json over a preset, say) replaces the base's model whole: the shapes exclude each other."""
    base_model, patch_model = base.get("model"), patch.get("model")
    if isinstance(patch_model, dict) and isinstance(base_model, (dict, str)):
        base_shapes = set(base_model) & set(MODEL_SHAPES) if isinstance(base_model, dict) else {"preset"}
        patch_shapes = set(patch_model) & set(MODEL_SHAPES)
        if patch_shapes and not patch_shapes & base_shapes:
            base = {key: value for key, value in base.items() if key != "model"}
    return merge_patch(base, patch)


def _kbit_upcast_note(setup: Setup, facts: dict[str, Any]) -> list[str]:
    """PEFT's prepare_model_for_kbit_training casts the parameters bitsandbytes leaves unquantized to fp32."""
    parallel = setup.parallelism
    if (
        not facts.get("kbit_upcast")
        or setup.finetuning.method != "qlora"
        or parallel.strategy == "fsdp"
        or (parallel.strategy == "zero" and parallel.zero_stage == 3)
    ):
        return []
    architecture = setup.architecture()
    if architecture is None:
        return []
    from ..inventory import build_inventory
    from ..models import family_for
    from ..units import format_bytes

    inventory = build_inventory(architecture)
    family = family_for(architecture)
    quantized = sum(
        group.count * sum(t.numel for t in group.tensors if family.quantized_by_bitsandbytes(t))
        for group in inventory.layer_groups
    )
    unquantized = inventory.num_parameters - quantized
    return [
        f"{facts['kbit_upcast@file']}: prepare_model_for_kbit_training (PEFT 0.21) casts the {unquantized:,} unquantized "
        f"parameters (embeddings, norms, lm_head) to fp32; trainmem counts them in 16 bits, about "
        f"{format_bytes(2 * unquantized)} less than the run holds (not modelled)"
    ]


def _facts(recorders: list[Recorder]) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    for r in recorders:
        for name, value in r.facts.items():
            if name == "unresolved_models":
                facts.setdefault(name, []).extend((r.file, key, hub) for key, hub in value)
            else:
                facts.setdefault(name, value)
                facts.setdefault(f"{name}@file", r.file)
    return facts


def _choose(contributions: list[Contribution], replaced: list[str]) -> dict[str, Contribution]:
    """One contribution per field: explicit ones must agree, unless one of them ``wins`` as its framework decides
    (a note in ``replaced`` says so); else the first default."""
    chosen: dict[str, Contribution] = {}
    for c in contributions:
        if c.default:
            continue
        previous = chosen.get(c.field)
        if previous is None:
            chosen[c.field] = c
        elif c.field == "model":
            chosen[c.field] = _more_specific_model(previous, c)
        elif previous.value != c.value and (c.wins or previous.wins) and not (c.wins and previous.wins):
            winner, loser = (c, previous) if c.wins else (previous, c)
            chosen[c.field] = winner
            replaced.append(
                f"{c.field}: {winner.file}: {winner.key} = {short_value(winner.value)} replaces {loser.file}: "
                f"{loser.key} = {short_value(loser.value)} ({winner.wins})"
            )
        elif previous.value != c.value:
            raise InputError(
                f"{c.file}: {c.key} = {short_value(c.value)} contradicts {previous.file}: {previous.key} = "
                f"{short_value(previous.value)} (both set {c.field}); make them agree"
            )
    for c in contributions:
        if c.default and c.field not in chosen:
            chosen[c.field] = c
    return chosen


def _more_specific_model(a: Contribution, b: Contribution) -> Contribution:
    a_config, b_config = "hf_config" in a.value, "hf_config" in b.value
    if a_config and b_config and a.value != b.value:
        raise InputError(f"{b.file}: contradicts {a.file}: two different config.json files; give one")
    if b_config and not a_config:
        return b
    if a_config or a.value == b.value:
        return a
    raise InputError(
        f"{b.file}: {b.key} = {short_value(b.value)} contradicts {a.file}: {a.key} = {short_value(a.value)} (two models); "
        "make them agree"
    )


def _fill_autos(
    recorders: list[Recorder], chosen: dict[str, Contribution], base: dict[str, Any], overrides: dict[str, Any]
) -> list[KeyEntry]:
    entries = []
    for r in recorders:
        for auto in r.autos:
            if auto.field in overrides:
                source, value = "the command line", overrides[auto.field]
            elif auto.field in chosen:
                c = chosen[auto.field]
                source = f"{c.file}: {c.key}" + (f" ({c.label} default)" if c.default else "")
                value = c.value
            elif auto.field in base:
                source, value = "the setup file", base[auto.field]
            else:
                flag = FLAGS.get(auto.field, "a flag")
                if auto.reason:
                    raise InputError(f"{auto.file}: {auto.key}: {auto.reason}; give {flag}")
                raise InputError(
                    f'{auto.file}: {auto.key}: "auto" is filled from the trainer\'s arguments, and no file or flag '
                    f"gives {auto.field}; add the trainer file or give {flag}"
                )
            entries.append(
                KeyEntry(
                    file=auto.file,
                    key=auto.key,
                    value="auto",
                    status="modelled",
                    detail=f"auto: {auto.field} = {short_value(value)}, filled from {source}",
                )
            )
    return entries


def _default_entry(c: Contribution) -> KeyEntry:
    return KeyEntry(
        file=c.file,
        key=c.key,
        value=None,
        status="modelled",
        default=True,
        detail=f"not in the file: {c.label} default, {c.field} = {short_value(c.value)}",
    )


def _apply_rules(
    values: dict[str, Any], facts: dict[str, Any], chosen: dict[str, Contribution], overrides: dict[str, Any]
) -> list[str]:
    notes = []
    mode = facts.get("training_mode")
    if mode and "training.mode" not in values and "training.mode" not in overrides:
        values["training.mode"] = mode
        counts = {"grpo": "completions", "rloo": "completions", "ppo": "completions", "kto": "examples"}.get(mode, "preference pairs")
        trainer = "verl 0.9.1's PPO (the actor's RL step and the critic's update)" if mode == "ppo" else f"TRL 1.16's {mode.upper()} trainer"
        notes.append(
            f"training.mode = {mode} (from {facts['training_mode@file']}): the step is simulated as {trainer} runs it; "
            f"micro_batch_size counts {counts}"
        )
    if facts.get("kto_kl_from_dataset") and values.get("training.mode") == "kto":
        if overrides.get("micro_batch_size", values.get("micro_batch_size")) == 1:
            raise InputError(
                f"{facts['kto_kl_from_dataset@file']}: per_device_train_batch_size: 1: LLaMA-Factory's KTO runs with 1 "
                "(its KL examples come from the dataset), but trainmem models TRL's KTOTrainer, which needs at least 2 "
                "per micro-batch; give --micro-batch-size 2 or more for an estimate"
            )
    if values.get("finetuning.quantization.bits") and values.get("finetuning.method", "full") == "full":
        if facts.get("quantized_base"):
            values["finetuning.method"] = "qlora"
            notes.append(
                "the model's quantization_config makes the base quantized: trainmem assumed LoRA adapters "
                "(QLoRA) with PEFT's defaults; add the adapter_config.json or the trainer file for the rank"
            )
    if values.get("finetuning.method") == "lora" and values.get("finetuning.quantization.bits"):
        values["finetuning.method"] = "qlora"
    if not values.get("finetuning.quantization.bits") and values.get("finetuning.method") == "qlora":
        values["finetuning.quantization.bits"] = 4
    base_dtype = facts.get("base_dtype")
    strategy = overrides.get("parallelism.strategy", values.get("parallelism.strategy", "ddp"))
    # Accelerate upcasts trainable 16-bit parameters to fp32 before FSDP shards them when mixed precision is on
    # (accelerate 1.15 accelerator.py prepare_model for FSDP1's flat parameters, utils/fsdp_utils.py fsdp2_prepare_model)
    fsdp_upcast = strategy == "fsdp" and values.get("finetuning.method", "full") == "full"
    if (
        values.get("precision") == "bf16-mixed"
        and base_dtype == "bf16"
        and fsdp_upcast
        and "precision" not in overrides
    ):
        notes.append(
            f"{facts['base_dtype@file']}: the base is loaded in bf16, but Accelerate upcasts the trainable parameters to "
            "fp32 before FSDP shards them (mixed precision on): fp32 shards with bf16 compute, as bf16-mixed under FSDP"
        )
    elif (
        values.get("precision") == "bf16-mixed"
        and base_dtype == "bf16"
        and strategy != "zero"
        and "precision" not in overrides
    ):
        values["precision"] = "bf16-pure"
        method = values.get("finetuning.method", "full")
        what = "the frozen base is" if method in ("lora", "qlora") else "weights, gradients and optimizer states are"
        notes.append(
            f"{facts['base_dtype@file']}: the base is loaded in bf16, so {what} bf16: trainmem models the run "
            "as bf16-pure"
            + (" (fp32 adapter copies, under 1% of the memory, counted in bf16)" if method in ("lora", "qlora") else "")
        )
    if "parallelism.num_gpus" not in values and "parallelism.num_gpus" not in overrides:
        total = facts.get("train_batch_size")
        micro, steps = values.get("micro_batch_size"), values.get("gradient_accumulation_steps", 1)
        if isinstance(total, int) and micro and total % (micro * steps) == 0:
            values["parallelism.num_gpus"] = total // (micro * steps)
            notes.append(
                f"parallelism.num_gpus = {values['parallelism.num_gpus']}: DeepSpeed's train_batch_size "
                f"{total} / (micro-batch {micro} × accumulation {steps})"
            )
    notes += _multi_gpu_strategy_rule(values, facts, overrides)
    if values.get("parallelism.strategy") == "ddp" and values.get("parallelism.zero_stage"):
        values["parallelism.strategy"] = "zero"
    if (
        values.get("parallelism.strategy") != "zero"
        and "parallelism.zero_stage" in values
        and values.get("parallelism.strategy") is not None
    ):
        values.pop("parallelism.zero_stage")
    if values.get("parallelism.strategy") == "fsdp" and "parallelism.fsdp_sharding_strategy" not in values:
        values["parallelism.fsdp_sharding_strategy"] = "FULL_SHARD"
    return notes


def _multi_gpu_strategy_rule(values: dict[str, Any], facts: dict[str, Any], overrides: dict[str, Any]) -> list[str]:
    """A torchtune config does not say how many processes ``tune run --nproc_per_node N`` starts: with more than one
    GPU (a flag or another file) and no strategy, its distributed recipes shard with FSDP2 (``fully_shard``)."""
    strategy = facts.get("multi_gpu_strategy")
    gpus = overrides.get("parallelism.num_gpus", values.get("parallelism.num_gpus", 1))
    if not strategy or "parallelism.strategy" in values or "parallelism.strategy" in overrides:
        return []
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus <= 1:
        return []
    values["parallelism.strategy"] = strategy
    values.setdefault("parallelism.fsdp_version", 2)
    return [
        f"{facts['multi_gpu_strategy@file']}: {gpus} GPUs: torchtune's distributed recipes shard the model with FSDP2 "
        "(fully_shard, reshard after forward): parallelism.strategy = fsdp"
    ]


def _report_unresolved_model(values: dict[str, Any], facts: dict[str, Any], base: dict, overrides: dict) -> None:
    if "model" in values or "model" in base or "model" in overrides:
        return
    unresolved = facts.get("unresolved_models")
    if unresolved:
        file, key, hub = unresolved[0]
        raise InputError(
            f"{file}: {key}: {hub!r} matches no preset (data/hub_ids.json); add that model's config.json as another "
            "file (or give --hf-config FILE or --preset NAME)"
        )
    raise InputError("model: no file names the model; add its config.json, or give --preset NAME or --hf-config FILE")


def _locate(error: ValidationError, chosen: dict[str, Contribution]) -> str:
    parts = []
    for path, message in format_validation_error(error):
        source = (
            chosen.get(path)
            or next((c for f, c in chosen.items() if path.startswith(f + ".")), None)
            or next((c for f, c in chosen.items() if f.startswith(path + ".")), None)
        )
        where = f"{source.file}: {source.key}" if source is not None and not source.default else path
        parts.append(f"{where}: {message}" if where == path else f"{where}: {path}: {message}")
    return "; ".join(parts)


def _hidden_size_autos(entries: list[KeyEntry], setup: Setup) -> list[KeyEntry]:
    from .deepspeed import BUCKET_DEFAULTS, HIDDEN_SIZE_AUTOS

    architecture = setup.architecture()
    out = []
    for entry in entries:
        name = entry.key.rsplit(".", 1)[-1]
        if entry.value == "auto" and entry.key.startswith("zero_optimization.") and name in HIDDEN_SIZE_AUTOS:
            formula, compute = HIDDEN_SIZE_AUTOS[name]
            if architecture is None:
                detail = "auto: needs the model's hidden_size; "
            else:
                detail = f"auto: {formula} = {compute(architecture.hidden_size):,} (HF integration); "
            if name == "reduce_bucket_size" and architecture is not None:
                detail = detail.removesuffix("; ") + ": parallelism.zero_reduce_bucket_size"
                entry = entry.model_copy(update={"detail": detail, "status": "modelled"})
            else:
                detail += f"not modelled: trainmem simulates DeepSpeed's default {BUCKET_DEFAULTS[name]:.0e}"
                entry = entry.model_copy(update={"detail": detail})
        out.append(entry)
    return out


def _auto_reduce_bucket(setup: Setup, facts: dict[str, Any], overrides: dict[str, Any], base: dict[str, Any]) -> Setup:
    """A DeepSpeed ``reduce_bucket_size: "auto"`` is hidden_size² once the Hugging Face integration sees the model
    (transformers 5.24 ``integrations/deepspeed.py`` trainer_config_finalize), not DeepSpeed's 5e8 default."""
    field = "parallelism.zero_reduce_bucket_size"
    autos = facts.get("hidden_size_autos") or []
    if field in overrides or field in base or not any(key.endswith(".reduce_bucket_size") for key in autos):
        return setup
    architecture = setup.architecture()
    if architecture is None:
        return setup
    data = setup.model_dump(mode="json", exclude_unset=True)
    data = merge_patch(data, {"parallelism": {"zero_reduce_bucket_size": architecture.hidden_size**2}})
    return Setup.model_validate(data)


ATOMIC_FIELDS = {"model", "optimizer", "gpu", "runtime", "finetuning.frozen"}


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted paths as contributions name them (``parallelism.zero_stage``); model, optimizer and gpu stay whole."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and path not in ATOMIC_FIELDS:
            flat.update(_flatten(value, path))
        else:
            flat[path] = value
    return flat


def _nest(values: dict[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for path, value in values.items():
        node = nested
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if isinstance(value, dict) and isinstance(node.get(parts[-1]), dict):
            node[parts[-1]] = merge_patch(node[parts[-1]], value)
        else:
            node[parts[-1]] = value
    return nested
