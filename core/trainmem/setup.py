"""The validated description of a training run: :class:`Setup`.

A Setup is what a user gives trainmem, as a Python object, a JSON file for the CLI, or the
form of the web page; ``trainmem schema`` prints its JSON Schema. Every field except
``model`` has the default a typical user would pick. Names follow the ecosystem: Hugging
Face config.json fields for architectures, DeepSpeed's zero stages and offload, FSDP's
sharding strategies, PEFT's LoraConfig, bitsandbytes' quantisation options, Megatron's
parallel sizes.
"""

from __future__ import annotations

import re
import typing
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (
    AfterValidator,
    ConfigDict,
    Discriminator,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Tag,
    field_validator,
    model_validator,
)

from . import limits
from ._base import FrozenModel
from .architecture import Architecture
from .catalogs import gpus, optimizers, presets
from .errors import FieldError, describe_value
from .files import read_json_file
from .cuda.settings import AllocConf, CublasWorkspaceConfig, CudaVersion
from .hf_config import architecture_from_hf_config
from .limits import Bound
from .training.config import Training
from .tasks import Task, apply_task, check_finetuning, check_sequence_length
from .vision.inputs import ImageInputs

# --------------------------------------------------------------------------- strict, bounded fields


class StrictModel(FrozenModel):
    """A Setup model that never coerces: ``"4"`` is not an integer and ``"false"`` is not a boolean.

    pydantic's lax mode would read ``{"micro_batch_size": "4"}`` as 4 and ``"yes"`` as true; a
    setup file or a URL that says so is more likely a mistake than an intent, so it is refused.
    Integers are accepted where floats go (JSON does not distinguish ``1`` from ``1.0``).
    """

    model_config = ConfigDict(strict=True)


def _bound_check(bound: Bound) -> AfterValidator:
    def check(value: Any) -> Any:
        if value > bound.maximum:
            raise ValueError(f"{describe_value(value)} is too large; {bound.describe()}")
        return value

    return AfterValidator(check)


def _schema_bound(bound: Bound) -> dict[str, Any]:
    return {"maximum": bound.maximum, "x-bound-reason": bound.reason}


def bounded_int(bound: Bound, minimum: int = 1) -> Any:
    """An integer from ``minimum`` to ``bound.maximum``, both stated in the schema."""
    return Annotated[int, Field(gt=minimum - 1, json_schema_extra=_schema_bound(bound)), _bound_check(bound)]


def bounded_float(bound: Bound, minimum: float = 0.0, exclusive: bool = True) -> Any:
    """A finite number above (or from) ``minimum``, at most ``bound.maximum``."""
    limit = Field(gt=minimum) if exclusive else Field(ge=minimum)
    return Annotated[
        float,
        limit,
        Field(allow_inf_nan=False, json_schema_extra=_schema_bound(bound)),
        _bound_check(bound),
    ]


MicroBatchSize = bounded_int(limits.MICRO_BATCH)
SequenceLength = bounded_int(limits.SEQUENCE)
AccumulationSteps = bounded_int(limits.ACCUMULATION)
LossChunks = bounded_int(limits.LOSS_CHUNKS)
LoRARank = bounded_int(limits.LORA_RANK)
ParameterCount = bounded_int(limits.NUM_PARAMETERS)
GPUCount = bounded_int(limits.NUM_GPUS)
ParallelSize = bounded_int(limits.PARALLEL_SIZE)
GPUsPerNode = bounded_int(limits.GPUS_PER_NODE)
GPUMemoryGiB = bounded_float(limits.GPU_MEMORY_GIB)
MemoryMiB = bounded_float(limits.MEMORY_MIB)
NonNegativeMemoryMiB = bounded_float(limits.MEMORY_MIB, exclusive=False)
HostRAMGiB = bounded_float(limits.HOST_RAM_GIB)
BucketElements = bounded_int(limits.BUCKET_ELEMENTS)
DataloaderWorkers = bounded_int(limits.DATALOADER_WORKERS, minimum=0)
FiniteFraction = Annotated[float, Field(allow_inf_nan=False)]


def _reject_bool_and_float(value: Any) -> Any:
    """Before a Literal of integers: pydantic accepts ``true`` for 1 and ``3.0`` for 3 even when strict."""
    if isinstance(value, (bool, float)):
        raise ValueError(f"expected an integer, got {describe_value(value)}")
    return value


def _allowed_types(annotation: Any) -> Optional[tuple[type, ...]]:
    """The Python types a JSON value may have for a field of ``annotation``; None: not checked here."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _allowed_types(typing.get_args(annotation)[0])
    if origin is Literal:
        return tuple({type(value) for value in typing.get_args(annotation)})
    if origin is Union:
        found: list[type] = []
        for argument in typing.get_args(annotation):
            allowed = type(None) if argument is type(None) else _allowed_types(argument)
            if allowed is None:
                return None
            found.extend(allowed if isinstance(allowed, tuple) else (allowed,))
        return tuple(found)
    if annotation is float:
        return (int, float)
    if annotation in (int, bool, str):
        return (annotation,)
    return None


_TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}


def strict_fields(model: type[FrozenModel], data: Any) -> None:
    """Refuse a value of the wrong JSON type for ``model``'s fields (a string for an integer, a
    number for a boolean) with a FieldError naming the field, instead of pydantic's coercion."""
    if not isinstance(data, dict):
        return
    for name, value in data.items():
        field = model.model_fields.get(name)
        allowed = _allowed_types(field.annotation) if field is not None else None
        if allowed is None:
            continue
        if isinstance(value, bool) and bool not in allowed:
            ok = False
        else:
            ok = isinstance(value, allowed)
        if not ok:
            names = " or ".join(dict.fromkeys(_TYPE_NAMES.get(kind, kind.__name__) for kind in allowed))
            raise FieldError(name, f"expected {names}, got {describe_value(value)}")


# --------------------------------------------------------------------------- model


class PresetModel(StrictModel):
    """A model from trainmem's catalog of published models (``trainmem presets``)."""

    preset: str = Field(description="Preset name, e.g. llama-3-8b.")

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, name: str) -> str:
        catalog = presets()
        key = name.strip().lower()
        if key not in catalog:
            raise ValueError(f"unknown preset {name!r}; allowed: {', '.join(catalog)}")
        return key

    def architecture(self) -> Architecture:
        preset = presets()[self.preset]
        found = _PRESET_ARCHITECTURES.get(self.preset)
        if found is None or found[0] is not preset:
            found = _PRESET_ARCHITECTURES[self.preset] = (preset, architecture_from_hf_config(preset.config))
        return found[1]


_PRESET_ARCHITECTURES: dict[str, tuple[Any, Architecture]] = {}
"""Preset name -> (the catalog's Preset, its Architecture): a setup reads its architecture several times
per estimate (validation, the plan, the checks), and a preset's is a pure function of its catalog entry
(a frozen Architecture, kept with the entry it was read from, so another catalog reads it anew)."""


class HFConfigModel(StrictModel):
    """A Hugging Face config.json, given as its JSON object or as the path of the file."""

    hf_config: Union[dict[str, Any], str] = Field(description="config.json contents, or a path to the file.")

    @field_validator("hf_config")
    @classmethod
    def _readable_config(cls, value: Union[dict[str, Any], str]) -> dict[str, Any]:
        if isinstance(value, str):
            value = _read_json_file(value)  # the file reader applies the same limits
        else:
            limits.check_free_form_json(value, "config.json")
        if not isinstance(value, dict):
            raise ValueError(f"a config.json must be a JSON object, got {describe_value(value)}")
        model_type = value.get("model_type")
        if model_type is not None and not isinstance(model_type, str):  # the key every reader dispatches on
            raise FieldError("model_type", f"expected a string, got {describe_value(model_type)}")
        _read_architecture(value)  # raises a ValueError that names what is wrong
        return value

    def architecture(self) -> Architecture:
        assert isinstance(self.hf_config, dict)
        return _read_architecture(self.hf_config)


def _read_architecture(config: Any) -> Architecture:
    """The config readers' Architecture; a reader that trips over a wrong-typed field (a list where
    a string goes) is reported as a ValueError too, never as a TypeError with a traceback."""
    try:
        architecture = architecture_from_hf_config(config)
        from .vision.readers import read_vision_stack

        read_vision_stack(config)  # a VLM's vision_config is read (and its errors named) with the model
        return architecture
    except ValueError:
        raise
    except (TypeError, KeyError, AttributeError, IndexError, OverflowError, ArithmeticError) as error:
        raise ValueError(
            f"config.json has a field of the wrong type or value ({type(error).__name__}: {error})"
        ) from None


class ArchitectureModel(StrictModel):
    """A custom architecture, field by field."""

    architecture: Architecture

    @field_validator("architecture", mode="before")
    @classmethod
    def _strict_architecture(cls, value: Any) -> Any:
        strict_fields(Architecture, value)
        return value

    def architecture_(self) -> Architecture:
        return self.architecture


class ParameterCountModel(StrictModel):
    """Only a parameter count: enough for model-state memory, not for activations."""

    num_parameters: ParameterCount = Field(description=limits.NUM_PARAMETERS.describe())


def _read_json_file(path: str) -> dict[str, Any]:
    return read_json_file(path, "config file")


_MODEL_KINDS = ("preset", "hf_config", "architecture", "num_parameters")


def _model_kind(value: Any) -> Optional[str]:
    if isinstance(value, str):
        return "preset"
    if isinstance(value, FrozenModel):
        for kind in _MODEL_KINDS:
            if kind in type(value).model_fields:
                return kind
    if isinstance(value, dict):
        present = [kind for kind in _MODEL_KINDS if kind in value]
        if len(present) == 1:
            return present[0]
    return None


ModelSpec = Annotated[
    Union[
        Annotated[PresetModel, Tag("preset")],
        Annotated[HFConfigModel, Tag("hf_config")],
        Annotated[ArchitectureModel, Tag("architecture")],
        Annotated[ParameterCountModel, Tag("num_parameters")],
    ],
    Discriminator(
        _model_kind,
        custom_error_type="model_kind",
        custom_error_message="give exactly one of: preset, hf_config, architecture, num_parameters",
    ),
]

# --------------------------------------------------------------------------- precision

Precision = Literal[
    "fp32",
    "amp-bf16",
    "amp-fp16",
    "bf16-mixed",
    "fp16-mixed",
    "bf16-master-weights",
    "fp16-master-weights",
    "bf16-master-weights-fp32-grads",
    "bf16-pure",
    "fp8-mixed",
]
PRECISION_HELP = {
    "fp32": "fp32 weights, gradients, optimizer states and activations.",
    "amp-bf16": "PyTorch autocast: fp32 weights and gradients, bf16 compute (the weights are cast per forward).",
    "amp-fp16": "PyTorch autocast with fp16 compute and a gradient scaler.",
    "bf16-mixed": "The framework's usual bf16 mixed precision: amp-bf16 for DDP, FSDP MixedPrecision for FSDP, "
    "bf16-master-weights for DeepSpeed ZeRO, bf16-master-weights-fp32-grads for Megatron (tensor/pipeline parallel).",
    "fp16-mixed": "As bf16-mixed, with fp16.",
    "bf16-master-weights": "bf16 weights and gradients, fp32 master weights in the optimizer (DeepSpeed bf16).",
    "fp16-master-weights": "fp16 weights and gradients, fp32 master weights (DeepSpeed fp16, ZeRO paper).",
    "bf16-master-weights-fp32-grads": "bf16 weights, fp32 gradient buffers and master weights (Megatron-LM).",
    "bf16-pure": "bf16 weights, gradients and optimizer states, no fp32 copy.",
    "fp8-mixed": "NVIDIA Transformer Engine: linear layers compute in fp8 and keep fp8 copies of their inputs and "
    "weights for backward; bf16 weights and gradients, fp32 master weights.",
}

# --------------------------------------------------------------------------- optimizer

OptimizerImplementation = Literal["foreach", "for-loop", "fused"]


class OptimizerConfig(StrictModel):
    """The optimizer and the implementation of its step()."""

    name: str = Field(default="adamw", description="Optimizer name (trainmem optimizers lists them).")
    implementation: Optional[OptimizerImplementation] = Field(
        default=None,
        description="foreach (CUDA default of torch.optim), for-loop (CPU default), fused. Default: by device.",
    )

    @field_validator("name")
    @classmethod
    def _known_optimizer(cls, name: str) -> str:
        key = name.strip().lower().replace("_", "-")
        if key not in optimizers():
            raise ValueError(f"unknown optimizer {name!r}; allowed: {', '.join(optimizers())}")
        return key


# --------------------------------------------------------------------------- parallelism

FSDPShardingStrategy = Literal["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"]


class Parallelism(StrictModel):
    """How the run spreads over GPUs: data parallel (DDP, DeepSpeed ZeRO, FSDP) and model parallel sizes."""

    num_gpus: GPUCount = Field(
        default=1,
        description="GPUs in the run; data parallel size = num_gpus / (tp·pp·cp). " + limits.NUM_GPUS.describe(),
    )
    strategy: Literal["ddp", "zero", "fsdp", "megatron"] = Field(
        default="ddp",
        description="Data parallelism: PyTorch DDP, DeepSpeed ZeRO, PyTorch FSDP, or Megatron-Core's DDP with its "
        "distributed optimizer (use_distributed_optimizer).",
    )
    use_distributed_optimizer: bool = Field(
        default=True,
        description="Megatron-Core (strategy 'megatron'): shard the fp32 master weights and optimizer states over the "
        "data-parallel ranks (6 + 12/d bytes per parameter with bf16 and Adam); False keeps them whole (18).",
    )
    zero_stage: Literal[0, 1, 2, 3] = Field(
        default=0,
        description="DeepSpeed zero_optimization.stage: 1 shards optimizer states, 2 also gradients, 3 also weights.",
    )
    fsdp_sharding_strategy: FSDPShardingStrategy = "FULL_SHARD"
    gpus_per_node: GPUsPerNode = Field(
        default=8, description="Shard group size of HYBRID_SHARD; " + limits.GPUS_PER_NODE.describe()
    )
    offload_optimizer: bool = Field(default=False, description="Optimizer states (and master weights) in CPU memory.")
    offload_parameters: bool = Field(default=False, description="Weights in CPU memory (ZeRO-3 / FSDP only).")
    tensor_parallel_size: ParallelSize = Field(default=1, description=limits.PARALLEL_SIZE.describe())
    pipeline_parallel_size: ParallelSize = Field(default=1, description=limits.PARALLEL_SIZE.describe())
    pipeline_virtual_stages: ParallelSize = Field(
        default=1,
        description="Megatron virtual_pipeline_model_parallel_size: model chunks per pipeline rank (interleaved 1F1B); "
        "1: the plain 1F1B schedule.",
    )
    pipeline_schedule: Optional[Literal["gpipe", "1f1b", "interleaved_1f1b"]] = Field(
        default=None,
        description="torch.distributed.pipelining schedule (ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B with "
        "pipeline_virtual_stages stages per rank): PipelineStage's per-micro-batch receive buffers and the last "
        "stage's kept outputs are counted; None: Megatron-Core's 1F1B (interleaved with virtual stages).",
    )
    sequence_parallel: bool = Field(default=False, description="Megatron sequence parallelism (needs tensor parallel).")
    context_parallel_size: ParallelSize = Field(default=1, description=limits.PARALLEL_SIZE.describe())
    expert_parallel_size: ParallelSize = Field(default=1, description=limits.PARALLEL_SIZE.describe())
    expert_tensor_parallel_size: Optional[ParallelSize] = Field(
        default=None,
        description="Megatron-Core expert_tensor_parallel_size (ETP): the tensor-parallel degree of the routed "
        "experts, whose weights, gradients and states are divided by EP × ETP; default: tensor_parallel_size.",
    )
    bucket_size_mib: MemoryMiB = Field(
        default=25.0,
        description="DDP bucket_cap_mb / DeepSpeed reduce_bucket_size (converted to MiB); "
        + limits.MEMORY_MIB.describe(),
    )
    zero_reduce_bucket_size: BucketElements = Field(
        default=500_000_000,
        description="DeepSpeed zero_optimization.reduce_bucket_size, in elements (5e8 by default). DeepSpeed 0.19 "
        "allocates the bucket at this size whatever the model's size.",
    )
    zero3_max_live_parameters: BucketElements = Field(
        default=1_000_000_000,
        description="DeepSpeed stage3_max_live_parameters (1e9): a model at most this large stays gathered from "
        "forward to backward under ZeRO-3.",
    )
    zero_overlap_comm: Optional[bool] = Field(
        default=None,
        description="DeepSpeed zero_optimization.overlap_comm (a second reduce bucket); None: DeepSpeed's default "
        "(True for stage 3, False otherwise).",
    )
    fsdp_version: Literal[1, 2] = Field(
        default=2, description="FSDP1 (FullyShardedDataParallel, flat parameters) or FSDP2 (fully_shard, DTensor shards)."
    )
    fsdp_reshard_after_forward: bool = Field(
        default=True,
        description="FSDP2 fully_shard(reshard_after_forward=...): free each unit's unsharded weights after its forward "
        "(True) or keep them until its backward (False, ZeRO-2-like).",
    )
    fsdp_reduce_dtype: Optional[Literal["fp32", "bf16", "fp16"]] = Field(
        default=None,
        description="FSDP MixedPrecisionPolicy(reduce_dtype=...): the dtype gradients are reduce-scattered in; "
        "None: the param dtype.",
    )
    offload_device: Literal["cpu", "nvme"] = Field(
        default="cpu",
        description="Where offloaded states go: CPU memory, or NVMe (DeepSpeed ZeRO-Infinity, offload_*.device='nvme').",
    )
    model_load: Literal["every_rank", "rank0", "sharded"] = Field(
        default="every_rank",
        description="How the weights are loaded into host RAM: every rank loads the full state dict, rank 0 only "
        "(FSDP sync_module_states / cpu_ram_efficient_loading), or each rank its shard (deepspeed.zero.Init, meta device).",
    )
    host_ram_gib_per_node: Optional[HostRAMGiB] = Field(
        default=None,
        description="Host RAM of one node, for a host-RAM fit verdict (None: no verdict); " + limits.HOST_RAM_GIB.describe() + "."
    )
    tensor_parallel_flavor: Literal["megatron", "dtensor"] = Field(
        default="megatron",
        description="megatron: Megatron-Core TP (vocabulary-parallel embedding and loss); dtensor: PyTorch "
        "parallelize_module with colwise/rowwise plans (torchtitan, transformers tp_plan).",
    )

    _integer_stage = field_validator("zero_stage", mode="before")(_reject_bool_and_float)

    @model_validator(mode="before")
    @classmethod
    def _infer_strategy(cls, data: Any) -> Any:
        if isinstance(data, dict) and "strategy" not in data and data.get("zero_stage"):
            data = {**data, "strategy": "zero"}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Parallelism:
        model_parallel = self.tensor_parallel_size * self.pipeline_parallel_size * self.context_parallel_size
        if self.num_gpus % model_parallel:
            raise FieldError(
                "num_gpus",
                f"num_gpus ({self.num_gpus}) must be a multiple of tensor_parallel_size × pipeline_parallel_size × "
                f"context_parallel_size ({model_parallel})",
            )
        if self.zero_stage and self.strategy != "zero":
            raise FieldError(
                "zero_stage", f"zero_stage {self.zero_stage} needs strategy 'zero' (got {self.strategy!r})"
            )
        if self.offload_parameters and not (
            (self.strategy == "zero" and self.zero_stage == 3) or self.strategy == "fsdp"
        ):
            raise FieldError(
                "offload_parameters", "offload_parameters needs strategy 'zero' with zero_stage 3, or strategy 'fsdp'"
            )
        if self.offload_optimizer and self.strategy in ("ddp", "megatron"):
            raise FieldError("offload_optimizer", "offload_optimizer needs strategy 'zero' or 'fsdp'")
        if self.pipeline_virtual_stages > 1 and self.pipeline_parallel_size == 1:
            raise FieldError("pipeline_virtual_stages", "pipeline_virtual_stages > 1 needs pipeline_parallel_size > 1")
        from .parallel.pipelining import check_schedule

        check_schedule(self)
        if self.offload_device == "nvme" and not (self.offload_optimizer or self.offload_parameters):
            raise FieldError("offload_device", "offload_device 'nvme' needs offload_optimizer or offload_parameters")
        if self.offload_device == "nvme" and self.strategy != "zero":
            raise FieldError("offload_device", "offload_device 'nvme' is DeepSpeed ZeRO-Infinity: needs strategy 'zero'")
        if self.sequence_parallel and self.tensor_parallel_size == 1:
            raise FieldError("sequence_parallel", "sequence_parallel needs tensor_parallel_size > 1")
        data_parallel = self.num_gpus // model_parallel
        expert_model_parallel = self.expert_tensor_parallel * self.expert_parallel_size * self.pipeline_parallel_size
        if self.expert_tensor_parallel_size is not None and self.num_gpus % expert_model_parallel:
            # megatron/core/parallel_state.py initialize_model_parallel: the expert grid is ETP × EP × DP × PP
            raise FieldError(
                "expert_tensor_parallel_size",
                f"expert_tensor_parallel_size ({self.expert_tensor_parallel}) × expert_parallel_size "
                f"({self.expert_parallel_size}) × pipeline_parallel_size ({self.pipeline_parallel_size}) must divide "
                f"num_gpus ({self.num_gpus})",
            )
        if self.expert_parallel_size > data_parallel * self.context_parallel_size:
            raise FieldError(
                "expert_parallel_size",
                f"expert_parallel_size ({self.expert_parallel_size}) cannot exceed the data × context parallel size "
                f"({data_parallel * self.context_parallel_size})",
            )
        return self

    @property
    def expert_tensor_parallel(self) -> int:
        """ETP as Megatron-Core resolves it: expert_tensor_parallel_size, or tensor_parallel_size when unset."""
        return self.expert_tensor_parallel_size or self.tensor_parallel_size

    @property
    def data_parallel_size(self) -> int:
        return self.num_gpus // (self.tensor_parallel_size * self.pipeline_parallel_size * self.context_parallel_size)


# --------------------------------------------------------------------------- fine-tuning

LINEAR_TARGET_ALL = "all-linear"


class LoRAConfig(StrictModel):
    """PEFT LoraConfig fields that change memory."""

    r: LoRARank = Field(default=16, description="LoRA rank; " + limits.LORA_RANK.describe())
    target_modules: Optional[Union[list[str], Literal["all-linear"]]] = Field(
        default=None,
        description="Module names (matched by suffix, as PEFT does) or 'all-linear'. "
        "Default: PEFT's default for the model type (q_proj and v_proj for Llama-style models; PEFT has none "
        "for some families, which then need target_modules).",
    )
    lora_dropout: FiniteFraction = Field(default=0.0, ge=0.0, lt=1.0, description="Dropout on each adapter's input.")
    modules_to_save: list[str] = Field(
        default_factory=list,
        description="PEFT modules_to_save: modules (matched as PEFT does, by the end of their path, e.g. lm_head, "
        "embed_tokens) trained as full copies next to their frozen originals.",
    )
    use_dora: bool = Field(
        default=False, description="PEFT use_dora: DoRA's magnitude vector per adapted linear and its weight norm."
    )

    @field_validator("modules_to_save")
    @classmethod
    def _module_names(cls, value: list[str]) -> list[str]:
        _check_module_names(value, "modules_to_save")
        return value

    @field_validator("target_modules")
    @classmethod
    def _non_empty(cls, value: Optional[Union[list[str], str]]) -> Optional[Union[list[str], str]]:
        if isinstance(value, list) and not value:
            raise ValueError("target_modules must name at least one module, or be 'all-linear'")
        if isinstance(value, list):
            _check_module_names(value, "target_modules")
        return value


class QuantizationConfig(StrictModel):
    """bitsandbytes BitsAndBytesConfig for the frozen base of QLoRA."""

    bits: Literal[4, 8] = 4

    _integer_bits = field_validator("bits", mode="before")(_reject_bool_and_float)
    quant_type: Literal["nf4", "fp4"] = Field(default="nf4", description="bnb_4bit_quant_type.")
    double_quant: bool = Field(default=True, description="bnb_4bit_use_double_quant.")
    compute_dtype: Literal["bf16", "fp16", "fp32"] = Field(default="bf16", description="bnb_4bit_compute_dtype.")


FREEZABLE_GROUPS = ("embeddings", "attention", "mlp", "norms", "lm_head")


class Finetuning(StrictModel):
    """Which parameters train: all of them, some of them, or low-rank adapters on a frozen base."""

    method: Literal["full", "lora", "qlora"] = "full"
    lora: LoRAConfig = Field(default_factory=LoRAConfig)
    quantization: QuantizationConfig = Field(default_factory=QuantizationConfig)
    frozen: list[str] = Field(
        default_factory=list,
        description="For full fine-tuning: groups to freeze (embeddings, attention, mlp, norms, lm_head) "
        "and/or layer ranges such as 'layers:0-15'.",
    )
    vision_tower: Optional[Literal["frozen", "trained"]] = Field(
        default=None,
        description="Vision-language models: whether the vision tower trains (default: trained under full "
        "fine-tuning, frozen under LoRA/QLoRA).",
    )
    projector: Optional[Literal["frozen", "trained"]] = Field(
        default=None,
        description="Vision-language models: whether the projector/merger trains (default: as the vision tower "
        "under full fine-tuning, frozen under LoRA/QLoRA; 'trained' is PEFT's modules_to_save).",
    )

    @field_validator("frozen")
    @classmethod
    def _known_groups(cls, names: list[str]) -> list[str]:
        _check_module_names(names, "frozen")
        for name in names:
            if name in FREEZABLE_GROUPS:
                continue
            if name.startswith("layers:"):
                _parse_layer_range(name)
                continue
            raise ValueError(f"cannot freeze {name!r}; allowed: {', '.join(FREEZABLE_GROUPS)}, or 'layers:A-B'")
        return names


_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*|layers:[0-9]+(-[0-9]+)?")
"""A module name as PEFT matches it (``q_proj``, ``self_attn.o_proj``), or a frozen layer range."""


def _check_module_names(names: list[str], field: str) -> None:
    if len(names) > limits.LIST_ITEMS:
        raise ValueError(f"{field} lists {len(names):,} entries; at most {limits.LIST_ITEMS} allowed")
    for name in names:
        if len(name) > limits.MODULE_NAME_CHARS or not _MODULE_NAME.fullmatch(name):
            raise ValueError(
                f"{describe_value(name)} is not a module name (letters, digits, '_' and '.', "
                f"at most {limits.MODULE_NAME_CHARS} characters)"
            )


_LAYER_RANGE = re.compile(r"layers:([0-9]{1,6})(?:-([0-9]{1,6}))?")


def _parse_layer_range(text: str) -> range:
    found = _LAYER_RANGE.fullmatch(text)
    if found is None:
        raise ValueError(f"layer range {describe_value(text)} must look like 'layers:0-15'")
    start, stop = int(found.group(1)), int(found.group(2) or found.group(1))
    if start < 0 or stop < start:
        raise ValueError(f"layer range {text!r} must go from a lower to a higher layer index")
    return range(start, stop + 1)


# --------------------------------------------------------------------------- hardware


class CustomGPU(StrictModel):
    """A GPU not in the catalog, by its memory."""

    name: str = Field(
        default="custom", description=f"Shown in the report: printable, at most {limits.NAME_CHARS} characters."
    )
    memory_gib: GPUMemoryGiB = Field(description=limits.GPU_MEMORY_GIB.describe())

    @field_validator("name")
    @classmethod
    def _printable_name(cls, name: str) -> str:
        return limits.check_name(name, "name")


def _check_gpu_name(name: str) -> str:
    key = name.strip().lower()
    if key not in gpus():
        raise ValueError(f'unknown gpu {name!r}; allowed: {", ".join(gpus())}, or {{"memory_gib": N}}')
    return key


GPUChoice = Union[Annotated[str, Field(description="A GPU of the catalog (trainmem gpus).")], CustomGPU]


class Runtime(StrictModel):
    """Details of the software stack that change memory, for replaying a measured run faithfully."""

    device: Literal["cuda", "cpu"] = Field(
        default="cuda", description="cuda for GPU runs; cpu replays a CPU measurement (no CUDA context, CPU autocast)."
    )
    cuda_context_mib: Optional[NonNegativeMemoryMiB] = Field(
        default=None,
        description="Memory the CUDA context takes outside PyTorch's allocator. Default: by GPU architecture "
        "(data/cuda_overheads.json). " + limits.MEMORY_MIB.describe(),
    )
    cuda_alloc_conf: AllocConf = Field(
        default="",
        description="PYTORCH_CUDA_ALLOC_CONF, e.g. expandable_segments:True or max_split_size_mb:512 (also "
        "roundup_power2_divisions, garbage_collection_threshold, max_non_split_rounding_mb).",
    )
    cuda_memory_fraction: Optional[float] = Field(
        default=None,
        gt=0,
        le=1,
        description="torch.cuda.set_per_process_memory_fraction: caps the allocator and lets "
        "garbage_collection_threshold act.",
    )
    cuda_module_loading: Literal["lazy", "eager"] = Field(
        default="lazy",
        description="CUDA_MODULE_LOADING: lazy (PyTorch's default since 1.13) loads kernels on first use.",
    )
    cuda_version: Optional[CudaVersion] = Field(
        default=None, description="CUDA runtime version, e.g. 12.8; before 11.7 kernels always load eagerly."
    )
    cublas_workspace_config: CublasWorkspaceConfig = Field(
        default="",
        description="CUBLAS_WORKSPACE_CONFIG, e.g. :4096:8; default: PyTorch's choice for the GPU architecture.",
    )
    torch_compile: bool = Field(default=False, description="torch.compile: Triton kernels and autotuning buffers.")
    cuda_graphs: bool = Field(
        default=False, description="CUDA graphs (mode='reduce-overhead'): a private pool keeps the captured memory."
    )
    nccl_communicator_mib: Optional[NonNegativeMemoryMiB] = Field(
        default=None,
        description="NCCL buffer memory per communicator (one per process group larger than 1); default 656 MiB "
        "(NVIDIA/nccl#964's A100 figure), an assumption.",
    )
    host_process_mib: NonNegativeMemoryMiB = Field(
        default=2048.0,
        description="Host RAM of one training process before any model state (interpreter, torch, CUDA host state); "
        "an assumption, not measured.",
    )
    dataloader_workers: DataloaderWorkers = Field(
        default=0, description="DataLoader num_workers per rank; " + limits.DATALOADER_WORKERS.describe() + "."
    )
    dataloader_worker_mib: NonNegativeMemoryMiB = Field(
        default=1024.0, description="Host RAM of one dataloader worker process (an assumption: set what you observe)."
    )


# --------------------------------------------------------------------------- divisibility


def _divides(part: int, whole: int) -> bool:
    return whole % part == 0


def check_divisibility(architecture: Architecture, setup: Setup) -> None:
    """Every size a parallel degree splits must split evenly, as Megatron-LM asserts at start-up
    (megatron/training/arguments.py, validate_args; megatron/core/transformer/transformer_config.py):
    heads and query groups by TP, the MLP width (of each expert and of the shared expert) by TP,
    experts by EP, the vocabulary by TP (Megatron pads it first: --make-vocab-size-divisible-by),
    layers by PP, the sequence by CP, and each CP chunk by TP under sequence parallelism.
    Raises a FieldError that names both fields."""
    parallel = setup.parallelism
    tp, pp, cp, ep = (
        parallel.tensor_parallel_size,
        parallel.pipeline_parallel_size,
        parallel.context_parallel_size,
        parallel.expert_parallel_size,
    )
    tp_field = "parallelism.tensor_parallel_size"

    def need(ok: bool, field: str, message: str) -> None:
        if not ok:
            raise FieldError(field, message)

    need(
        _divides(tp, architecture.num_attention_heads),
        tp_field,
        f"{tp_field} ({tp}) must divide num_attention_heads ({architecture.num_attention_heads})",
    )
    kv_heads = architecture.kv_heads
    need(
        _divides(tp, kv_heads) or _divides(kv_heads, tp),
        tp_field,
        f"{tp_field} ({tp}) must divide num_key_value_heads ({kv_heads}), or be a multiple of it "
        "(each key/value head then replicated on several ranks)",
    )
    etp = parallel.expert_tensor_parallel
    etp_field = "parallelism.expert_tensor_parallel_size" if parallel.expert_tensor_parallel_size else tp_field
    need(
        _divides(etp if architecture.is_moe else tp, architecture.intermediate_size),
        etp_field if architecture.is_moe else tp_field,
        f"{etp_field if architecture.is_moe else tp_field} ({etp if architecture.is_moe else tp}) must divide "
        f"intermediate_size ({architecture.intermediate_size})"
        + (" (the width of each expert)" if architecture.is_moe else ""),
    )
    if architecture.shared_expert_intermediate_size:
        need(
            _divides(tp, architecture.shared_expert_intermediate_size),
            tp_field,
            f"{tp_field} ({tp}) must divide shared_expert_intermediate_size "
            f"({architecture.shared_expert_intermediate_size})",
        )
    need(
        _divides(tp, architecture.vocab_size),
        tp_field,
        f"{tp_field} ({tp}) must divide vocab_size ({architecture.vocab_size}): the vocabulary is sharded; "
        "Megatron pads it to a multiple of 128 × TP (--make-vocab-size-divisible-by), give the padded size",
    )
    if architecture.linear_attention_layers:  # the layers' traces refuse a split mixer too (mamba2_mixer, qwen3_next)
        mixer = "Mamba-2" if architecture.mamba is not None else "Gated DeltaNet"
        if architecture.short_conv:
            mixer = "short-convolution"
        need(tp == 1, tp_field, f"tensor parallelism of {architecture.model_type}'s {mixer} layers is not modelled yet; use 1")
        need(
            not parallel.sequence_parallel,
            "parallelism.sequence_parallel",
            f"is not modelled for {architecture.model_type}'s {mixer} layers yet",
        )
    from .parallel.pipelining import check_layers, check_micro_batches

    check_layers(architecture.num_hidden_layers, parallel)
    check_micro_batches(setup.gradient_accumulation_steps, parallel)
    need(
        _divides(pp, architecture.num_hidden_layers),
        "parallelism.pipeline_parallel_size",
        f"parallelism.pipeline_parallel_size ({pp}) must divide num_hidden_layers ({architecture.num_hidden_layers})",
    )
    need(
        ep == 1 or (architecture.is_moe and _divides(ep, architecture.num_experts)),
        "parallelism.expert_parallel_size",
        f"parallelism.expert_parallel_size ({ep}) needs a MoE model whose num_experts it divides"
        + (f" (num_experts is {architecture.num_experts})" if architecture.is_moe else " (this model has no experts)"),
    )
    need(
        _divides(cp, setup.sequence_length),
        "sequence_length",
        f"sequence_length ({setup.sequence_length}) must be a multiple of parallelism.context_parallel_size ({cp})",
    )
    if parallel.sequence_parallel:
        chunk = setup.sequence_length // cp
        need(
            _divides(tp, chunk),
            "sequence_length",
            f"sequence_length ({setup.sequence_length}) / parallelism.context_parallel_size ({cp}) must be a multiple "
            f"of {tp_field} ({tp}) under sequence parallelism",
        )


# --------------------------------------------------------------------------- setup


class Setup(StrictModel):
    """Everything that decides the memory of one training step."""

    model: ModelSpec
    micro_batch_size: MicroBatchSize = Field(
        default=1, description="Sequences per GPU per forward pass; " + limits.MICRO_BATCH.describe()
    )
    sequence_length: SequenceLength = Field(
        default=2048, description="Tokens per sequence; " + limits.SEQUENCE.describe()
    )
    target_length: Optional[SequenceLength] = Field(
        default=None,
        description="Encoder-decoders (T5, mT5, flan-T5, BART): the decoder's tokens per sample (the labels); "
        "sequence_length is then the source (encoder) length. Default: sequence_length. Refused for "
        "decoder-only models and encoders.",
    )
    gradient_accumulation_steps: AccumulationSteps = Field(default=1, description=limits.ACCUMULATION.describe())
    precision: Precision = "bf16-mixed"
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    activation_checkpointing: Literal["none", "selective", "full"] = "none"
    attention: Literal["sdpa", "flash_attention_2", "eager", "sdpa-math"] = Field(
        default="sdpa",
        description="sdpa/flash_attention_2: fused kernels, no s×s scores; eager and sdpa-math (SDPA's fallback, "
        "e.g. on CPU with attention dropout) materialise the scores.",
    )
    batch: Literal["padded", "padded_masked", "packed"] = Field(
        default="padded",
        description="padded: micro_batch_size rows of sequence_length tokens, no attention_mask (causal only); "
        "padded_masked: the same rows passed with an attention_mask holding padding zeros, as a padding collator "
        "gives them (a 4-D mask instead of is_causal, trainmem.padding_mask); packed: "
        "sequence packing / padding-free, one row of micro_batch_size × sequence_length tokens whose position_ids "
        "restart at each of packed_sequences sequences (trainmem.packing).",
    )
    packed_sequences: SequenceLength = Field(
        default=2,
        description="batch 'packed': sequences in the row; more than one makes SDPA and eager attention use a "
        "block-diagonal mask over the whole row (1: one sequence, no mask).",
    )
    loss: Literal["standard", "chunked", "liger"] = Field(
        default="standard",
        description="standard: cross-entropy over the full fp32 logits; chunked: logits computed in loss_chunks "
        "chunks (torchtune CEWithChunkedOutputLoss); liger: Liger-Kernel's fused linear cross-entropy "
        "(use_liger_kernel), chunked by its own rule from the vocabulary and hidden sizes.",
    )
    loss_chunks: LossChunks = Field(
        default=8, description="Chunks of the chunked loss (torchtune default 8); " + limits.LOSS_CHUNKS.describe()
    )
    parallelism: Parallelism = Field(default_factory=Parallelism)
    finetuning: Finetuning = Field(default_factory=Finetuning)
    gpu: GPUChoice = "a100-80gb"
    headroom_fraction: FiniteFraction = Field(
        default=0.10, ge=0.0, lt=0.5, description="Memory to keep free for spikes and fragmentation (10–15% is usual)."
    )
    runtime: Runtime = Field(default_factory=Runtime)
    training: Training = Field(
        default_factory=Training,
        description="The trainer (TRL 1.16 vocabulary): sft (default), dpo, kto, orpo, cpo, simpo, reward, gkd, grpo.",
    )
    task: Task = Field(
        default_factory=Task,
        description="The head trained on top: causal_lm for decoders; sequence_classification, "
        "token_classification, masked_lm or embedding (contrastive, in-batch negatives) for encoders.",
    )

    images: Optional[ImageInputs] = Field(
        default=None,
        description="Vision-language models: images (and Qwen-VL videos) per sample and their size in pixels; "
        "their tokens are added to sequence_length (the text tokens).",
    )

    @field_validator("model", mode="before")
    @classmethod
    def _preset_shorthand(cls, value: Any) -> Any:
        return {"preset": value} if isinstance(value, str) else value

    @field_validator("optimizer", mode="before")
    @classmethod
    def _optimizer_shorthand(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: GPUChoice) -> GPUChoice:
        return _check_gpu_name(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _consistent(self) -> Setup:
        architecture = self.architecture()
        if architecture is not None and architecture.image_size:  # a vision encoder: the image sets the sequence
            from .vision.encoder_checks import image_sequence_length

            object.__setattr__(self, "sequence_length", image_sequence_length(self, architecture))
        parallel = self.parallelism
        tokens = self.micro_batch_size * self.sequence_length
        if tokens > limits.TOKENS_PER_MICRO_BATCH.maximum:
            raise FieldError(
                "micro_batch_size",
                f"micro_batch_size × sequence_length = {tokens:,} tokens is too large; "
                f"{limits.TOKENS_PER_MICRO_BATCH.describe()}",
            )
        if architecture is not None:
            limits.check_architecture(architecture, self._architecture_field())
            check_divisibility(architecture, self)
            for name in self.finetuning.frozen:
                if name.startswith("layers:") and _parse_layer_range(name).stop > architecture.num_hidden_layers:
                    raise FieldError(
                        "finetuning.frozen",
                        f"finetuning.frozen {name!r} goes past the model's {architecture.num_hidden_layers} layers",
                    )
            check_finetuning(architecture, self.finetuning.method)
            check_sequence_length(architecture, self.sequence_length)
            self._check_lora_targets(architecture)
            from .models import family_for

            from .precision import resolve_precision

            precision = resolve_precision(self)
            compute_dtype = precision.autocast or precision.compute_weight_dtype
            problem = family_for(architecture).unsupported_attention(self.attention, self.runtime.device, compute_dtype)
            if problem:
                raise FieldError("attention", problem)
        elif self.finetuning.method != "full" or self.finetuning.frozen:
            raise FieldError(
                "finetuning",
                "LoRA, QLoRA and frozen groups need an architecture: give a preset, hf_config or architecture",
            )
        from .packing import check_packing

        check_packing(self)

        from .training.checks import check_training

        check_training(self, architecture)

        from .vision.checks import check_vision_setup

        check_vision_setup(self)
        from .encoder_decoder.checks import check_encoder_decoder_setup

        check_encoder_decoder_setup(self, architecture)
        from .parallel.dtensor_tp import check_optimizer_over_mixed_tensors

        check_optimizer_over_mixed_tensors(self)
        if self.pipeline_and_accumulation_mismatch():
            raise FieldError(
                "gradient_accumulation_steps",
                "with pipeline parallelism, gradient_accumulation_steps is the number of micro-batches per step and "
                f"must be at least pipeline_parallel_size ({parallel.pipeline_parallel_size})",
            )
        return self

    def _architecture_field(self) -> str:
        """Where the architecture's fields were given, for messages."""
        kind = _model_kind(self.model) or "model"
        return "model" if kind == "preset" else f"model.{kind}"

    def _check_lora_targets(self, architecture: Architecture) -> None:
        """PEFT refuses a LoraConfig whose target_modules match nothing, or that has no default targets."""
        if self.finetuning.method == "full":
            return
        from .inventory import build_inventory
        from .lora_targets import resolve_lora_targets
        from .models import family_for

        from .dora import check_dora
        from .modules_to_save import check_no_adapter_overlap, check_quantized_base, saved_tensor_names

        from .tasks import check_lora_targets

        check_lora_targets(architecture, self.finetuning.lora.target_modules)
        inventory = build_inventory(architecture)
        targets = resolve_lora_targets(self.finetuning.lora, family_for(architecture), inventory)
        problem = family_for(architecture).unsupported_lora_targets(targets)
        if problem:
            raise FieldError("finetuning.lora.target_modules", problem)
        check_dora(self, targets)
        from .tasks import peft_task_modules_to_save

        saved = saved_tensor_names(
            self.finetuning.lora.modules_to_save, inventory, implicit=peft_task_modules_to_save(architecture)
        )
        check_no_adapter_overlap(saved, targets.modules)
        check_quantized_base(saved, inventory, self.finetuning.method)
        from .tasks import check_head_not_adapted

        check_head_not_adapted(architecture, self.finetuning.lora.target_modules, list(inventory.head), saved)

    def pipeline_and_accumulation_mismatch(self) -> bool:
        return 1 < self.parallelism.pipeline_parallel_size > self.gradient_accumulation_steps

    def vision_stack(self):
        """The vision tower and projector of a vision-language model's config (None for a text model)."""
        from .vision.readers import read_vision_stack

        model = self.model
        if isinstance(model, PresetModel):
            return read_vision_stack(presets()[model.preset].config, "model")
        if isinstance(model, HFConfigModel):
            return read_vision_stack(model.hf_config, "model.hf_config")
        return None

    def architecture(self) -> Optional[Architecture]:
        """The model's architecture, or None when only a parameter count was given."""
        model = self.model
        if isinstance(model, PresetModel):
            architecture = model.architecture()
        elif isinstance(model, HFConfigModel):
            architecture = model.architecture()
        elif isinstance(model, ArchitectureModel):
            architecture = model.architecture
        else:
            if self.task.kind not in (None, "causal_lm"):
                raise FieldError("task.kind", f"a {self.task.kind} head needs an architecture: give a preset or hf_config")
            return None
        return apply_task(architecture, self.task)
