"""The distributed gate: trainmem's predictions against every committed multi-rank measurement.

``trainmem/data/corpus_distributed.jsonl`` holds one line per rank of real 2- and 4-rank
runs on gloo (``scripts/build_distributed_corpus.py``: DDP, FSDP2, DTensor tensor
parallelism, DeepSpeed ZeRO 1–3). Reading it needs no torch. Cases whose framework rule is
not modelled yet are listed in ``NOT_YET_MODELLED`` with the reason; every other case must
meet the single-device corpus's targets (peak within 5%, median within 2%, categories
holding more than 1% of the peak within 5%), and a listed case that starts to meet them
fails the test so the list shrinks.
"""

import pytest

import trainmem
from trainmem.measure.corpus import default_corpus_path, load_corpus
from trainmem.validate import CATEGORY_TARGET, MAX_TARGET, MEDIAN_TARGET, compare, summarize

CORPUS = load_corpus(default_corpus_path(distributed=True))

_BUCKET_COPY = (
    "peak within 0.5%, activations off: DeepSpeed's gradient hook holds each parameter's gradient until it is "
    "copied into the reduce bucket (the measurement sees an unnamed tensor, trainmem a gradient)"
)
_OFFLOAD = (
    "offload: on CPU the offloaded buffers (fp32 gradient partitions, pinned bit16 staging, fp64 norm copies) share "
    "the one memory pool; trainmem puts them in host RAM, and the device/host split is not compared yet"
)
NOT_YET_MODELLED: dict[str, str] = {
    "zero1-llama-7m-fp32-w2": "peak within 0.5%, activations off: ZeRO-1 flattens the gradients into the rank's "
    "partition at the end of backward (get_flat_partition's torch.cat, uneven across ranks); not simulated",
    "zero1-llama-7m-bf16-w2": _BUCKET_COPY,
    "zero2-llama-7m-bf16-w2": _BUCKET_COPY,
    "zero2-llama-7m-fp32-w2": _BUCKET_COPY,
    "zero2-llama-7m-bf16-ckpt-w2": _BUCKET_COPY,
    "zero2-llama-7m-bf16-offload-w2": _OFFLOAD,
    "zero3-llama-7m-bf16-offload-w2": _OFFLOAD,
}
"""Case id (without -rankN) -> what trainmem does not model yet."""


def _case(measurement) -> str:
    return measurement.id.rsplit("-rank", 1)[0]


GATED = [m for m in CORPUS if _case(m) not in NOT_YET_MODELLED]
OPEN = [m for m in CORPUS if _case(m) in NOT_YET_MODELLED]


def test_the_distributed_corpus_covers_every_framework():
    assert {m.framework for m in CORPUS} == {"ddp", "fsdp2", "dtensor-tp", "deepspeed"}
    assert all(m.world_size == m.setup.parallelism.num_gpus and 0 <= m.rank < m.world_size for m in CORPUS)
    assert all(m.environment.distributed_backend == "gloo" for m in CORPUS)


@pytest.fixture(scope="module")
def comparisons():
    return [compare(m, trainmem.estimate(m.setup, suggestions=False)) for m in GATED]


def test_peak_error_targets(comparisons):
    summary = summarize(comparisons)
    assert summary.median_abs_error <= MEDIAN_TARGET
    assert summary.max_abs_error <= MAX_TARGET, summary.worst_case


def test_category_error_target(comparisons):
    worst = max(comparisons, key=lambda c: c.worst_category_error)
    assert worst.worst_category_error <= CATEGORY_TARGET, (worst.id, worst.categories)


@pytest.mark.parametrize("case", sorted(NOT_YET_MODELLED))
def test_open_cases_are_still_open(case):
    ranks = [m for m in OPEN if _case(m) == case]
    assert ranks, f"{case} is not in the distributed corpus"

    def meets(measurement) -> bool:
        comparison = compare(measurement, trainmem.estimate(measurement.setup, suggestions=False))
        return abs(comparison.relative_error) <= MAX_TARGET and comparison.worst_category_error <= CATEGORY_TARGET

    assert not all(meets(m) for m in ranks), f"{case} now meets the targets on every rank: remove it from NOT_YET_MODELLED"


@pytest.mark.parametrize("measurement", CORPUS, ids=[m.id for m in CORPUS])
def test_parameter_counts_are_exact(measurement):
    report = trainmem.estimate(measurement.setup, suggestions=False)
    assert report.num_parameters == measurement.num_parameters


def test_validate_distributed_prints_every_rank(capsys):
    from trainmem.validate import main

    assert main(["--distributed"]) == 0
    out = capsys.readouterr().out
    assert "fsdp2-llama-7m-fp32-w2-rank1" in out and f"{len(CORPUS)} cases" in out
