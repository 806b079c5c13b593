"""DeepSpeed ``ds_config.json``.

``"auto"`` values are what the Hugging Face integration fills from ``TrainingArguments``
(transformers 5.24 ``integrations/deepspeed.py``, ``HfTrainerDeepSpeedConfig``):
``train_micro_batch_size_per_gpu`` <- ``per_device_train_batch_size``,
``gradient_accumulation_steps``, ``fp16.enabled``/``bf16.enabled`` <- ``fp16``/``bf16``;
in ``trainer_config_finalize``, from the model's ``hidden_size``: ``reduce_bucket_size`` =
hidden², ``stage3_prefetch_bucket_size`` = 0.9·hidden², ``stage3_param_persistence_threshold``
= 10·hidden. A value that is not ``"auto"`` must match the trainer's (the integration refuses a
mismatch); here that is a contradiction between the two files.

The bucket sizes are reported but trainmem simulates DeepSpeed's defaults (reduce_bucket_size
5e8, stage3_prefetch_bucket_size 5e7, stage3_param_persistence_threshold 1e5): a Setup field
for each is needed to model other values.
"""

from __future__ import annotations

from typing import Any

from .optimizer_names import deepspeed_optimizer
from .record import Contribution, InputError, Recorder

DEEPSPEED_VERSION = "DeepSpeed (zero_optimization defaults of deepspeed/runtime/zero/config.py)"
BUCKET_DEFAULTS = {
    "reduce_bucket_size": 500_000_000,
    "stage3_prefetch_bucket_size": 50_000_000,
    "prefetch_bucket_size": 50_000_000,
    "stage3_param_persistence_threshold": 100_000,
    "param_persistence_threshold": 100_000,
}
HIDDEN_SIZE_AUTOS = {
    "reduce_bucket_size": ("hidden_size²", lambda h: h * h),
    "stage3_prefetch_bucket_size": ("0.9 × hidden_size²", lambda h: int(0.9 * h * h)),
    "prefetch_bucket_size": ("0.9 × hidden_size²", lambda h: int(0.9 * h * h)),
    "stage3_param_persistence_threshold": ("10 × hidden_size", lambda h: 10 * h),
    "param_persistence_threshold": ("10 × hidden_size", lambda h: 10 * h),
}
NOT_MODELLED_ZERO = {
    "stage3_max_live_parameters": "assumed DeepSpeed's default 1e9 (never the limit for one layer)",
    "max_live_parameters": "assumed DeepSpeed's default 1e9 (never the limit for one layer)",
    "stage3_max_reuse_distance": "assumed gathered parameters are released after each use",
    "max_reuse_distance": "assumed gathered parameters are released after each use",
    "sub_group_size": "assumed the optimizer steps all of a rank's partition at once (sub_group_size 1e9)",
    "contiguous_gradients": "trainmem assumes a contiguous gradient buffer (the default, true)",
    "overlap_comm": "assumed the reduce bucket is not doubled for overlap",
    "allgather_bucket_size": "assumed the all-gather bucket adds no peak memory",
    "zero_quantized_weights": "assumed 16-bit gathers",
    "zero_quantized_gradients": "assumed 16-bit gradients",
    "zero_hpz_partition_size": "assumed no secondary weight partition",
    "mics_shard_size": "assumed plain ZeRO sharding",
    "cpu_offload": "old spelling of offload_optimizer: assumed it",
}


def read_deepspeed(rec: Recorder) -> None:
    read_batch(rec)
    read_precision(rec)
    zero = rec.get("zero_optimization")
    if isinstance(zero, dict):
        read_zero(rec, zero)
    elif "zero_optimization" not in rec.data:
        rec.default("parallelism.strategy", "zero", "zero_optimization", DEEPSPEED_VERSION)
        rec.default("parallelism.zero_stage", 0, "zero_optimization.stage", DEEPSPEED_VERSION)
    optimizer = rec.get("optimizer")
    if isinstance(optimizer, dict):
        read_optimizer(rec, optimizer)
    for key, assumption in (
        (
            "activation_checkpointing",
            "DeepSpeed's own checkpointing (Megatron-DeepSpeed): the trainer's setting applies",
        ),
        ("tensor_parallel", "AutoTP: assumed no tensor parallelism (give --tp)"),
        (
            "fp8",
            "not a DeepSpeed 0.19 option (its config has no fp8 section and ignores it): fp8 training comes from the "
            "trainer's fp8 argument (Accelerate with Transformer Engine or torchao), not read here",
        ),
        ("pipeline", "assumed no pipeline parallelism"),
        ("sequence_parallel_size", "assumed no sequence parallelism"),
        ("data_types", "assumed gradients accumulate in the training dtype"),
        ("compile", "assumed eager-mode memory"),
        ("amp", "apex AMP: assumed DeepSpeed's fp16 recipe"),
    ):
        if rec.get(key) is not None:
            rec.unmodelled(key, assumption)
    rec.finish()


def read_batch(rec: Recorder) -> None:
    for key, setup_field in (
        ("train_micro_batch_size_per_gpu", "micro_batch_size"),
        ("gradient_accumulation_steps", "gradient_accumulation_steps"),
    ):
        value = rec.get(key)
        if value == "auto":
            rec.auto(key, setup_field)
        elif value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f'{rec.file}: {key}: must be a positive integer or "auto", got {value!r}')
            rec.set(key, setup_field, value)
    total = rec.get("train_batch_size")
    if total == "auto":
        rec.neutral("train_batch_size", "auto: micro-batch × accumulation × data-parallel ranks")
    elif total is not None:
        rec.facts["train_batch_size"] = total
        rec.modelled(
            "train_batch_size", "with the micro-batch and accumulation, gives the number of data-parallel ranks"
        )


def read_precision(rec: Recorder) -> None:
    flags = {}
    for name in ("bf16", "fp16"):
        section = rec.get(name)
        if isinstance(section, dict):
            flags[name] = section.get("enabled", False if name == "fp16" else None)
            if flags[name] not in (True, False, None, "auto") or isinstance(flags[name], (int, float)) and not isinstance(
                flags[name], bool
            ):
                raise InputError(f'{rec.file}: {name}.enabled: must be true, false or "auto", got {flags[name]!r:.60}')
    if not flags:
        return
    values = set(flags.values())
    keys = [f"{name}.enabled" for name in flags if f"{name}.enabled" in _flatten(rec.data)]
    if True in values:
        precision = "bf16-mixed" if flags.get("bf16") is True else "fp16-mixed"
        key = "bf16.enabled" if flags.get("bf16") is True else "fp16.enabled"
        rec.set(key, "precision", precision, "DeepSpeed keeps fp32 master weights")
        for other in keys:
            if other != key:
                rec.modelled(other, f"read together with {key}")
    elif "auto" in values:
        for key in keys:
            rec.auto(key, "precision")
        rec.mark(keys)
    else:
        key = keys[0] if keys else "bf16"
        rec.set(key, "precision", "fp32")
        for other in keys[1:]:
            rec.modelled(other, f"read together with {key}")
    fp16 = rec.get("fp16")
    if isinstance(fp16, dict) and fp16.get("auto_cast") is True:
        rec.unmodelled("fp16.auto_cast", "assumed DeepSpeed's fp16 weights without autocast")
    elif isinstance(fp16, dict) and "auto_cast" in fp16:
        rec.neutral("fp16.auto_cast", "off")
    for name in flags:
        rec.finish(name)


def read_zero(rec: Recorder, zero: dict[str, Any]) -> None:
    stage = zero.get("stage", 0)
    if stage not in (0, 1, 2, 3):
        raise InputError(f"{rec.file}: zero_optimization.stage: must be 0, 1, 2 or 3, got {stage!r}")
    rec.contributions.append(Contribution("parallelism.strategy", "zero", rec.file, "zero_optimization.stage"))
    if "stage" in zero:
        rec.set("zero_optimization.stage", "parallelism.zero_stage", stage)
    else:
        rec.default("parallelism.zero_stage", 0, "zero_optimization.stage", DEEPSPEED_VERSION)
    for section, setup_field in (
        ("offload_optimizer", "parallelism.offload_optimizer"),
        ("offload_param", "parallelism.offload_parameters"),
    ):
        value = zero.get(section)
        key = f"zero_optimization.{section}"
        if isinstance(value, dict):
            device = str(value.get("device", "none")).lower()
            if device in ("cpu", "nvme"):
                rec.set(
                    f"{key}.device", setup_field, True, "NVMe: off the GPU like CPU offload" if device == "nvme" else ""
                )
            else:
                rec.set(f"{key}.device", setup_field, False)
            rec.finish(key)
        elif value is not None:
            rec.unmodelled(key, "expected an object with a device")
    if zero.get("cpu_offload") is True:
        rec.set(
            "zero_optimization.cpu_offload", "parallelism.offload_optimizer", True, "old spelling of offload_optimizer"
        )
    for name in BUCKET_DEFAULTS:
        if name in zero:
            read_bucket(rec, name, zero[name])
    for name, assumption in NOT_MODELLED_ZERO.items():
        if name in zero and name != "cpu_offload":
            value = zero[name]
            if name == "contiguous_gradients" and value is True:
                rec.modelled(f"zero_optimization.{name}", assumption)
            elif name == "overlap_comm" and value is False:
                rec.neutral(f"zero_optimization.{name}", "off")
            else:
                rec.unmodelled(f"zero_optimization.{name}", assumption)
    rec.finish("zero_optimization")


def read_bucket(rec: Recorder, name: str, value: Any) -> None:
    key = f"zero_optimization.{name}"
    default = BUCKET_DEFAULTS[name]
    if value == "auto":
        rec.mark(key)
        rec.facts.setdefault("hidden_size_autos", []).append(key)
        rec.entries.append(_pending_auto(rec, key))
    elif name == "reduce_bucket_size" and isinstance(value, (int, float)) and not isinstance(value, bool):
        if value != int(value) or value < 1:
            raise InputError(f"{rec.file}: {key}: must be a positive whole number of elements, got {value!r}")
        rec.set(key, "parallelism.zero_reduce_bucket_size", int(value), "elements per reduce bucket")
    elif isinstance(value, (int, float)) and float(value) == default:
        rec.modelled(key, f"DeepSpeed's default {default:.0e}, which trainmem simulates")
    else:
        rec.unmodelled(key, f"trainmem simulates DeepSpeed's default {default:.0e} elements")


def read_optimizer(rec: Recorder, optimizer: dict[str, Any]) -> None:
    type_name = optimizer.get("type")
    params = optimizer.get("params") if isinstance(optimizer.get("params"), dict) else {}
    amsgrad = params.get("amsgrad") is True
    name = str(type_name)
    if name.lower() == "adam" and params.get("adam_w_mode", True) is True:
        name = "AdamW"  # DeepSpeed's FusedAdam defaults to adam_w_mode=True
    entry = deepspeed_optimizer(name, amsgrad)
    if entry is None:
        rec.unmodelled("optimizer.type", f"{type_name!r}: unknown DeepSpeed optimizer, assumed the trainer's")
    else:
        implementation = None if params.get("torch_adam") is True else entry.implementation  # torch.optim's own step
        value = {"name": entry.optimizer, "implementation": implementation}
        offloaded = _offloads_optimizer(rec)
        note = entry.note + ("; offloaded: DeepSpeedCPUAdam steps on the host" if offloaded else "")
        if entry.modelled:
            rec.set("optimizer.type", "optimizer", value, note)
        else:
            rec.unmodelled("optimizer.type", f"{note} (optimizer = {entry.optimizer})")
            rec.contributions.append(Contribution("optimizer", value, rec.file, "optimizer.type"))
        # transformers 5.24 integrations/deepspeed.py deepspeed_optim_sched: an "optimizer" section makes DeepSpeed
        # build the optimizer (DummyOptim); the trainer's optim is then never created
        rec.contributions[-1].wins = "DeepSpeed builds the optimizer its config names; the trainer's optim is unused"
    for flag in ("torch_adam", "adam_w_mode", "amsgrad"):
        if flag in params:
            rec.modelled(f"optimizer.params.{flag}", "decides the optimizer above")
    rec.finish("optimizer.params")
    rec.finish("optimizer")


def _offloads_optimizer(rec: Recorder) -> bool:
    zero = rec.get("zero_optimization") or {}
    section = zero.get("offload_optimizer") if isinstance(zero, dict) else None
    return isinstance(section, dict) and str(section.get("device", "none")).lower() in ("cpu", "nvme")


def _pending_auto(rec: Recorder, key: str):
    from .record import KeyEntry

    return KeyEntry(
        file=rec.file,
        key=key,
        value="auto",
        status="not modelled",
        detail="auto: filled from the model's hidden_size by the Hugging Face integration",
    )


def _flatten(data: Any, prefix: str = "") -> set[str]:
    keys: set[str] = set()
    if isinstance(data, dict):
        for name, value in data.items():
            key = f"{prefix}.{name}" if prefix else name
            keys.add(key)
            keys |= _flatten(value, key)
    return keys
