"""The Plan: a Setup resolved into what one rank holds.

From the validated Setup this module works out, once, everything the step simulation
needs: the architecture and its inventory, the precision recipe, which tensors train
(full fine-tuning, frozen groups, LoRA adapters), and how every tensor is split over
ranks:

* tensor parallelism (Megatron-LM) splits the attention and MLP matrices and the
  vocabulary of the embedding and head by ``t``; norms stay whole;
* pipeline parallelism gives each stage ``L/p`` layers; the first stage holds the
  embedding, the last the head (and, for tied embeddings, its own copy of the embedding);
* expert parallelism gives each rank ``E/ep`` experts;
* ZeRO (Rajbhandari et al. 2020) and FSDP shard over the data-parallel group: stage 1
  the optimizer states (and master weights), stage 2 also the gradients, stage 3 also the
  weights; FSDP FULL_SHARD is stage 3, SHARD_GRAD_OP stage 2, NO_SHARD DDP, and
  HYBRID_SHARD shards within a node and replicates across nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Optional

from .allocator import rounded
from .architecture import Architecture
from .catalogs import OptimizerKind, optimizers
from .inventory import ModelInventory, ParameterTensor, build_inventory
from .precision import PrecisionPlan, resolve_precision
from .quantization import quantized_weight_bytes
from .setup import LINEAR_TARGET_ALL, Setup, _parse_layer_range
from .tape import DTYPE_BYTES

COLUMN_PARALLEL = (
    "q_proj",
    "k_proj",
    "v_proj",
    "qkv_proj",
    "c_attn",
    "gate_proj",
    "up_proj",
    "gate_up_proj",
    "c_fc",
    "fc1",
)
"""Linear layers whose output features tensor parallelism splits (Megatron's ColumnParallelLinear)."""
ROW_PARALLEL = ("o_proj", "c_proj", "down_proj", "fc2")
"""Linear layers whose input features tensor parallelism splits (RowParallelLinear)."""


MODULE_PATHS = (
    "input_layernorm",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "post_feedforward_layernorm",
    "ln_1",
    "ln_2",
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.qkv_proj",
    "self_attn.o_proj",
    "self_attn.q_norm",
    "self_attn.k_norm",
    "attn.c_attn",
    "attn.c_proj",
    "mlp.c_fc",
    "mlp.c_proj",
    "mlp.fc1",
    "mlp.fc2",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.gate_up_proj",
    "mlp.down_proj",
    "mlp.gate",
    "mlp.experts",
    "mlp.shared_expert.gate_proj",
    "mlp.shared_expert.up_proj",
    "mlp.shared_expert.down_proj",
    "mlp.shared_expert_gate",
    "norm",
    "ln_f",
    "embed_tokens",
    "wte",
    "wpe",
    "lm_head",
)
"""Every module path the layer and head programs ask about (for a hashable summary of trainability)."""


@dataclass(frozen=True)
class Slice:
    """One parameter tensor as it sits on a rank: ``count`` copies of ``numel`` elements each."""

    tensor: ParameterTensor
    numel: int
    count: int
    trainable: bool
    quantized: bool
    layer_scope: bool
    """True for tensors inside decoder layers (gathered layer by layer under ZeRO-3/FSDP)."""

    @property
    def total_numel(self) -> int:
        return self.numel * self.count


@dataclass(frozen=True)
class Sharding:
    """How many ranks share (split) each kind of model state."""

    weights: int
    gradients: int
    optimizer: int


@dataclass(frozen=True)
class Stage:
    """A pipeline stage: which part of the model one rank of it holds."""

    index: int
    num_layers: int
    has_embedding: bool
    has_head: bool
    in_flight_micro_batches: int
    """Micro-batches whose activations a rank of this stage holds at once (1F1B schedule)."""


class Plan:
    """Everything about one setup that the step simulation reads."""

    def __init__(self, setup: Setup):
        self.setup = setup
        self.parallel = setup.parallelism
        self.architecture: Optional[Architecture] = setup.architecture()
        self.inventory: Optional[ModelInventory] = build_inventory(self.architecture) if self.architecture else None
        self.precision: PrecisionPlan = resolve_precision(setup)
        self.optimizer: OptimizerKind = optimizers()[setup.optimizer.name]
        self.device = setup.runtime.device
        self.optimizer_implementation = setup.optimizer.implementation or self._default_optimizer_implementation()
        if self.optimizer.quantized_state_bits or self.optimizer.paged:
            self.optimizer_implementation = "fused"  # bitsandbytes updates with its own fused kernels
        self.finetuning = setup.finetuning
        self.lora = self.finetuning.method in ("lora", "qlora")
        self.quantized_base = self.finetuning.method == "qlora"

    def _default_optimizer_implementation(self) -> str:
        """What runs when the setup does not say: DeepSpeed and Megatron-LM ship fused Adam kernels
        (deepspeed.ops.adam.FusedAdam, Apex/Transformer Engine FusedAdam); torch.optim defaults
        to foreach on CUDA and to a per-parameter loop on CPU."""
        parallel = self.setup.parallelism
        megatron = parallel.tensor_parallel_size > 1 or parallel.pipeline_parallel_size > 1
        if self.device == "cuda" and (parallel.strategy == "zero" or megatron):
            return "fused"
        return "foreach" if self.device == "cuda" else "for-loop"

    # ------------------------------------------------------------------ parallel layout
    @property
    def data_parallel_size(self) -> int:
        return self.parallel.data_parallel_size

    @cached_property
    def sharding(self) -> Sharding:
        parallel, dp = self.parallel, self.data_parallel_size
        if parallel.strategy == "zero":
            stage = parallel.zero_stage
            return Sharding(dp if stage >= 3 else 1, dp if stage >= 2 else 1, dp if stage >= 1 else 1)
        if parallel.strategy == "fsdp":
            group = min(dp, parallel.gpus_per_node) if parallel.fsdp_sharding_strategy == "HYBRID_SHARD" else dp
            strategy = parallel.fsdp_sharding_strategy
            if strategy == "NO_SHARD":
                return Sharding(1, 1, 1)
            if strategy == "SHARD_GRAD_OP":
                return Sharding(1, group, group)
            return Sharding(group, group, group)
        return Sharding(1, 1, 1)

    @cached_property
    def stages(self) -> list[Stage]:
        """Pipeline stages that differ in memory: the first, the last, and (if any) a middle one."""
        pp = self.parallel.pipeline_parallel_size
        layers = self.architecture.num_hidden_layers // pp if self.architecture else 0
        micro_batches = self.setup.gradient_accumulation_steps
        if pp == 1:
            return [Stage(0, layers, True, True, 1)]
        stages = [Stage(0, layers, True, False, min(pp, micro_batches))]
        if pp > 2:
            stages.append(Stage(1, layers, False, False, min(pp - 1, micro_batches)))
        stages.append(Stage(pp - 1, layers, False, True, 1))
        return stages

    # ------------------------------------------------------------------ which tensors train
    def _matches_lora_target(self, module: str) -> bool:
        targets = self.finetuning.lora.targets_for(self.architecture.model_type if self.architecture else "")
        if targets == LINEAR_TARGET_ALL:
            return True
        return any(module == target or module.endswith("." + target) for target in targets)

    @cached_property
    def _adapted_modules(self) -> frozenset[str]:
        if not self.lora or self.inventory is None:
            return frozenset()
        return frozenset(t.module for t in self.inventory.linear_modules() if self._matches_lora_target(t.module))

    def has_adapter(self, module: str) -> bool:
        return module in self._adapted_modules

    @cached_property
    def trainability_key(self) -> tuple:
        """Which module paths train or carry adapters: a hashable key for caching layer traces."""
        return tuple((self.module_trains(m), self.has_adapter(m)) for m in MODULE_PATHS)

    @cached_property
    def _frozen_groups(self) -> tuple[set[str], set[int]]:
        groups: set[str] = set()
        layers: set[int] = set()
        for name in self.finetuning.frozen:
            if name.startswith("layers:"):
                layers.update(_parse_layer_range(name))
            else:
                groups.add(name)
        return groups, layers

    def tensor_trains(self, tensor: ParameterTensor, layer_index: Optional[int] = None) -> bool:
        """Whether a base-model tensor trains (LoRA/QLoRA freeze the whole base)."""
        if self.lora:
            return False
        groups, layers = self._frozen_groups
        if layer_index is not None and layer_index in layers:
            return False
        group = {"experts": "mlp", "router": "mlp"}.get(tensor.group, tensor.group)
        return group not in groups

    def module_trains(self, module: str) -> bool:
        """Whether the weights of a module (by path, as the layer programs name them) train."""
        known = self._module_trains.get(module)
        if known is None:
            known = self._module_trains[module] = self._decide_module_trains(module)
        return known

    @cached_property
    def _module_trains(self) -> dict[str, bool]:
        return {}

    def _decide_module_trains(self, module: str) -> bool:
        if self.lora or self.inventory is None:
            return False
        groups, _ = self._frozen_groups
        if module in ("embed_tokens", "wte", "wpe"):
            return "embeddings" not in groups
        if module == "lm_head":
            return "lm_head" not in groups
        if module in ("norm", "ln_f") or "norm" in module.rsplit(".", 1)[-1] or module.startswith("ln_"):
            return "norms" not in groups
        if module.startswith(("self_attn", "attn")):
            return "attention" not in groups
        return "mlp" not in groups

    def layer_trains(self, layer_index: int) -> bool:
        return layer_index not in self._frozen_groups[1]

    # ------------------------------------------------------------------ per-rank slices
    def _tp_numel(self, tensor: ParameterTensor) -> int:
        """Elements of ``tensor`` on one tensor-parallel rank (and one expert-parallel rank)."""
        tp, ep = self.parallel.tensor_parallel_size, self.parallel.expert_parallel_size
        numel = tensor.numel
        if tensor.group == "experts":
            return numel // ep // tp
        if tensor.group in ("embeddings", "lm_head") and "wpe" not in tensor.name and "positions" not in tensor.name:
            return numel // tp
        module = tensor.module.rsplit(".", 1)[-1]
        if module in COLUMN_PARALLEL:
            return numel // tp
        if module in ROW_PARALLEL and tensor.name.endswith("weight"):
            return numel // tp
        return numel

    def slices(self, stage: Stage) -> list[Slice]:
        """Base-model tensors on one rank of ``stage``."""
        inventory = self.inventory
        if inventory is None:
            return []
        out: list[Slice] = []
        quantize = self.quantized_base
        if stage.has_embedding or (stage.has_head and inventory.tied_embeddings and len(self.stages) > 1):
            for tensor in inventory.embedding:
                out.append(Slice(tensor, self._tp_numel(tensor), 1, self.tensor_trains(tensor), False, False))
        first_layer = stage.index * stage.num_layers
        frozen = self._frozen_groups[1]
        frozen_layers = sum(1 for i in frozen if first_layer <= i < first_layer + stage.num_layers)
        for tensor in inventory.layer:
            # bitsandbytes quantises the linear layers of the frozen base; stacked expert weights are
            # counted as quantised too, as a QLoRA run on an MoE model quantises its experts.
            quantized = quantize and (tensor.linear_features is not None or tensor.group == "experts")
            trainable_count = stage.num_layers - frozen_layers if self.tensor_trains(tensor) else 0
            numel = self._tp_numel(tensor)
            if trainable_count:
                out.append(Slice(tensor, numel, trainable_count, True, quantized, True))
            if stage.num_layers - trainable_count:
                out.append(Slice(tensor, numel, stage.num_layers - trainable_count, False, quantized, True))
        if stage.has_head:
            for tensor in inventory.head:
                out.append(Slice(tensor, self._tp_numel(tensor), 1, self.tensor_trains(tensor), False, False))
        return out

    def adapter_slices(self, stage: Stage) -> list[tuple[str, int, int]]:
        """LoRA adapters on one rank: (module, elements of A and B per layer, layers)."""
        if not self.lora or self.inventory is None:
            return []
        rank = self.finetuning.lora.r
        tp = self.parallel.tensor_parallel_size
        adapters = []
        for tensor in self.inventory.linear_modules():
            if self._matches_lora_target(tensor.module):
                in_features, out_features = tensor.linear_features
                module = tensor.module.rsplit(".", 1)[-1]
                if module in COLUMN_PARALLEL:
                    out_features //= tp
                elif module in ROW_PARALLEL:
                    in_features //= tp
                adapters.append((tensor.module, rank * (in_features + out_features), stage.num_layers))
        return adapters

    # ------------------------------------------------------------------ counts
    @cached_property
    def num_parameters(self) -> int:
        if self.inventory is None:
            model = self.setup.model
            return model.num_parameters  # type: ignore[union-attr]
        return self.inventory.num_parameters + self.num_adapter_parameters

    @cached_property
    def num_adapter_parameters(self) -> int:
        if not self.lora or self.inventory is None:
            return 0
        rank = self.finetuning.lora.r
        return sum(
            rank * sum(t.linear_features) * self.inventory.num_layers
            for t in self.inventory.linear_modules()
            if self._matches_lora_target(t.module)
        )

    @cached_property
    def num_trainable_parameters(self) -> int:
        if self.inventory is None:
            return self.num_parameters
        if self.lora:
            return self.num_adapter_parameters
        inventory = self.inventory
        trainable_layers = sum(1 for i in range(inventory.num_layers) if self.layer_trains(i))
        count = sum(t.numel for t in inventory.embedding if self.tensor_trains(t))
        count += sum(t.numel for t in inventory.head if self.tensor_trains(t))
        count += trainable_layers * sum(t.numel for t in inventory.layer if self.tensor_trains(t))
        return count

    # ------------------------------------------------------------------ bytes of model states
    def weight_bytes(self, slice_: Slice) -> int:
        """Bytes one rank stores for a slice, before ZeRO-3/FSDP sharding (each tensor as the allocator counts it)."""
        if slice_.quantized:
            quant = self.finetuning.quantization
            per_tensor = quantized_weight_bytes(slice_.numel, quant.bits, quant.double_quant)
        else:
            per_tensor = slice_.numel * DTYPE_BYTES[self.precision.stored_weight_dtype]
        return rounded(per_tensor, self.device) * slice_.count

    @property
    def adapter_dtype(self) -> str:
        """PEFT keeps adapters in fp32 when the base is 16-bit (``autocast_adapter_dtype=True``)."""
        return "fp32"
