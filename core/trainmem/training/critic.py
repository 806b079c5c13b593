"""PPO's critic (verl 0.9.1, ``adv_estimator: gae``): a value model updated in its own phase.

What verl's critic is (``verl/workers/engine/fsdp/transformer_impl.py``, ``FSDPEngine._build_module`` with
``model_type == "value_model"``, and ``verl/utils/model.py`` ``load_valuehead_model``): the critic's own
copy of the model loaded as ``AutoModelForTokenClassification`` with ``num_labels = 1`` and every dropout
0 — transformers' ``GenericForTokenClassification`` (``modeling_layers.py``): the decoder without its
``lm_head`` and a ``score = nn.Linear(hidden, 1)`` with a bias on every token. It is wrapped by FSDP on
its own (``critic.fsdp``: the same engine code as the actor, its own ``model_dtype``, offload flags and
optimizer ``critic.optim``, AdamW by default).

The step (``verl/trainer/ppo/ray_trainer.py`` ``fit``): generation, the old and reference log-prob
passes, ``_compute_values`` (the critic's forward under no_grad over the batch), the advantages, then
``_update_critic`` and ``_update_actor``: the critic's update runs between the actor's log-prob passes and
the actor's update. Each update is its own phase: verl's ``EngineTrainModeCtx`` calls
``optimizer_zero_grad`` when the update ends (``zero_grad_on_exit``; set_to_none frees the gradients), so
between phases a model holds its weights and optimizer states only — and not even those when its
``param_offload`` / ``optimizer_offload`` is set (``BaseEngineCtx._context_switch`` moves them to the host
on exit and back on entry; ``grad`` follows ``param_offload``).

The value loss (``verl/trainer/ppo/core_algos.py`` ``compute_value_loss``): the values of the response
tokens, clipped around the old values, two squared errors against the returns and their maximum,
aggregated to a scalar: tensors of (rows × response) elements, next to nothing beside the activations.

Here the critic's update is simulated as its own Setup (:func:`critic_setup`: mode ``critic``, the
critic's architecture untied from any embedding, full fine-tuning, the critic's micro-batch), and
:func:`with_critic` splices its timeline into the actor's, each side carrying what the other holds
between phases. The report's peak is the larger phase; every part of the critic is named ``critic …``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..layers import LayerKernels, LayerShape, Trace, Trainability
from ..tape import Sym

if TYPE_CHECKING:
    from ..architecture import Architecture
    from ..plan import Plan
    from ..setup import Setup
    from ..simulate import RankSimulation
    from ..timeline import MemoryAccount, PartKey

CRITIC_PREFIX = "critic "
CRITIC_LABEL = "critic: "
VALUES_PASS = "critic: values pass"
BETWEEN_PHASES_CATEGORIES = ("parameters", "optimizer_states", "gradients", "overhead")
"""What a model holds on the GPU outside its own phase (its activations and inputs are gone)."""


def critic_architecture(setup: "Setup") -> "Architecture":
    """The critic's decoder: ``training.critic_model`` (a preset) or the actor's architecture, with no tied
    output embedding (``GenericForTokenClassification`` has ``score``, not ``lm_head``)."""
    from ..catalogs import presets
    from ..hf_config import architecture_from_hf_config

    name = setup.training.critic_model
    arch = architecture_from_hf_config(presets()[name.strip().lower()].config) if name else setup.architecture()
    return arch.model_copy(update={"tie_word_embeddings": False})


def critic_setup(setup: "Setup") -> "Setup":
    """The setup of the critic's update: mode ``critic``, prompt + response tokens per row, the critic's
    micro-batch, accumulation and checkpointing (the actor's by default), full fine-tuning (verl's ``critic.model.lora_rank``
    defaults to 0), the actor's precision, optimizer and parallelism (verl's defaults are the same)."""
    from ..setup import ArchitectureModel, Finetuning
    from .config import Training

    training = setup.training
    tokens = training.resolved("max_prompt_length") + training.resolved("max_completion_length")
    return setup.model_copy(
        update={
            "model": ArchitectureModel.model_construct(architecture=critic_architecture(setup)),
            "micro_batch_size": training.critic_micro_batch_size or setup.micro_batch_size,
            "gradient_accumulation_steps": training.critic_gradient_accumulation_steps or setup.gradient_accumulation_steps,
            "sequence_length": tokens,
            "finetuning": Finetuning(),
            "activation_checkpointing": training.critic_activation_checkpointing or setup.activation_checkpointing,
            "training": Training(mode="critic"),
        }
    )


def trace_value_head(
    arch: "Architecture",
    shape: LayerShape,
    kernels: LayerKernels,
    trainability: Trainability,
    parameter_grads_exist: bool = False,
) -> Trace:
    """The critic's head: the final norm, ``score`` (hidden → 1, with its bias) on every token, the values of
    the response tokens, the clipped value loss (``compute_value_loss``: ``clip``, two squared errors, their
    maximum, the masked mean) over (rows × tokens) elements."""
    from ..ends import _finish, _tape_through_final_norm

    tape, x, normed = _tape_through_final_norm(arch, shape, kernels, trainability)
    h = shape.hidden
    weight = Sym(h, kernels.weight_dtype, True, "parameter")
    bias = Sym(1, kernels.weight_dtype, True, "parameter")
    values = tape.linear(normed, weight, 1, bias)
    tape.release(normed)
    tokens = values.numel
    clipped = tape.new(tokens, values.dtype, True)
    tape.record("clamp", [values], [values], [clipped])
    errors = tape.new(tokens, values.dtype, True)
    tape.record("mse", [values], [values], [errors])
    clipped_errors = tape.new(tokens, values.dtype, True)
    tape.record("mse", [clipped], [clipped], [clipped_errors])
    tape.release(clipped)
    worst = tape.new(tokens, values.dtype, True)
    tape.record("maximum", [errors, clipped_errors], [errors, clipped_errors], [worst])
    tape.release(errors, clipped_errors, values)
    loss = tape.new(1, "fp32", True)
    tape.record("masked_mean", [worst], [worst], [loss])
    tape.release(worst)
    return _finish(tape, loss, parameter_grads_exist, x)


def value_head_inventory(inventory, hidden: int):
    """``lm_head`` replaced by ``score`` (hidden → 1) and its bias (``GenericForTokenClassification``)."""
    from dataclasses import replace

    from ..models.blocks import ParameterTensor

    head = [tensor for tensor in inventory.head if tensor.group != "lm_head"]
    head.append(ParameterTensor("score.weight", "lm_head", (1, hidden), (hidden, 1)))
    head.append(ParameterTensor("score.bias", "lm_head", (1,)))
    return replace(inventory, head=tuple(head))


# ---------------------------------------------------------------------------- the two phases together


def between_phases(parts: dict, param_offload: bool, optimizer_offload: bool) -> dict:
    """What a model keeps on the GPU while the other model's phase runs: its weights (unless ``param_offload``)
    and optimizer states (unless ``optimizer_offload``); a colocated engine's share, a reference copy."""
    kept = {}
    for (category, name), nbytes in parts.items():
        if category not in BETWEEN_PHASES_CATEGORIES:
            continue
        if param_offload and category in ("parameters", "gradients") and name != "reference model":
            continue
        if optimizer_offload and category == "optimizer_states":
            continue
        kept[(category, name)] = nbytes
    return kept


def _critic_key(key: "PartKey") -> "PartKey":
    return key[0], CRITIC_PREFIX + key[1]


def _totals(parts: dict) -> tuple[int, int, int, int, int]:
    from ..report import CATEGORIES

    totals = [0] * len(CATEGORIES)
    for (category, _), nbytes in parts.items():
        totals[CATEGORIES.index(category)] += nbytes
    return tuple(totals)  # type: ignore[return-value]


def _shifted(point, offset: tuple, label_prefix: str = ""):
    from ..timeline import Point

    return Point(label_prefix + point.label, point.phase, point.micro_batch, tuple(a + b for a, b in zip(point.totals, offset)))


def values_pass_bytes(critic_plan: "Plan") -> int:
    """``_compute_values``: the critic's forward under no_grad (one layer's working memory at a time, the
    hidden state and the rotary tables alive; the one-column head is negligible)."""
    from ..simulate import _rotary_bytes
    from .phases import no_grad_layers

    _, _, _, layers = no_grad_layers(critic_plan)
    return _rotary_bytes(critic_plan) + layers


def critic_plan(plan: "Plan") -> "Plan":
    from ..plan import Plan
    from .phases import effective_setup

    return Plan(effective_setup(critic_setup(plan.setup)))


def with_critic(plan: "Plan", actor: "RankSimulation") -> "RankSimulation":
    """The actor's simulation with the critic's phase spliced in after the actor's log-prob passes (verl's
    order: ``_compute_values``, ``_update_critic``, then ``_update_actor``); each phase carries what the
    other model holds between phases."""
    from ..simulate import RankSimulation, simulate_rank
    from ..timeline import MemoryAccount

    training = plan.setup.training
    value_plan = critic_plan(plan)
    critic = simulate_rank(value_plan, value_plan.stages[0])
    a, c = actor.account, critic.account
    critic_own = {_critic_key(key): nbytes for key, nbytes in c.parts.items()}
    critic_held = between_phases(critic_own, bool(training.critic_param_offload), bool(training.critic_optimizer_offload))
    actor_held = between_phases(a.parts, bool(training.actor_param_offload), bool(training.actor_optimizer_offload))
    critic_offset, actor_offset = _totals(critic_held), _totals(actor_held)

    split = next((i for i, p in enumerate(a.points) if i and p.phase not in ("start", "generation", "reference")), len(a.points))
    values_key = ("activations", VALUES_PASS)
    values_parts = dict(critic_own)
    values_parts[values_key] = values_pass_bytes(value_plan)
    values_point = _shifted(
        a.points[0]._replace(label="values pass (no_grad)", phase="reference", micro_batch=1, totals=_totals(values_parts)),
        actor_offset,
        CRITIC_LABEL,
    )
    points = (
        [_shifted(p, critic_offset) for p in a.points[:split]]
        + [values_point]
        + [_shifted(p, actor_offset, CRITIC_LABEL) for p in c.points]
        + [_shifted(p, critic_offset) for p in a.points[split:]]
    )
    peak_index = max(range(len(points)), key=lambda i: (sum(points[i].totals), -i))
    in_critic = split <= peak_index <= split + len(c.points)
    if peak_index == split:
        peak_parts = {**values_parts, **actor_held}
    elif in_critic:
        peak_parts = {**{_critic_key(key): nbytes for key, nbytes in c.peak_parts.items()}, **actor_held}
    else:
        peak_parts = {**a.peak_parts, **critic_held}
    details = dict(a.details)
    details.update({_critic_key(key): f"the critic (verl critic.*): {text}" for key, text in c.details.items()})
    details[values_key] = "verl _compute_values: the critic's forward under no_grad before its update (one layer at a time)"
    parts = {**a.parts, **critic_held}
    account = MemoryAccount(
        parts=parts,
        details=details,
        points=points,
        peak_total=sum(points[peak_index].totals),
        peak_index=peak_index,
        peak_parts={key: nbytes for key, nbytes in peak_parts.items() if nbytes},
        totals=list(_totals(parts)),
    )
    return RankSimulation(
        actor.stage,
        account,
        actor.cpu_offload_bytes + critic.cpu_offload_bytes,
        actor.description,
        tuple(actor.cpu_offload_parts) + tuple((CRITIC_PREFIX + name, nbytes, detail) for name, nbytes, detail in critic.cpu_offload_parts),
    )


def critic_warnings(plan: "Plan") -> list[str]:
    training = plan.setup.training
    if not training.has_critic:
        return []
    return [
        "PPO's critic is simulated as verl 0.9.1 builds it (AutoModelForTokenClassification, num_labels 1) with the "
        "actor's precision, optimizer and sharding, full fine-tuning; its update is its own phase (gradients freed "
        "when it ends) and the report's peak is the larger phase."
    ]
