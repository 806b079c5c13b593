"""``trainmem measure``: measure a setup's training step, or re-measure a corpus case.

Examples::

    trainmem measure setup.json                 # real tensors on runtime.device
    trainmem measure setup.json --fake --json   # FakeTensorMode, the full record as JSON
    trainmem measure setup.json --output my.jsonl --id my-case
    trainmem measure --case llama-14m-fp32-adamw-sdpa-b1-s128   # re-measure, compare
    trainmem measure fsdp2.json --output ranks.jsonl  # parallelism.num_gpus 2-4: local gloo ranks,
                                                      # one record per rank (trainmem.measure.distributed)

The setup is a JSON file (``-`` reads stdin) or inline JSON. torch is imported only when
a measurement runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

from ..report import CATEGORIES
from ..units import format_bytes
from .corpus import dump_measurement, load_corpus, measurement_differences
from .record import Measurement


def build_parser() -> argparse.ArgumentParser:
    from ..cli import OneLineParser
    from ..cli_values import whole_number

    parser = OneLineParser(
        prog="trainmem measure",
        description="Run a real training step of a setup in PyTorch and count its memory by category.",
    )
    parser.add_argument("setup", nargs="?", help="setup JSON file, '-' for stdin, or inline JSON")
    parser.add_argument("--fake", action="store_true", help="FakeTensorMode: shapes only, no memory (large models)")
    parser.add_argument("--seed", type=whole_number, default=0)
    parser.add_argument(
        "--warmup-steps",
        type=whole_number,
        default=None,
        help="untracked steps before the measured one (default 1; 2 for DDP, whose buckets are rebuilt in step 2)",
    )
    parser.add_argument("--id", default="", help="case id to record (default: derived from the setup)")
    parser.add_argument("--description", default="")
    parser.add_argument("--output", type=Path, help="append the measurement to this JSON-lines file")
    parser.add_argument("--json", action="store_true", help="print the whole measurement as JSON")
    parser.add_argument("--case", help="re-measure this corpus case and compare with the committed numbers")
    parser.add_argument("--corpus", type=Path, help="corpus file for --case (default: the packaged corpus)")
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    arguments = build_parser().parse_args(argv)
    if arguments.case:
        return _recheck(arguments)
    if not arguments.setup:
        print("trainmem measure: error: give a setup, or --case ID", file=sys.stderr)
        return 2
    try:
        setup = _read_setup(arguments.setup)
        if _ranks(setup) > 1 or _one_rank_zero(setup):
            if arguments.fake:
                raise ValueError("--fake: a distributed measurement runs real tensors (gloo needs data)")
            from .distributed import measure_distributed

            measurements = measure_distributed(
                setup,
                seed=arguments.seed,
                warmup_steps=arguments.warmup_steps,
                case_id=arguments.id,
                description=arguments.description,
            )
        else:
            from .runner import measure

            measurements = [
                measure(
                    setup,
                    fake=arguments.fake,
                    seed=arguments.seed,
                    warmup_steps=arguments.warmup_steps if arguments.warmup_steps is not None else 1,
                    case_id=arguments.id,
                    description=arguments.description,
                )
            ]
    except (ValueError, OSError) as error:
        print(f"trainmem measure: {error}", file=sys.stderr)
        return 2
    for measurement in measurements:
        _emit(measurement, arguments)
    return 0


def _one_rank_zero(setup: dict) -> bool:
    """A one-process DeepSpeed ZeRO run is measured through DeepSpeed, as the distributed runs are."""
    from ..setup import Setup
    from .distributed import runs_deepspeed_on_one_rank

    try:
        return runs_deepspeed_on_one_rank(Setup.model_validate(setup))
    except ValueError:
        return False


def _ranks(setup: dict) -> int:
    parallelism = setup.get("parallelism") if isinstance(setup, dict) else None
    value = parallelism.get("num_gpus", 1) if isinstance(parallelism, dict) else 1
    return value if isinstance(value, int) else 1


def _recheck(arguments: argparse.Namespace) -> int:
    cases = {case.id: case for case in load_corpus(arguments.corpus)}
    committed = cases.get(arguments.case)
    if committed is None:
        print(f"trainmem measure: no case {arguments.case!r} in the corpus", file=sys.stderr)
        return 2
    from .runner import measure

    fresh = measure(
        committed.setup,
        fake=committed.environment.fake,
        seed=committed.environment.seed,
        warmup_steps=committed.environment.warmup_steps,
        case_id=committed.id,
        description=committed.description,
    )
    _emit(fresh, arguments)
    differences = measurement_differences(committed, fresh)
    if differences:
        print(f"\n{len(differences)} difference(s) from the committed measurement:")
        for line in differences[:40]:
            print(f"  {line}")
        return 1
    print("\nreproduces the committed measurement exactly")
    return 0


def _read_setup(text: str) -> dict:
    """Inline JSON, ``-`` for stdin, or a file, each with the limits of :mod:`trainmem.files`."""
    from ..files import MAX_FILE_BYTES, parse_json_text, read_json_file

    if text.lstrip().startswith("{"):
        return parse_json_text(text, "setup")
    if text == "-":
        data = sys.stdin.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise ValueError(f"setup on stdin is larger than the {MAX_FILE_BYTES // 2**20} MiB limit")
        return parse_json_text(data, "setup on stdin")
    return read_json_file(text, "setup file")


def _emit(measurement: Measurement, arguments: argparse.Namespace) -> None:
    if arguments.output:
        with arguments.output.open("a", encoding="utf-8") as file:
            file.write(dump_measurement(measurement) + "\n")
    if arguments.json:
        print(json.dumps(measurement.model_dump(mode="json"), indent=2))
    else:
        print(format_measurement(measurement))


def format_measurement(measurement: Measurement) -> str:
    """A human summary: peak, breakdown at the peak, phase peaks, largest transients."""
    peak = measurement.peak_allocated_bytes
    environment = measurement.environment
    lines = [
        f"{measurement.id}",
        f"  {measurement.num_parameters:,} parameters ({measurement.num_trainable_parameters:,} trainable); "
        f"{environment.device}{' (fake tensors)' if environment.fake else ''}, torch {environment.torch}",
        f"  kernels: attention {measurement.kernels.attention}, optimizer {measurement.kernels.optimizer_implementation}"
        + (
            f", autocast {measurement.kernels.autocast_dtype} on {measurement.kernels.autocast_device}"
            if measurement.kernels.autocast_device
            else ""
        ),
        f"  peak allocated {format_bytes(peak)} ({peak:,} B) in {measurement.peak.phase} "
        f"at '{measurement.peak.label}' (micro-batch {measurement.peak.micro_batch})",
    ]
    for category in CATEGORIES:
        value = getattr(measurement.breakdown, category)
        lines.append(f"    {category:<17} {format_bytes(value):>11}  {100 * value / peak if peak else 0:5.1f}%")
    for name, value in measurement.parts.items():
        lines.append(f"      incl. {name:<34} {format_bytes(value):>11}")
    lines.append("  phase peaks:")
    for phase, phase_peak in measurement.phase_peaks.items():
        lines.append(f"    {phase:<10} {format_bytes(phase_peak.bytes):>11}  at '{phase_peak.label}'")
    if measurement.peak_by_op:
        lines.append("  transient memory at the peak, by op:")
        for entry in measurement.peak_by_op[:6]:
            lines.append(
                f"    {entry.op:<48} {format_bytes(entry.bytes):>11}  ({entry.count} tensors, {entry.category})"
            )
    if measurement.cuda is not None:
        lines.append(
            f"  torch.cuda: max_memory_allocated {format_bytes(measurement.cuda.max_memory_allocated)}, "
            f"max_memory_reserved {format_bytes(measurement.cuda.max_memory_reserved)}"
        )
    return "\n".join(lines)
