"""Accelerate config YAML (``accelerate config`` / ``accelerate launch --config_file``).

Read from accelerate 1.15 ``commands/config/config_args.py`` and ``utils/dataclasses.py``:
``distributed_type`` NO / MULTI_GPU (DDP) / DEEPSPEED / FSDP; ``num_processes`` is the total
number of processes over all machines (one per GPU); ``mixed_precision`` no / fp16 / bf16 / fp8;
``deepspeed_config`` carries either a ``deepspeed_config_file`` or the inline ``zero_stage``,
``offload_optimizer_device``, ``offload_param_device`` and ``gradient_accumulation_steps``.
"""

from __future__ import annotations

from .fsdp import apply_fsdp_config
from .record import Contribution, InputError, Recorder

STRATEGIES = {"NO": "ddp", "MULTI_GPU": "ddp", "DEEPSPEED": "zero", "FSDP": "fsdp"}
PRECISIONS = {"no": "fp32", "fp16": "fp16-mixed", "bf16": "bf16-mixed", "fp8": "fp8-mixed"}


def read_accelerate(rec: Recorder) -> None:
    raw = rec.get("distributed_type", "NO")
    distributed = "NO" if raw is False else str(raw).upper()  # YAML 1.1 reads an unquoted NO as false
    if distributed not in STRATEGIES:
        rec.unmodelled("distributed_type", f"{distributed}: assumed DDP")
        distributed = "MULTI_GPU"
    elif STRATEGIES[distributed] == "ddp" and rec.has("distributed_type"):
        # the trainer's own deepspeed/fsdp arguments win over a plain launcher config (HF Trainer enables them)
        rec.modelled("distributed_type", "parallelism.strategy = ddp, unless a trainer file turns on DeepSpeed or FSDP")
        rec.default("parallelism.strategy", "ddp", "distributed_type", "the Accelerate config")
    elif rec.has("distributed_type"):
        rec.set("distributed_type", "parallelism.strategy", STRATEGIES[distributed])
    processes = rec.get("num_processes")
    if processes is not None:
        if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
            raise InputError(f"{rec.file}: num_processes: must be a positive integer, got {processes!r}")
        if distributed == "NO" and processes > 1:
            # accelerate 1.15 commands/launch.py: distributed_type NO sets neither multi_gpu nor a distributed backend,
            # so launch_command falls through to simple_launcher, which starts one process
            rec.set(
                "num_processes",
                "parallelism.num_gpus",
                1,
                "distributed_type NO: accelerate launch starts one process (simple_launcher); num_processes is unused",
            )
        else:
            rec.set("num_processes", "parallelism.num_gpus", processes, "one process per GPU, over all machines")
    machines = rec.get("num_machines")
    if machines is not None:
        if processes and isinstance(machines, int) and machines > 1 and processes % machines == 0:
            rec.set("num_machines", "parallelism.gpus_per_node", processes // machines, "num_processes / num_machines")
        else:
            rec.neutral("num_machines", "one machine" if machines == 1 else "")
    precision = rec.get("mixed_precision")
    if precision is not None:
        name = str(precision).lower()
        if name not in PRECISIONS:
            raise InputError(f"{rec.file}: mixed_precision: must be one of no, fp16, bf16, fp8; got {precision!r}")
        rec.set(
            "mixed_precision", "precision", PRECISIONS[name], "fp8 through Transformer Engine" if name == "fp8" else ""
        )
    if rec.get("use_cpu") is True:
        rec.unmodelled("use_cpu", "trains on the CPU: trainmem still reports GPU memory")
    elif rec.get("use_cpu") is not None:
        rec.neutral("use_cpu", "off")
    if distributed == "DEEPSPEED":
        read_deepspeed_section(rec)
    elif rec.get("deepspeed_config") is not None:
        rec.neutral("deepspeed_config", f"ignored: distributed_type is {distributed}")
    config = rec.get("fsdp_config")
    if distributed == "FSDP":
        apply_fsdp_config(
            rec,
            "fsdp_config",
            config if isinstance(config, dict) else {},
            "FULL_SHARD",
            True,
            (1, "accelerate 1.15 FullyShardedDataParallelPlugin (FSDP_VERSION 1)"),
        )
    elif config is not None:
        rec.neutral("fsdp_config", f"ignored: distributed_type is {distributed}")
    if isinstance(rec.get("parallelism_config"), dict):
        read_parallelism_config(rec)
    if rec.get("dynamo_config") is not None:
        rec.unmodelled("dynamo_config", "torch.compile may fuse away saved tensors: assumed eager-mode memory")
    rec.finish()


def read_deepspeed_section(rec: Recorder) -> None:
    section = rec.get("deepspeed_config")
    if not isinstance(section, dict):
        rec.contributions.append(Contribution("parallelism.strategy", "zero", rec.file, "distributed_type"))
        return
    base = "deepspeed_config"
    if section.get("deepspeed_config_file"):
        rec.modelled(f"{base}.deepspeed_config_file", "reads the DeepSpeed config it names")
        rec.link("deepspeed", f"{base}.deepspeed_config_file", section["deepspeed_config_file"])
    if "zero_stage" in section:
        stage = section["zero_stage"]
        if stage not in (0, 1, 2, 3):
            raise InputError(f"{rec.file}: {base}.zero_stage: must be 0, 1, 2 or 3, got {stage!r}")
        rec.set(f"{base}.zero_stage", "parallelism.zero_stage", stage)
    for name, setup_field in (
        ("offload_optimizer_device", "parallelism.offload_optimizer"),
        ("offload_param_device", "parallelism.offload_parameters"),
    ):
        if name in section:
            device = str(section[name]).lower()
            rec.set(f"{base}.{name}", setup_field, device in ("cpu", "nvme"))
    if "gradient_accumulation_steps" in section:
        steps = section["gradient_accumulation_steps"]
        if isinstance(steps, int) and not isinstance(steps, bool) and steps >= 1:
            rec.modelled(
                f"{base}.gradient_accumulation_steps",
                f"gradient_accumulation_steps = {steps} unless the trainer file sets it (TrainingArguments win)",
            )
            rec.default(
                "gradient_accumulation_steps", steps, f"{base}.gradient_accumulation_steps", "the Accelerate config"
            )
        else:
            raise InputError(
                f"{rec.file}: {base}.gradient_accumulation_steps: must be a positive integer, got {steps!r}"
            )
    if "gradient_clipping" in section:
        rec.neutral(f"{base}.gradient_clipping")
    rec.finish(base)


PARALLELISM_SIZES = {
    "parallelism_config_cp_size": "context parallelism (the sequence split over cp ranks): assumed each rank holds the "
    "whole sequence's activations, an upper bound; the model states shard over all num_processes ranks, as trainmem counts",
    "parallelism_config_tp_size": "tensor parallelism (DTensor): assumed none (give --tp)",
    "parallelism_config_dp_replicate_size": "replicated FSDP groups (HSDP): assumed FSDP shards over every GPU",
}


def read_parallelism_config(rec: Recorder) -> None:
    """accelerate 1.15 ``ParallelismConfig`` (``parallelism_config_*`` keys: dp_replicate, dp_shard, tp, cp sizes; FSDP2
    shards over the flattened dp_shard x cp mesh, ``parallelism_config.py``). Sizes above 1 that trainmem does not
    split by are named with the assumption made; the rest change no memory."""
    section = "parallelism_config"
    config = rec.get(section)
    for name, value in config.items():
        key = f"{section}.{name}"
        if name in PARALLELISM_SIZES and isinstance(value, int) and not isinstance(value, bool) and value > 1:
            rec.unmodelled(key, PARALLELISM_SIZES[name])
        elif name == "parallelism_config_dp_shard_size":
            rec.neutral(key, "FSDP shards over the processes, as num_processes says")
        elif name in PARALLELISM_SIZES:
            rec.neutral(key, "1: off")
        elif name.startswith("parallelism_config_cp_"):
            rec.neutral(key, "a context-parallel option")
    rec.finish(section)
