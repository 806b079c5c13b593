"""Regenerate trainmem's measured corpus from the case list in scripts/corpus_cases.py.

    python scripts/build_corpus.py                 # every case -> core/trainmem/data/corpus.jsonl
    python scripts/build_corpus.py --only ID ...   # re-measure some cases, keep the others
    python scripts/build_corpus.py --check         # re-measure and compare, write nothing
    python scripts/build_corpus.py --check-fake    # measure each real case on fake tensors too, compare

Every case runs in a fresh process (spawned, one case per process), so no state carries
over from one measurement to the next; ``--jobs`` runs several at once. Needs the
``measure`` extra (torch, transformers, peft).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from corpus_cases import CASES  # noqa: E402

from trainmem.measure.corpus import (  # noqa: E402
    dump_measurement,
    load_corpus,
    measurement_differences,
    write_corpus,
)
from trainmem.measure.record import Measurement  # noqa: E402

DEFAULT_OUTPUT = ROOT / "core" / "trainmem" / "data" / "corpus.jsonl"


def measure_case(case: dict[str, Any], fake: bool | None = None) -> str:
    """Measure one case (in a worker process); the Measurement as a JSON line."""
    import torch

    from trainmem.measure.runner import measure

    torch.set_num_threads(1)
    measurement = measure(
        case["setup"],
        fake=case["fake"] if fake is None else fake,
        case_id=case["id"],
        description=case["description"],
    )
    return dump_measurement(measurement)


def run_all(cases: list[dict[str, Any]], jobs: int, fake: bool | None = None) -> dict[str, Measurement]:
    context = multiprocessing.get_context("spawn")
    results: dict[str, Measurement] = {}
    started = time.time()
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context, max_tasks_per_child=1) as pool:
        futures = {case["id"]: pool.submit(measure_case, case, fake) for case in cases}
        for number, (case_id, future) in enumerate(futures.items(), start=1):
            measurement = Measurement.model_validate_json(future.result())
            results[case_id] = measurement
            print(
                f"[{number}/{len(cases)}] {case_id}: peak {measurement.peak_allocated_bytes:,} B "
                f"in {measurement.peak.phase} ({time.time() - started:.0f} s)",
                flush=True,
            )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="ID", help="measure only these cases")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--check", action="store_true", help="re-measure and compare with --output; write nothing")
    parser.add_argument("--check-fake", action="store_true", help="re-measure real cases on fake tensors; compare")
    parser.add_argument("--list", action="store_true", help="list the case ids")
    arguments = parser.parse_args(argv)

    by_id = {case["id"]: case for case in CASES}
    if arguments.list:
        print("\n".join(by_id))
        return 0
    selected = list(by_id) if not arguments.only else arguments.only
    unknown = [case_id for case_id in selected if case_id not in by_id]
    if unknown:
        print(f"unknown case ids: {', '.join(unknown)}", file=sys.stderr)
        return 2
    cases = [by_id[case_id] for case_id in selected]

    if arguments.check_fake:
        cases = [case for case in cases if not case["fake"]]
        real = run_all(cases, arguments.jobs, fake=False)
        fake = run_all(cases, arguments.jobs, fake=True)
        return _report_differences({key: (real[key], fake[key]) for key in real}, "fake vs real")

    fresh = run_all(cases, arguments.jobs)
    if arguments.check:
        committed = {m.id: m for m in load_corpus(arguments.output)}
        missing = [key for key in fresh if key not in committed]
        if missing:
            print(f"not in the corpus: {', '.join(missing)}")
            return 1
        return _report_differences({key: (committed[key], fresh[key]) for key in fresh}, "re-measured vs committed")

    if arguments.only and arguments.output.exists():
        written = _merge_into_corpus(fresh, arguments.output, set(by_id))
    else:
        write_corpus(fresh.values(), arguments.output)
        written = len(fresh)
    print(f"wrote {written} cases to {arguments.output}")
    return 0


def _merge_into_corpus(fresh: dict[str, Measurement], path: Path, known_ids: set[str]) -> int:
    """``--only``: the re-measured cases replace their lines; every other line is kept byte for byte (a
    re-dump would rewrite old setups with fields added since they were measured), all sorted by id."""
    lines: dict[str, str] = {}
    for measurement, line in zip(load_corpus(path), [text for text in path.read_text(encoding="utf-8").splitlines() if text.strip()]):
        if measurement.id in known_ids:
            lines[measurement.id] = line
    lines.update({case_id: dump_measurement(measurement) for case_id, measurement in fresh.items()})
    path.write_text("".join(lines[case_id] + "\n" for case_id in sorted(lines)), encoding="utf-8")
    return len(lines)


def _report_differences(pairs: dict[str, tuple[Measurement, Measurement]], what: str) -> int:
    failures = 0
    for case_id, (left, right) in pairs.items():
        differences = measurement_differences(left, right)
        differences = [line for line in differences if not line.startswith("environment.fake")]
        if differences:
            failures += 1
            print(f"{case_id}: {len(differences)} difference(s), e.g. {differences[:3]}")
    print(f"{what}: {len(pairs) - failures} of {len(pairs)} cases identical")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
