"""Measure trainmem's CUDA validation cases on one NVIDIA GPU and compare them with the predictions.

    pip install 'trainmem[measure]'            # torch with CUDA, transformers, peft (+ bitsandbytes)
    python scripts/validate_cuda.py             # or: make validate-cuda
    python scripts/validate_cuda.py --dry-run   # no GPU needed: the cases, their predictions, what would be skipped

For each case of ``scripts/cuda_cases.py`` it runs two training steps with ``trainmem.measure``
(one warm-up, one measured), in one process, one case after another, with the caching allocator
emptied and its settings (``PYTORCH_CUDA_ALLOC_CONF``) set per case in between. It records
``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``, ``cudaMemGetInfo`` used right after
the step (the cache still held) and, once for the process, the memory in use after
``torch.cuda.init()`` and one small kernel (the bare CUDA context); plus the GPU's name, the
driver, CUDA, cuDNN and library versions. The measurements are appended to the corpus
(``core/trainmem/data/corpus.jsonl``, ``device: cuda``; same ids are replaced) and the table of
predicted vs measured allocated, reserved and total memory, with whether the upper bound held, is
printed. It stops starting new cases after ``--budget-s`` seconds (default 420: the issue asks
for under 8 minutes).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "core"))

from cuda_cases import CASES  # noqa: E402

from trainmem.setup import Setup  # noqa: E402
from trainmem.units import GIB, MIB  # noqa: E402

DEFAULT_CORPUS = ROOT / "core" / "trainmem" / "data" / "corpus.jsonl"
DEFAULT_BUDGET_S = 420
DRY_RUN_GPU = "h100-sxm-80gb"

# (substring of torch.cuda.get_device_name, extra condition on memory GiB, catalog name), first match wins
_GPU_NAMES: list[tuple[str, Optional[tuple[float, float]], str]] = [
    ("H200", None, "h200"),
    ("H100 PCIe", None, "h100-pcie-80gb"),
    ("H100", None, "h100-sxm-80gb"),
    ("B200", None, "b200"),
    ("A100", (60, 1000), "a100-80gb"),
    ("A100", (0, 60), "a100-40gb"),
    ("L40S", None, "l40s"),
    ("L4", None, "l4"),
    ("A10G", None, "a10g"),
    ("T4", None, "t4"),
    ("V100", (20, 1000), "v100-32gb"),
    ("V100", (0, 20), "v100-16gb"),
    ("RTX 5090", None, "rtx-5090"),
    ("RTX 4090", None, "rtx-4090"),
    ("RTX 3090", None, "rtx-3090"),
    ("RTX A6000", None, "rtx-a6000"),
]


def catalog_gpu(device_name: str, total_bytes: int) -> Any:
    """The catalog GPU a device name stands for, or a custom GPU of its memory."""
    from trainmem.catalogs import gpus

    memory_gib = total_bytes / GIB
    for token, memory_range, name in _GPU_NAMES:
        if token in device_name and (memory_range is None or memory_range[0] <= memory_gib < memory_range[1]):
            if name in gpus():
                return name
    return {"name": "measured", "memory_gib": round(memory_gib, 2)}


def selected_cases(only: list[str]) -> list[dict[str, Any]]:
    if not only:
        return list(CASES)
    wanted = set(only)
    unknown = wanted - {c["id"] for c in CASES}
    if unknown:
        raise SystemExit(f"validate_cuda: no such case(s): {', '.join(sorted(unknown))}")
    return [c for c in CASES if c["id"] in wanted]


def why_not_measurable(case: dict[str, Any]) -> Optional[str]:
    """The reason ``trainmem.measure`` cannot replay a case here, or None (no GPU needed to tell)."""
    setup = Setup.model_validate(case["setup"])
    try:
        from trainmem.measure.runner import check_replayable, resolve_precision
    except ImportError as error:  # no torch: a dry run still lists the cases
        return f"the measure extra is not installed ({error.name})"
    try:
        check_replayable(resolve_precision(setup))
    except ValueError as error:
        return str(error)
    for module in case["requires"]:
        try:
            __import__(module)
        except ImportError:
            return f"needs {module} (pip install {module})"
    return None


def predicted(setup: dict[str, Any], gpu: Any) -> Any:
    import trainmem

    return trainmem.estimate({**setup, "gpu": gpu}, suggestions=False)


def dry_run(cases: list[dict[str, Any]], gpu: Any) -> str:
    """The cases, what trainmem predicts for each on ``gpu``, and which would be skipped and why."""
    lines = [f"{'case':<52} {'allocated':>10} {'reserved':>10} {'total':>10} {'bound':>10}  measured?"]
    for case in cases:
        report = predicted(case["setup"], gpu)
        reason = why_not_measurable(case)
        lines.append(
            f"{case['id']:<52} {report.peak_allocated_bytes / MIB:>10.1f} {report.peak_reserved_bytes / MIB:>10.1f} "
            f"{report.peak_total_bytes / MIB:>10.1f} {report.upper_bound_bytes / MIB:>10.1f}  "
            + ("yes" if reason is None else f"skipped: {reason}")
        )
    measurable = sum(why_not_measurable(c) is None for c in cases)
    lines.append(f"{len(cases)} cases, {measurable} measurable here (MiB, predicted on {gpu})")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- on the GPU
def device_info() -> dict[str, Any]:
    """GPU name, memory, driver, CUDA, cuDNN and library versions."""
    import subprocess

    import torch

    info: dict[str, Any] = {
        "gpu_name": torch.cuda.get_device_name(0),
        "device_total_bytes": torch.cuda.mem_get_info(0)[1],
        "cuda_version": torch.version.cuda,
        "cudnn_version": str(torch.backends.cudnn.version()),
        "driver_version": None,
        "library_versions": {},
    }
    try:
        output = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        info["driver_version"] = output.stdout.strip().splitlines()[0] if output.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        pass
    for module in ("bitsandbytes", "flash_attn", "transformers", "peft", "accelerate"):
        try:
            info["library_versions"][module] = __import__(module).__version__
        except (ImportError, AttributeError):
            continue
    return info


def context_bytes() -> int:
    """Device memory in use after ``torch.cuda.init()`` and one small kernel: the bare CUDA context."""
    import torch

    torch.cuda.init()
    x = torch.ones(16, device="cuda")
    (x * 2).sum().item()
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info(0)
    del x
    return total - free - torch.cuda.memory_reserved(0)


def set_allocator(conf: str) -> None:
    """``PYTORCH_CUDA_ALLOC_CONF`` for the next case, on a freshly emptied cache.

    ``parseArgs`` resets max_split_size, roundup_power2_divisions and the garbage-collection
    threshold to their defaults on every call, but not expandable_segments, so it is always given.
    """
    import torch

    gc.collect()
    torch.cuda.empty_cache()
    settings = conf if "expandable_segments" in conf else ",".join(filter(None, [conf, "expandable_segments:False"]))
    torch.cuda.memory._set_allocator_settings(settings)
    torch.cuda.reset_peak_memory_stats()


def with_device(measurement: Any, info: dict[str, Any], context: int, gpu: Any, conf: str) -> Any:
    """A measurement with the process-level CUDA figures and the GPU it ran on filled in."""
    cuda = measurement.cuda.model_copy(
        update={
            "context_bytes": context,
            "gpu_name": info["gpu_name"],
            "driver_version": info["driver_version"],
            "cuda_version": info["cuda_version"],
            "cudnn_version": info["cudnn_version"],
            "library_versions": dict(info["library_versions"]),
            "alloc_conf": conf,
        }
    )
    setup = Setup.model_validate({**measurement.setup.model_dump(mode="json"), "gpu": gpu})
    return measurement.model_copy(update={"cuda": cuda, "setup": setup})


def measure_cases(cases: list[dict[str, Any]], budget_s: float) -> tuple[list[Any], list[str]]:
    import torch

    from trainmem.measure.runner import measure

    if not torch.cuda.is_available():
        raise SystemExit("validate_cuda: no CUDA device (use --dry-run to see the cases without one)")
    context = context_bytes()
    info = device_info()
    gpu = catalog_gpu(info["gpu_name"], info["device_total_bytes"])
    print(
        f"{info['gpu_name']} ({info['device_total_bytes'] / GIB:.1f} GiB, as {gpu}), driver {info['driver_version']}, "
        f"CUDA {info['cuda_version']}, cuDNN {info['cudnn_version']}, torch {torch.__version__}; "
        f"context after torch.cuda.init(): {context / MIB:.0f} MiB",
        flush=True,
    )
    started, measured, notes = time.time(), [], []
    for case in cases:
        elapsed = time.time() - started
        if elapsed > budget_s:
            notes.append(f"{case['id']}: not started, the {budget_s:.0f} s budget is spent")
            continue
        reason = why_not_measurable(case)
        if reason is not None:
            notes.append(f"{case['id']}: skipped, {reason}")
            continue
        conf = case["setup"]["runtime"].get("cuda_alloc_conf", "")
        set_allocator(conf)
        began = time.time()
        try:
            result = measure(case["setup"], case_id=case["id"], description=case["description"])
        except (RuntimeError, ValueError) as error:  # an OOM or a kernel this GPU lacks: record and go on
            notes.append(f"{case['id']}: failed, {type(error).__name__}: {str(error).splitlines()[0][:200]}")
            continue
        measured.append(with_device(result, info, context, gpu, conf))
        print(f"  {case['id']}: {time.time() - began:.1f} s", flush=True)
    set_allocator("")
    return measured, notes


def merge_into_corpus(measurements: list[Any], path: Path) -> None:
    """Append (or replace, by id) the measurements in a corpus file, which stays sorted by id."""
    from trainmem.measure.corpus import load_corpus, write_corpus

    existing = load_corpus(path) if path.exists() else []
    by_id = {m.id: m for m in existing}
    by_id.update({m.id: m for m in measurements})
    write_corpus(by_id.values(), path)


def comparison_table(measurements: list[Any]) -> str:
    import trainmem
    from trainmem.cuda.gate import format_cuda_table, validate_cuda

    comparisons, summary = validate_cuda(measurements, lambda setup: trainmem.estimate(setup, suggestions=False))
    return format_cuda_table(comparisons, summary)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="list the cases and their predictions; no GPU")
    parser.add_argument("--only", action="append", default=[], help="only this case id (repeatable)")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S, help="stop starting cases after this")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="corpus file to append to")
    parser.add_argument("--output", type=Path, help="also write the new measurements alone to this file")
    parser.add_argument("--gpu", default=DRY_RUN_GPU, help="catalog GPU for --dry-run predictions")
    arguments = parser.parse_args(argv)
    cases = selected_cases(arguments.only)
    if arguments.dry_run:
        print(dry_run(cases, arguments.gpu))
        return 0
    measurements, notes = measure_cases(cases, arguments.budget_s)
    if measurements:
        merge_into_corpus(measurements, arguments.corpus)
        if arguments.output is not None:
            from trainmem.measure.corpus import write_corpus

            write_corpus(measurements, arguments.output)
    print()
    print(comparison_table(measurements))
    for note in notes:
        print(f"note: {note}")
    print(f"{len(measurements)} of {len(cases)} cases measured and written to {arguments.corpus}")
    return 0 if measurements else 1


if __name__ == "__main__":
    sys.exit(main())
