"""Measure the TRL post-training corpus cases (ids starting with ``trl-``) and append them to the corpus.

    python scripts/measure_post_training.py                 # every trl- case not in the corpus yet
    python scripts/measure_post_training.py --ids ID ...    # these cases (to a separate file with --output)

New lines are appended in id order after the existing ones (the corpus is never rewritten); trl- ids sort
after every other case.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "core"))

from corpus_cases import CASES  # noqa: E402

from trainmem.measure.corpus import dump_measurement, load_corpus  # noqa: E402

DEFAULT_OUTPUT = ROOT / "core" / "trainmem" / "data" / "corpus.jsonl"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", nargs="*", help="case ids (default: the trl- cases missing from the corpus)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    arguments = parser.parse_args(argv)
    import torch

    from trainmem.measure.runner import measure

    torch.set_num_threads(1)
    existing = {case.id for case in load_corpus(arguments.output)} if arguments.output.exists() else set()
    wanted = arguments.ids or [case["id"] for case in CASES if case["id"].startswith("trl-") and case["id"] not in existing]
    by_id = {case["id"]: case for case in CASES}
    for case_id in sorted(wanted):
        definition = by_id[case_id]
        measurement = measure(
            definition["setup"], fake=definition["fake"], case_id=case_id, description=definition["description"]
        )
        with arguments.output.open("a", encoding="utf-8") as file:
            file.write(dump_measurement(measurement) + "\n")
        print(f"{case_id}: {measurement.peak_allocated_bytes:,} bytes at {measurement.peak.label}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
