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
from .inventory import LayerGroup, ModelInventory, ParameterTensor, build_inventory
from .models.blocks import NO_GRADIENT_GROUP
from .lora_targets import COLUMN_PARALLEL, ROW_PARALLEL, LoraTargets, model_level_group, resolve_lora_targets
from .models import DecoderFamily, family_for
from .precision import PrecisionPlan, resolve_precision
from .quantization import quantized_weight_bytes
from .setup import Setup, _parse_layer_range
from .tape import DTYPE_BYTES
from .training.phases import adjust_inventory
from .vision import step as vision_step
from .encoder_decoder.stack import encoder_stack, with_encoder_layers
from .vision.training import trainable_numel as vision_trainable_numel, vision_slices

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
    kind: int = -1
    """For layer tensors, the position of their layer kind in ``inventory.layer_groups``."""

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

    @property
    def first_layer(self) -> int:
        return self.index * self.num_layers

    @property
    def stop_layer(self) -> int:
        return self.first_layer + self.num_layers


class Plan:
    """Everything about one setup that the step simulation reads."""

    def __init__(self, setup: Setup):
        self.setup = setup
        self.parallel = setup.parallelism
        self.architecture: Optional[Architecture] = setup.architecture()
        self.inventory: Optional[ModelInventory] = build_inventory(self.architecture) if self.architecture else None
        self.inventory = adjust_inventory(setup, self.inventory)  # a reward model's score head (training.phases)
        self.family: Optional[DecoderFamily] = family_for(self.architecture) if self.architecture else None
        self.precision: PrecisionPlan = resolve_precision(setup)
        self.optimizer: OptimizerKind = optimizers()[setup.optimizer.name]
        self.device = setup.runtime.device
        self.optimizer_implementation = setup.optimizer.implementation or self._default_optimizer_implementation()
        if self.optimizer.quantized_state_bits or self.optimizer.paged:
            self.optimizer_implementation = "fused"  # bitsandbytes updates with its own fused kernels
        self.finetuning = setup.finetuning
        self.lora = self.finetuning.method in ("lora", "qlora")
        self.quantized_base = self.finetuning.method == "qlora"
        # Vision-language models: the tower and projector, and what one sample's images become; their
        # tokens join the language model's sequence (trainmem.vision).
        self.vision, self.visual_counts = vision_step.of_setup(setup)
        if self.visual_counts is not None:
            self.setup = setup.model_copy(update={"sequence_length": setup.sequence_length + self.visual_counts.tokens})
        # Encoder-decoders: the encoder is a stack before the decoder path, over sequence_length source tokens;
        # the decoder path runs over target_length tokens (trainmem.encoder_decoder).
        self.encoder = encoder_stack(self.architecture)
        self.source_length = setup.sequence_length
        if self.encoder is not None:
            self.setup = self.setup.model_copy(update={"sequence_length": setup.target_length or setup.sequence_length})

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
        if parallel.strategy == "megatron" and parallel.use_distributed_optimizer:
            # Megatron-Core DistributedOptimizer (megatron/core/optimizer/distrib_optimizer.py): each data-parallel
            # rank owns a shard of the fp32 main params and optimizer states; the bf16 weights and the fp32 grad
            # buffer stay whole (the grads are reduce-scattered into the buffer, not freed).
            return Sharding(1, 1, dp)
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
        from .parallel.pipelining import with_schedule  # torch.distributed.pipelining's schedules

        return with_schedule(self, stages)

    # ------------------------------------------------------------------ which tensors train
    @cached_property
    def lora_targets(self) -> Optional[LoraTargets]:
        """What PEFT adapts (None without LoRA): linear modules, and the router and fused experts of MoE
        families whose v4 target names PEFT converts (``trainmem.lora_targets``)."""
        if not self.lora or self.inventory is None:
            return None
        inventory = self.inventory if self.encoder is None else with_encoder_layers(self.inventory, self.encoder)
        return resolve_lora_targets(self.finetuning.lora, self.family, inventory)

    @cached_property
    def saved_module_tensors(self) -> frozenset[str]:
        """Tensor names PEFT's ``modules_to_save`` trains as full copies (``trainmem.modules_to_save``)."""
        if not self.lora or self.inventory is None:
            return frozenset()
        from .modules_to_save import check_no_adapter_overlap, saved_tensor_names
        from .tasks import peft_task_modules_to_save

        implicit = peft_task_modules_to_save(self.architecture) if self.architecture is not None else ()
        if not self.finetuning.lora.modules_to_save and not implicit:
            return frozenset()
        saved = saved_tensor_names(self.finetuning.lora.modules_to_save, self.inventory, implicit=implicit)
        check_no_adapter_overlap(saved, self.lora_targets.modules if self.lora_targets else frozenset())
        return saved

    def has_adapter(self, module: str) -> bool:
        """Whether LoRA adapts a linear module, or (MoE) the router or a fused expert parameter, by path."""
        targets = self.lora_targets
        return targets is not None and targets.adapts(module, self.family.names)

    @cached_property
    def trainability_key(self) -> tuple:
        """Which module paths train or carry adapters: a hashable key for caching layer traces."""
        paths = self.family.names.module_paths() if self.family else ()
        return tuple((self.module_trains(m), self.has_adapter(m)) for m in paths)

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
        """Whether a base-model tensor trains (LoRA/QLoRA freeze the whole base, but for the copies of
        ``modules_to_save``)."""
        if tensor.group in ("unused", NO_GRADIENT_GROUP):  # on no path to the loss (models/vision_encoders.py): no gradient
            return False
        if self.lora:
            return tensor.name in self.saved_module_tensors
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
        if self.lora and self.saved_module_tensors:
            return any(name.rsplit(".", 1)[0] == module for name in self.saved_module_tensors)
        if self.lora or self.inventory is None:
            return False
        groups, _ = self._frozen_groups
        names = self.family.names
        if module in (names.embed_tokens, names.embed_positions, getattr(names, "embed_token_types", None)):
            return "embeddings" not in groups
        if module == names.lm_head:
            return "lm_head" not in groups
        norms = (names.final_norm, names.input_norm, names.post_attention_norm, names.pre_feedforward_norm,
                 names.post_feedforward_norm, names.q_norm, names.k_norm)
        if module in norms:
            return "norms" not in groups
        attention_prefix = getattr(names, "attention_prefix", names.o_proj.rsplit(".", 1)[0])
        if module.startswith(attention_prefix + "."):
            return "attention" not in groups
        return "mlp" not in groups

    def layer_trains(self, layer_index: int) -> bool:
        return layer_index not in self._frozen_groups[1]

    # ------------------------------------------------------------------ per-rank slices
    def _tp_numel(self, tensor: ParameterTensor) -> int:
        """Elements of ``tensor`` on one tensor-parallel rank (and one expert-parallel rank)."""
        tp, ep = self.parallel.tensor_parallel_size, self.parallel.expert_parallel_size
        numel = tensor.numel
        if tensor.group == "experts":  # Megatron-Core: routed experts are split over EP × ETP (ETP default: TP)
            return numel // ep // self.parallel.expert_tensor_parallel
        if tensor.group in ("embeddings", "lm_head") and "wpe" not in tensor.name and "positions" not in tensor.name:
            return numel // tp
        module = tensor.module.rsplit(".", 1)[-1]
        if module in COLUMN_PARALLEL:
            return numel // tp
        if module in ROW_PARALLEL and tensor.name.endswith("weight"):
            return numel // tp
        return numel

    def stage_layer_groups(self, stage: Stage) -> list[tuple[int, LayerGroup, int]]:
        """The layer kinds on a rank of ``stage``: (position in ``layer_groups``, group, layers of the stage)."""
        if self.inventory is None:
            return []
        counts = [
            (position, group, group.count_in(stage.first_layer, stage.stop_layer))
            for position, group in enumerate(self.inventory.layer_groups)
        ]
        return [item for item in counts if item[2]]

    def stage_layer_runs(self, stage: Stage) -> list[tuple[int, int, int]]:
        """The stage's layers in order as runs of one kind: (first layer, layers in the run, kind position)."""
        if self.inventory is None or stage.num_layers == 0:
            return []
        kind_of = {index: position for position, group in enumerate(self.inventory.layer_groups) for index in group.indices}
        runs: list[list[int]] = []
        for index in range(stage.first_layer, stage.stop_layer):
            kind = kind_of[index]
            if runs and runs[-1][2] == kind:
                runs[-1][1] += 1
            else:
                runs.append([index, 1, kind])
        return [tuple(run) for run in runs]  # type: ignore[misc]

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
                out += self._saved_module_originals(tensor, 1, False)
        if stage.has_embedding and self.vision is not None:
            out += vision_slices(self.vision, self.setup)
        if stage.has_embedding and self.encoder is not None:
            out += [Slice(t, t.numel, count, self.finetuning.method == "full" and t.group != "frozen", False, False)
                    for t, count in self.encoder.tensors()]  # "frozen": Whisper's sinusoidal positions
        frozen = self._frozen_groups[1]
        for kind, group, count in self.stage_layer_groups(stage):
            frozen_layers = sum(1 for i in group.indices if i in frozen and stage.first_layer <= i < stage.stop_layer)
            for tensor in group.tensors:
                # bitsandbytes quantises the nn.Linear modules of the frozen base (family rule); fused 3-D
                # experts and custom router modules keep the load dtype.
                quantized = quantize and self.family.quantized_by_bitsandbytes(tensor)
                trainable_count = count - frozen_layers if self.tensor_trains(tensor) else 0
                numel = self._tp_numel(tensor)
                if trainable_count:
                    out.append(Slice(tensor, numel, trainable_count, True, quantized, True, kind))
                    out += self._saved_module_originals(tensor, trainable_count, True, kind)
                if count - trainable_count:
                    out.append(Slice(tensor, numel, count - trainable_count, False, quantized, True, kind))
        if stage.has_head:
            for tensor in inventory.head:
                out.append(Slice(tensor, self._tp_numel(tensor), 1, self.tensor_trains(tensor), False, False))
                out += self._saved_module_originals(tensor, 1, False)
        return out

    def _saved_module_originals(self, tensor: ParameterTensor, count: int, layer_scope: bool, kind: int = -1) -> list[Slice]:
        """The frozen original next to a ``modules_to_save`` copy (ModulesToSaveWrapper.original_module)."""
        if tensor.name not in self.saved_module_tensors:
            return []
        return [Slice(tensor._replace(name=f"{tensor.name}.original_module"), self._tp_numel(tensor), count, False, False, layer_scope, kind)]

    def adapter_slices(self, stage: Stage) -> list[tuple[str, int, int, int]]:
        """LoRA adapters on one rank: (module, elements of A and B per layer, layers, kind position)."""
        targets = self.lora_targets
        if targets is None:
            return []
        tp, ep = self.parallel.tensor_parallel_size, self.parallel.expert_parallel_size
        adapters = []
        for kind, group, count in self.stage_layer_groups(stage):
            for adapter in targets.adapters_of(group):
                numel = adapter.numel_per_layer(tp, ep)
                adapters.append((adapter.module, numel, count, kind))
        if stage.has_head and self.inventory.head_linear_modules():  # Qwen4-Exp's final mixer (kind -1)
            for adapter in targets.adapters_of(self.inventory.head_group()):
                adapters.append((adapter.module, adapter.numel_per_layer(tp, ep), 1, -1))
        model_level = model_level_group(self.family, self.inventory, self.architecture) if stage.has_embedding else None
        if model_level is not None:  # Gemma 4's per_layer_model_projection (kind -1: not a decoder layer)
            for adapter in targets.adapters_of(model_level):
                adapters.append((adapter.module, adapter.numel_per_layer(1, 1), 1, -1))
        if stage.has_embedding and self.encoder is not None:  # the encoder's adapters (kind -1: not a decoder layer)
            encoder = with_encoder_layers(self.inventory, self.encoder).layer_groups[-1]
            for adapter in targets.adapters_of(encoder):
                adapters.append((f"encoder.{adapter.module}", adapter.numel_per_layer(tp, ep), encoder.count, -1))
        return adapters

    # ------------------------------------------------------------------ counts
    @cached_property
    def num_parameters(self) -> int:
        if self.inventory is None:
            model = self.setup.model
            return model.num_parameters  # type: ignore[union-attr]
        vision = self.vision.numel if self.vision is not None else 0
        vision += self.encoder.numel if self.encoder is not None else 0
        return self.inventory.num_parameters + self.num_adapter_parameters + self.num_saved_module_parameters + vision

    @cached_property
    def num_saved_module_parameters(self) -> int:
        """Elements of the trained copies of ``modules_to_save`` (each also kept frozen as the original)."""
        saved, inventory = self.saved_module_tensors, self.inventory
        if not saved:
            return 0
        count = sum(t.numel for t in (*inventory.embedding, *inventory.head) if t.name in saved)
        return count + sum(group.count * sum(t.numel for t in group.tensors if t.name in saved) for group in inventory.layer_groups)

    @cached_property
    def num_adapter_parameters(self) -> int:
        targets = self.lora_targets
        if targets is None:
            return 0
        inventory = self.inventory if self.encoder is None else with_encoder_layers(self.inventory, self.encoder)
        model_level = model_level_group(self.family, self.inventory, self.architecture)
        groups = (
            *inventory.layer_groups,
            *((inventory.head_group(),) if inventory.head_linear_modules() else ()),
            *((model_level,) if model_level is not None else ()),
        )
        return sum(adapter.numel_per_layer(1, 1) * group.count for group in groups for adapter in targets.adapters_of(group))

    @cached_property
    def num_trainable_parameters(self) -> int:
        if self.inventory is None:
            return self.num_parameters
        vision = vision_trainable_numel(self.vision, self.setup) if self.vision is not None else 0
        vision += self.encoder.trainable_numel if self.encoder is not None and self.finetuning.method == "full" else 0
        if self.lora:
            return self.num_adapter_parameters + self.num_saved_module_parameters + vision
        inventory = self.inventory
        count = vision
        # requires_grad, as the frameworks count it: parameters on no path to the loss too (they get no gradient)
        count += sum(t.numel for t in inventory.embedding if self.tensor_trains(t) or t.group == "unused")
        count += sum(t.numel for t in inventory.head if self.tensor_trains(t) or t.group == "unused")
        for group in inventory.layer_groups:
            trainable_layers = sum(1 for i in group.indices if self.layer_trains(i))
            # "no_gradient": requires_grad, but no gradient reaches it (Qwen4-Exp's QSA indexer), or used
            # under torch.no_grad() only (DeepSeek-V3.2's lightning indexer, models/deepseek_v32.py)
            count += trainable_layers * sum(t.numel for t in group.tensors if self.tensor_trains(t) or t.group == NO_GRADIENT_GROUP)
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
        """PEFT keeps adapters in fp32 when the base is 16-bit (``autocast_adapter_dtype=True``); DeepSpeed's bf16/fp16
        engine casts them back (``trainmem.parallel.deepspeed.casts_adapters``)."""
        from .parallel import deepspeed

        return self.precision.compute_weight_dtype if deepspeed.casts_adapters(self) else "fp32"
