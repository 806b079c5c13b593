"""The step program of each post-training mode, as hooks into the supervised step simulation.

The supervised step (``trainmem.simulate``) already replays forward, loss, backward and the
optimizer. A TRL trainer changes it in four places, each a function here:

1. the rows and tokens of the forward (:func:`effective_setup`): a preference pair is two rows
   (``DataCollatorForPreference`` puts the chosen rows first, then the rejected ones, in one batch);
   a GRPO step trains on ``micro_batch_size`` completions of ``max_prompt_length +
   max_completion_length`` tokens;
2. the loss head: TRL's fused log-prob head (:mod:`.fused_head`) instead of transformers' logits
   and cross-entropy;
3. model copies resident on the GPU (:func:`resident_copies`): the reference (a second copy of the
   weights in the policy's dtype, TRL ``create_model_from_path(..., dtype=model.dtype)``; none for a
   PEFT policy, whose base with adapters disabled is the reference; none with precomputed
   reference log-probs), the teacher (GKD);
4. forwards under ``torch.no_grad`` between the policy's forward and its backward
   (:func:`record_reference_forward`): DPOTrainer's reference forward runs after the policy's
   ``outputs = model(...)`` returned, so it sits on top of every activation the policy saved.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..tape import DTYPE_BYTES

if TYPE_CHECKING:
    from ..layers import LayerKernels, LayerShape
    from ..plan import Plan, Stage
    from ..setup import Setup
    from .config import Training
    from ..timeline import MemoryAccount

REFERENCE_DETAIL_COPY = "the reference model: a frozen copy of the weights in the policy's dtype (TRL create_model_from_path)"
REFERENCE_FORWARD_DETAIL = (
    "the reference model's forward under no_grad (one layer's working memory, its fused log-prob head), "
    "while the policy's saved activations wait for backward"
)


def effective_setup(setup: "Setup") -> "Setup":
    """The setup whose supervised step has the mode's forward shape (rows, tokens per row)."""
    training = setup.training
    if training.is_supervised:
        return setup
    update: dict = {}
    rows = training.rows_per_example
    if rows != 1:
        update["micro_batch_size"] = setup.micro_batch_size * rows
    if training.is_rl:
        update["sequence_length"] = training.resolved("max_prompt_length") + training.resolved("max_completion_length")
    if not update:
        return setup
    return setup.model_copy(update=update)


FUSED_HEAD_MODES = ("dpo", "kto", "grpo", "rloo", "ppo")
"""Trainers that call ``add_fused_lm_head`` (trl/trainer/dpo_trainer.py, kto_trainer.py, grpo_trainer.py, rloo_trainer.py). The
experimental ORPO/CPO/GKD trainers take ``outputs.logits`` whole: their heads are :mod:`.odds_ratio` and
:mod:`.distillation`."""


def uses_fused_head(plan: "Plan") -> bool:
    """Whether the trainer scores tokens with TRL's fused log-prob head (not verl's whole logits, training.verl_logits)."""
    from .verl_logits import uses_logits_head

    return plan.setup.training.mode in FUSED_HEAD_MODES and not uses_logits_head(plan)


def adjust_inventory(setup: "Setup", inventory):
    """The reward model has ``score`` (hidden → 1, no bias) where the causal LM has ``lm_head``
    (transformers ``*ForSequenceClassification``, TRL RewardTrainer ``num_labels=1``)."""
    if inventory is not None and setup.training.mode == "critic":  # PPO's value model (training.critic)
        from .critic import value_head_inventory

        return value_head_inventory(inventory, setup.architecture().hidden_size)
    if inventory is None or setup.training.mode != "reward":
        return inventory
    from dataclasses import replace as replace_fields

    from ..models.blocks import ParameterTensor

    head = [tensor for tensor in inventory.head if tensor.group != "lm_head"]
    hidden = setup.architecture().hidden_size
    head.append(ParameterTensor("score.weight", "lm_head", (1, hidden), (hidden, 1)))
    return replace_fields(inventory, head=tuple(head))


def _peft(plan: "Plan") -> bool:
    return plan.lora


def policy_outputs(plan: "Plan") -> tuple[str, ...]:
    """The per-token outputs the trainer asks of the policy's fused head (``add_fused_lm_head(outputs=...)``)."""
    from .fused_head import POLICY_OUTPUTS
    from .kto import KTO_POLICY_OUTPUTS

    if plan.setup.training.mode == "kto":
        return KTO_POLICY_OUTPUTS
    if plan.setup.training.is_rl:
        return ("log_probs", "entropy") if plan.setup.training.resolved("log_prob_entropy") else ("log_probs",)
    return POLICY_OUTPUTS


def scored_fraction(plan: "Plan") -> float:
    """Of the next-token positions, the fraction TRL scores (labels not -100): GRPO masks the prompt
    (``labels[:, :-logits_to_keep] = -100``); the other modelled trainers score every row's tokens (the
    corpus's rows are all completion)."""
    training = plan.setup.training
    if not training.is_rl:
        return 1.0
    completion = training.resolved("max_completion_length")
    return completion / max(1, plan.setup.sequence_length - 1)


def old_policy_pass(plan: "Plan") -> bool:
    """Whether the round recomputes the old policy's log-probs under no_grad (``training.old_log_probs``).

    Its default is the trainer's rule: TRL 1.16's GRPOTrainer (``_generate_and_score_completions``) when a
    generation batch is optimised more than once (``gradient_accumulation_steps % (steps_per_generation ×
    num_iterations) != 0``; with TRL's default steps_per_generation = gradient_accumulation_steps:
    num_iterations > 1) or when it generates with vLLM (``vllm_importance_sampling_correction``, default true);
    RLOOTrainer always; verl 0.9.1 always (``RayPPOTrainer.fit``: ``_compute_old_log_prob`` unless
    ``algorithm.rollout_correction.bypass_mode``): the modes table gives rloo and ppo true."""
    return old_log_probs_recomputed(plan.setup.training)


def old_log_probs_recomputed(training: "Training") -> bool:
    """:func:`old_policy_pass` of a ``training`` section (the measured GRPO/PPO steps follow it too)."""
    if not training.is_rl:
        return False
    recomputed = training.resolved("old_log_probs")
    if recomputed is not None:
        return bool(recomputed)
    return training.resolved("num_iterations") > 1 or bool(training.resolved("use_vllm"))


def log_prob_passes(plan: "Plan") -> list[tuple[str, int, bool]]:
    """The RL round's no-grad passes before the update, in order: (label, rows per forward, entropy computed).

    Rows per forward: ``training.log_prob_micro_batch_size`` / ``ref_log_prob_micro_batch_size`` (verl
    ``rollout.log_prob_micro_batch_size_per_gpu`` / ``ref.log_prob_micro_batch_size_per_gpu``, the
    ``infer_micro_batch_size_per_gpu`` of verl/workers/engine_workers.py), else the update's micro-batch (TRL
    ``_get_per_token_logps_and_entropies(..., batch_size=per_device_train_batch_size)``). The old policy's pass
    computes the entropy (verl's ``_compute_old_log_prob`` asks ``calculate_entropy=True``; TRL runs the
    policy, whose fused head is patched with ``outputs=("log_probs", "entropy")``), and so does TRL's reference
    when it is the PEFT policy with its adapters disabled; verl's reference (``calculate_entropy=False``) and
    a separate TRL reference (``add_fused_lm_head`` with its default outputs) do not."""
    from .verl_logits import uses_logits_head

    training = plan.setup.training
    rows = plan.setup.micro_batch_size
    passes = []
    if old_policy_pass(plan):
        passes.append(("old-policy log-probs", training.resolved("log_prob_micro_batch_size") or rows, True))
    peft = _peft(plan)
    if training.is_rl and training.has_reference(peft):
        policy_head = not uses_logits_head(plan) and not training.reference_copy(peft)
        passes.append(("reference log-probs", training.resolved("ref_log_prob_micro_batch_size") or rows, policy_head))
    return passes


def plan_with_rows(plan: "Plan", rows: int) -> "Plan":
    """``plan`` with ``rows`` rows per forward (a no-grad pass over another micro-batch): a shallow copy whose
    setup has that ``micro_batch_size`` and whose cached properties are computed again."""
    if rows == plan.setup.micro_batch_size:
        return plan
    import copy
    from functools import cached_property

    view = copy.copy(plan)
    for name, attribute in vars(type(plan)).items():
        if isinstance(attribute, cached_property):
            view.__dict__.pop(name, None)
    view.setup = plan.setup.model_copy(update={"micro_batch_size": rows})
    return view


def reference_weight_bytes(plan: "Plan", stage: "Stage") -> int:
    """The reference copy on one rank: every base tensor in the stored dtype (ZeRO-3/FSDP shard it too, as
    TRL prepares it with the same engine), 0 when TRL keeps no copy."""
    training = plan.setup.training
    if not training.reference_copy(_peft(plan)) or plan.inventory is None:
        return 0
    element = DTYPE_BYTES[plan.precision.stored_weight_dtype]
    from ..allocator import rounded

    total = 0
    for slice_ in plan.slices(stage):
        total += rounded(slice_.numel * element, plan.device) * slice_.count
    return total // plan.sharding.weights


def resident_copies(plan: "Plan", stage: "Stage", account: "MemoryAccount") -> None:
    """Set the parts of the model copies besides the policy, and the mode's extra inputs (before the step starts)."""
    from .kto import record_kl_batch

    record_kl_batch(plan, account)
    reference = reference_weight_bytes(plan, stage)
    if reference:
        account.set("parameters", "reference model", reference, REFERENCE_DETAIL_COPY)
    from .distillation import teacher_weight_bytes

    teacher = teacher_weight_bytes(plan)
    if teacher:
        account.set("parameters", "teacher model", teacher, "GKD's frozen teacher, in the student's weight dtype (assumed)")
    engine, detail = vllm_engine_bytes(plan)
    if engine and not plan.setup.training.resolved("vllm_enable_sleep_mode"):
        account.set("overhead", "vLLM engine (colocated)", engine, detail)


def generation_batch(plan: "Plan") -> int:
    """Completions one rank generates per generation round: per_device_train_batch_size ×
    steps_per_generation (TRL's default: gradient_accumulation_steps)."""
    return plan.setup.micro_batch_size * plan.setup.gradient_accumulation_steps


def vllm_engine_bytes(plan: "Plan") -> tuple[int, str]:
    """A colocated vLLM engine's share of the GPU (``vllm_gpu_memory_utilization`` × the GPU's memory: vLLM
    preallocates its weights and KV-cache pool inside it), 0 without vLLM or in server mode."""
    training = plan.setup.training
    if not training.is_rl or not training.resolved("use_vllm") or training.resolved("vllm_mode") != "colocate":
        return 0, ""
    from ..fit import resolve_gpu
    from ..inference.vllm import vllm_colocated_bytes

    utilization = training.resolved("vllm_gpu_memory_utilization")
    gpu = resolve_gpu(plan.setup)
    share = vllm_colocated_bytes(gpu.memory_bytes, utilization, 0)
    return share, (
        f"vllm_gpu_memory_utilization {utilization} × {gpu.display_name} (vLLM's weights and KV-cache pool; "
        "TRL GRPOConfig, vllm_mode 'colocate')"
    )


def record_generation_phases(plan: "Plan", account: "MemoryAccount") -> None:
    """GRPO's round before the training forward: generation (Hugging Face ``generate`` or colocated vLLM),
    then the old-policy and reference log-prob passes under no_grad over micro-batches of the completions.
    Each is its own point of the timeline: a separate peak, not added to the training phase."""
    training = plan.setup.training
    if not training.is_rl:
        return
    prompt = training.resolved("max_prompt_length")
    completion = training.resolved("max_completion_length")
    batch = generation_batch(plan)
    engine, detail = vllm_engine_bytes(plan)
    if training.resolved("use_vllm"):
        if engine and training.resolved("vllm_enable_sleep_mode"):
            account.record("generation (vLLM)", "generation", 1, {("overhead", "vLLM engine (colocated)"): engine})
            account.details[("overhead", "vLLM engine (colocated)")] = detail + "; released by sleep mode (level 2) for training"
        else:
            account.record("generation (vLLM)", "generation", 1)
    else:
        from ..inference.generation import hf_generation_phase

        phase = hf_generation_phase(plan, batch, prompt, completion, do_sample=True, top_k=0)
        transient = {("activations", f"generation: {name}"): nbytes for name, nbytes in phase.parts.items() if nbytes}
        for name in phase.parts:
            account.details[("activations", f"generation: {name}")] = (
                f"transformers generate of {batch} completions × ({prompt} + {completion}) tokens, at its {phase.peak_at}"
            )
        prompts = rounded_ids(plan, batch * prompt)
        transient[("activations", "generation: prompt ids")] = prompts
        account.record("generation (transformers generate)", "generation", 1, transient)
    for label, rows, entropy in log_prob_passes(plan):
        outputs = ("log_probs", "entropy") if entropy else ("log_probs",)
        nbytes = no_grad_forward_bytes(plan_with_rows(plan, rows), outputs)
        key = ("activations", f"log-prob pass ({label.split()[0]})")
        account.details[key] = (
            f"{label}, {rows} rows per forward{' with the entropy' if entropy else ''}: "
            + REFERENCE_FORWARD_DETAIL.split(" while")[0]
        )
        account.record(label, "reference", 1, {key: nbytes})


def rounded_ids(plan: "Plan", count: int) -> int:
    from ..allocator import rounded

    return rounded(count * 8, plan.device)


def reference_forward_bytes(plan: "Plan") -> int:
    """High-water bytes of the reference forward under no_grad, above what the step holds at that moment.

    Alive during it: the reference's ``inputs_embeds`` (referenced by the model's forward until it returns)
    and the rotary tables; then, layer after layer, the current hidden state and one layer's no-grad
    working memory; at the end the fused head's forward (``log_probs`` only)."""
    training = plan.setup.training
    if not (training.has_reference(_peft(plan)) or old_policy_pass(plan)):
        return 0
    return no_grad_forward_bytes(plan)


def no_grad_forward_bytes(plan: "Plan", outputs: tuple[str, ...] = ("log_probs",)) -> int:
    """High-water bytes of one forward of the step's batch under no_grad with the fused head asked for
    ``outputs`` (the reference's log-probs; KTO's KL pass of the policy): see :func:`reference_forward_bytes`.

    The layers run with the model's ``inputs_embeds`` and rotary tables alive (locals of the base model's
    forward); the head runs after that forward has returned, with only its output (the normed hidden states)
    alive: measured, an old-policy pass of 8 rows whose fused head peaks (the corpus's
    ``trl-grpo-...-lp8-ref4-...``) was one hidden state high when the head was added on top of them."""
    from ..simulate import _rotary_bytes
    from .fused_head import reference_head_forward_bytes

    arch = plan.architecture
    shape, kernels, stream, layers = no_grad_layers(plan)
    vocab = arch.vocab_size // plan.parallel.tensor_parallel_size
    from .verl_logits import no_grad_log_prob_bytes, uses_logits_head

    if uses_logits_head(plan):
        head = no_grad_log_prob_bytes(plan, shape.stream_tokens, stream, "entropy" in outputs)
    else:
        head = reference_head_forward_bytes(arch, shape, kernels, vocab, scored_fraction(plan), outputs)
    return max(stream + _rotary_bytes(plan) + layers, head)


def no_grad_layers(plan: "Plan") -> tuple["LayerShape", "LayerKernels", int, int]:
    """The layers of ``plan``'s first stage run under no_grad (nothing trains, no LoRA): its shape and kernels,
    the bytes of one hidden state, and the high-water bytes of the heaviest layer with that hidden state
    alive (each layer kind traced once, ``trace_layer`` with a frozen trainability)."""
    from ..layers import Trainability, trace_layer
    from ..simulate import _cached, _kernels, _shape

    arch = plan.architecture
    shape = _shape(plan)
    kernels = replace(_kernels(plan, selective=False), lora_rank=0)
    frozen = Trainability(lambda module: False, lambda module: False)
    stream = shape.stream_tokens * arch.hidden_size * DTYPE_BYTES[plan.precision.stream_dtype]
    layers = 0
    for _, group, _ in plan.stage_layer_groups(plan.stages[0]):
        kind_shape = _shape(plan, group.architecture)
        trace = _cached(
            ("no_grad", group.architecture, kind_shape, kernels),
            lambda a=group.architecture, sh=kind_shape: trace_layer(a, sh, kernels, frozen, False, False),
        )
        layers = max(layers, stream + trace.forward_peak_bytes)
    return shape, kernels, stream, layers


def record_reference_forward(plan: "Plan", account: "MemoryAccount", micro_batch: int, suffix: str) -> None:
    """The reference forward as one event of the timeline (phase ``reference``); GRPO's log-prob passes
    run before the training forward instead (:func:`record_generation_phases`)."""
    if uses_fused_head(plan):
        account.details[("activations", "saved by the loss head")] = (
            "the final norm's tensors; TRL's fused head keeps the scored hidden states, targets and fp32 log-sum-exp"
        )
        account.details[("parameters", "head weight cast (fused head)")] = (
            "one vocabulary chunk of the head weight cast to the compute dtype (ChunkedLogProbFunction)"
        )
    elif plan.setup.training.mode == "reward":
        account.details[("activations", "saved by the loss head")] = "the final norm's tensors and the score head's input"
    elif plan.setup.training.mode in ("orpo", "cpo", "simpo"):
        account.details[("activations", "saved by the loss head")] = (
            "the full logits (kept by selective_log_softmax's gather and logsumexp, or its per-row log-softmax) and "
            "the chosen half's log-softmax of the NLL term (training.odds_ratio)"
        )
    if plan.setup.training.is_rl:
        return
    nbytes = reference_forward_bytes(plan)
    if not nbytes:
        return
    account.details[("activations", "reference forward")] = REFERENCE_FORWARD_DETAIL
    account.record("reference forward" + suffix, "reference", micro_batch, {("activations", "reference forward"): nbytes})


NOT_MODELLED = {
    "gkd": "GKD's on-policy batches (lmbda: the student generates) are not modelled; the teacher is held in the "
    "student's weight dtype (an assumption).",
}


def training_warnings(plan: "Plan") -> list[str]:
    """What the report must say about the mode: parts not modelled, assumptions."""
    training = plan.setup.training
    warnings = [NOT_MODELLED[training.mode]] if training.mode in NOT_MODELLED else []
    from .critic import critic_warnings
    from .verl_logits import verl_logits_warning

    warnings += critic_warnings(plan) + verl_logits_warning(plan)
    if training.is_rl and training.resolved("use_vllm"):
        warnings.append(
            "The colocated vLLM share is vLLM's documented gpu_memory_utilization × GPU memory (an assumption, "
            "not measured here); server mode puts nothing on the training GPUs."
        )
    return warnings


def head_weight_casts(plan: "Plan", moment: dict) -> dict:
    """The fused head casts each head-weight chunk to the compute dtype (``weight[start:end].to(compute_dtype)``,
    an fp32 model under autocast): a copy of a weight, counted with the parameters (as autocast's weight copies
    are), not with the head's temporaries."""
    if not uses_fused_head(plan):
        return moment
    from ..simulate import _kernels, _shape
    from .fused_head import head_shape

    arch = plan.architecture
    sizes = head_shape(arch, _shape(plan), _kernels(plan, False), arch.vocab_size // plan.parallel.tensor_parallel_size)
    if sizes.weight_dtype == sizes.compute_dtype:
        return moment
    cast = sizes.tile_columns * arch.hidden_size * DTYPE_BYTES[sizes.compute_dtype]
    key = ("activations", "logits and loss temporaries")
    moved = min(cast, max(0, moment.get(key, 0)))
    changed = dict(moment)
    changed[key] = changed.get(key, 0) - moved
    copies = ("parameters", "head weight cast (fused head)")
    changed[copies] = changed.get(copies, 0) + moved
    return changed


def record_before_forward(plan: "Plan", account: "MemoryAccount", micro_batch: int, suffix: str) -> None:
    """Passes of a micro-batch before the policy's forward (KTO's KL forward under no_grad)."""
    from .kto import record_kl_forward

    record_kl_forward(plan, account, micro_batch, suffix)


def record_teacher_forward(plan: "Plan", account: "MemoryAccount", micro_batch: int, suffix: str) -> None:
    """GKD: the teacher's forward under no_grad, after the student's logits exist and before the loss."""
    if plan.setup.training.mode != "gkd":
        return
    from .distillation import teacher_forward_bytes

    account.details[("activations", "teacher forward")] = (
        "the teacher's forward under no_grad, next to the student's logits (GKDTrainer.compute_loss)"
    )
    account.record("teacher forward" + suffix, "reference", micro_batch, {("activations", "teacher forward"): teacher_forward_bytes(plan)})
