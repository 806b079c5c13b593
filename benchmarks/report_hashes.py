"""Fingerprints of what trainmem predicts, to show that a refactoring changed no number.

For every setup of the measured corpora (``corpus.jsonl``, ``corpus_distributed.jsonl``), every
preset with the default setup, every case of the generation corpus (``corpus_generation.jsonl``)
and a few hundred generated setups (``benchmarks/fuzz_setups.py``: valid-looking and hostile), it
writes one line ``<name> <sha256>``: the hash of ``trainmem.estimate(setup).model_dump_json()`` (the
generation phase's ``repr`` for generation cases; the rejection's one-line message for a setup
that is refused). Run it before and after a change and compare the files:

    python benchmarks/report_hashes.py > /tmp/before.txt
    ... change ...
    python benchmarks/report_hashes.py > /tmp/after.txt && diff /tmp/before.txt /tmp/after.txt

The last line is a hash of all lines, for a one-glance comparison.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any, Iterator, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "core"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from pydantic import ValidationError  # noqa: E402

import trainmem  # noqa: E402
from trainmem.catalogs import presets  # noqa: E402
from trainmem.errors import one_line  # noqa: E402

DATA = ROOT / "core" / "trainmem" / "data"
CORPORA = ("corpus.jsonl", "corpus_distributed.jsonl")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _estimate_hash(setup: Any, suggestions: bool) -> str:
    """The hash of the report, or of the one-line rejection (``rejected:`` before it)."""
    try:
        return _sha(trainmem.estimate(setup, suggestions=suggestions).model_dump_json())
    except ValidationError as error:
        return "rejected:" + _sha(one_line(error))
    except ValueError as error:
        return "value-error:" + _sha(str(error))


def _corpus_setups() -> Iterator[tuple[str, dict[str, Any]]]:
    for name in CORPORA:
        for line in (DATA / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                yield f"{name}:{record['id']}", record["setup"]


def _generation_hashes() -> Iterator[tuple[str, str]]:
    from trainmem.inference.validate import load_generation_corpus, predict
    from trainmem.inference.generation import hf_generation_phase
    from trainmem.plan import Plan
    from trainmem.setup import Setup

    for measurement in load_generation_corpus():
        case = measurement.case
        plan = Plan(Setup.model_validate(case.setup_dict()))
        phase = hf_generation_phase(
            plan, case.batch_size, case.prompt_tokens, case.completion_tokens,
            do_sample=case.do_sample, top_k=case.generation_kwargs.get("top_k", 50) if case.do_sample else None,
        )
        yield f"generation:{case.id}", _sha(repr(phase) + repr(predict(measurement)))


def _generated_setups(count: int, seed: int) -> Iterator[tuple[str, Any, bool]]:
    from fuzz_setups import _materialise, hostile, valid_looking

    rng = random.Random(seed)
    for index in range(count):
        case = hostile(rng) if index % 2 else valid_looking(rng)
        yield f"fuzz:{seed}:{index}", _materialise(case), index % 10 == 0


def lines(fuzz_cases: int, seed: int) -> Iterator[str]:
    for name, setup in _corpus_setups():
        yield f"{name} {_estimate_hash(setup, suggestions=False)}"
    for name in sorted(presets()):
        yield f"preset:{name} {_estimate_hash({'model': name}, suggestions=True)}"
    for name, digest in _generation_hashes():
        yield f"{name} {digest}"
    for name, setup, suggestions in _generated_setups(fuzz_cases, seed):
        try:
            digest = _estimate_hash(setup, suggestions)
        except Exception as error:  # noqa: BLE001 - a crash is a fingerprint too
            digest = "crash:" + _sha(f"{type(error).__name__}: {error}")
        yield f"{name} {digest}"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fuzz-cases", type=int, default=300, help="generated setups (half hostile)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    total = hashlib.sha256()
    for line in lines(args.fuzz_cases, args.seed):
        print(line, flush=True)
        total.update(line.encode("utf-8") + b"\n")
    print(f"all {total.hexdigest()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
