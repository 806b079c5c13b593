"""Speed of the core (a benchmark, not a test): run ``make bench`` or this file directly.

Reports
* the latency of one estimate of an 80-layer model (Llama-2-70B, ZeRO-3 on 8 GPUs) with its
  full timeline: cold (trace cache cleared each time) and warm (repeated setup);
* the latency of a full report with suggestions (it re-simulates alternative setups);
* the throughput over 1,000 varied setups (presets, batch, sequence, precision, optimizer,
  checkpointing, parallelism, fine-tuning), as a user scanning a design space would run.
Target: under 1 ms per estimate on CPython.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time

import trainmem
from trainmem.catalogs import presets
from trainmem.simulate import _TRACE_CACHE

HEADLINE = {
    "model": "llama-2-70b",
    "parallelism": {"num_gpus": 8, "strategy": "zero", "zero_stage": 3},
    "micro_batch_size": 1,
    "sequence_length": 4096,
    "activation_checkpointing": "full",
}


def timed(function, repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        samples.append(time.perf_counter() - start)
    return samples


def varied_setups(count: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    names = list(presets())
    setups = []
    for _ in range(count):
        setups.append(
            {
                "model": rng.choice(names),
                "micro_batch_size": rng.choice([1, 2, 4, 8, 16]),
                "sequence_length": rng.choice([512, 1024, 2048, 4096, 8192]),
                "gradient_accumulation_steps": rng.choice([1, 1, 4]),
                "precision": rng.choice(["bf16-mixed", "fp32", "amp-bf16", "bf16-pure", "bf16-master-weights"]),
                "optimizer": rng.choice(["adamw", "adamw-8bit", "sgd-momentum", "adafactor", "lion"]),
                "activation_checkpointing": rng.choice(["none", "selective", "full"]),
                "finetuning": rng.choice([{"method": "full"}, {"method": "lora"}, {"method": "qlora"}]),
                "parallelism": rng.choice(
                    [
                        {},
                        {"num_gpus": 8, "zero_stage": 3},
                        {"num_gpus": 8, "zero_stage": 2},
                        {"num_gpus": 8, "strategy": "fsdp"},
                        {"num_gpus": 8},
                    ]
                ),
            }
        )
    return setups


def milliseconds(samples: list[float]) -> str:
    return (
        f"median {statistics.median(samples) * 1e3:.3f} ms, p90 {sorted(samples)[int(0.9 * len(samples))] * 1e3:.3f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--setups", type=int, default=1000)
    args = parser.parse_args()
    print(f"trainmem {trainmem.__version__} on CPython {platform.python_version()} ({platform.machine()})")

    trainmem.estimate(HEADLINE, suggestions=False)
    warm = timed(lambda: trainmem.estimate(HEADLINE, suggestions=False), args.repeats)

    def cold_estimate():
        _TRACE_CACHE.clear()
        trainmem.estimate(HEADLINE, suggestions=False)

    cold = timed(cold_estimate, args.repeats // 3)
    full = timed(lambda: trainmem.estimate(HEADLINE), max(10, args.repeats // 20))
    points = len(trainmem.estimate(HEADLINE, suggestions=False).timeline.labels)
    print(f"80-layer estimate with its {points}-point timeline, warm: {milliseconds(warm)}")
    print(f"80-layer estimate, cold (trace cache cleared):          {milliseconds(cold)}")
    print(f"80-layer full report with suggestions:                   {milliseconds(full)}")

    setups = [trainmem.Setup.model_validate(s) for s in varied_setups(args.setups)]
    _TRACE_CACHE.clear()
    start = time.perf_counter()
    for setup in setups:
        trainmem.estimate(setup, suggestions=False)
    elapsed = time.perf_counter() - start
    print(
        f"{len(setups)} varied setups: {len(setups) / elapsed:,.0f} estimates/s ({elapsed / len(setups) * 1e3:.3f} ms each)"
    )


if __name__ == "__main__":
    main()
