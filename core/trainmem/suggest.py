"""What to change: alternative setups, each simulated, ranked by what they save.

Every suggestion is a JSON merge patch on the setup, evaluated with a full ``estimate``,
so its number is as trustworthy as the main one. When the run fits, the suggestion is the
largest micro-batch that still fits.
"""

from __future__ import annotations

from typing import Any, Optional

from .catalogs import gpus
from .patch import merge_patch
from .report import Report, Suggestion
from .setup import Setup
from .units import format_bytes

MAX_MICRO_BATCH = 4096


def _try(setup_json: dict[str, Any], patch: dict[str, Any]) -> Optional[Report]:
    from .estimate import estimate

    try:
        return estimate(Setup.model_validate(merge_patch(setup_json, patch)), suggestions=False)
    except ValueError:
        return None  # the change is not valid for this setup (e.g. ZeRO-3 on one GPU)


def _candidates(setup: Setup) -> list[tuple[str, str, dict[str, Any]]]:
    """(title, why, patch) for every change that could lower the peak."""
    parallel, finetuning = setup.parallelism, setup.finetuning
    out: list[tuple[str, str, dict[str, Any]]] = []
    if setup.activation_checkpointing != "full":
        out.append(
            (
                "Full activation checkpointing",
                "keep one input per layer, recompute the rest in backward",
                {"activation_checkpointing": "full"},
            )
        )
    if parallel.num_gpus > 1:
        if parallel.strategy == "ddp":
            out.append(
                (
                    "ZeRO stage 2",
                    "shard optimizer states and gradients over the data-parallel ranks",
                    {"parallelism": {"strategy": "zero", "zero_stage": 2}},
                )
            )
        if parallel.strategy != "fsdp" and parallel.zero_stage < 3:
            out.append(
                (
                    "ZeRO stage 3",
                    "shard the weights too, gathering one layer at a time",
                    {"parallelism": {"strategy": "zero", "zero_stage": 3}},
                )
            )
    if parallel.strategy in ("zero", "fsdp") and not parallel.offload_optimizer:
        out.append(
            (
                "Offload the optimizer to the CPU",
                "optimizer states and master weights in host memory",
                {"parallelism": {"offload_optimizer": True}},
            )
        )
    if setup.micro_batch_size > 1:
        half = setup.micro_batch_size // 2
        out.append(
            (
                f"Micro-batch {half} × {setup.gradient_accumulation_steps * 2} accumulation steps",
                "same global batch, half the activations",
                {"micro_batch_size": half, "gradient_accumulation_steps": setup.gradient_accumulation_steps * 2},
            )
        )
    eight_bit = {"adam": "adamw-8bit", "adamw": "adamw-8bit", "paged-adamw": "paged-adamw-8bit", "lion": "lion-8bit"}
    if setup.optimizer.name in eight_bit:
        name = eight_bit[setup.optimizer.name]
        out.append(
            (
                f"8-bit optimizer ({name})",
                "bitsandbytes block-wise 8-bit optimizer states",
                {"optimizer": {"name": name}},
            )
        )
    if setup.attention in ("eager", "sdpa-math"):
        out.append(("Fused attention (SDPA)", "no s×s attention scores are stored", {"attention": "sdpa"}))
    if setup.loss == "standard":
        out.append(("Chunked cross-entropy", "never materialise the full fp32 logits", {"loss": "chunked"}))
    if setup.precision == "fp32":
        out.append(("bf16 mixed precision", "16-bit activations", {"precision": "bf16-mixed"}))
    if finetuning.method == "full" and setup.architecture() is not None:
        out.append(
            (
                "LoRA (r=16, all linear layers)",
                "freeze the base; train low-rank adapters",
                {"finetuning": {"method": "lora", "lora": {"r": 16, "target_modules": "all-linear"}}},
            )
        )
    if finetuning.method == "lora":
        out.append(
            ("QLoRA (4-bit NF4 base)", "quantise the frozen base to 4 bits", {"finetuning": {"method": "qlora"}})
        )
    if finetuning.method in ("lora", "qlora") and finetuning.lora.r > 16:
        out.append(
            (
                f"LoRA rank 16 instead of {finetuning.lora.r}",
                "smaller adapters, their gradients and states",
                {"finetuning": {"lora": {"r": 16}}},
            )
        )
    return out


def _faster_candidates(setup: Setup) -> list[tuple[str, str, dict[str, Any]]]:
    """Changes that cost memory but save time: worth making when the run still fits after them."""
    parallel = setup.parallelism
    out: list[tuple[str, str, dict[str, Any]]] = []
    if setup.activation_checkpointing != "none":
        out.append(
            (
                "No activation checkpointing",
                "nothing is recomputed in backward (about a third less compute)",
                {"activation_checkpointing": "none"},
            )
        )
    if parallel.strategy == "zero" and parallel.zero_stage == 3:
        out.append(
            (
                "ZeRO stage 2 instead of 3",
                "no per-layer weight gathers in forward and backward",
                {"parallelism": {"zero_stage": 2}},
            )
        )
    if parallel.offload_optimizer:
        out.append(
            (
                "Keep the optimizer on the GPU",
                "no host-device copies and no CPU optimizer step",
                {"parallelism": {"offload_optimizer": False}},
            )
        )
    return out


def _largest_micro_batch(setup_json: dict[str, Any], report: Report) -> Optional[tuple[int, Report]]:
    """The largest micro-batch up to :data:`MAX_MICRO_BATCH` that fits: doubling until one does
    not fit (the last doubling step is capped at the maximum, so 3 → … → 3072 → 4096 is tried),
    then bisection between the last that fits and the first that does not. A micro-batch the
    Setup refuses (beyond its bounds) counts as not fitting. Exact when the peak grows with the
    micro-batch, which tests/test_properties.py checks."""
    usable = report.fit.usable_bytes

    def fitting(size: int) -> Optional[Report]:
        trial = _try(setup_json, {"micro_batch_size": size})
        return trial if trial is not None and trial.fit.required_bytes <= usable else None

    low, low_report = report.setup.micro_batch_size, report
    high: Optional[int] = None  # the smallest size known not to fit
    while low < MAX_MICRO_BATCH:
        candidate = min(low * 2, MAX_MICRO_BATCH)
        trial = fitting(candidate)
        if trial is None:
            high = candidate
            break
        low, low_report = candidate, trial
    if high is None:
        return low, low_report
    while high - low > 1:
        middle = (low + high) // 2
        trial = fitting(middle)
        if trial is not None:
            low, low_report = middle, trial
        else:
            high = middle
    return _settle_with_replay(setup_json, low, low_report, usable, report.setup.micro_batch_size)


def _settle_with_replay(
    setup_json: dict[str, Any], size: int, size_report: Report, usable: int, smallest: int
) -> tuple[int, Report]:
    """The search above runs with the allocator reserve scaled from the base setup; the boundary is
    found again with each candidate's own allocator replay (``trainmem.cuda.memory``): galloping from
    ``size`` in the direction the replayed answer points, then bisection, so that a reserve far off
    costs a logarithmic number of replays, not one per micro-batch. When not even ``smallest`` fits,
    it is returned with its report."""
    from .cuda.memory import replayed_reserve

    with replayed_reserve():

        def tried(candidate: int) -> tuple[Optional[Report], bool]:
            trial = _try(setup_json, {"micro_batch_size": candidate})
            return trial, trial is not None and trial.fit.required_bytes <= usable

        trial, fits = tried(size)
        if fits:
            assert trial is not None
            low, low_report, high, step = size, trial, None, 1
            while high is None and low < MAX_MICRO_BATCH:
                candidate = min(low + step, MAX_MICRO_BATCH)
                bigger, bigger_fits = tried(candidate)
                if bigger_fits:
                    assert bigger is not None
                    low, low_report, step = candidate, bigger, step * 2
                else:
                    high = candidate
            if high is None:
                return low, low_report
        else:
            high, step, low, low_report = size, 1, None, None
            while low is None:
                candidate = max(high - step, smallest)
                smaller, smaller_fits = tried(candidate)
                if smaller_fits:
                    assert smaller is not None
                    low, low_report = candidate, smaller
                elif candidate == smallest:
                    return smallest, smaller if smaller is not None else size_report
                else:
                    high, step = candidate, step * 2
        while high - low > 1:
            middle = (low + high) // 2
            trial, fits = tried(middle)
            if fits:
                assert trial is not None
                low, low_report = middle, trial
            else:
                high = middle
    return low, low_report


MAX_COMBINED_CHANGES = 4
MAX_GPUS = 4096


def _enough_gpus(setup_json: dict[str, Any], setup: Setup) -> Optional[Suggestion]:
    """The fewest GPUs (doubling) on which ZeRO-3 makes the setup fit, everything else unchanged."""
    num_gpus = setup.parallelism.num_gpus * 2
    while num_gpus <= MAX_GPUS:
        patch = {"parallelism": {"num_gpus": num_gpus, "strategy": "zero", "zero_stage": 3}}
        trial = _try(setup_json, patch)
        if trial is not None and trial.fit.fits:
            return Suggestion(
                title=f"{num_gpus} GPUs with ZeRO-3",
                detail=f"the fewest GPUs (doubling from {setup.parallelism.num_gpus}) that fit with the rest "
                f"unchanged: peak {format_bytes(trial.peak_total_bytes)} per GPU",
                setup_patch=patch,
                peak_total_bytes=trial.peak_total_bytes,
                fits=True,
            )
        num_gpus *= 2
    return None


def _combine(setup_json: dict[str, Any]) -> Optional[Suggestion]:
    """When no single change fits, apply changes together, greedily: at each step the candidate
    (regenerated for the setup changed so far) that lowers the peak most, until it fits."""
    patch: dict[str, Any] = {}
    titles: list[str] = []
    best: Optional[Report] = None
    while len(titles) < MAX_COMBINED_CHANGES:
        current = Setup.model_validate(merge_patch(setup_json, patch))
        trials = []
        for title, _, candidate in _candidates(current):
            trial = _try(setup_json, merge_patch(patch, candidate))
            if trial is not None and (best is None or trial.peak_total_bytes < best.peak_total_bytes):
                trials.append((title, candidate, trial))
        if not trials:
            break
        title, candidate, best = min(trials, key=lambda item: item[2].peak_total_bytes)
        patch = merge_patch(patch, candidate)
        titles.append(title)
        if best.fit.fits:
            break
    if best is None or len(titles) < 2:
        return None
    return Suggestion(
        title=" + ".join(titles),
        detail=f"these changes together: peak {format_bytes(best.peak_total_bytes)}",
        setup_patch=patch,
        peak_total_bytes=best.peak_total_bytes,
        fits=best.fit.fits,
    )


def suggest(setup: Setup, report: Report, limit: int = 5) -> list[Suggestion]:
    setup_json = setup.model_dump(mode="json")
    suggestions: list[Suggestion] = []
    if report.fit.fits and report.setup.architecture() is not None:
        for title, why, patch in _faster_candidates(setup):
            trial = _try(setup_json, patch)
            if trial is not None and trial.fit.fits:
                suggestions.append(
                    Suggestion(
                        title=title,
                        detail=f"{why}; still fits ({format_bytes(trial.peak_total_bytes)})",
                        setup_patch=patch,
                        peak_total_bytes=trial.peak_total_bytes,
                        fits=True,
                    )
                )
        found = _largest_micro_batch(setup_json, report)
        if found and found[0] > setup.micro_batch_size:
            size, trial = found
            suggestions.append(
                Suggestion(
                    title=f"Micro-batch up to {size}",
                    detail=f"the largest micro-batch that fits {report.fit.gpu_display_name} with headroom "
                    f"({format_bytes(trial.peak_total_bytes)})"
                    + (" — the search stops at this size" if size == MAX_MICRO_BATCH else ""),
                    setup_patch={"micro_batch_size": size},
                    peak_total_bytes=trial.peak_total_bytes,
                    fits=True,
                )
            )
        return suggestions
    for title, why, patch in _candidates(setup):
        trial = _try(setup_json, patch)
        if trial is None or trial.peak_total_bytes >= report.peak_total_bytes:
            continue
        saved = report.peak_total_bytes - trial.peak_total_bytes
        suggestions.append(
            Suggestion(
                title=title,
                detail=f"{why}: saves {format_bytes(saved)}, peak {format_bytes(trial.peak_total_bytes)}",
                setup_patch=patch,
                peak_total_bytes=trial.peak_total_bytes,
                fits=trial.fit.fits,
            )
        )
    suggestions.sort(key=lambda s: (not s.fits, s.peak_total_bytes))
    if suggestions and not any(s.fits for s in suggestions):
        combined = _combine(setup_json)
        if combined is not None:
            suggestions.insert(0, combined)
    suggestions = suggestions[:limit]
    more_gpus = _enough_gpus(setup_json, setup)
    if more_gpus is not None:
        suggestions.append(more_gpus)
    for gpu in sorted(gpus().values(), key=lambda g: g.memory_mib):
        if gpu.memory_bytes * (1 - setup.headroom_fraction) < report.peak_total_bytes:
            continue
        trial = _try(setup_json, {"gpu": gpu.name})
        if trial is not None and trial.fit.fits:
            suggestions.append(
                Suggestion(
                    title=f"A larger GPU: {gpu.display_name}",
                    detail=f"{gpu.memory_mib / 1024:.0f} GiB holds this setup as is",
                    setup_patch={"gpu": gpu.name},
                    peak_total_bytes=trial.peak_total_bytes,
                    fits=True,
                )
            )
            break
    return suggestions
