"""Byte-identity of the allocator replay (a check for speed work on trainmem.cuda, not a test).

Hashes the ``cuda`` section of every rank of ``trainmem.estimate(...)`` (the replay's figures, the
reserve, the upper bound, the allocator alternatives) and the whole report's JSON, for

* every setup of the packaged training corpora (corpus.jsonl, corpus_distributed.jsonl),
  run on ``cuda`` (the corpus measured many on the CPU, where no replay runs);
* ``--varied`` (200) generated setups (presets, batch, sequence, precision, optimizer, checkpointing,
  parallelism, fine-tuning, accumulation);

each under several ``PYTORCH_CUDA_ALLOC_CONF`` settings (:data:`CONFS`). ``--suggestions N``
estimates the first N cases with suggestions as well (that path replays the expandable-segments
alternative and each suggestion's own setup).

    python benchmarks/replay_identity.py --write /tmp/before.json    # on the old code
    python benchmarks/replay_identity.py --check /tmp/before.json    # on the new code: exit 1 on any difference

The replay caches of trainmem.cuda.memory are cleared before every case, so that each case runs
its replay itself; ``--warm`` keeps them (the page's recomputes).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from pathlib import Path

import trainmem
from trainmem.catalogs import presets
from trainmem.measure.corpus import load_corpus

ROOT = Path(__file__).resolve().parents[1]
CORPORA = ("corpus.jsonl", "corpus_distributed.jsonl")
CONFS = (
    ("", None),
    ("expandable_segments:True", None),
    ("max_split_size_mb:256", None),
    ("roundup_power2_divisions:4", None),
    ("garbage_collection_threshold:0.8", 0.9),
    ("expandable_segments:True,roundup_power2_divisions:[256:1,512:2,>:8]", None),
)
"""(PYTORCH_CUDA_ALLOC_CONF, set_per_process_memory_fraction): the collector acts only with a fraction."""


def corpus_setups() -> list[tuple[str, dict]]:
    cases, seen = [], set()
    for name in CORPORA:
        for measurement in load_corpus(ROOT / "core" / "trainmem" / "data" / name):
            setup = measurement.setup.model_dump(mode="json")
            text = json.dumps(setup, sort_keys=True)
            if text not in seen:
                seen.add(text)
                cases.append((measurement.id, setup))
    return cases


def varied_setups(count: int, seed: int = 14) -> list[tuple[str, dict]]:
    rng = random.Random(seed)
    names = sorted(presets())
    cases = []
    for index in range(count):
        setup = {
            "model": rng.choice(names),
            "micro_batch_size": rng.choice([1, 2, 4, 8]),
            "sequence_length": rng.choice([256, 512, 1024, 2048, 4096, 8192]),
            "gradient_accumulation_steps": rng.choice([1, 1, 2, 4]),
            "precision": rng.choice(["bf16-mixed", "fp32", "amp-bf16", "bf16-pure", "bf16-master-weights"]),
            "optimizer": rng.choice(["adamw", "adamw-8bit", "sgd-momentum", "adafactor", "lion"]),
            "activation_checkpointing": rng.choice(["none", "selective", "full"]),
            "finetuning": rng.choice([{"method": "full"}, {"method": "lora"}, {"method": "qlora"}]),
            "parallelism": rng.choice(
                [
                    {},
                    {"num_gpus": 8, "zero_stage": 3},
                    {"num_gpus": 8, "zero_stage": 2},
                    {"num_gpus": 8, "zero_stage": 1},
                    {"num_gpus": 8, "strategy": "fsdp"},
                    {"num_gpus": 4, "strategy": "fsdp", "fsdp_version": 1},
                    {"num_gpus": 8},
                    {"num_gpus": 8, "tensor_parallel_size": 2, "strategy": "ddp"},
                    {"num_gpus": 8, "pipeline_parallel_size": 2, "strategy": "ddp"},
                ]
            ),
        }
        cases.append((f"varied-{index}", setup))
    return cases


def with_runtime(setup: dict, conf: str, fraction) -> dict:
    setup = json.loads(json.dumps(setup))
    runtime = dict(setup.get("runtime") or {})
    runtime.update(device="cuda", cuda_alloc_conf=conf, cuda_memory_fraction=fraction)
    setup["runtime"] = runtime
    return setup


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def run_case(setup: dict, suggestions: bool, warm: bool) -> dict:
    from trainmem.cuda import memory

    if not warm:
        memory._REPLAY_CACHE.clear()
        memory._EVENTS_CACHE.clear()
    try:
        report = trainmem.estimate(setup, suggestions=suggestions)
    except Exception as exc:  # noqa: BLE001 - a setup the core refuses is recorded as such
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    cuda = [rank.cuda.model_dump_json() if rank.cuda is not None else "" for rank in report.ranks]
    return {"cuda": digest("\n".join(cuda)), "report": digest(report.model_dump_json())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="write the hashes to this JSON file")
    parser.add_argument("--check", type=Path, help="compare with the hashes in this JSON file")
    parser.add_argument("--varied", type=int, default=200)
    parser.add_argument("--suggestions", type=int, default=24, help="estimate the first N cases with suggestions too")
    parser.add_argument("--limit", type=int, default=0, help="only the first N setups (a quick look)")
    parser.add_argument("--warm", action="store_true", help="keep the replay caches between cases")
    args = parser.parse_args()
    cases = corpus_setups() + varied_setups(args.varied)
    if args.limit:
        cases = cases[: args.limit]
    start = time.perf_counter()
    hashes: dict[str, dict] = {}
    for number, (name, setup) in enumerate(cases):
        for conf, fraction in CONFS:
            key = f"{name} | {conf}"
            hashes[key] = run_case(with_runtime(setup, conf, fraction), False, args.warm)
            if number < args.suggestions:
                hashes[key + " | suggestions"] = run_case(with_runtime(setup, conf, fraction), True, args.warm)
    elapsed = time.perf_counter() - start
    replayed = sum(1 for value in hashes.values() if "cuda" in value)
    print(f"{len(cases)} setups x {len(CONFS)} settings: {len(hashes)} estimates ({replayed} reports, "
          f"{len(hashes) - replayed} refused) in {elapsed:.1f} s")  # fmt: skip
    if args.write:
        args.write.write_text(json.dumps(hashes, indent=0, sort_keys=True))
    if args.check:
        before = json.loads(args.check.read_text())
        differ = [key for key in before if before[key] != hashes.get(key)]
        missing = [key for key in hashes if key not in before]
        print(f"compared with {args.check}: {len(before) - len(differ)} identical, {len(differ)} different, "
              f"{len(missing)} new")  # fmt: skip
        for key in differ[:20]:
            print(f"  {key}: {before[key]} -> {hashes.get(key)}")
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
