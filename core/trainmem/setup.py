"""The validated description of a training run: :class:`Setup`.

A Setup is what a user gives trainmem, as a Python object, a JSON file for the CLI, or the
form of the web page; ``trainmem schema`` prints its JSON Schema. Every field except
``model`` has the default a typical user would pick. Names follow the ecosystem: Hugging
Face config.json fields for architectures, DeepSpeed's zero stages and offload, FSDP's
sharding strategies, PEFT's LoraConfig, bitsandbytes' quantisation options, Megatron's
parallel sizes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (
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

from ._base import FrozenModel
from .architecture import Architecture
from .catalogs import gpus, optimizers, presets
from .errors import FieldError
from .files import read_json_file
from .cuda.settings import AllocConf, CublasWorkspaceConfig, CudaVersion
from .hf_config import architecture_from_hf_config

# --------------------------------------------------------------------------- model


class PresetModel(FrozenModel):
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
        return architecture_from_hf_config(presets()[self.preset].config)


class HFConfigModel(FrozenModel):
    """A Hugging Face config.json, given as its JSON object or as the path of the file."""

    hf_config: Union[dict[str, Any], str] = Field(description="config.json contents, or a path to the file.")

    @field_validator("hf_config")
    @classmethod
    def _readable_config(cls, value: Union[dict[str, Any], str]) -> dict[str, Any]:
        if isinstance(value, str):
            value = _read_json_file(value)
        architecture_from_hf_config(value)  # raises a ValueError that names what is wrong
        return value

    def architecture(self) -> Architecture:
        assert isinstance(self.hf_config, dict)
        return architecture_from_hf_config(self.hf_config)


class ArchitectureModel(FrozenModel):
    """A custom architecture, field by field."""

    architecture: Architecture

    def architecture_(self) -> Architecture:
        return self.architecture


class ParameterCountModel(FrozenModel):
    """Only a parameter count: enough for model-state memory, not for activations."""

    num_parameters: PositiveInt


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


class OptimizerConfig(FrozenModel):
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


class Parallelism(FrozenModel):
    """How the run spreads over GPUs: data parallel (DDP, DeepSpeed ZeRO, FSDP) and model parallel sizes."""

    num_gpus: PositiveInt = Field(default=1, description="GPUs in the run; data parallel size = num_gpus / (tp·pp·cp).")
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
    gpus_per_node: PositiveInt = Field(default=8, description="Shard group size of HYBRID_SHARD.")
    offload_optimizer: bool = Field(default=False, description="Optimizer states (and master weights) in CPU memory.")
    offload_parameters: bool = Field(default=False, description="Weights in CPU memory (ZeRO-3 / FSDP only).")
    tensor_parallel_size: PositiveInt = 1
    pipeline_parallel_size: PositiveInt = 1
    pipeline_virtual_stages: PositiveInt = Field(
        default=1,
        description="Megatron virtual_pipeline_model_parallel_size: model chunks per pipeline rank (interleaved 1F1B); "
        "1: the plain 1F1B schedule.",
    )
    sequence_parallel: bool = Field(default=False, description="Megatron sequence parallelism (needs tensor parallel).")
    context_parallel_size: PositiveInt = 1
    expert_parallel_size: PositiveInt = 1
    bucket_size_mib: PositiveFloat = Field(
        default=25.0, description="DDP bucket_cap_mb / DeepSpeed reduce_bucket_size (converted to MiB)."
    )
    zero_reduce_bucket_size: PositiveInt = Field(
        default=500_000_000,
        description="DeepSpeed zero_optimization.reduce_bucket_size, in elements (5e8 by default). DeepSpeed 0.19 "
        "allocates the bucket at this size whatever the model's size.",
    )
    zero3_max_live_parameters: PositiveInt = Field(
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
    host_ram_gib_per_node: Optional[PositiveFloat] = Field(
        default=None, description="Host RAM of one node, for a host-RAM fit verdict (None: no verdict)."
    )
    tensor_parallel_flavor: Literal["megatron", "dtensor"] = Field(
        default="megatron",
        description="megatron: Megatron-Core TP (vocabulary-parallel embedding and loss); dtensor: PyTorch "
        "parallelize_module with colwise/rowwise plans (torchtitan, transformers tp_plan).",
    )

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
        if self.offload_device == "nvme" and not (self.offload_optimizer or self.offload_parameters):
            raise FieldError("offload_device", "offload_device 'nvme' needs offload_optimizer or offload_parameters")
        if self.offload_device == "nvme" and self.strategy != "zero":
            raise FieldError("offload_device", "offload_device 'nvme' is DeepSpeed ZeRO-Infinity: needs strategy 'zero'")
        if self.sequence_parallel and self.tensor_parallel_size == 1:
            raise FieldError("sequence_parallel", "sequence_parallel needs tensor_parallel_size > 1")
        data_parallel = self.num_gpus // model_parallel
        if self.expert_parallel_size > data_parallel * self.context_parallel_size:
            raise FieldError(
                "expert_parallel_size",
                f"expert_parallel_size ({self.expert_parallel_size}) cannot exceed the data × context parallel size "
                f"({data_parallel * self.context_parallel_size})",
            )
        return self

    @property
    def data_parallel_size(self) -> int:
        return self.num_gpus // (self.tensor_parallel_size * self.pipeline_parallel_size * self.context_parallel_size)


# --------------------------------------------------------------------------- fine-tuning

LINEAR_TARGET_ALL = "all-linear"


class LoRAConfig(FrozenModel):
    """PEFT LoraConfig fields that change memory."""

    r: PositiveInt = Field(default=16, description="LoRA rank.")
    target_modules: Optional[Union[list[str], Literal["all-linear"]]] = Field(
        default=None,
        description="Module names (matched by suffix, as PEFT does) or 'all-linear'. "
        "Default: PEFT's default for the model type (q_proj and v_proj for Llama-style models; PEFT has none "
        "for some families, which then need target_modules).",
    )
    lora_dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="Dropout on each adapter's input.")

    @field_validator("target_modules")
    @classmethod
    def _non_empty(cls, value: Optional[Union[list[str], str]]) -> Optional[Union[list[str], str]]:
        if isinstance(value, list) and not value:
            raise ValueError("target_modules must name at least one module, or be 'all-linear'")
        return value


class QuantizationConfig(FrozenModel):
    """bitsandbytes BitsAndBytesConfig for the frozen base of QLoRA."""

    bits: Literal[4, 8] = 4
    quant_type: Literal["nf4", "fp4"] = Field(default="nf4", description="bnb_4bit_quant_type.")
    double_quant: bool = Field(default=True, description="bnb_4bit_use_double_quant.")
    compute_dtype: Literal["bf16", "fp16", "fp32"] = Field(default="bf16", description="bnb_4bit_compute_dtype.")


FREEZABLE_GROUPS = ("embeddings", "attention", "mlp", "norms", "lm_head")


class Finetuning(FrozenModel):
    """Which parameters train: all of them, some of them, or low-rank adapters on a frozen base."""

    method: Literal["full", "lora", "qlora"] = "full"
    lora: LoRAConfig = Field(default_factory=LoRAConfig)
    quantization: QuantizationConfig = Field(default_factory=QuantizationConfig)
    frozen: list[str] = Field(
        default_factory=list,
        description="For full fine-tuning: groups to freeze (embeddings, attention, mlp, norms, lm_head) "
        "and/or layer ranges such as 'layers:0-15'.",
    )

    @field_validator("frozen")
    @classmethod
    def _known_groups(cls, names: list[str]) -> list[str]:
        for name in names:
            if name in FREEZABLE_GROUPS:
                continue
            if name.startswith("layers:"):
                _parse_layer_range(name)
                continue
            raise ValueError(f"cannot freeze {name!r}; allowed: {', '.join(FREEZABLE_GROUPS)}, or 'layers:A-B'")
        return names


def _parse_layer_range(text: str) -> range:
    spec = text.removeprefix("layers:")
    try:
        first, _, last = spec.partition("-")
        start, stop = int(first), int(last or first)
    except ValueError:
        raise ValueError(f"layer range {text!r} must look like 'layers:0-15'") from None
    if start < 0 or stop < start:
        raise ValueError(f"layer range {text!r} must go from a lower to a higher layer index")
    return range(start, stop + 1)


# --------------------------------------------------------------------------- hardware


class CustomGPU(FrozenModel):
    """A GPU not in the catalog, by its memory."""

    name: str = "custom"
    memory_gib: PositiveFloat


def _check_gpu_name(name: str) -> str:
    key = name.strip().lower()
    if key not in gpus():
        raise ValueError(f'unknown gpu {name!r}; allowed: {", ".join(gpus())}, or {{"memory_gib": N}}')
    return key


GPUChoice = Union[Annotated[str, Field(description="A GPU of the catalog (trainmem gpus).")], CustomGPU]


class Runtime(FrozenModel):
    """Details of the software stack that change memory, for replaying a measured run faithfully."""

    device: Literal["cuda", "cpu"] = Field(
        default="cuda", description="cuda for GPU runs; cpu replays a CPU measurement (no CUDA context, CPU autocast)."
    )
    cuda_context_mib: Optional[NonNegativeFloat] = Field(
        default=None,
        description="Memory the CUDA context takes outside PyTorch's allocator. Default: by GPU architecture "
        "(data/cuda_overheads.json).",
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
    nccl_communicator_mib: Optional[NonNegativeFloat] = Field(
        default=None,
        description="NCCL buffer memory per communicator (one per process group larger than 1); default 656 MiB "
        "(NVIDIA/nccl#964's A100 figure), an assumption.",
    )
    host_process_mib: NonNegativeFloat = Field(
        default=2048.0,
        description="Host RAM of one training process before any model state (interpreter, torch, CUDA host state); "
        "an assumption, not measured.",
    )
    dataloader_workers: NonNegativeInt = Field(default=0, description="DataLoader num_workers per rank.")
    dataloader_worker_mib: NonNegativeFloat = Field(
        default=1024.0, description="Host RAM of one dataloader worker process (an assumption: set what you observe)."
    )


# --------------------------------------------------------------------------- setup


class Setup(FrozenModel):
    """Everything that decides the memory of one training step."""

    model: ModelSpec
    micro_batch_size: PositiveInt = Field(default=1, description="Sequences per GPU per forward pass.")
    sequence_length: PositiveInt = Field(default=2048, description="Tokens per sequence.")
    gradient_accumulation_steps: PositiveInt = 1
    precision: Precision = "bf16-mixed"
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    activation_checkpointing: Literal["none", "selective", "full"] = "none"
    attention: Literal["sdpa", "flash_attention_2", "eager", "sdpa-math"] = Field(
        default="sdpa",
        description="sdpa/flash_attention_2: fused kernels, no s×s scores; eager and sdpa-math (SDPA's fallback, "
        "e.g. on CPU with attention dropout) materialise the scores.",
    )
    loss: Literal["standard", "chunked"] = Field(
        default="standard",
        description="standard: cross-entropy over the full fp32 logits; chunked: logits computed in chunks "
        "(torchtune CEWithChunkedOutputLoss, Liger fused linear cross-entropy).",
    )
    loss_chunks: PositiveInt = Field(default=8, description="Chunks of the chunked loss (torchtune default 8).")
    parallelism: Parallelism = Field(default_factory=Parallelism)
    finetuning: Finetuning = Field(default_factory=Finetuning)
    gpu: GPUChoice = "a100-80gb"
    headroom_fraction: float = Field(
        default=0.10, ge=0.0, lt=0.5, description="Memory to keep free for spikes and fragmentation (10–15% is usual)."
    )
    runtime: Runtime = Field(default_factory=Runtime)

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
        parallel = self.parallelism
        if architecture is not None:
            if architecture.num_attention_heads % parallel.tensor_parallel_size:
                raise FieldError(
                    "parallelism.tensor_parallel_size",
                    f"parallelism.tensor_parallel_size ({parallel.tensor_parallel_size}) must divide "
                    f"num_attention_heads ({architecture.num_attention_heads})",
                )
            if architecture.num_hidden_layers % parallel.pipeline_parallel_size:
                raise FieldError(
                    "parallelism.pipeline_parallel_size",
                    f"parallelism.pipeline_parallel_size ({parallel.pipeline_parallel_size}) must divide "
                    f"num_hidden_layers ({architecture.num_hidden_layers})",
                )
            if parallel.expert_parallel_size > 1 and (
                not architecture.is_moe or architecture.num_experts % parallel.expert_parallel_size
            ):
                raise FieldError(
                    "parallelism.expert_parallel_size",
                    f"parallelism.expert_parallel_size ({parallel.expert_parallel_size}) needs a MoE model whose "
                    "num_experts it divides",
                )
            if self.sequence_length % parallel.context_parallel_size:
                raise FieldError(
                    "sequence_length",
                    f"sequence_length ({self.sequence_length}) must be a multiple of "
                    f"parallelism.context_parallel_size ({parallel.context_parallel_size})",
                )
            for name in self.finetuning.frozen:
                if name.startswith("layers:") and _parse_layer_range(name).stop > architecture.num_hidden_layers:
                    raise FieldError(
                        "finetuning.frozen",
                        f"finetuning.frozen {name!r} goes past the model's {architecture.num_hidden_layers} layers",
                    )
            self._check_lora_targets(architecture)
            from .models import family_for

            problem = family_for(architecture).unsupported_attention(self.attention, self.runtime.device)
            if problem:
                raise FieldError("attention", problem)
        elif self.finetuning.method != "full" or self.finetuning.frozen:
            raise FieldError(
                "finetuning",
                "LoRA, QLoRA and frozen groups need an architecture: give a preset, hf_config or architecture",
            )
        if self.pipeline_and_accumulation_mismatch():
            raise FieldError(
                "gradient_accumulation_steps",
                "with pipeline parallelism, gradient_accumulation_steps is the number of micro-batches per step and "
                f"must be at least pipeline_parallel_size ({parallel.pipeline_parallel_size})",
            )
        return self

    def _check_lora_targets(self, architecture: Architecture) -> None:
        """PEFT refuses a LoraConfig whose target_modules match nothing, or that has no default targets."""
        if self.finetuning.method == "full":
            return
        from .inventory import build_inventory
        from .lora_targets import resolve_lora_targets
        from .models import family_for

        resolve_lora_targets(self.finetuning.lora, family_for(architecture), build_inventory(architecture))

    def pipeline_and_accumulation_mismatch(self) -> bool:
        return 1 < self.parallelism.pipeline_parallel_size > self.gradient_accumulation_steps

    def architecture(self) -> Optional[Architecture]:
        """The model's architecture, or None when only a parameter count was given."""
        model = self.model
        if isinstance(model, PresetModel):
            return model.architecture()
        if isinstance(model, HFConfigModel):
            return model.architecture()
        if isinstance(model, ArchitectureModel):
            return model.architecture
        return None
