"""One optimizer step on one rank, simulated event by event.

The step, as PyTorch, DeepSpeed and FSDP run it (``loss = model(ids, labels=ids).loss;
loss.backward()`` per micro-batch, then ``optimizer.step(); optimizer.zero_grad()``):

1. *start*: weights, optimizer states (and fp32 master weights) are resident; gradients
   were freed by the last ``zero_grad(set_to_none=True)``; DDP's gradient buckets and
   DeepSpeed's reduce bucket are resident buffers.
2. *forward*, layer by layer: ZeRO-3/FSDP gather the layer's weights; each layer adds the
   tensors it saves for backward (``layers.py``) and passes its output on; under
   checkpointing only the layer's input is kept.
3. *loss*: final norm, logits, their fp32 upcast and the cross-entropy (``ends.py``).
4. *backward*, last layer first: the loss head's gradients, then each layer (recomputed
   first under checkpointing) frees its saved tensors and leaves its parameter gradients,
   which ZeRO-2/3 and FSDP reduce-scatter to a shard.
5. later micro-batches repeat 2–4 with the gradients already allocated (accumulated into).
6. *optimizer step* with the implementation's temporaries, then *zero_grad*.

Every layer of a model is the same, so each distinct layer is replayed once on a tape and
the timeline repeats its numbers; the timeline still has one point per layer and event.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from .allocator import rounded
from .architecture import Architecture
from .ends import trace_chunked_loss_head, trace_embedding, trace_final_norm, trace_loss_head
from .layers import LayerKernels, LayerShape, Trace, Trainability, trace_layer
from .heads import encoder_buffer_bytes, trace_task_head
from .tasks import encoded_sequences, label_bytes
from .optimizers import StepTemporaries, TrainableTensor, state_bytes, step_temporaries
from . import packing, padding_mask
from .plan import Plan, Stage
from .tape import DTYPE_BYTES
from .parallel import ddp, deepspeed, dtensor_tp, fsdp, megatron, pipelining
from .timeline import MemoryAccount
from .training import phases as training_phases
from .training import verl_logits
from .training.distillation import trace_gkd_head
from .training.fused_head import trace_fused_head, trace_score_head
from .training.odds_ratio import ODDS_RATIO_MODES, trace_odds_ratio_head
from . import stacks
from .vision import step as vision_step
from .vision.encoders import trace_patch_embedding
from .encoder_decoder import step as encoder_step
from .vision.training import VISION_GROUPS

ZERO3_PREFETCH_ELEMENTS = 50_000_000
"""DeepSpeed stage3_prefetch_bucket_size default (5e7 elements)."""
ZERO3_PERSISTENCE_THRESHOLD = 100_000
"""DeepSpeed stage3_param_persistence_threshold: smaller parameters stay gathered (1e5 elements)."""


@dataclass(frozen=True)
class RankSimulation:
    """The result for one rank kind: the timeline account and what it resolved."""

    stage: Stage
    account: MemoryAccount
    cpu_offload_bytes: int
    description: str
    cpu_offload_parts: tuple[tuple[str, int, str], ...] = ()
    """What ``cpu_offload_bytes`` is made of (trainmem.parallel.host lists it per node)."""


def attention_kernel(plan: Plan) -> str:
    """The attention kernel that runs: fused, eager, or SDPA's math fallback.

    On CUDA, SDPA picks flash or memory-efficient attention; fp32 inputs rule out flash,
    and the memory-efficient kernel cannot do grouped-query attention natively, so fp32 GQA
    falls back to math. On CPU the fused kernel runs only without attention dropout.
    """
    choice = plan.setup.attention
    arch = plan.architecture
    if choice == "eager":
        return "eager"
    if choice == "sdpa-math":
        return "math"
    if arch is None:
        return "fused"
    if arch.attn_logit_softcapping and choice == "sdpa":
        return "eager"  # transformers refuses softcap with SDPA; Gemma 2 trains with eager
    if plan.device == "cpu" and arch.attention_dropout > 0 and choice == "sdpa":
        return "math"
    compute = plan.precision.autocast or plan.precision.compute_weight_dtype
    if plan.device == "cuda" and choice == "sdpa" and compute == "fp32" and arch.kv_heads != arch.num_attention_heads:
        return "math"
    return "fused"


def _shape(plan: Plan, kind: Optional[Architecture] = None) -> LayerShape:
    """Per-rank sizes of a layer (of ``kind``, one of the architecture's layer kinds)."""
    parallel, setup = plan.parallel, plan.setup
    arch = kind or plan.architecture
    assert arch is not None
    tp, cp = parallel.tensor_parallel_size, parallel.context_parallel_size
    rows, row_tokens = packing.row_shape(setup)
    rows = encoded_sequences(arch, rows)
    seq = row_tokens // cp
    if arch.task == "contrastive":  # the main path is the vision tower; sequence_length is the text's (vision/contrastive.py)
        seq = arch.image_tokens
    tokens = rows * seq
    kv_heads = max(1, arch.kv_heads // tp)
    return LayerShape(
        batch=rows,
        seq=seq,
        kv_seq=seq,
        heads=arch.num_attention_heads // tp,
        kv_heads=kv_heads,
        head_dim=arch.resolved_head_dim,
        hidden=arch.hidden_size,
        intermediate=arch.intermediate_size // (parallel.expert_tensor_parallel if arch.is_moe else tp),
        stream_tokens=tokens // tp if parallel.sequence_parallel else tokens,
        experts_per_token=arch.num_experts_per_tok if arch.is_moe else 0,
        local_experts=arch.num_experts // parallel.expert_parallel_size if arch.is_moe else 0,
        shared_intermediate=arch.shared_expert_intermediate_size // tp,
        attention_mask=_materialised_mask(arch, setup.sequence_length) or packing.packed_mask(setup)
        or padding_mask.padding_mask(setup),
        packed_row=packing.packed_mask(setup) or padding_mask.padding_mask(setup),
        cross_seq=plan.source_length if arch.cross_attention else 0,
    )


def _materialised_mask(arch: Architecture, sequence_length: int) -> bool:
    """Whether transformers passes SDPA a 4-D mask instead of ``is_causal``: a sliding window no longer
    than the keys (masking_utils.py ``_ignore_causal_mask_sdpa``: ``kv_length >= local_attention_size``
    cannot skip the mask). Padding masks are not modelled (batches are taken as unpadded)."""
    return arch.layer_sliding and arch.sliding_window is not None and sequence_length >= arch.sliding_window


def _kernels(plan: Plan, selective: bool) -> LayerKernels:
    precision = plan.precision
    quant = plan.finetuning.quantization
    return LayerKernels(
        device=plan.device,
        autocast=precision.autocast,
        weight_dtype=precision.compute_weight_dtype,
        stream_dtype=precision.stream_dtype,
        attention=attention_kernel(plan),
        selective_recompute=selective,
        adapter_dtype=precision.compute_weight_dtype if fsdp.casts_adapters_for_compute(plan) else plan.adapter_dtype,
        lora_rank=plan.finetuning.lora.r if plan.lora else 0,
        lora_dropout=plan.finetuning.lora.lora_dropout if plan.lora else 0.0,
        use_dora=plan.lora and plan.finetuning.lora.use_dora,
        quantized_compute_dtype=quant.compute_dtype if plan.quantized_base else None,
        fp8_matmuls=precision.fp8_matmuls,
        saves_gathered_sequence=dtensor_tp.saves_gathered_sequence(plan),
        linear_saves_input=deepspeed.linear_saves_input(plan),
    )


@dataclass(frozen=True)
class _LayerTraces:
    """The replayed layers of one layer kind."""

    layer: Trace
    """A layer whose input requires grad."""
    first_layer: Trace
    """The stage's first layer, whose input may not require grad (a frozen embedding)."""
    no_grad_layer: Optional[Trace]
    """Full checkpointing: the forward under no_grad."""


@dataclass(frozen=True)
class _Traces:
    """The replayed pieces one rank kind needs, for the first and the later micro-batches."""

    kinds: dict[int, _LayerTraces]
    """By position in ``inventory.layer_groups``: the kinds this stage holds."""
    runs: list[tuple[int, int, int]]
    """The stage's layers in order: (first layer, layers, kind position)."""
    embedding: Optional[Trace]
    head: Optional[Trace]

    def first_run_trace(self) -> Optional[_LayerTraces]:
        return self.kinds[self.runs[0][2]] if self.runs else None


def _traces(plan: Plan, stage: Stage, grads_exist: bool) -> _Traces:
    arch = plan.architecture
    assert arch is not None and plan.inventory is not None
    checkpointing = plan.setup.activation_checkpointing
    shape = _shape(plan)
    kernels = _kernels(plan, selective=checkpointing == "selective")
    trainability = Trainability(plan.module_trains, plan.has_adapter)
    key = (arch, shape, kernels, plan.trainability_key, grads_exist)
    embedding_trains = plan.module_trains(plan.family.names.embed_tokens)
    # HF gradient checkpointing with a frozen embedding calls enable_input_require_grads().
    first_input_grad = embedding_trains or checkpointing == "full" or not stage.has_embedding
    # A VLM's trained projector (or tower) makes the merged input embeddings require grad.
    first_input_grad = first_input_grad or vision_step.features_require_grad(plan)
    runs = plan.stage_layer_runs(stage)
    first_kind = runs[0][2] if runs else None
    kinds: dict[int, _LayerTraces] = {}
    layer_trainability, layer_key = trainability, plan.trainability_key
    if fsdp.computes_frozen_gradients(plan):  # FSDP1: the frozen base of a mixed unit is a view that requires grad
        layer_trainability, layer_key = Trainability(lambda module: True, plan.has_adapter), ("fsdp1 unit", layer_key)
    for position, group, _ in plan.stage_layer_groups(stage):
        kind_arch, kind_shape = group.architecture, _shape(plan, group.architecture)
        kind_key = (kind_arch, kind_shape, kernels, layer_key, grads_exist)
        layer = _cached(
            ("layer", kind_key, True),
            lambda a=kind_arch, sh=kind_shape: trace_layer(a, sh, kernels, layer_trainability, True, grads_exist),
        )
        first = layer
        if position == first_kind and not first_input_grad:
            first = _cached(
                ("layer", kind_key, False),
                lambda a=kind_arch, sh=kind_shape: trace_layer(a, sh, kernels, layer_trainability, False, grads_exist),
            )
        no_grad = None
        if checkpointing == "full":
            frozen = Trainability(lambda module: False, lambda module: False)
            plain = replace(kernels, lora_rank=0)
            no_grad = _cached(
                ("no_grad", kind_arch, kind_shape, plain),
                lambda a=kind_arch, sh=kind_shape: trace_layer(a, sh, plain, frozen, False, False),
            )
        kinds[position] = _LayerTraces(layer, first, no_grad)
    embedding = None
    if stage.has_embedding:
        # A tied embedding's gradient is first made by the head; the embedding's backward adds to it.
        tied = arch.tie_word_embeddings and stage.has_head and embedding_trains
        embedding_rows = dtensor_tp.embedding_gradient_rows(plan, arch.vocab_size, tied)
        embedding = _cached(
            ("embedding", key, tied, embedding_rows, checkpointing),
            lambda: trace_patch_embedding(arch, shape, kernels, trainability, grads_exist)
            if arch.image_size  # a vision encoder (vision/encoders.py)
            else plan.family.trace_embedding(arch, shape, kernels, trainability, grads_exist, tied, checkpointing)
            if arch.bidirectional or getattr(plan.family, "traces_own_embedding", False)  # Gemma 4's per-layer inputs
            else encoder_step.trace_seq2seq_embedding(arch, shape, kernels, trainability, grads_exist, tied, False)
            if arch.cross_attention and (arch.embedding_norm or arch.num_mel_bins)  # BART's / Whisper's decoder
            else trace_embedding(arch, shape, kernels, trainability, grads_exist, tied, embedding_rows),
        )
    head = None
    if stage.has_head:
        vocab = arch.vocab_size // plan.parallel.tensor_parallel_size
        gathered_vocab = dtensor_tp.gathered_logits_vocabulary(plan, arch.vocab_size)
        head_shape = dtensor_tp.loss_head_shape(plan, shape)
        if arch.task != "causal_lm":  # an encoder's task head (heads.py)
            head = _cached(
                ("task_head", key, plan.setup.sequence_length),
                lambda: trace_task_head(arch, head_shape, kernels, trainability, grads_exist,
                                        plan.setup.sequence_length if arch.task == "contrastive" else 0),
            )
        elif plan.setup.training.mode == "gkd":
            head = _cached(
                ("gkd_head", key, vocab), lambda: trace_gkd_head(arch, shape, kernels, trainability, vocab, grads_exist)
            )
        elif plan.setup.training.mode in ODDS_RATIO_MODES:
            head = _cached(
                ("odds_ratio_head", key, vocab),
                lambda: trace_odds_ratio_head(arch, shape, kernels, trainability, vocab, grads_exist),
            )
        elif plan.setup.training.mode == "reward":
            head = _cached(
                ("score_head", key), lambda: trace_score_head(arch, shape, kernels, trainability, grads_exist)
            )
        elif plan.setup.training.mode == "critic":  # PPO's value model (training.critic)
            from .training.critic import trace_value_head

            head = _cached(
                ("value_head", key), lambda: trace_value_head(arch, shape, kernels, trainability, grads_exist)
            )
        elif verl_logits.uses_logits_head(plan):  # verl's log-probs from the whole logits (training.verl_logits)
            entropy = bool(plan.setup.training.resolved("log_prob_entropy"))
            head = _cached(
                ("verl_logits_head", key, vocab, entropy),
                lambda: verl_logits.trace_verl_log_prob_head(arch, shape, kernels, trainability, vocab, grads_exist, entropy),
            )
        elif training_phases.uses_fused_head(plan):
            head = _cached(
                ("fused_head", key, vocab, training_phases.policy_outputs(plan), training_phases.scored_fraction(plan)),
                lambda: trace_fused_head(
                    arch, shape, kernels, trainability, vocab, grads_exist, training_phases.policy_outputs(plan),
                    training_phases.scored_fraction(plan),
                ),
            )
        elif plan.setup.loss == "liger":
            from .liger import trace_liger_loss_head

            head = _cached(
                ("liger_head", key, vocab, head_shape),
                lambda: trace_liger_loss_head(arch, head_shape, kernels, trainability, vocab, grads_exist),
            )
        elif plan.setup.loss == "chunked":
            chunks = plan.setup.loss_chunks
            head = _cached(
                ("chunked_head", key, vocab, chunks, head_shape),
                lambda: trace_chunked_loss_head(arch, head_shape, kernels, trainability, vocab, chunks, grads_exist),
            )
        else:
            # DTensor SP: the final norm runs on the sequence shard, lm_head gathers its input (trace_loss_head)
            head_shape = shape if kernels.saves_gathered_sequence else head_shape
            head = _cached(
                ("head", key, vocab, head_shape, gathered_vocab),
                lambda: trace_loss_head(arch, head_shape, kernels, trainability, vocab, grads_exist, gathered_vocab),
            )
    return _Traces(kinds, runs, embedding, head)


_TRACE_CACHE: dict[tuple, object] = {}
_TRACE_CACHE_SIZE = 512


def _cached(key: tuple, compute):
    """Traces are pure functions of their key; estimates that differ only in parallelism,
    optimizer or GPU reuse them."""
    found = _TRACE_CACHE.get(key)
    if found is None:
        if len(_TRACE_CACHE) >= _TRACE_CACHE_SIZE:
            _TRACE_CACHE.clear()
        found = _TRACE_CACHE[key] = compute()
    return found


# ---------------------------------------------------------------------------- model states


@dataclass(frozen=True)
class ModelStates:
    """Per-rank bytes of the model states, resolved from the plan."""

    weights: int
    weights_detail: str
    adapters: int
    gradients: int
    gradients_per_layer: dict[int, int]
    """By layer kind position: one layer's gradient bytes as stored."""
    gradients_embedding: int
    gradients_head: int
    master_weights: int
    optimizer_states: int
    optimizer_detail: str
    step_temporaries: int
    step_detail: str
    gathered_layer_weights: dict[int, int]
    """By layer kind position: bytes of one layer's full weights in the compute dtype (what ZeRO-3/FSDP gather)."""
    trainable_numel: int
    offloaded_bytes: int
    offloaded_parts: tuple[tuple[str, int, str], ...] = ()
    """What ``offloaded_bytes`` is made of, as (name, bytes, detail): the host side of the rank."""
    largest_trainable_numel: int = 0
    """Elements of the largest trainable tensor on the rank (DeepSpeed sizes offload buffers by it)."""


def model_states(plan: Plan, stage: Stage) -> ModelStates:
    precision, sharding, parallel = plan.precision, plan.sharding, plan.parallel
    grad_bytes = DTYPE_BYTES[precision.gradient_dtype]
    compute_bytes = DTYPE_BYTES[precision.compute_weight_dtype]
    if plan.inventory is None:
        return _count_only_states(plan)
    slices = plan.slices(stage)
    adapters = plan.adapter_slices(stage)
    adapter_numel = sum(per_layer * layers for _, per_layer, layers, _ in adapters)
    weights = sum(plan.weight_bytes(s) for s in slices) // sharding.weights
    adapter_bytes = adapter_numel * DTYPE_BYTES[plan.adapter_dtype] // sharding.weights
    trainable = [s for s in slices if s.trainable]
    trainable_numel = sum(s.total_numel for s in trainable) + adapter_numel
    stored_grad_bytes = DTYPE_BYTES["fp32"] if plan.lora else grad_bytes
    adapter_grad_bytes = DTYPE_BYTES[plan.adapter_dtype] if plan.lora else grad_bytes
    if plan.lora:
        stored_grad_bytes = grad_bytes  # the base's trained tensors: PEFT's modules_to_save copies
    gradients_per_layer: dict[int, int] = {}
    gathered_per_layer: dict[int, int] = {}
    for kind, group, layers in plan.stage_layer_groups(stage):
        layer_trainable = sum(s.total_numel for s in trainable if s.kind == kind) * stored_grad_bytes
        layer_trainable += sum(per_layer * count for _, per_layer, count, k in adapters if k == kind) * adapter_grad_bytes
        gradients_per_layer[kind] = layer_trainable // layers // sharding.gradients
        # One layer's tensors, each once (a tensor trainable in some layers and frozen in others has two slices).
        layer_tensors = {s.tensor.name: s.numel for s in slices if s.kind == kind}
        gathered = sum(layer_tensors.values()) * compute_bytes
        adapter_gathered_bytes = compute_bytes if fsdp.casts_adapters_for_compute(plan) else DTYPE_BYTES[plan.adapter_dtype]
        gathered += sum(per_layer * adapter_gathered_bytes for _, per_layer, _, k in adapters if k == kind)
        gathered_per_layer[kind] = gathered
        if fsdp.computes_frozen_gradients(plan):  # a gradient shard of the layer's whole FlatParameter
            unit_numel = sum(numel for numel, _ in fsdp.unit_layout(plan, group))
            gradients_per_layer[kind] = unit_numel * DTYPE_BYTES[precision.stored_weight_dtype] // sharding.gradients
    embedding_numel = sum(s.total_numel for s in trainable if not s.layer_scope and s.tensor.group == "embeddings")
    head_numel = sum(
        s.total_numel for s in trainable if not s.layer_scope and s.tensor.group not in ("embeddings", *VISION_GROUPS)
    )
    tensors = [TrainableTensor(_rank_shape(s), s.count) for s in trainable]
    adapter_tensors = [TrainableTensor((per_layer,), layers_) for _, per_layer, layers_, _ in adapters]
    tensors += adapter_tensors
    state_dtype = "fp32" if plan.lora else precision.optimizer_state_dtype
    states = state_bytes(plan.optimizer, tensors, state_dtype, plan.device) // sharding.optimizer
    base_tensors = tensors[: len(tensors) - len(adapter_tensors)]
    if plan.lora and base_tensors:  # modules_to_save copies keep the base's dtype (torch.optim: zeros_like(param))
        states = (
            state_bytes(plan.optimizer, adapter_tensors, "fp32", plan.device)
            + state_bytes(plan.optimizer, base_tensors, precision.optimizer_state_dtype, plan.device)
        ) // sharding.optimizer
    scalar = plan.optimizer.scalar_state
    if scalar == "device" or (
        scalar == "host_unless_fused" and (plan.device == "cpu" or plan.optimizer_implementation == "fused")
    ):
        per_adapter = 3 if plan.lora and plan.finetuning.lora.use_dora else 2  # A, B (and DoRA's magnitude)
        stepped = sum(s.count for s in trainable) + per_adapter * sum(layers_ for _, _, layers_, _ in adapters)
        states += 4 * (1 if deepspeed.steps_flat_partition(plan) else stepped)  # one step counter per tensor stepped
    keeps_master = precision.master_weights or deepspeed.keeps_fp32_partition(plan)
    master = trainable_numel * 4 // sharding.optimizer if keeps_master and (not plan.lora or deepspeed.casts_adapters(plan)) else 0
    temporaries = step_temporaries(
        plan.optimizer, plan.optimizer_implementation, tensors, state_dtype, sharding.optimizer
    )
    if deepspeed.steps_flat_partition(plan):  # the client optimizer steps one flat fp32 partition
        flat = [TrainableTensor((deepspeed.flat_partition_numel(plan, trainable_numel),))]
        temporaries = step_temporaries(plan.optimizer, plan.optimizer_implementation, flat, state_dtype, 1)
    if fsdp.steps_flat_shard_views(plan):  # FSDP1: each parameter's view of the rank's FlatParameter chunk
        temporaries = _flat_shard_temporaries(plan, trainable, state_dtype)
    if fsdp.computes_frozen_gradients(plan) and not base_tensors:  # FSDP1 + LoRA: the adapters' views on the rank
        states, temporaries = _flat_shard_adapter_states(plan, stage, state_dtype)
    if plan.lora and base_tensors:
        ends = [s for s in trainable if not s.layer_scope]
        ordered = (
            [TrainableTensor(_rank_shape(s), s.count) for s in ends if s.tensor.group == "embeddings"],
            [TrainableTensor(_rank_shape(s), s.count) for s in trainable if s.layer_scope],
            [TrainableTensor(_rank_shape(s), s.count) for s in ends if s.tensor.group != "embeddings"],
        )
        temporaries = _mixed_dtype_temporaries(plan, adapter_tensors, ordered, sharding.optimizer)
    largest = max((s.numel for s in trainable), default=0)
    offloaded_parts: list[tuple[str, int, str]] = []
    if parallel.offload_optimizer:
        offloaded_parts += [
            ("fp32 master weights", master, "the rank's fp32 partition" + (" (pinned)" if parallel.zero_stage < 3 else "")),
            ("optimizer states", states, opt_detail_for(plan, state_dtype, sharding.optimizer)),
        ]
        offloaded_parts += deepspeed.offloaded_gradient_parts(plan, trainable_numel, largest)
        states, master = 0, 0
        temporaries = replace(temporaries, bytes=0, description="the optimizer steps on the CPU")
    if parallel.offload_parameters:
        offloaded_parts.append(("weights", weights, f"{precision.stored_weight_dtype} weight partition"))
        offloaded_parts += fsdp.offloaded_gradient_parts(plan, trainable_numel)
        weights = 0
    offloaded_parts = [part for part in offloaded_parts if part[1]]
    offloaded = sum(part[1] for part in offloaded_parts)
    detail = f"{precision.stored_weight_dtype}"
    if plan.quantized_base:
        quant = plan.finetuning.quantization
        detail = f"{quant.quant_type if quant.bits == 4 else 'int8'} base{' + double quantization' if quant.double_quant else ''}"
        kept = [s for s in slices if s.layer_scope and not s.quantized and s.tensor.group in ("experts", "router")]
        if kept:  # bitsandbytes converts nn.Linear modules only (models/family.py quantized_by_bitsandbytes)
            kept_bytes = sum(plan.weight_bytes(s) for s in kept) // sharding.weights
            detail += f"; fused experts and routers unquantised ({kept_bytes / 2**30:.2f} GiB: bitsandbytes converts nn.Linear only)"
    if plan.saved_module_tensors:
        detail += ", with the trained copies and frozen originals of modules_to_save"
    if sharding.weights > 1:
        detail += f", sharded over {sharding.weights} ranks"
    if parallel.tensor_parallel_size > 1:
        detail += f", tensor parallel {parallel.tensor_parallel_size}"
    opt_detail = opt_detail_for(plan, state_dtype, sharding.optimizer)
    gradients = (adapter_numel * adapter_grad_bytes + (trainable_numel - adapter_numel) * stored_grad_bytes) // sharding.gradients
    if fsdp.computes_frozen_gradients(plan):  # every layer unit's gradient shard (the root holds no adapter)
        gradients = sum(gradients_per_layer[kind] * layers for kind, _, layers in plan.stage_layer_groups(stage))
    return ModelStates(
        weights=weights,
        weights_detail=detail,
        adapters=adapter_bytes,
        gradients=gradients,
        gradients_per_layer=gradients_per_layer,
        gradients_embedding=embedding_numel * grad_bytes // sharding.gradients,
        gradients_head=head_numel * grad_bytes // sharding.gradients,
        master_weights=master,
        optimizer_states=states,
        optimizer_detail=opt_detail,
        step_temporaries=temporaries.bytes,
        step_detail=temporaries.description,
        gathered_layer_weights=gathered_per_layer,
        trainable_numel=trainable_numel,
        offloaded_bytes=offloaded,
        offloaded_parts=tuple(offloaded_parts),
        largest_trainable_numel=largest,
    )


def opt_detail_for(plan: Plan, state_dtype: str, shards: int) -> str:
    detail = f"{plan.optimizer.display_name}, {state_dtype} states"
    return detail + (f", sharded over {shards} ranks" if shards > 1 else "")


def _mixed_dtype_temporaries(plan: Plan, adapters: list, copies: tuple[list, list, list], shard_factor: int):
    """Step scratch for fp32 adapters next to ``modules_to_save`` copies in the base's dtype.

    foreach: torch.optim groups the tensors by dtype and steps the groups one after the other
    (torch/optim/optimizer.py ``_group_tensors_by_device_and_dtype``): the larger group's scratch is the
    peak. A per-parameter loop visits ``model.parameters()`` in order (the embedding's copy, the layers
    with their adapters, the head's copy), so the adapters are listed between the copies, each counted in
    elements of the copies' dtype so that its bytes come out right."""
    kind, implementation = plan.optimizer, plan.optimizer_implementation
    copy_dtype = plan.precision.optimizer_state_dtype
    embedding, layers, head = copies
    if implementation == "foreach":
        parts = [
            step_temporaries(kind, implementation, adapters, "fp32", shard_factor),
            step_temporaries(kind, implementation, embedding + layers + head, copy_dtype, shard_factor),
        ]
        return max(parts, key=lambda part: part.bytes)
    ratio = DTYPE_BYTES["fp32"] // DTYPE_BYTES[copy_dtype]
    as_copies = [TrainableTensor((t.numel * ratio,), t.count) for t in adapters]
    return step_temporaries(kind, implementation, embedding + layers + as_copies + head, copy_dtype, shard_factor)


def _flat_shard_temporaries(plan: Plan, trainable: list, state_dtype: str) -> StepTemporaries:
    """The step's temporaries on FSDP1's heaviest rank: the parameters of a layer form one unit (the same views in
    every layer of that kind), everything outside the layers the root unit (trainmem.parallel.fsdp.flat_shard_views).
    Only the trainable tensors are laid out (a unit's frozen tensors would shift the chunk boundaries)."""
    shards = max(1, plan.sharding.weights)
    units: dict[object, list] = {}
    for s in trainable:
        units.setdefault(s.kind if s.layer_scope else "root", []).append(s)
    ranks = fsdp.representative_ranks([[m.numel for m in members] for members in units.values()], shards)
    view_of: dict[int, list[int]] = {}  # id(slice) -> its view's numel on each representative rank
    for members in units.values():
        per_rank = fsdp.flat_shard_views([m.numel for m in members], shards, ranks)
        for position, s in enumerate(members):
            view_of[id(s)] = [views[position] for views in per_rank]
    distinct = {tuple(view_of[id(s)][index] for s in trainable) for index in range(len(ranks))}
    heaviest = StepTemporaries(0, "updates in place")
    for rank_views in distinct:
        views = [TrainableTensor((numel,), s.count) for s, numel in zip(trainable, rank_views) if numel]
        rank_temporaries = step_temporaries(plan.optimizer, plan.optimizer_implementation, views, state_dtype, 1)
        heaviest = max(heaviest, rank_temporaries, key=lambda t: t.bytes)
    return heaviest


def _flat_shard_adapter_states(plan: Plan, stage: Stage, state_dtype: str) -> tuple[int, StepTemporaries]:
    """FSDP1 + LoRA: the optimizer states (step counters included) and the step's temporaries on the rank whose
    FlatParameter chunks hold the most adapter elements (trainmem.parallel.fsdp.adapter_views_per_rank); a rank
    holding none of an adapter's elements has no state for it (its view's ``.grad`` is None)."""
    kind = plan.optimizer
    scalar = kind.scalar_state
    counts_steps = scalar == "device" or (
        scalar == "host_unless_fused" and (plan.device == "cpu" or plan.optimizer_implementation == "fused")
    )
    heaviest = (0, StepTemporaries(0, "updates in place"))
    for views in fsdp.adapter_views_per_rank(plan, stage):
        tensors = [TrainableTensor((numel,), count) for numel, count in views]
        states = state_bytes(kind, tensors, state_dtype, plan.device)
        states += 4 * sum(count for _, count in views) if counts_steps else 0
        temporaries = step_temporaries(kind, plan.optimizer_implementation, tensors, state_dtype, 1)
        heaviest = max(heaviest, (states, temporaries), key=lambda pair: (pair[0], pair[1].bytes))
    return heaviest


def _rank_shape(slice_) -> tuple[int, ...]:
    """The shape of a tensor's slice on this rank (tensor/expert parallelism split its first dimension)."""
    shape = slice_.tensor.shape
    if slice_.numel == slice_.tensor.numel or len(shape) < 2:
        return shape if slice_.numel == slice_.tensor.numel else (slice_.numel,)
    inner = slice_.tensor.numel // shape[0]
    return (slice_.numel // inner, *shape[1:]) if slice_.numel % inner == 0 else (slice_.numel,)


def _count_only_states(plan: Plan) -> ModelStates:
    """Model states from a bare parameter count (one tensor; activations unknown)."""
    precision, sharding = plan.precision, plan.sharding
    n = plan.num_parameters
    tensors = [TrainableTensor((n,))]
    states = state_bytes(plan.optimizer, tensors, precision.optimizer_state_dtype) // sharding.optimizer
    master = n * 4 // sharding.optimizer if precision.master_weights or deepspeed.keeps_fp32_partition(plan) else 0
    offloaded = 0
    if plan.parallel.offload_optimizer:
        offloaded, states, master = states + master, 0, 0
    weights = n * DTYPE_BYTES[precision.stored_weight_dtype] // sharding.weights
    if plan.parallel.offload_parameters:
        offloaded, weights = offloaded + weights, 0
    return ModelStates(
        weights=weights,
        weights_detail=precision.stored_weight_dtype,
        adapters=0,
        gradients=n * DTYPE_BYTES[precision.gradient_dtype] // sharding.gradients,
        gradients_per_layer={},
        gradients_embedding=0,
        gradients_head=0,
        master_weights=master,
        optimizer_states=states,
        optimizer_detail=plan.optimizer.display_name,
        step_temporaries=0,
        step_detail="",
        gathered_layer_weights={},
        trainable_numel=n,
        offloaded_bytes=offloaded,
    )


# ---------------------------------------------------------------------------- the step


def simulate_rank(plan: Plan, stage: Stage) -> RankSimulation:
    """Simulate one optimizer step on a rank of ``stage`` and return its memory account."""
    states = model_states(plan, stage)
    account = MemoryAccount()
    training_phases.resident_copies(plan, stage, account)
    _resident_states(plan, states, account)
    account.set("overhead", "pipeline receive buffers", pipelining.receive_buffer_bytes(plan, stage), pipelining.BUFFERS_DETAIL)
    if plan.architecture is None:
        _count_only_step(plan, states, account)
    else:
        accumulation = plan.setup.gradient_accumulation_steps
        in_flight = stage.in_flight_micro_batches
        first = _traces(plan, stage, grads_exist=False)
        # ZeRO-2 moves every new .grad into its bucket: a later micro-batch's gradients are fresh tensors again.
        later_grads_exist = not deepspeed.gradients_live_in_bucket(plan)
        later = _traces(plan, stage, grads_exist=later_grads_exist) if accumulation > 1 else first
        training_phases.record_generation_phases(plan, account)
        chunk_gradients: dict[int, int] = {}  # interleaved 1F1B: each local chunk's gradient bytes (first pass)
        _micro_batch(plan, stage, states, first, account, micro_batch=1, in_flight=in_flight, grads_exist=False, chunk_gradients=chunk_gradients)
        if accumulation > 1:
            if pipelining.runs_torch_pipelining(plan):
                in_flight = pipelining.later_in_flight(plan, stage)
            _micro_batch(plan, stage, states, later, account, micro_batch=2, in_flight=in_flight, grads_exist=later_grads_exist, chunk_gradients=chunk_gradients)
        _optimizer_step(plan, states, account)
    return RankSimulation(stage, account, states.offloaded_bytes, _stage_name(plan, stage), states.offloaded_parts)


def _stage_name(plan: Plan, stage: Stage) -> str:
    if plan.parallel.pipeline_parallel_size == 1:
        return "every rank" if plan.parallel.num_gpus > 1 else "the GPU"
    if stage.index == 0:
        return "first pipeline stage"
    if stage.has_head:
        return "last pipeline stage"
    return pipelining.middle_name(plan, stage)


def _resident_states(plan: Plan, states: ModelStates, account: MemoryAccount) -> None:
    parallel = plan.parallel
    account.set("parameters", "weights", states.weights, states.weights_detail)
    account.set("parameters", "LoRA adapters", states.adapters, "fp32 adapters (PEFT upcasts them)")
    buffers_detail = (
        "position_ids and token_type_ids (int64)"
        if plan.architecture is not None and plan.architecture.bidirectional
        and plan.architecture.position_embedding == "learned"
        else "RoPE inv_freq and original_inv_freq"
    )
    account.set("parameters", "buffers", _buffer_bytes(plan), buffers_detail)
    account.set("optimizer_states", "master weights", states.master_weights, "fp32 copy of the trainable weights")
    account.set("optimizer_states", "optimizer states", states.optimizer_states, states.optimizer_detail)
    resident = _resident_gradient_buffer(plan)
    if resident:
        account.set("gradients", "gradients", states.gradients, resident)
    account.set("overhead", "DDP gradient buckets", ddp.gradient_bucket_bytes(plan, states.gradients), ddp.DETAIL)
    account.set(
        "overhead",
        "ZeRO-Offload gradient staging",
        deepspeed.offload_gpu_staging_bytes(plan, states.largest_trainable_numel),
        deepspeed.OFFLOAD_STAGING_DETAIL,
    )
    if deepspeed.bucket_is_resident(plan):
        account.set(
            "overhead", "ZeRO reduce bucket", deepspeed.reduce_bucket_bytes(plan), deepspeed.BUCKET_DETAIL_RESIDENT
        )
    if parallel.strategy == "zero" and parallel.zero_stage == 3:
        account.set(
            "parameters",
            "persistent gathered parameters",
            _persistent_small_params(plan),
            "parameters under stage3_param_persistence_threshold stay gathered",
        )
    setup = plan.setup
    account.set(
        "activations",
        "input batch",
        _input_batch_bytes(plan)
        + rounded(packing.position_ids_bytes(setup), plan.device)
        + rounded(padding_mask.attention_mask_input_bytes(setup), plan.device)
        + encoder_step.source_ids_bytes(plan),
        ("token ids (int64), also used as labels" if arch_task(plan) == "causal_lm"
         else "labels (int64)" if arch_task(plan) == "image_classification" else "token ids and labels (int64)")
        + (", and the packed row's position_ids" if setup.batch == "packed" else "")
        + (", and the collator's attention_mask (int64)" if setup.batch == "padded_masked" else ""),
    )
    account.set("activations", "pixel values", vision_step.pixel_values_bytes(plan), "the processor's fp32 pixel_values")
    account.record("step start", "start", 1)


def arch_task(plan: Plan) -> str:
    return plan.architecture.task if plan.architecture is not None else "causal_lm"


def _input_batch_bytes(plan: Plan) -> int:
    """The batch made before the step: int64 token ids (the labels of a causal LM), and the labels
    of an encoder's task (``tasks.label_bytes``), each its own tensor."""
    setup, arch = plan.setup, plan.architecture
    if arch is None or arch.task == "causal_lm":
        return rounded(setup.micro_batch_size * setup.sequence_length * 8, plan.device)
    if arch.image_size:  # a vision encoder: the labels (its fp32 pixel_values are the "pixel values" line)
        return rounded(label_bytes(arch, setup.micro_batch_size, setup.sequence_length), plan.device)
    ids = encoded_sequences(arch, setup.micro_batch_size) * setup.sequence_length * 8
    labels = label_bytes(arch, setup.micro_batch_size, setup.sequence_length)
    return rounded(ids, plan.device) + (rounded(labels, plan.device) if labels else 0)


def _buffer_bytes(plan: Plan) -> int:
    """Non-parameter tensors of the model, converted with the model's dtype: transformers' rotary
    embedding keeps ``inv_freq`` and ``original_inv_freq`` (head_dim / 2 values each) per rotary table
    (Gemma 3 has one per layer type), and Gemma 3's scaled embedding its one-element ``embed_scale``."""
    arch = plan.architecture
    if arch is None:
        return 0
    element = DTYPE_BYTES[plan.precision.stored_weight_dtype]
    total = rounded(element, plan.device) if arch.embedding_scale_buffer else 0
    if arch.position_embedding == "rope" and getattr(plan.family, "has_rotary_embedding", lambda _: True)(arch):
        total += arch.rope_sets * 2 * rounded((arch.rotary_dim // 2) * element, plan.device)
    if getattr(plan.family, "final_logits_bias", False):  # BART's (1, V) final_logits_bias buffer
        total += rounded(arch.vocab_size * element, plan.device)
    if hasattr(plan.family, "layer_buffer_numels"):  # e.g. Falcon-H1's per-layer mup_vector
        total += sum(rounded(numel * element, plan.device) for numel in plan.family.layer_buffer_numels(arch))
    return total + encoder_buffer_bytes(arch, plan.device)


def _persistent_small_params(plan: Plan) -> int:
    """ZeRO-3's parameters under stage3_param_persistence_threshold, gathered on every rank besides their
    partitions. Not on one rank: with a partition world size of 1 DeepSpeed "gathers" by pointing the
    parameter at its partition (``_no_gather_coalesced``/``NoGatherHandle``, deepspeed/runtime/zero/
    partition_parameters.py; measured: ``zero3-llama-7m-bf16-fp32grads-w1``, one copy of the weights)."""
    if plan.inventory is None or plan.sharding.weights == 1:
        return 0
    compute = DTYPE_BYTES[plan.precision.compute_weight_dtype]
    small = sum(
        group.count * sum(t.numel for t in group.tensors if t.numel < ZERO3_PERSISTENCE_THRESHOLD)
        for group in plan.inventory.layer_groups
    )
    adapters = 0  # PEFT's lora_A and lora_B are parameters of their own, small ones among them
    if plan.lora_targets is not None:
        for group in plan.inventory.layer_groups:
            for adapter in plan.lora_targets.adapters_of(group):
                pair = (adapter.rank * adapter.in_features * adapter.experts, adapter.out_features * adapter.rank * adapter.experts)
                adapters += group.count * sum(numel for numel in pair if numel < ZERO3_PERSISTENCE_THRESHOLD)
    return small * compute + adapters * DTYPE_BYTES[plan.adapter_dtype]


def _gathered_weights(plan: Plan, layer: int) -> tuple[int, str]:
    """Weights ZeRO-3 / FSDP hold gathered while a layer of ``layer`` bytes computes: it and what is prefetched."""
    parallel = plan.parallel
    if plan.sharding.weights == 1 and not (parallel.strategy == "fsdp" and plan.precision.recipe.startswith("fsdp")):
        return 0, ""
    if plan.sharding.weights == 1:
        return layer, "FSDP keeps an unsharded low-precision copy of the layer"
    if parallel.strategy == "fsdp":
        return 2 * layer, "this layer and the prefetched next one (FSDP limit_all_gathers)"
    prefetch = min(layer, ZERO3_PREFETCH_ELEMENTS * DTYPE_BYTES[plan.precision.compute_weight_dtype])
    return layer + prefetch, "this layer and the prefetch bucket (stage3_prefetch_bucket_size 5e7)"


def _top_apart(indices: list[int], tops: frozenset[int]) -> list[list[int]]:
    """Ascending layer ``indices`` with any of ``tops`` (the highest of a chunk) cut off into its own group, first."""
    top = [i for i in indices if i in tops]
    if not top or len(indices) == 1:
        return [indices]
    return [[top[-1]], [i for i in indices if i != top[-1]]]


def _backward_moment(
    trace, saved: int, copies: int, stream: int, grads_exist: bool, recompute: bool, saved_name: str, copies_name: str
) -> dict:
    """The high-water mark of one layer's (or the embedding's) backward, as changes to the parts.

    ``trace``'s replay says what its peak is made of: saved tensors not yet released,
    activation gradients (the incoming one included), parameter gradients. The account holds
    the layer's ``saved`` activations and ``copies`` of weights and one ``stream``-sized
    incoming gradient; the moment releases what is gone and adds what is new. Under
    recomputation the account holds only the layer's input, and the forward runs again first.
    """
    activation_grads = trace.backward_peak_activation_grad_bytes
    parameter_grads = trace.backward_peak_grad_bytes
    changes = {
        ("activations", "activation gradient"): min(0, activation_grads - stream),
        ("activations", "backward working memory"): max(0, activation_grads - stream)
        + (parameter_grads if grads_exist else 0),
        ("gradients", "gradients"): 0 if grads_exist else parameter_grads,
    }
    if not recompute:
        changes[("activations", saved_name)] = trace.backward_peak_saved_activation_bytes - saved
        changes[("parameters", copies_name)] = trace.backward_peak_saved_weight_copy_bytes - copies
        return changes
    recomputed = trace.backward_peak_saved_activation_bytes - (saved if trace.input_saved else 0)
    backward_total = recomputed + trace.backward_peak_saved_weight_copy_bytes + activation_grads + parameter_grads
    forward_total = trace.forward_peak_bytes + stream  # the recomputation, with the incoming gradient alive
    if forward_total > backward_total:  # the recomputed forward's peak: its weight copies (autocast) are parameters
        copies_at_peak = min(trace.saved_weight_copy_bytes, trace.forward_peak_bytes)
        return {
            ("activations", "backward working memory"): trace.forward_peak_bytes - copies_at_peak,
            ("parameters", copies_name): copies_at_peak,
        }
    changes[("activations", "backward working memory")] += recomputed
    changes[("parameters", copies_name)] = trace.backward_peak_saved_weight_copy_bytes
    return changes


def _gathered_vocabulary_weights(plan: Plan) -> int:
    """ZeRO-3 / FSDP FULL_SHARD gather the embedding (or head) weight while it computes: vocab × h."""
    if plan.sharding.weights == 1 or plan.architecture is None:
        return 0
    arch = plan.architecture
    vocab = arch.vocab_size // plan.parallel.tensor_parallel_size
    return vocab * arch.hidden_size * DTYPE_BYTES[plan.precision.compute_weight_dtype]


def _micro_batch(
    plan: Plan,
    stage: Stage,
    states: ModelStates,
    traces: _Traces,
    account: MemoryAccount,
    micro_batch: int,
    in_flight: int,
    grads_exist: bool,
    chunk_gradients: Optional[dict[int, int]] = None,
) -> None:
    """Forward and backward of one micro-batch (``in_flight`` of them overlap on a pipeline stage).

    Under interleaved 1F1B each of the rank's chunks backs up at its own moment of the rank's order
    (:func:`pipelining.interleaved_chunk_moments`): the chunks in flight, and in the later pass the
    gradients that exist, are set again as the backward enters each chunk; the first pass notes each
    chunk's gradient bytes in ``chunk_gradients`` for the later one.

    Parts kept during the forward: "saved for backward" (what finished layers saved),
    "hidden state" (the current layer's input) and "embedding output" (``inputs_embeds``,
    referenced by the model's forward until it returns; it is also the first layer's input).
    """
    checkpointing = plan.setup.activation_checkpointing
    accumulation = plan.setup.gradient_accumulation_steps
    suffix = (
        "" if accumulation == 1 else (" (micro-batch 1)" if micro_batch == 1 else f" (micro-batches 2–{accumulation})")
    )
    gathered_by_kind = {kind: _gathered_weights(plan, layer) for kind, layer in states.gathered_layer_weights.items()}
    gathered_detail = next((detail for _, detail in gathered_by_kind.values() if detail), "")
    gathered_any = any(bytes_ for bytes_, _ in gathered_by_kind.values())
    zero3_keeps = deepspeed.zero3_keeps_everything_gathered(plan)
    ends_gathered = 0 if fsdp.runs_fsdp_units(plan) or zero3_keeps else _gathered_vocabulary_weights(plan)
    kept_by_kind = {
        kind: fsdp.kept_after_forward(plan, layer) + deepspeed.kept_after_forward(plan, layer)
        for kind, layer in states.gathered_layer_weights.items()
    }
    stream = rounded(
        _shape(plan).stream_tokens * plan.architecture.hidden_size * plan.family.residual_streams(plan.architecture)
        * DTYPE_BYTES[plan.precision.stream_dtype],
        plan.device,
    )
    recompute = checkpointing == "full"
    saved_name = "saved for backward (checkpointed layer inputs)" if recompute else "saved for backward"
    copies_name = "autocast weight copies"
    copies_detail = f"{plan.precision.autocast} copies of the weights, saved for backward"

    def kept_by(trace: Trace) -> tuple[int, int]:
        """(activation, weight-copy) bytes a layer keeps until its backward."""
        if recompute:
            return stream, 0  # the checkpoint keeps the layer's input only
        return trace.saved_activation_bytes, trace.saved_weight_copy_bytes

    per_layer = sum(count * sum(kept_by(traces.kinds[kind].layer)) for _, count, kind in traces.runs)
    moments = pipelining.chunk_moments(plan, stage, micro_batch)  # interleaved 1F1B: per chunk (in flight, with gradients)
    chunk_gradients = {} if chunk_gradients is None else chunk_gradients
    gradients_at_start = account.get("gradients", "gradients")
    if moments is not None and micro_batch > 1 and chunk_gradients:
        _set_chunk_gradients(account, moments, len(moments) - 1, chunk_gradients, gradients_at_start)
    # outputs already backwarded that a forward send work still holds (1F1B's warm-up send_work, GPipe's list)
    sent = pipelining.sent_outputs_bytes(plan, stage) if micro_batch > 1 else 0
    if in_flight > 1 or sent:  # 1F1B warm-up: earlier micro-batches' activations wait for their backward
        if pipelining.runs_torch_pipelining(plan):
            layers = pipelining.earlier_layers(plan, stage, in_flight)
        else:
            layers = megatron.earlier_micro_batches_layers(plan, stage)
        held = int(layers * per_layer / max(1, stage.num_layers))
        held += pipelining.earlier_outputs_bytes(
            plan, stage, in_flight, traces.head.saved_activation_bytes if traces.head else 0, _rotary_bytes(plan)
        )
        held += sent
        schedule = (
            f"interleaved 1F1B, {plan.parallel.pipeline_virtual_stages} virtual stages"
            if plan.parallel.pipeline_virtual_stages > 1 and stage.index == 0
            else "1F1B schedule"
        )
        if moments is not None:  # the same, and what the send works hold, at the backward of the last chunk
            held = pipelining.chunk_held_bytes(plan, stage, len(moments) - 1, moments[-1], per_layer, _rotary_bytes(plan))
        account.set(
            "activations",
            "earlier micro-batches in flight",
            held,
            f"{in_flight - 1} micro-batches waiting for their backward ({schedule})",
        )

    # ---- forward
    training_phases.record_before_forward(plan, account, micro_batch, suffix)
    embedding = traces.embedding
    if embedding is not None:
        encoder_step.forward(plan, account, micro_batch, suffix, _kernels(plan, False), grads_exist)
        account.set("activations", "embedding output", embedding.output_bytes, "kept until the forward returns")
        account.add("activations", saved_name, embedding.saved_activation_bytes)
        account.add("parameters", copies_name, embedding.saved_weight_copy_bytes)  # a patch conv's cast weight
        # What the embedding's forward holds at its high-water mark besides what it keeps (BERT's three lookups
        # and their sums before the LayerNorm): a transient of the embedding moment.
        embedding_working = embedding.forward_peak_bytes - embedding.output_bytes - embedding.saved_activation_bytes
        embedding_working -= embedding.saved_weight_copy_bytes
        account.record(
            "embedding" + suffix,
            "forward",
            micro_batch,
            {
                ("parameters", "gathered weights"): ends_gathered,
                ("activations", "embedding working memory"): max(0, embedding_working),
            },
        )
        vision_step.forward(plan, account, micro_batch, suffix, _kernels(plan, False), grads_exist, stream)
    else:
        account.set("activations", "hidden state", stream, "the current layer's input")
    account.set("activations", "rotary cos/sin", _rotary_bytes(plan), "position embeddings shared by all layers")
    for name, nbytes, detail in _forward_locals(plan):
        account.set("activations", name, nbytes, detail)
    if packing.packed_mask(plan.setup):
        account.set("activations", "packed-row attention mask", rounded(packing.mask_bytes(plan.setup), plan.device), packing.MASK_DETAIL)
    if padding_mask.padding_mask(plan.setup):
        account.set("activations", "padding attention mask", rounded(padding_mask.mask_bytes(plan.setup), plan.device), padding_mask.MASK_DETAIL)
    account.set("parameters", "FSDP root unit (unsharded)", fsdp.root_unit_bytes(plan, stage), fsdp.ROOT_DETAIL)
    if zero3_keeps:
        account.set("parameters", "persistent gathered parameters", 0)  # among the kept ones now
        account.set(
            "parameters",
            "gathered embedding and head",
            fsdp.ends_bytes(plan, stage) - deepspeed.released_frozen_embedding_bytes(plan, stage),
            deepspeed.ZERO3_KEPT_DETAIL,
        )
    if any(kept_by_kind.values()):
        account.details[("parameters", "unsharded layers kept for backward")] = (
            deepspeed.ZERO3_KEPT_DETAIL if zero3_keeps else fsdp.KEPT_DETAIL
        )
    cache_detail = "weight casts autocast keeps until the forward's autocast region exits"
    account.details[("parameters", copies_name)] = copies_detail
    account.details[("parameters", "autocast cache")] = cache_detail
    for run_index, (first_index, count, kind) in enumerate(traces.runs):
        kind_traces = traces.kinds[kind]
        if gathered_any:
            forward_gathered = fsdp.forward_gathered_bytes(
                plan, states.gathered_layer_weights[kind], gathered_by_kind[kind][0]
            )
            account.set("parameters", "gathered weights", forward_gathered, gathered_detail)
        pieces = [(kind_traces.first_layer, [first_index]), (kind_traces.layer, list(range(first_index + 1, first_index + count)))]
        if run_index:
            pieces = [(kind_traces.layer, list(range(first_index, first_index + count)))]
        for trace, indices in pieces:
            if not indices:
                continue
            working_trace = kind_traces.no_grad_layer if recompute else trace
            working = working_trace.forward_peak_bytes
            # The weight casts alive at the layer's forward peak are parameters, not activations.
            working_casts = min(working, working_trace.forward_peak_weight_copy_bytes)
            saved, copies = kept_by(trace)
            delta = {
                ("activations", saved_name): saved,
                ("parameters", copies_name): copies,
                # Under checkpointing nothing is saved, and every cached cast waits for the region's end.
                ("parameters", "autocast cache"): trace.cached_weight_copy_bytes
                if recompute
                else trace.cache_only_weight_copy_bytes,
                ("parameters", "unsharded layers kept for backward"): kept_by_kind.get(kind, 0),
            }
            if getattr(plan.family, "encoder_keeps_layer_outputs", False) and not recompute:
                # the encoder collects every layer's output (all_hidden_states) until the base model returns
                takes_embedding = indices[0] == stage.first_layer and embedding is not None
                delta[("activations", LAYER_OUTPUTS)] = 0 if takes_embedding or trace.input_saved else stream
            labels = [f"layer {i} forward{suffix}" for i in indices]
            account.record_series(
                labels,
                "forward",
                micro_batch,
                {
                    ("activations", "layer working memory"): working - working_casts,
                    ("parameters", "autocast cache"): working_casts,
                },
                delta,
            )
            if indices[0] == stage.first_layer and embedding is not None and (recompute or trace.input_saved):
                account.add("activations", "embedding output", -stream)  # now counted among the saved tensors
            account.set("activations", "hidden state", trace.output_bytes, "the current layer's input")
    if gathered_any:
        account.set("parameters", "gathered weights", 0)

    if packing.packed_mask(plan.setup) and plan.setup.activation_checkpointing != "full":
        account.set("activations", "packed-row attention mask", 0)  # freed when the decoder's forward returns
    if padding_mask.padding_mask(plan.setup) and plan.setup.activation_checkpointing != "full":
        account.set("activations", "padding attention mask", 0)
    # ---- loss, and the start of backward
    head = traces.head
    base_model_returned = getattr(plan.family, "embedding_output_freed_before_head", False) or arch_task(plan) == "embedding"
    if head is not None and base_model_returned:
        # the base model returned before the task head (the embedding task pools the bare encoder's output)
        account.set("activations", "embedding output", 0)
        account.set("activations", LAYER_OUTPUTS, 0)
    for name, _, _ in _forward_locals(plan):
        account.set("activations", name, 0)  # the base model's forward returned
    writeback = _fsdp1_writeback_shards(plan, states, traces)
    if head is not None:
        training_phases.record_teacher_forward(plan, account, micro_batch, suffix)
        account.record(
            "loss" + suffix,
            "loss",
            micro_batch,
            training_phases.head_weight_casts(plan, {
                ("activations", "logits and loss temporaries"): head.forward_peak_bytes
                - head.cache_only_weight_copy_bytes
                - head.saved_weight_copy_bytes
                - account.get("activations", "hidden state"),
                ("parameters", "autocast cache"): head.cache_only_weight_copy_bytes + head.saved_weight_copy_bytes,
                ("parameters", "gathered weights"): ends_gathered,
            }),
        )
        account.set("activations", "hidden state", 0)
        account.set("activations", "embedding output", 0)
        account.set("activations", LAYER_OUTPUTS, 0)
        account.set("parameters", "autocast cache", 0)  # the autocast region ends with the loss
        account.set("activations", stacks.DISCARDED, 0)  # the model's output object is dropped after the loss
        encoder_step.end_forward(plan, account, _kernels(plan, False))
        account.set("activations", "pipeline stage output", pipelining.output_bytes(plan, stage), pipelining.OUTPUT_DETAIL)
        account.add(
            "activations",
            "saved by the loss head",
            head.saved_activation_bytes,
            "the final norm's tensors and the fp32 log-softmax of the logits",
        )
        account.add("parameters", copies_name, head.saved_weight_copy_bytes, copies_detail)
        training_phases.record_reference_forward(plan, account, micro_batch, suffix)
        grads_now = head.backward_peak_grad_bytes
        if writeback:  # the root's pre-backward: the root's copy, and the prefetched last layer's
            account.add("gradients", WRITEBACK, writeback[0], fsdp.WRITEBACK_DETAIL)
        account.record(
            "loss backward" + suffix,
            "backward",
            micro_batch,
            training_phases.head_weight_casts(plan, {
                ("activations", "saved by the loss head"): head.backward_peak_saved_activation_bytes
                - head.saved_activation_bytes,
                ("parameters", copies_name): head.backward_peak_saved_weight_copy_bytes - head.saved_weight_copy_bytes,
                ("activations", "logits and loss temporaries"): head.backward_peak_activation_grad_bytes
                + (grads_now if grads_exist else 0),
                ("gradients", "gradients"): 0 if grads_exist else grads_now,
                ("gradients", WRITEBACK): writeback[1] if writeback else 0,
                ("parameters", "gathered weights"): ends_gathered
                + fsdp.backward_prefetch_bytes(plan, states.gathered_layer_weights.get(traces.runs[-1][2], 0))
                if traces.runs
                else ends_gathered,
            }),
        )
        account.add("activations", "saved by the loss head", -head.saved_activation_bytes)
        account.add("parameters", copies_name, -head.saved_weight_copy_bytes)
        if not deepspeed.bucket_is_resident(plan) and deepspeed.reduce_bucket_bytes(plan):
            # setup_buckets runs when the first parameter gradient (the head's) arrives: after the loss's backward.
            account.set(
                "overhead", "ZeRO reduce bucket", deepspeed.reduce_bucket_bytes(plan), deepspeed.BUCKET_DETAIL_BACKWARD
            )
            # The hook that allocates it holds the head's new gradient, before the final norm's backward.
            head_grads = 0 if grads_exist else head.parameter_grad_bytes - _pending_tied_gradient(plan, stage)
            norm = _cached(
                ("final_norm", plan.architecture, dtensor_tp.loss_head_shape(plan, _shape(plan)), _kernels(plan, False)),
                lambda: trace_final_norm(
                    plan.architecture,
                    dtensor_tp.loss_head_shape(plan, _shape(plan)),
                    _kernels(plan, False),
                    Trainability(plan.module_trains, plan.has_adapter),
                ),
            )
            account.record(
                "reduce bucket" + suffix,
                "backward",
                micro_batch,
                {
                    ("gradients", "gradients"): head_grads,
                    ("activations", "logits and loss temporaries"): deepspeed.bucket_moment_activation_bytes(
                        plan, norm, stream
                    ),
                },
            )
        pending = _pending_tied_gradient(plan, stage)
        # A tied head's gradient of the embedding waits in the autograd engine for the embedding's own.
        account.set(
            "activations",
            "pending tied-embedding gradient",
            pending,
            "the head's gradient of the shared weight, held until the embedding's arrives",
        )
        if not grads_exist:
            account.add(
                "gradients", "gradients", _stored(plan, states.gradients_head, head.parameter_grad_bytes - pending)
            )
    else:  # a pipeline stage without the head receives its output gradient from the next stage
        account.set("activations", "hidden state", 0)
        account.set("activations", "embedding output", 0)
        account.set("parameters", "autocast cache", 0)
    account.set("activations", "activation gradient", stream, "the gradient flowing back between layers")
    encoder_step.start_backward(plan, account, _kernels(plan, False))

    # ---- backward through the layers, last first
    current_chunk = len(moments) - 1 if moments is not None else 0
    received_tops = pipelining.received_gradient_layers(plan, stage)
    for run_index in reversed(range(len(traces.runs))):
        first_index, count, kind = traces.runs[run_index]
        kind_traces = traces.kinds[kind]
        if gathered_any:
            # Layers kept unsharded since their forward need no new gather.
            gathered_now = 0 if kept_by_kind.get(kind) else gathered_by_kind[kind][0]
            account.set("parameters", "gathered weights", gathered_now, gathered_detail)
        pieces = [(kind_traces.layer, list(range(first_index, first_index + count)))]
        if run_index == 0:
            pieces = [(kind_traces.layer, list(range(first_index + 1, first_index + count))), (kind_traces.first_layer, [first_index])]
        # interleaved 1F1B: cut where the rank's chunks end (one group per piece otherwise)
        pieces = [(trace, group) for trace, indices in pieces for group in pipelining.chunk_groups(plan, stage, indices)]
        pieces = [(trace, group) for trace, indices in pieces for group in _top_apart(indices, received_tops)]
        for trace, indices in pieces:
            if not indices:
                continue
            if moments is not None and pipelining.chunk_of(plan, stage, indices) != current_chunk:
                if micro_batch == 1:  # the chunk just left made its gradients in this pass
                    chunk_gradients[current_chunk] = account.get("gradients", "gradients") - gradients_at_start - sum(chunk_gradients.values())
                current_chunk = pipelining.chunk_of(plan, stage, indices)
                account.set("activations", "stage output held for backward", 0)  # the chunk above has returned
                account.set(
                    "activations",
                    "earlier micro-batches in flight",
                    pipelining.chunk_held_bytes(plan, stage, current_chunk, moments[current_chunk], per_layer, _rotary_bytes(plan)),
                )
                if micro_batch > 1 and chunk_gradients:
                    _set_chunk_gradients(account, moments, current_chunk, chunk_gradients, gradients_at_start)
            labels = [f"layer {i} backward{suffix}" for i in reversed(indices)]
            saved, copies = kept_by(trace)
            stored = 0 if grads_exist else _stored(plan, states.gradients_per_layer[kind], trace.parameter_grad_bytes)
            moment = _backward_moment(trace, saved, copies, stream, grads_exist, recompute, saved_name, copies_name)
            if writeback:
                # Before layer i's backward: the copies of the layers above, its own and the one below (prefetched).
                shard = states.gradients_per_layer[kind]
                moment[("gradients", WRITEBACK)] = shard * (1 if indices[0] == stage.first_layer else 2)
            account.record_series(
                labels,
                "backward",
                micro_batch,
                moment,
                {
                    ("activations", saved_name): -saved,
                    ("parameters", copies_name): -copies,
                    ("gradients", "gradients"): stored,
                    ("parameters", "unsharded layers kept for backward"): -kept_by_kind.get(kind, 0),
                    ("gradients", WRITEBACK): states.gradients_per_layer[kind] if writeback else 0,
                },
            )
            if received_tops.intersection(indices):  # its output, held by backward_one_chunk, is no gradient
                account.set("activations", "stage output held for backward", stream, pipelining.HELD_OUTPUT_DETAIL)
    if gathered_any:
        account.set("parameters", "gathered weights", 0)

    if embedding is not None:
        # cos/sin are saved by the layers' rotary products only (the model's forward local is gone): freed
        # with the first layer's saved tensors, before the embedding's backward (measured on a pipeline stage,
        # pp-1f1b-llama-7m-fp32-mb4-w4 rank 0 peaks there; no single-process corpus case moves)
        account.set("activations", "rotary cos/sin", 0)
        vision_step.backward(
            plan, account, micro_batch, suffix, _kernels(plan, False), grads_exist,
            lambda produced: _stored(plan, produced // plan.sharding.gradients, produced),
        )
        moment = _backward_moment(
            embedding, embedding.saved_activation_bytes, embedding.saved_weight_copy_bytes, stream, grads_exist, False,
            saved_name, copies_name,
        )
        account.record(
            "embedding backward" + suffix,
            "backward",
            micro_batch,
            {**moment, ("parameters", "gathered weights"): ends_gathered},
        )
        pending = account.get("activations", "pending tied-embedding gradient")
        if pending:
            # The engine now sums the head's and the embedding's gradients of the shared weight out of
            # place; the sum becomes .grad (or, with accumulation, is added into it).
            account.set("activations", saved_name, 0)
            account.set("activations", "activation gradient", 0)
            account.record(
                "tied embedding gradient" + suffix,
                "backward",
                micro_batch,
                {
                    ("activations", "backward working memory"): pending * (2 if grads_exist else 1),
                    ("gradients", "gradients"): 0 if grads_exist else pending,
                },
            )
        if not grads_exist:
            account.add(
                "gradients",
                "gradients",
                _stored(plan, states.gradients_embedding, embedding.parameter_grad_bytes + pending),
            )
        account.set("activations", "pending tied-embedding gradient", 0)
        encoder_step.backward(
            plan, account, micro_batch, suffix, _kernels(plan, False), grads_exist,
            lambda produced: _stored(plan, produced // plan.sharding.gradients, produced),
        )
    if moments is not None:  # the first pass notes its first chunk's gradients; every chunk has them now
        if micro_batch == 1:
            chunk_gradients[current_chunk] = account.get("gradients", "gradients") - gradients_at_start - sum(chunk_gradients.values())
        else:
            account.set("gradients", "gradients", gradients_at_start)
    account.set("activations", saved_name, 0)
    account.set("activations", "rotary cos/sin", 0)
    if packing.packed_mask(plan.setup):
        account.set("activations", "packed-row attention mask", 0)
    if padding_mask.padding_mask(plan.setup):
        account.set("activations", "padding attention mask", 0)
    account.set("activations", "activation gradient", 0)
    account.set("gradients", WRITEBACK, 0)  # FSDP1's prepare_gradient_for_optim drops _saved_grad_shard
    account.set("activations", "earlier micro-batches in flight", 0)
    account.set("activations", "stage output held for backward", 0)
    account.set("activations", "pipeline stage output", 0)
    account.set("parameters", copies_name, 0)
    account.set("parameters", "FSDP root unit (unsharded)", 0)
    account.set("parameters", "gathered embedding and head", 0)
    if zero3_keeps:
        account.set("parameters", "persistent gathered parameters", _persistent_small_params(plan))
    _zero_backward_epilogue(plan, states, account, micro_batch, suffix)
    if not deepspeed.bucket_is_resident(plan):
        account.set("overhead", "ZeRO reduce bucket", 0)  # cleared by the backward's epilogue


def _set_chunk_gradients(
    account: MemoryAccount, moments: list, chunk: int, chunk_gradients: dict[int, int], gradients_at_start: int
) -> None:
    """Interleaved 1F1B, later pass: the gradients of the chunks that have had a backward at the moment the
    pass's backward of ``chunk`` stands for (its own included); the others appear at their first backward."""
    existing = moments[chunk].with_gradients | {chunk}
    missing = sum(nbytes for other, nbytes in chunk_gradients.items() if other not in existing)
    account.set("gradients", "gradients", gradients_at_start - missing)


def _zero_backward_epilogue(plan: Plan, states: ModelStates, account: MemoryAccount, micro_batch: int, suffix: str) -> None:
    """DeepSpeed ZeRO-1/2's end of backward (``independent_gradient_partition_epilogue``), while the
    bucket is alive: the flattened bucket, the fp64 norm copies under offload, then the partition's
    gradients (trainmem.parallel.deepspeed)."""
    flattened = deepspeed.flattened_bucket_bytes(plan, states.trainable_numel)
    partition = states.trainable_numel // max(1, plan.sharding.optimizer)
    fp32_copy = deepspeed.reduced_gradient_fp32_copy_bytes(plan, states.largest_trainable_numel, partition)
    if fp32_copy and micro_batch == 1:
        # the fp32 partition buffer is filled while the bucket is reduced, one fp32 slice at a time
        account.set("gradients", "gradients", deepspeed.partition_gradient_bytes(plan, states.trainable_numel))
    if flattened:
        account.details[("overhead", "ZeRO flattened gradients")] = deepspeed.FLATTENED_DETAIL
        delta = {("overhead", "ZeRO flattened gradients"): flattened}
        if fp32_copy:
            account.details[("overhead", "fp32 reduced-gradient copy")] = deepspeed.FP32_COPY_DETAIL
            delta[("overhead", "fp32 reduced-gradient copy")] = fp32_copy
        account.record("reduce bucket: all-reduce" + suffix, "backward", micro_batch, delta)
    norm_copy = deepspeed.offload_norm_copy_bytes(plan, states.largest_trainable_numel, partition)
    if norm_copy:
        account.details[("overhead", "fp64 gradient copy")] = deepspeed.NORM_COPY_DETAIL
        account.record("gradient norms" + suffix, "backward", micro_batch, {("overhead", "fp64 gradient copy"): norm_copy})
    if deepspeed.gradients_live_in_bucket(plan) and micro_batch == 1:
        account.set("gradients", "gradients", deepspeed.partition_gradient_bytes(plan, states.trainable_numel))


WRITEBACK = "FSDP1 writeback gradient copies"
"""trainmem.parallel.fsdp.writes_back_gradient_copies: each unit's sharded gradient from its pre-backward."""


def _fsdp1_writeback_shards(plan: Plan, states: ModelStates, traces: "_Traces") -> "tuple[int, int] | None":
    """FSDP1 CPU offload on the CPU: (the root unit's sharded gradient copy, the prefetched last layer's), or None."""
    if not fsdp.writes_back_gradient_copies(plan):
        return None
    last = states.gradients_per_layer.get(traces.runs[-1][2], 0) if traces.runs else 0
    return states.gradients_embedding + states.gradients_head, last


def _pending_tied_gradient(plan: Plan, stage: Stage) -> int:
    """Bytes of the head's gradient of a tied embedding weight (0 when untied or frozen)."""
    arch = plan.architecture
    if not (arch.tie_word_embeddings and stage.has_embedding and stage.has_head):
        return 0
    if not plan.module_trains(plan.family.names.embed_tokens):
        return 0
    vocab = arch.vocab_size // plan.parallel.tensor_parallel_size
    return vocab * arch.hidden_size * DTYPE_BYTES[plan.precision.compute_weight_dtype]


def _rotary_bytes(plan: Plan) -> int:
    """The rotary tables computed once per forward (the family says which: cos and sin by default)."""
    arch = plan.architecture
    if arch is None or arch.position_embedding != "rope":
        return 0
    if not plan.family.layers_save_rotary_tables and plan.setup.activation_checkpointing != "full":
        return 0  # GLM-4, ERNIE 4.5: each layer saves its own repeated copies; the model's tables die with its forward
    seq = packing.row_shape(plan.setup)[1] // plan.parallel.context_parallel_size
    tables = plan.family.rotary_tables_bytes(arch, seq, DTYPE_BYTES[plan.precision.stream_dtype])
    if plan.family.rotary_tables_per_sample:
        tables = [nbytes * packing.row_shape(plan.setup)[0] for nbytes in tables]
    return arch.rope_sets * sum(rounded(nbytes, plan.device) for nbytes in tables)


LAYER_OUTPUTS = "layer outputs kept by the encoder"
"""``DecoderFamily.encoder_keeps_layer_outputs``: the layers' outputs the encoder's hidden-states tuple holds."""


def _forward_locals(plan: Plan) -> list[tuple[str, int, str]]:
    """The family's tensors made once per forward for all layers (``DecoderFamily.forward_locals_bytes``), rounded."""
    arch = plan.architecture
    if arch is None or plan.setup.activation_checkpointing == "full":
        return []  # not modelled with full checkpointing (the layers' recompute would need them in backward)
    rows, seq = packing.row_shape(plan.setup)
    rows = rows if padding_mask.padding_mask(plan.setup) else 1
    tensors = plan.family.forward_locals_bytes(arch, rows, seq, attention_kernel(plan))
    return [(name, rounded(nbytes, plan.device), detail) for name, nbytes, detail in tensors]


def _resident_gradient_buffer(plan: Plan) -> str:
    """Why gradients live in a buffer allocated once for the run (never freed by zero_grad), or "".

    Megatron-LM accumulates into an fp32 ``main_grad`` buffer; DeepSpeed ZeRO-3 allocates its
    flat gradient-partition buffer (``grad_partitions_flat_buffer``) at start-up, on the GPU
    unless the optimizer is offloaded.
    """
    if deepspeed.runs_bf16_optimizer(plan):
        return deepspeed.BF16_OPTIMIZER_GRADIENTS_DETAIL
    if plan.precision.recipe == "bf16-master-weights-fp32-grads" and plan.parallel.strategy != "zero":
        return "fp32 gradient buffer (Megatron main_grad)"
    parallel = plan.parallel
    if parallel.strategy == "zero" and parallel.zero_stage == 3 and not parallel.offload_optimizer:
        return "ZeRO-3 flat gradient-partition buffer, allocated at start-up"
    return ""


def _stored(plan: Plan, stored: int, produced: int) -> int:
    """Gradient bytes left after a layer: the stored (sharded, cast) form, or what backward produced."""
    if deepspeed.runs_bf16_optimizer(plan):
        return produced  # the bf16 .grad stays next to the fp32 buffer until the step
    if (
        _resident_gradient_buffer(plan)
        or deepspeed.gradients_live_in_bucket(plan)
        or deepspeed.gradients_go_to_host(plan)
        or fsdp.offloads_to_host(plan) and not fsdp.keeps_reduced_shards_on_device(plan)
        or fsdp.writes_back_gradient_copies(plan)  # reduced in place into the unit's writeback copy
    ):
        return 0  # accumulated into the resident buffer, copied into ZeRO-2's reduce bucket or to the host
    if plan.sharding.gradients > 1 or plan.lora:
        return stored
    return produced


def _optimizer_step(plan: Plan, states: ModelStates, account: MemoryAccount) -> None:
    precision = plan.precision
    extra = {("overhead", "optimizer step temporaries"): states.step_temporaries}
    if (
        precision.master_weights and precision.gradient_dtype != "fp32" or deepspeed.flattens_sub_group_gradients(plan)
    ) and not plan.parallel.offload_optimizer:
        # DeepSpeed stage 1/2 flattens this rank's gradient partition to fp32 for the update.
        extra[("overhead", "fp32 gradient partition")] = states.trainable_numel * 4 // plan.sharding.optimizer
        if plan.parallel.strategy == "zero":  # ZeRO-3 casts one sub_group_size piece at a time
            extra[("overhead", "fp32 gradient partition")] = deepspeed.flat_partition_numel(plan, states.trainable_numel) * 4
    zero_partition = deepspeed.update_gradient_partition_bytes(plan, states.trainable_numel)
    if zero_partition:  # ZeRO-1/2: one fp32 gradient partition through the update, also for an fp32 model
        extra[("overhead", "fp32 gradient partition")] = zero_partition
    flatten = deepspeed.flatten_moment_parts(plan, states.trainable_numel)
    if sum(flatten.values()) > sum(extra.values()):  # the flattening before the update is the step's high-water mark
        extra = flatten
        account.details[("overhead", "flattened gradient partition")] = deepspeed.FLATTEN_DETAIL
    account.details[("overhead", "optimizer step temporaries")] = states.step_detail
    if deepspeed.frees_gradients_before_update(plan) or fsdp.keeps_reduced_shards_on_device(plan):
        account.set("gradients", "gradients", 0)  # (FSDP1 offload: the update reads the host _cpu_grad)
    persistent = account.get("parameters", "persistent gathered parameters") if deepspeed.releases_all_for_step(plan) else 0
    if persistent and persistent > sum(extra.values()):
        # a small update (LoRA): the step's high-water mark is its start, the persistent parameters still gathered
        # (measured: zero3-llama-7m-bf16-lora-w2, the optimizer phase)
        account.record("optimizer step start", "optimizer", 1)
    if persistent:  # ZeRO-3's step releases every gathered parameter and re-gathers the persistent ones after it
        account.set("parameters", "persistent gathered parameters", 0)
    account.record("optimizer step", "optimizer", 1, extra)
    if persistent:
        account.set("parameters", "persistent gathered parameters", persistent)
    if not _resident_gradient_buffer(plan):
        account.set("gradients", "gradients", 0)
    elif deepspeed.runs_bf16_optimizer(plan):
        account.set("gradients", "gradients", states.gradients)  # clear_lp_grads: the fp32 buffer stays
    account.record("zero_grad", "zero_grad", 1)


def _count_only_step(plan: Plan, states: ModelStates, account: MemoryAccount) -> None:
    """Without an architecture: gradients appear in backward, then the optimizer steps."""
    account.set("gradients", "gradients", states.gradients)
    account.record("backward (gradients)", "backward", 1)
    _optimizer_step(plan, states, account)
