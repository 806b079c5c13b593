"""What trainmem answers: the :class:`Report` of one Setup.

All byte counts are integers in bytes. *Allocated* is tensor memory, the figure
``torch.cuda.max_memory_allocated`` reports; *total* adds what the process holds beyond
live tensors (the caching allocator's reserved-but-unused memory, the CUDA context,
communication library buffers): the figure nvidia-smi shows and the one that must fit.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from ._base import FrozenModel
from .setup import Setup

Category = Literal["parameters", "gradients", "optimizer_states", "activations", "overhead"]
CATEGORIES: tuple[Category, ...] = ("parameters", "gradients", "optimizer_states", "activations", "overhead")

Phase = Literal["start", "forward", "loss", "backward", "optimizer", "zero_grad", "reference", "generation"]


class Breakdown(FrozenModel):
    """Bytes per category at one moment of the step."""

    parameters: int = 0
    gradients: int = 0
    optimizer_states: int = 0
    activations: int = 0
    overhead: int = 0

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer_states + self.activations + self.overhead


class Part(FrozenModel):
    """One named contributor inside a category, e.g. activations / "saved by 40 layers"."""

    category: Category
    name: str
    bytes: int
    allocated: bool = Field(
        default=True, description="False for memory outside PyTorch's allocator (CUDA context, reserve gap)."
    )
    detail: str = ""


class Timeline(FrozenModel):
    """Memory over one optimizer step, one point per event, as columns (chart-ready).

    Each point is the high-water mark of its event (allocated bytes by category). Points
    cover: step start, forward of each layer, the loss, backward of each layer, the
    optimizer step and zero_grad; with gradient accumulation, the first micro-batch and
    one later micro-batch (the later ones are identical).
    """

    labels: list[str]
    phases: list[Phase]
    micro_batches: list[int] = Field(description="1 for the first micro-batch, 2 for the later ones.")
    parameters: list[int]
    gradients: list[int]
    optimizer_states: list[int]
    activations: list[int]
    overhead: list[int]
    peak_index: int


class PeakMoment(FrozenModel):
    """When in the step the peak happens."""

    index: int
    phase: Phase
    label: str
    description: str


class AllocatorAlternative(FrozenModel):
    """What another ``PYTORCH_CUDA_ALLOC_CONF`` would make of the same step's allocations."""

    cuda_alloc_conf: str
    peak_reserved_bytes: int = Field(description="The replayed max_memory_reserved under this setting.")
    change_bytes: int = Field(description="Against the setup's own setting (negative: less reserved).")


class CudaMemory(FrozenModel):
    """The CUDA side of a rank: the caching allocator's replay and what lives outside it."""

    cuda_alloc_conf: str = Field(description="The PYTORCH_CUDA_ALLOC_CONF replayed ('' = PyTorch's defaults).")
    replayed: bool = Field(
        description="True: the step's allocations were replayed through the allocator model; False: the reserve "
        "was scaled from the replay of the setup the suggestions start from."
    )
    peak_allocated_bytes: int = Field(description="Predicted torch.cuda.max_memory_allocated.")
    peak_reserved_bytes: int = Field(description="Predicted torch.cuda.max_memory_reserved.")
    replay_peak_allocated_bytes: int = Field(description="The allocated peak of the replayed event stream.")
    replay_peak_reserved_bytes: int = Field(description="The reserved peak of the replayed event stream.")
    fragmentation_bytes: int = Field(
        description="Reserved but unallocated at the allocated peak (cached blocks no request could use)."
    )
    largest_free_block_bytes: int = Field(description="The largest cached free block after the step.")
    segments: int = Field(description="Segments the allocator holds after the step (cudaMalloc'd or mapped ranges).")
    outside_parts: list[Part] = Field(description="Memory outside PyTorch's allocator (best figures).")
    upper_bound_bytes: int = Field(description="Reserved peak + outside parts at their upper figures + margin.")
    upper_bound_parts: list[Part] = Field(description="What the upper bound adds to the reserved peak.")
    margin_fraction: float
    alternatives: list[AllocatorAlternative] = Field(default_factory=list)


class RankReport(FrozenModel):
    """The memory of one kind of GPU rank (ranks that behave alike are reported once)."""

    name: str
    num_ranks: int
    peak_allocated_bytes: int
    peak_total_bytes: int
    breakdown: Breakdown = Field(description="At the peak; sums to peak_total_bytes.")
    parts: list[Part]
    peak: PeakMoment
    timeline: Timeline
    cpu_offload_bytes: int = Field(default=0, description="Host memory this rank's offloaded states take.")
    peak_reserved_bytes: int = Field(
        default=0, description="Predicted max_memory_reserved (the allocator replay); 0 on CPU."
    )
    upper_bound_bytes: int = Field(
        default=0, description="What the fit verdict uses: reserved peak + outside parts (upper) + margin."
    )
    cuda: Optional[CudaMemory] = None


class FitVerdict(FrozenModel):
    """Does the heaviest rank fit the chosen GPU with the chosen headroom?"""

    gpu: str
    gpu_display_name: str
    capacity_bytes: int
    headroom_fraction: float
    usable_bytes: int = Field(description="capacity × (1 − headroom).")
    required_bytes: int = Field(
        description="The largest upper bound of any rank on CUDA (reserved peak + outside parts + margin); "
        "peak_total_bytes on CPU."
    )
    fits: bool = Field(description="required ≤ usable.")
    status: Literal["fits", "tight", "does_not_fit"] = Field(
        description="tight: fits the GPU but eats into the headroom."
    )
    message: str


class Suggestion(FrozenModel):
    """A change to the setup and what it does to the peak."""

    title: str
    detail: str
    setup_patch: dict = Field(description="Fields to change in the setup (a JSON merge patch).")
    peak_total_bytes: int
    fits: bool


class Resolved(FrozenModel):
    """How trainmem read the setup: the recipe and sizes it simulated."""

    precision_recipe: str
    precision_description: str
    data_parallel_size: int
    weight_bytes_per_parameter: float
    gradient_bytes_per_parameter: float
    optimizer_bytes_per_parameter: float
    optimizer_implementation: str
    attention_saves_scores: bool
    activation_dtype: str
    model_description: str


class HostPartReport(FrozenModel):
    """One contributor to a node's host RAM."""

    name: str
    bytes: int
    detail: str = ""


class HostMemoryReport(FrozenModel):
    """Host (CPU) RAM of one node: the training steady state, the model load, and NVMe for ZeRO-Infinity."""

    ranks_per_node: int
    peak_bytes: int = Field(description="max(steady_bytes, load_bytes): what the node's RAM must hold.")
    steady_bytes: int = Field(description="During training: offloaded states, pinned buffers, processes, workers.")
    load_bytes: int = Field(description="While the model is loaded, before training starts.")
    steady_parts: list[HostPartReport]
    load_parts: list[HostPartReport]
    nvme_bytes: int = Field(default=0, description="Offloaded states on NVMe per node (offload_device 'nvme').")
    budget_bytes: Optional[int] = Field(default=None, description="parallelism.host_ram_gib_per_node, in bytes.")
    fits: Optional[bool] = Field(default=None, description="peak_bytes ≤ budget_bytes; None without a budget.")
    message: str = ""


class Report(FrozenModel):
    """Everything trainmem predicts for one setup. Top-level peak fields are the heaviest rank's."""

    trainmem_version: str
    setup: Setup
    resolved: Resolved
    num_parameters: int
    num_trainable_parameters: int
    peak_allocated_bytes: int
    peak_total_bytes: int
    peak_reserved_bytes: int = Field(default=0, description="Predicted max_memory_reserved of the heaviest rank.")
    upper_bound_bytes: int = Field(default=0, description="The heaviest rank's upper bound (the fit verdict's).")
    breakdown: Breakdown
    parts: list[Part]
    peak: PeakMoment
    heaviest_rank: int = Field(description="Index into ranks.")
    ranks: list[RankReport]
    fit: FitVerdict
    fits_on: list[str] = Field(description="Catalog GPUs whose usable memory holds the heaviest rank.")
    suggestions: list[Suggestion] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    host: Optional[HostMemoryReport] = Field(default=None, description="Host RAM per node (trainmem.parallel.host).")

    @property
    def timeline(self) -> Timeline:
        return self.ranks[self.heaviest_rank].timeline
