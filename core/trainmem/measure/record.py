"""The record of one measured training step: :class:`Measurement`, one line of the corpus.

A Measurement is what ``trainmem.measure`` writes and what ``trainmem validate`` compares
against ``trainmem.estimate``. It is plain data (pydantic, no torch), so the committed
corpus can be read and checked on a machine without PyTorch.

Every byte count is the sum of ``untyped_storage().nbytes()`` over live tensor storages,
each storage counted once however many views share it: the quantity that
``torch.cuda.max_memory_allocated`` reports, before the CUDA caching allocator rounds
each block up to a multiple of 512 bytes and without memory kernels allocate outside
the dispatcher (cuBLAS workspaces, the scratch buffers of fused kernels).
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field

from .._base import FrozenModel
from ..report import CATEGORIES, Breakdown, Phase
from ..setup import Setup

PART_AUTOCAST_WEIGHT_COPIES = "parameters/autocast_weight_copies"
"""Low-precision copies of parameters made by autocast (an aten._to_copy of a parameter)."""
PART_INPUTS = "activations/inputs"
"""The batch of token ids (labels are the same tensor), allocated before the measured step."""

AttentionKernel = Literal["eager", "sdpa", "sdpa-math", "flash_attention_2"]
OptimizerImplementationRan = Literal["foreach", "for-loop", "fused"]


class Kernels(FrozenModel):
    """What actually ran, as seen in the dispatched aten ops, so that a case can be replayed faithfully."""

    attention: AttentionKernel = Field(
        description="sdpa: a fused SDPA kernel ran (no s×s scores); sdpa-math: SDPA's math fallback "
        "(on CPU whenever attention dropout > 0); eager: the model's own matmul/softmax attention."
    )
    attention_ops: list[str] = Field(
        description="The aten attention ops seen, e.g. aten._scaled_dot_product_flash_attention_for_cpu."
    )
    optimizer_class: str = Field(description="Qualified class name of the optimizer, e.g. torch.optim.adamw.AdamW.")
    optimizer_kwargs: dict[str, Any] = Field(description="Every keyword argument the optimizer was built with.")
    optimizer_implementation: OptimizerImplementationRan
    autocast_device: Optional[Literal["cpu", "cuda"]] = Field(
        description="device_type of torch.autocast around forward and loss; None without autocast."
    )
    autocast_dtype: Optional[Literal["bfloat16", "float16"]] = None
    use_cache: bool = Field(default=False, description="config.use_cache during the step (False: no KV cache).")
    input_embeddings_require_grad: bool = Field(
        description="True when the embedding output requires grad (always with full fine-tuning; with LoRA only "
        "when activation checkpointing is on, because transformers' activation_checkpointing_enable calls "
        "enable_input_require_grads)."
    )
    lora_adapter_dtype: Optional[str] = Field(
        default=None, description="dtype of the LoRA adapter weights (peft upcasts them to fp32 by default)."
    )
    lora_target_modules: Optional[list[str]] = Field(
        default=None, description="The module names peft adapted ('all-linear' and defaults resolved by peft)."
    )


class Environment(FrozenModel):
    """Where and how the step ran."""

    torch: str
    transformers: str
    peft: Optional[str] = None
    python: str
    device: Literal["cpu", "cuda"]
    device_name: str = Field(description="CPU model or GPU name; 'fake' tensors have none of their own.")
    fake: bool = Field(description="True: FakeTensorMode (shapes only, no memory); False: real tensors.")
    date: str = Field(description="ISO date of the measurement.")
    method: str = Field(description="How bytes were counted.")
    seed: int
    warmup_steps: int = Field(description="Optimizer steps run before the measured one (optimizer state exists).")
    distributed_backend: Optional[str] = Field(
        default=None, description="torch.distributed backend of a multi-rank measurement (gloo on CPU); None: one process."
    )
    frameworks: dict[str, str] = Field(
        default_factory=dict, description="Versions of the distributed frameworks used, e.g. {'deepspeed': '0.19.8'}."
    )


class PhasePeak(FrozenModel):
    """The high-water mark of one phase of the step, and the category mix at that moment."""

    bytes: int
    breakdown: Breakdown
    label: str
    micro_batch: int


class PeakMoment(FrozenModel):
    """When the step's peak happened."""

    phase: Phase
    label: str = Field(description="The module boundary the peak fell in, e.g. 'backward head', 'forward layers.3'.")
    micro_batch: int
    event_index: int = Field(description="Index of the allocation (in the tracker's event log) that set the peak.")


class PeakTensor(FrozenModel):
    """One large storage alive at the peak."""

    category: str
    bytes: int
    op: str = Field(description="The aten op whose output first used this storage.")
    phase: Phase
    label: str
    dtype: str
    shape: list[int]


class OpBytes(FrozenModel):
    """Live activation (or overhead) bytes at the peak, grouped by the aten op that allocated them."""

    category: str
    op: str
    bytes: int
    count: int


class MeasuredTimeline(FrozenModel):
    """High-water mark per module boundary (columns, chart-ready), at most ~200 points.

    Each point covers the events from one marker to the next: the step start, the
    embeddings and each decoder layer in forward, the head and loss, each layer in backward
    (a tensor hook on the layer's output marks where its backward starts), the optimizer
    step and zero_grad. The values are the breakdown at that segment's highest total.
    """

    labels: list[str]
    phases: list[Phase]
    micro_batches: list[int]
    parameters: list[int]
    gradients: list[int]
    optimizer_states: list[int]
    activations: list[int]
    overhead: list[int]
    peak_index: int

    def totals(self) -> list[int]:
        return [sum(values) for values in zip(*(getattr(self, name) for name in CATEGORIES))]


class CudaMemory(FrozenModel):
    """The CUDA caching allocator's own figures for the measured step (real CUDA runs only)."""

    max_memory_allocated: int
    max_memory_reserved: int
    memory_allocated_at_start: int
    memory_reserved_at_start: Optional[int] = Field(
        default=None, description="torch.cuda.memory_reserved when the measured step started (after warm-up)."
    )
    device_used_bytes: Optional[int] = Field(
        default=None,
        description="cudaMemGetInfo total − free right after the step, the cache still held: context, reserved "
        "segments and every library's own buffers (what nvidia-smi shows for a lone process).",
    )
    device_total_bytes: Optional[int] = Field(default=None, description="cudaMemGetInfo total.")
    context_bytes: Optional[int] = Field(
        default=None,
        description="cudaMemGetInfo used after torch.cuda.init() and one small kernel, before any model existed.",
    )
    phase_max_reserved: dict[str, int] = Field(
        default_factory=dict,
        description="torch.cuda.max_memory_reserved when each phase of the measured step ends (since it began).",
    )
    gpu_name: Optional[str] = None
    driver_version: Optional[str] = None
    cuda_version: Optional[str] = None
    cudnn_version: Optional[str] = None
    library_versions: dict[str, str] = Field(
        default_factory=dict, description="bitsandbytes, flash-attn and other libraries that ran, by name."
    )
    alloc_conf: str = Field(default="", description="PYTORCH_CUDA_ALLOC_CONF during the run.")


class Measurement(FrozenModel):
    """One measured training step: the setup as it was replayed, and where its memory went."""

    id: str = Field(description="Stable case name, e.g. llama-10m-amp-bf16-adamw-b2-s256.")
    description: str = ""
    setup: Setup = Field(description="The setup as replayed: explicit optimizer implementation and attention kernel.")
    kernels: Kernels
    environment: Environment
    num_parameters: int
    num_trainable_parameters: int
    peak_allocated_bytes: int
    breakdown: Breakdown = Field(description="Bytes per category at the peak; sums to peak_allocated_bytes.")
    parts: dict[str, int] = Field(
        default_factory=dict, description="Named sub-parts of a category at the peak (see PART_* names)."
    )
    peak: PeakMoment
    phase_peaks: dict[str, PhasePeak] = Field(
        description="Keyed by phase: forward, loss, backward, optimizer, zero_grad."
    )
    start_bytes: int = Field(description="Live bytes when the measured step started (weights, states, inputs).")
    end_bytes: int = Field(description="Live bytes after zero_grad.")
    peak_tensors: list[PeakTensor] = Field(
        default_factory=list,
        description="The largest transient storages alive at the peak (activations, overhead, autocast weight copies).",
    )
    peak_by_op: list[OpBytes] = Field(default_factory=list, description="Activations and overhead at the peak, by op.")
    timeline: MeasuredTimeline
    cuda: Optional[CudaMemory] = None
    untracked_input_bytes: int = Field(
        default=0,
        description="Bytes of storages that ops read but that were neither allocated in the step nor registered at "
        "its start (a diagnostic: 0 means every byte an op touched is accounted for).",
    )
    notes: list[str] = Field(default_factory=list)
    rank: int = Field(default=0, description="The rank this record measured (0 for a single process).")
    world_size: int = Field(default=1, description="Processes in the measured run.")
    framework: Optional[Literal["ddp", "fsdp1", "fsdp2", "dtensor-tp", "fsdp2-tp", "deepspeed", "pipelining"]] = Field(
        default=None, description="The distributed framework that wrapped the model; None for a single process."
    )
    host_parts: dict[str, int] = Field(
        default_factory=dict,
        description="Offload: bytes of the storages the framework keeps in host memory on a GPU machine, by part "
        "(from its source code; see trainmem.measure.frameworks). On the CPU they share the one pool; every other "
        "figure of the record is the device side, without them.",
    )
