"""The report as text for a terminal: breakdown by category and part, the peak, the verdict.

Rendering never fails on an accepted setup: names a user gave are refused at input when they
hold unprintable characters (``trainmem.limits.check_name``), and each line is escaped once more
here (:func:`trainmem.errors.printable`), so a terminal never receives a control sequence.
"""

from __future__ import annotations

from .errors import printable
from .report import CATEGORIES, RankReport, Report
from .units import format_bytes

_CATEGORY_NAMES = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer_states": "optimizer states",
    "activations": "activations",
    "overhead": "overhead",
}
_BAR_WIDTH = 24
_SPARK = " ▁▂▃▄▅▆▇█"


def _bar(fraction: float) -> str:
    cells = fraction * _BAR_WIDTH
    full = int(cells)
    return "█" * full + ("▌" if cells - full >= 0.5 else "")


def _sparkline(values: list[int], width: int = 60) -> str:
    if not values:
        return ""
    step = max(1, -(-len(values) // width))
    samples = [max(values[i : i + step]) for i in range(0, len(values), step)]
    top = max(samples) or 1
    return "".join(_SPARK[round(v / top * (len(_SPARK) - 1))] for v in samples)


def render_report(report: Report) -> str:
    setup, resolved = report.setup, report.resolved
    parallel = setup.parallelism
    lines = [
        f"trainmem {report.trainmem_version} · {resolved.model_description}",
        f"  {report.num_trainable_parameters:,} of {report.num_parameters:,} parameters train · "
        f"micro-batch {setup.micro_batch_size} × {setup.sequence_length} tokens"
        + (f" → {setup.target_length} target tokens" if setup.target_length is not None else "")
        + (
            f" × {setup.gradient_accumulation_steps} accumulation steps"
            if setup.gradient_accumulation_steps > 1
            else ""
        ),
        f"  {setup.precision} → {resolved.precision_recipe} ({resolved.precision_description}) · "
        f"{setup.optimizer.name} ({resolved.optimizer_implementation}) · checkpointing {setup.activation_checkpointing}"
        f" · attention {setup.attention}",
    ]
    if parallel.num_gpus > 1:
        strategy = {
            "ddp": "DDP",
            "zero": f"ZeRO-{parallel.zero_stage}",
            "fsdp": f"FSDP {parallel.fsdp_sharding_strategy}",
        }
        sizes = [
            f"{name} {size}"
            for name, size in (
                ("TP", parallel.tensor_parallel_size),
                ("PP", parallel.pipeline_parallel_size),
                ("CP", parallel.context_parallel_size),
                ("EP", parallel.expert_parallel_size),
            )
            if size > 1
        ]
        lines.append(
            f"  {parallel.num_gpus} GPUs · {strategy[parallel.strategy]} over {resolved.data_parallel_size} "
            f"data-parallel ranks" + (" · " + ", ".join(sizes) if sizes else "")
        )
    for index, rank in enumerate(report.ranks):
        heaviest = " (heaviest)" if len(report.ranks) > 1 and index == report.heaviest_rank else ""
        lines += [
            "",
            f"Per GPU — {rank.name}{heaviest}: peak {format_bytes(rank.peak_total_bytes)} total "
            f"({format_bytes(rank.peak_allocated_bytes)} allocated by PyTorch)",
        ]
        total = rank.peak_total_bytes or 1
        for category in CATEGORIES:
            value = getattr(rank.breakdown, category)
            lines.append(
                f"  {_CATEGORY_NAMES[category]:<18}{format_bytes(value):>12} {value / total:>4.0%}  "
                f"{_bar(value / total)}"
            )
            for part in (p for p in rank.parts if p.category == category):
                detail = f"  ({part.detail})" if part.detail else ""
                lines.append(f"      {part.name:<34}{format_bytes(part.bytes):>12}{detail}")
        lines.append(f"  peak at {rank.peak.description}")
        timeline = rank.timeline
        totals = [
            sum(values)
            for values in zip(
                timeline.parameters,
                timeline.gradients,
                timeline.optimizer_states,
                timeline.activations,
                timeline.overhead,
            )
        ]
        lines.append(f"  step timeline (allocated): {_sparkline(totals)}")
        lines += _cuda_lines(rank)
        if rank.cpu_offload_bytes:
            lines.append(f"  offloaded to CPU memory: {format_bytes(rank.cpu_offload_bytes)}")
    host = report.host
    if host is not None and (host.budget_bytes is not None or host.steady_parts and any(
        part.name.startswith("offloaded ") or part.name == "pinned NVMe swap buffers" for part in host.steady_parts
    )):
        lines += ["", f"Host RAM per node ({host.ranks_per_node} ranks): {format_bytes(host.peak_bytes)}"]
        for title, parts, total in (
            ("training", host.steady_parts, host.steady_bytes),
            ("model load", host.load_parts, host.load_bytes),
        ):
            lines.append(f"  {title:<12}{format_bytes(total):>12}")
            for part in parts:
                lines.append(f"      {part.name:<34}{format_bytes(part.bytes):>12}  ({part.detail})")
        if host.nvme_bytes:
            lines.append(f"  NVMe per node (ZeRO-Infinity): {format_bytes(host.nvme_bytes)}")
        if host.message:
            lines.append(host.message)
    fit = report.fit
    lines += ["", fit.message]
    if report.fits_on:
        lines.append(f"Fits with {setup.headroom_fraction:.0%} headroom on: {', '.join(report.fits_on)}")
    if report.suggestions:
        lines += ["", "Suggestions:"]
        for suggestion in report.suggestions:
            mark = "fits" if suggestion.fits else "still too big"
            lines.append(f"  • {suggestion.title} — {suggestion.detail} [{mark}]")
    for warning in report.warnings:
        lines.append(f"Note: {warning}")
    return "\n".join(printable(line, _MAX_LINE_CHARS).rstrip() for line in lines)


_MAX_LINE_CHARS = 4000
"""Longer than any line of a report (the longest, the fit list, is a few hundred characters)."""


# ---------------------------------------------------------------------------- CUDA memory
def _cuda_lines(rank: RankReport) -> list[str]:
    """Allocated, reserved (replayed), total and the upper bound; fragmentation; what the bound adds."""
    cuda = rank.cuda
    if cuda is None:
        return []
    conf = cuda.cuda_alloc_conf or "PyTorch defaults"
    how = f"allocator replay, {conf}" if cuda.replayed else "scaled from the base setup's replay"
    lines = [
        f"  CUDA: allocated {format_bytes(cuda.peak_allocated_bytes)} · reserved "
        f"{format_bytes(cuda.peak_reserved_bytes)} ({how}) · total {format_bytes(rank.peak_total_bytes)} · "
        f"upper bound {format_bytes(cuda.upper_bound_bytes)}"
    ]
    if cuda.replayed:
        line = (
            f"  allocator: {format_bytes(cuda.fragmentation_bytes)} reserved but unallocated at the allocated peak, "
            f"{cuda.segments} segments, largest free block {format_bytes(cuda.largest_free_block_bytes)}"
        )
        for alternative in cuda.alternatives:
            sign = "−" if alternative.change_bytes < 0 else "+"
            line += (
                f"; PYTORCH_CUDA_ALLOC_CONF={alternative.cuda_alloc_conf} would reserve "
                f"{format_bytes(alternative.peak_reserved_bytes)} ({sign}{format_bytes(abs(alternative.change_bytes))})"
            )
        lines.append(line)
    added = " + ".join(f"{part.name} {format_bytes(part.bytes)}" for part in cuda.upper_bound_parts if part.bytes)
    lines.append(f"  upper bound = reserved {format_bytes(cuda.peak_reserved_bytes)} + {added}")
    return lines
