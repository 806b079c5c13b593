"""Does it fit? The verdict against a GPU, with headroom.

On CUDA the verdict judges the upper bound (``trainmem.cuda.memory``: the replayed reserved
peak, the parts outside the allocator at their upper figures and a stated margin), so that an
estimate does not under-predict. Headroom is memory deliberately left free on top of it: a
longer-than-usual batch, a library upgrade.
10–15% is the usual advice; the setup's ``headroom_fraction`` (default 10%) sets it.
"""

from __future__ import annotations

from .catalogs import GPU, gpus
from .report import FitVerdict
from .setup import CustomGPU, Setup
from .units import GIB, format_bytes


def resolve_gpu(setup: Setup) -> GPU:
    """The catalog GPU the setup names, or a custom one built from its capacity."""
    if isinstance(setup.gpu, CustomGPU):
        memory_mib = max(1, round(setup.gpu.memory_gib * 1024))
        return GPU(
            name=setup.gpu.name,
            display_name=f"{setup.gpu.name} ({setup.gpu.memory_gib:g} GiB)",
            vendor="custom",
            architecture="custom",
            memory_mib=memory_mib,
            marketed_memory_gb=setup.gpu.memory_gib * GIB / 1e9,
            supports_bf16=True,
            supports_fp8=True,
            source="given by the user",
        )
    return gpus()[setup.gpu]


def verdict(gpu: GPU, required_bytes: int, headroom_fraction: float, what: str = "") -> FitVerdict:
    """``what`` names the figure judged (e.g. "upper bound"), shown in the message."""
    capacity = gpu.memory_bytes
    needs = f"{what} " if what else ""
    usable = int(capacity * (1 - headroom_fraction))
    free = capacity - required_bytes
    if required_bytes <= usable:
        status, message = (
            "fits",
            (
                f"Fits on {gpu.display_name}: {needs}{format_bytes(required_bytes)} of {format_bytes(capacity)}, "
                f"{format_bytes(free)} free ({free / capacity:.0%})."
            ),
        )
    elif required_bytes <= capacity:
        status, message = (
            "tight",
            (
                f"Tight on {gpu.display_name}: {needs}{format_bytes(required_bytes)} of {format_bytes(capacity)} leaves "
                f"{format_bytes(free)}, less than the {headroom_fraction:.0%} headroom."
            ),
        )
    else:
        status, message = (
            "does_not_fit",
            (
                f"Does not fit on {gpu.display_name}: needs {needs}{format_bytes(required_bytes)}, "
                f"{format_bytes(-free)} more than its {format_bytes(capacity)}."
            ),
        )
    return FitVerdict(
        gpu=gpu.name,
        gpu_display_name=gpu.display_name,
        capacity_bytes=capacity,
        headroom_fraction=headroom_fraction,
        usable_bytes=usable,
        required_bytes=required_bytes,
        fits=status == "fits",
        status=status,
        message=message,
    )


def gpus_that_fit(required_bytes: int, headroom_fraction: float) -> list[str]:
    """Catalog GPUs whose usable memory holds ``required_bytes``, smallest first."""
    fitting = [g for g in gpus().values() if required_bytes <= g.memory_bytes * (1 - headroom_fraction)]
    return [g.name for g in sorted(fitting, key=lambda g: g.memory_mib)]
