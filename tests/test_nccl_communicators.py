"""NCCL communicators: one per process group the layout creates, each sized from NCCL's defaults
(trainmem.parallel.nccl, trainmem/data/nccl.json). Every figure is an assumption with a source."""

import pytest

import trainmem
from trainmem.parallel import nccl
from trainmem.plan import Plan
from trainmem.setup import Setup
from trainmem.units import MIB

BASE = {"model": {"preset": "llama-3-8b"}, "micro_batch_size": 1, "sequence_length": 512, "gradient_accumulation_steps": 4}


def _nccl_part(gpu: str, **parallelism):
    report = trainmem.estimate({**BASE, "gpu": gpu, "parallelism": parallelism}, suggestions=False)
    return next(part for part in report.parts if part.name == "NCCL buffers")


def _groups(**parallelism):
    return {(g.name, g.size) for g in nccl.process_groups(Plan(Setup.model_validate({**BASE, "parallelism": parallelism})))}


def test_one_connection_holds_the_three_protocols_rounded_to_cumem_granularity():
    # 4 MiB Simple + 4,915,200 B LL128 + 512 KiB LL = 9,633,792 B -> 10 MiB in 2 MiB steps (NVIDIA/nccl#1685).
    assert nccl.connection_bytes() == 10 * MIB


@pytest.mark.parametrize(
    ("gpu", "gpus", "expected_mib"),
    [
        ("a100-80gb", 2, 16 * 2 * 10),  # a 2-rank group: ring and tree reach the one peer
        ("a100-80gb", 8, 16 * 3 * 10),
        ("h100-sxm-80gb", 2, 16 * 2 * 10),  # NVLS needs more than two GPUs
        ("h100-sxm-80gb", 8, 16 * 3 * 10 + 288),  # + nvlsPerRankSize 301,989,888 B (vllm-project/vllm#9699)
    ],
)
def test_a_data_parallel_communicator_from_nccl_defaults(gpu, gpus, expected_mib):
    part = _nccl_part(gpu, num_gpus=gpus)
    assert part.bytes == expected_mib * MIB
    assert "NCCL_BUFFSIZE" in part.detail and "assumed" in part.detail


def test_one_communicator_per_process_group():
    assert _groups(num_gpus=8) == {("data parallel", 8)}
    assert _groups(num_gpus=16, strategy="fsdp", fsdp_sharding_strategy="HYBRID_SHARD") == {
        ("FSDP shard", 8),
        ("FSDP replicate", 2),
    }
    megatron = _groups(
        num_gpus=64, strategy="megatron", tensor_parallel_size=8, pipeline_parallel_size=2, context_parallel_size=2
    )
    assert megatron == {
        ("data parallel", 2),
        ("tensor parallel", 8),
        ("pipeline parallel", 2),
        ("context parallel", 2),
        ("data × context parallel", 4),
    }


def test_megatron_ties_first_and_last_stage_with_an_embedding_group():
    tied = {**BASE, "model": {"preset": "llama-3.2-1b"}}
    setup = Setup.model_validate({**tied, "parallelism": {"num_gpus": 4, "strategy": "megatron", "pipeline_parallel_size": 4}})
    names = {g.name for g in nccl.process_groups(Plan(setup))}
    assert "embedding (first and last stage)" in names


def test_more_communicators_more_memory_and_the_override_wins():
    one = _nccl_part("h100-sxm-80gb", num_gpus=8).bytes
    two = _nccl_part("h100-sxm-80gb", num_gpus=16, strategy="megatron", tensor_parallel_size=8).bytes
    assert two == (16 * 3 * 10 + 288 + 16 * 2 * 10) * MIB > one
    report = trainmem.estimate(
        {**BASE, "gpu": "h100-sxm-80gb", "parallelism": {"num_gpus": 16, "strategy": "megatron", "tensor_parallel_size": 8},
         "runtime": {"nccl_communicator_mib": 100}},
        suggestions=False,
    )
    assert next(p.bytes for p in report.parts if p.name == "NCCL buffers") == 2 * 100 * MIB


def test_every_default_names_its_source():
    data = nccl.defaults()
    for key in ("buffsize_source", "protocol_source", "granularity_source", "channels_source", "connections_source", "nvls_source"):
        assert "nccl" in data[key].lower() or "NCCL" in data[key]
