"""``estimate(setup) -> Report``: the one entry point every shell (CLI, web page, Python) calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from . import __version__
from .catalogs import GPU
from .cuda.memory import rank_cuda, scaled_reserve
from .cuda.outside import cublas_workspace
from .fit import gpus_that_fit, resolve_gpu, verdict
from .tasks import task_description
from .plan import Plan
from .parallel.host import host_memory
from .report import (
    CATEGORIES,
    Breakdown,
    FitVerdict,
    HostMemoryReport,
    HostPartReport,
    Part,
    PeakMoment,
    RankReport,
    Report,
    Resolved,
    Suggestion,
    Timeline,
)
from .setup import Setup
from .simulate import RankSimulation, attention_kernel, simulate_rank
from .training.phases import effective_setup
from .tape import DTYPE_BYTES
from .units import GIB, format_bytes, format_count

_PHASE_DESCRIPTIONS = {
    "start": "between steps: only the model states are resident",
    "forward": "during the forward pass",
    "loss": "at the loss: the logits, their fp32 copy and the log-softmax are alive together",
    "backward": "during backward, while saved activations and new gradients coexist",
    "optimizer": "in the optimizer step: gradients, states and the step's temporaries together",
    "zero_grad": "after zero_grad",
    "reference": "in the reference model's forward (no_grad), on top of the policy's saved activations",
    "generation": "while completions are generated (inference weights, KV cache, sampling logits)",
}


def estimate(setup: Union[Setup, dict[str, Any]], suggestions: bool = True) -> Report:
    """Simulate one optimizer step of ``setup`` and report its memory on each distinct rank.

    ``setup`` may be a :class:`Setup` or anything ``Setup.model_validate`` accepts (a dict
    parsed from JSON). Invalid input raises ``pydantic.ValidationError``.
    """
    if not isinstance(setup, Setup):
        setup = Setup.model_validate(setup)
    return report_of(simulated(setup), suggestions)


@dataclass(frozen=True)
class Simulated:
    """What ``estimate`` computes before the allocator replay: the plan, the GPU and each rank's step.

    None of it reads the replay or :func:`~trainmem.cuda.memory.scaled_reserve`, so one ``Simulated``
    serves the page's fast answer (reserve scaled) and its replayed answer of the same setup
    (web/py/trainmem_web.py); it must then not be shared with code that changes the setup."""

    setup: Setup
    plan: Plan
    gpu: GPU
    simulations: list[RankSimulation]


def simulated(setup: Setup) -> Simulated:
    """The first half of :func:`estimate`: the plan and the step simulation of every distinct rank."""
    plan = Plan(effective_setup(setup))  # the trainer's forward shape (training.phases)
    simulations = [simulate_rank(plan, stage) for stage in plan.stages]
    if setup.training.has_critic:  # PPO: the critic's update is a phase of its own (training.critic)
        from .training.critic import with_critic

        simulations = [with_critic(plan, simulation) for simulation in simulations]
    return Simulated(setup, plan, resolve_gpu(setup), simulations)


def report_of(done: Simulated, suggestions: bool = True) -> Report:
    """The second half of :func:`estimate`: each rank's CUDA memory (the allocator replay) and the report."""
    setup, plan, gpu, simulations = done.setup, done.plan, done.gpu, done.simulations
    ranks = [_rank_report(plan, simulation, gpu, suggestions) for simulation in simulations]
    heaviest = max(range(len(ranks)), key=lambda i: ranks[i].peak_total_bytes)
    top = ranks[heaviest]
    required = max(rank.upper_bound_bytes for rank in ranks)
    report = _built_report(
        trainmem_version=__version__,
        setup=setup,
        resolved=_resolved(plan),
        num_parameters=plan.num_parameters,
        num_trainable_parameters=plan.num_trainable_parameters,
        peak_allocated_bytes=top.peak_allocated_bytes,
        peak_total_bytes=top.peak_total_bytes,
        peak_reserved_bytes=top.peak_reserved_bytes,
        upper_bound_bytes=top.upper_bound_bytes,
        breakdown=top.breakdown,
        parts=top.parts,
        peak=top.peak,
        heaviest_rank=heaviest,
        ranks=ranks,
        fit=verdict(gpu, required, setup.headroom_fraction, "upper bound" if plan.device == "cuda" else ""),
        fits_on=gpus_that_fit(required, setup.headroom_fraction),
        warnings=_warnings(plan, gpu),
        host=_host_report(plan, max(simulations, key=lambda simulation: simulation.cpu_offload_bytes)),
    )
    if suggestions:
        from .suggest import suggest  # suggestions re-run estimate: imported late to avoid a cycle

        fraction = (top.peak_reserved_bytes - top.peak_allocated_bytes) / max(1, top.peak_allocated_bytes)
        with scaled_reserve(max(0.0, fraction)):
            found = suggest(setup, report)
        report = report.model_copy(update={"suggestions": [_replayed(setup, s) for s in found]})
    return report


_REPORT_FIELD_TYPES = {
    "trainmem_version": str, "setup": Setup, "resolved": Resolved, "num_parameters": int,
    "num_trainable_parameters": int, "peak_allocated_bytes": int, "peak_total_bytes": int,
    "peak_reserved_bytes": int, "upper_bound_bytes": int, "breakdown": Breakdown, "peak": PeakMoment,
    "heaviest_rank": int, "fit": FitVerdict, "host": HostMemoryReport,
}  # fmt: skip
_REPORT_LIST_TYPES = {"parts": Part, "ranks": RankReport, "fits_on": str, "warnings": str}


def _built_report(**fields: Any) -> Report:
    """``Report(**fields)``, without validating again what its own constructors validated.

    Validating a Report runs the Setup's model validator again on the Setup instance (pydantic runs an
    "after" validator on instances too) and walks every nested model: a few hundred microseconds per
    estimate, each recompute of the page pays it. When every field is an instance of exactly its
    annotated type (models built by their own constructors, ints, strings, lists of them), validation
    returns each value as it is, so ``Report.model_construct`` builds the same report (the same field
    values and fields set, so the same JSON); anything else (a float where an int goes, a subclass)
    takes the validating constructor."""
    trusted = all(type(fields[name]) is kind for name, kind in _REPORT_FIELD_TYPES.items() if name in fields) and all(
        type(fields[name]) is list and all(type(item) is kind for item in fields[name])
        for name, kind in _REPORT_LIST_TYPES.items()
        if name in fields
    )
    return Report.model_construct(**fields) if trusted and fields.keys() <= Report.model_fields.keys() else Report(**fields)


def _replayed(setup: Setup, suggestion: Suggestion) -> Suggestion:
    """A suggestion found with the scaled reserve, re-estimated with its own allocator replay."""
    if setup.runtime.device != "cuda":
        return suggestion
    from .patch import merge_patch

    changed = estimate(merge_patch(setup.model_dump(mode="json"), suggestion.setup_patch), suggestions=False)
    detail = suggestion.detail.replace(format_bytes(suggestion.peak_total_bytes), format_bytes(changed.peak_total_bytes))
    return suggestion.model_copy(
        update={"peak_total_bytes": changed.peak_total_bytes, "fits": changed.fit.fits, "detail": detail}
    )


def _rank_report(plan: Plan, simulation: RankSimulation, gpu: GPU, full: bool) -> RankReport:
    account = simulation.account
    workspace, workspace_detail = cublas_workspace(plan, gpu.architecture)
    peak_allocated = account.peak_total + workspace

    parts = [
        Part(category=category, name=name, bytes=nbytes, detail=account.details.get((category, name), ""))
        for (category, name), nbytes in account.peak_parts.items()
        if nbytes > 0
    ]
    if workspace:
        parts.append(Part(category="overhead", name="cuBLAS workspace", bytes=workspace, detail=workspace_detail))
    cuda = None
    peak_reserved = 0
    peak_total = peak_allocated
    upper_bound = peak_allocated
    if plan.device == "cuda":
        activations = sum(nbytes for (category, _), nbytes in account.peak_parts.items() if category == "activations")
        rank = rank_cuda(
            plan,
            simulation.stage,
            dict(account.parts),
            gpu.architecture,
            gpu.memory_bytes,
            peak_allocated,
            workspace,
            activations,
            attention_kernel(plan) == "fused" if plan.architecture is not None else False,
            compare_alternatives=full,
        )
        cuda = rank.memory
        peak_reserved = cuda.peak_reserved_bytes
        parts += [part for part in [rank.reserve_part, *rank.outside] if part.bytes > 0]
        peak_total = peak_reserved + sum(part.bytes for part in rank.outside)
        upper_bound = cuda.upper_bound_bytes
    parts.sort(key=lambda part: (CATEGORIES.index(part.category), -part.bytes))
    totals = {category: 0 for category in CATEGORIES}
    for part in parts:
        totals[part.category] += part.bytes

    points = account.points
    columns = list(zip(*(point.totals for point in points)))
    timeline = Timeline.model_construct(
        labels=[p.label for p in points],
        phases=[p.phase for p in points],
        micro_batches=[p.micro_batch for p in points],
        parameters=list(columns[0]),
        gradients=list(columns[1]),
        optimizer_states=list(columns[2]),
        activations=list(columns[3]),
        overhead=[value + workspace for value in columns[4]],
        peak_index=account.peak_index,
    )
    moment = points[account.peak_index]
    return RankReport(
        name=simulation.description,
        num_ranks=_ranks_like(plan, simulation),
        peak_allocated_bytes=peak_allocated,
        peak_total_bytes=peak_total,
        breakdown=Breakdown(**totals),
        parts=parts,
        peak=PeakMoment(
            index=account.peak_index,
            phase=moment.phase,
            label=moment.label,
            description=f"{moment.label}: {_PHASE_DESCRIPTIONS[moment.phase]}",
        ),
        timeline=timeline,
        cpu_offload_bytes=simulation.cpu_offload_bytes,
        peak_reserved_bytes=peak_reserved,
        upper_bound_bytes=upper_bound,
        cuda=cuda,
    )


def _host_report(plan: Plan, offloading: RankSimulation) -> HostMemoryReport:
    """Host RAM per node (trainmem.parallel.host) for the rank that offloads most, with a verdict when the
    setup gives a budget."""
    host = host_memory(plan, offloading.cpu_offload_bytes, offloading.cpu_offload_parts)
    budget_gib = plan.parallel.host_ram_gib_per_node
    budget = int(budget_gib * GIB) if budget_gib is not None else None
    fits = None if budget is None else host.peak_bytes <= budget
    message = ""
    if budget is not None:
        verdict_word = "fits" if fits else "does not fit"
        message = (
            f"Host RAM {verdict_word}: {format_bytes(host.peak_bytes)} of {format_bytes(budget)} per node "
            f"({'model load' if host.load_bytes >= host.steady_bytes else 'training'} is the larger moment)."
        )
    return HostMemoryReport(
        ranks_per_node=host.ranks_per_node,
        peak_bytes=host.peak_bytes,
        steady_bytes=host.steady_bytes,
        load_bytes=host.load_bytes,
        steady_parts=[HostPartReport(name=p.name, bytes=p.bytes, detail=p.detail) for p in host.steady_parts],
        load_parts=[HostPartReport(name=p.name, bytes=p.bytes, detail=p.detail) for p in host.load_parts],
        nvme_bytes=host.nvme_bytes,
        budget_bytes=budget,
        fits=fits,
        message=message,
    )


def _ranks_like(plan: Plan, simulation: RankSimulation) -> int:
    parallel = plan.parallel
    pp = parallel.pipeline_parallel_size
    per_stage = parallel.num_gpus // pp
    if pp == 1:
        return parallel.num_gpus
    if simulation.stage.index == 0 or simulation.stage.has_head:
        return per_stage
    from .parallel.pipelining import middle_ranks  # torch schedules tell middle ranks apart

    return per_stage * (middle_ranks(plan, simulation.stage) or pp - 2)


def _resolved(plan: Plan) -> Resolved:
    precision = plan.precision
    arch = plan.architecture
    optimizer_values = plan.optimizer.full_state_tensors
    state_bytes = 1 if plan.optimizer.quantized_state_bits else DTYPE_BYTES[precision.optimizer_state_dtype]
    if arch is not None:
        model = f"{arch.model_type}, {format_count(plan.num_parameters)} parameters, {arch.num_hidden_layers} layers"
        if arch.encoder_layers:  # an encoder-decoder: the Architecture is the decoder's
            model = model.removesuffix(" layers") + f" decoder + {arch.encoder_layers} encoder layers"
        if arch.is_moe:
            model += f", {arch.num_experts} experts (top-{arch.num_experts_per_tok})"
        if arch.task != "causal_lm":
            model += ", " + task_description(arch)
    else:
        model = f"{format_count(plan.num_parameters)} parameters (no architecture: activations not estimated)"
    return Resolved(
        precision_recipe=precision.recipe,
        precision_description=precision.description,
        data_parallel_size=plan.data_parallel_size,
        weight_bytes_per_parameter=DTYPE_BYTES[precision.stored_weight_dtype],
        gradient_bytes_per_parameter=DTYPE_BYTES[precision.gradient_dtype],
        optimizer_bytes_per_parameter=optimizer_values * state_bytes + (4 if precision.master_weights else 0),
        optimizer_implementation=plan.optimizer_implementation,
        attention_saves_scores=attention_kernel(plan) != "fused" if arch is not None else False,
        activation_dtype=precision.stream_dtype
        if precision.autocast is None
        else f"{precision.stream_dtype} residual stream, {precision.autocast} matmuls",
        model_description=model,
    )


def _warnings(plan: Plan, gpu) -> list[str]:
    warnings = []
    setup, arch = plan.setup, plan.architecture
    half = {plan.precision.autocast, plan.precision.compute_weight_dtype}
    if plan.precision.fp8_matmuls and not gpu.supports_fp8:
        warnings.append(f"{gpu.display_name} has no fp8 tensor cores: fp8-mixed needs Ada, Hopper or newer.")
    if "bf16" in half and not gpu.supports_bf16:
        warnings.append(f"{gpu.display_name} has no bf16 support; use fp16 mixed precision on it.")
    if arch is None:
        warnings.append(
            "Only a parameter count was given: activations are not estimated. "
            "Give a preset, a config.json or an architecture for a full simulation."
        )
    elif arch.position_embedding == "rope" and setup.sequence_length > arch.max_position_embeddings:
        warnings.append(
            f"sequence_length {setup.sequence_length} is longer than the model's "
            f"max_position_embeddings ({arch.max_position_embeddings})."
        )
    if arch is not None and arch.attn_logit_softcapping and setup.attention == "sdpa":
        warnings.append("Gemma 2's attention soft-capping needs the eager kernel: simulated with eager attention.")
    for part in arch.not_counted if arch is not None else ():
        warnings.append(f"Not counted yet: {part}; the estimate covers the language model only.")
    if plan.lora_targets is not None and (plan.lora_targets.experts.gate_up_proj or plan.lora_targets.experts.down_proj):
        warnings.append(
            "LoRA on fused experts (PEFT's ParamWrapper) materialises each adapted expert stack as a new "
            "tensor per forward (W + B·A) that the expert matmul saves for backward: counted."
        )
    from .training.phases import training_warnings

    warnings += training_warnings(plan)
    from .padding_mask import padding_warnings

    warnings += padding_warnings(setup)
    if plan.optimizer.paged:
        warnings.append(
            "A paged optimizer keeps its states in unified memory and can evict them to the CPU under "
            "pressure; they are counted on the GPU here."
        )
    return warnings
