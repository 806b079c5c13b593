"""Data, tensor, pipeline and expert parallelism, offload and sharding: what each must do to a rank's memory."""

from __future__ import annotations

import pytest

import trainmem

PSI = 1_000_000_000


def model_state_bytes(report: trainmem.Report, rank: int | None = None) -> int:
    rank_report = report.ranks[report.heaviest_rank if rank is None else rank]
    timeline = rank_report.timeline
    index = timeline.phases.index("optimizer")
    # ZeRO-2 frees its 16-bit gradient partition just before the update: take the gradients of the moment before.
    gradients = max(timeline.gradients[index], timeline.gradients[index - 1])
    return timeline.parameters[index] + gradients + timeline.optimizer_states[index]


def estimate(setup: dict) -> trainmem.Report:
    return trainmem.estimate(setup, suggestions=False)


@pytest.mark.parametrize(
    ("precision", "distributed", "bytes_per_parameter"),
    [
        # Megatron-LM docs, "Distributed optimizer": bytes per parameter, d data-parallel ranks.
        ("bf16-master-weights-fp32-grads", False, lambda d: 18),
        ("bf16-master-weights-fp32-grads", True, lambda d: 6 + 12 / d),
        ("fp32", False, lambda d: 16),
        ("fp32", True, lambda d: 8 + 8 / d),
    ],
)
@pytest.mark.parametrize("ranks", [2, 8, 64])
def test_megatron_bytes_per_parameter(precision, distributed, bytes_per_parameter, ranks):
    parallelism = {"num_gpus": ranks, "strategy": "megatron", "use_distributed_optimizer": distributed}
    report = estimate(
        {"model": {"num_parameters": PSI}, "precision": precision, "optimizer": "adam", "parallelism": parallelism}
    )
    assert model_state_bytes(report) / PSI == pytest.approx(bytes_per_parameter(ranks))


def test_deepspeed_zero2_estimator():
    """DeepSpeed's ZeRO-2 estimator (estimate_zero2_model_states_mem_needs): 2Ψ + 18Ψ/N bytes per GPU.

    In the simulation: fp16 weights 2Ψ, and per rank 2Ψ/N fp16 gradients, 12Ψ/N of fp32 master
    weights and Adam moments, plus the 4Ψ/N fp32 gradient partition DeepSpeed builds in the step.
    """
    ranks = 8
    report = estimate({"model": {"num_parameters": PSI}, "precision": "fp16-master-weights", "optimizer": "adam",
                       "parallelism": {"num_gpus": ranks, "strategy": "zero", "zero_stage": 2}})
    step = report.timeline.phases.index("optimizer")
    partition = next(p.bytes for p in report.parts if p.name == "fp32 gradient partition")
    assert model_state_bytes(report) + partition == pytest.approx(2 * PSI + 18 * PSI / ranks)
    assert report.timeline.overhead[step] >= partition


def test_fsdp_full_shard_shards_like_zero3():
    common = {"model": "llama-2-7b", "micro_batch_size": 1, "sequence_length": 1024, "precision": "bf16-master-weights"}
    zero3 = estimate({**common, "parallelism": {"num_gpus": 8, "strategy": "zero", "zero_stage": 3}})
    fsdp = estimate({**common, "parallelism": {"num_gpus": 8, "strategy": "fsdp"}})
    assert model_state_bytes(fsdp) == pytest.approx(model_state_bytes(zero3), rel=0.01)


def test_fsdp_strategies_order():
    common = {"model": "llama-2-7b", "micro_batch_size": 1, "sequence_length": 1024}
    states = {
        strategy: model_state_bytes(
            estimate({**common, "parallelism": {"num_gpus": 8, "strategy": "fsdp", "fsdp_sharding_strategy": strategy}})
        )
        for strategy in ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD")
    }
    assert states["FULL_SHARD"] < states["SHARD_GRAD_OP"] < states["NO_SHARD"]
    assert states["HYBRID_SHARD"] == states["FULL_SHARD"]  # 8 GPUs fit in one node: the same shard group


def test_ddp_keeps_gradient_buckets_as_big_as_the_gradients():
    report = estimate({"model": "gpt2", "parallelism": {"num_gpus": 4}})
    buckets = next(part for part in report.parts if part.name == "DDP gradient buckets")
    assert buckets.bytes == report.num_trainable_parameters * 4


def test_optimizer_offload_moves_states_to_the_cpu():
    common = {"model": "llama-2-13b", "sequence_length": 2048, "parallelism": {"num_gpus": 8, "zero_stage": 3}}
    resident = estimate(common)
    offloaded = estimate({**common, "parallelism": {**common["parallelism"], "offload_optimizer": True}})
    rank = offloaded.ranks[0]
    assert rank.cpu_offload_bytes > 0
    assert rank.breakdown.optimizer_states == 0
    assert offloaded.peak_total_bytes < resident.peak_total_bytes


def test_tensor_parallelism_splits_the_weights():
    common = {"model": "llama-2-70b", "sequence_length": 2048, "precision": "bf16-master-weights"}
    alone = estimate({**common, "parallelism": {"num_gpus": 8}})
    tp8 = estimate({**common, "parallelism": {"num_gpus": 8, "tensor_parallel_size": 8}})
    weights = lambda r: next(p.bytes for p in r.parts if p.name == "weights")  # noqa: E731
    assert weights(tp8) == pytest.approx(weights(alone) / 8, rel=0.01)
    # Norm weights stay whole on every rank: a little more than 1/8 of the model states.
    assert model_state_bytes(tp8) == pytest.approx(model_state_bytes(alone) / 8, rel=0.01)


def test_sequence_parallelism_shrinks_activations():
    common = {"model": "llama-2-70b", "sequence_length": 4096, "micro_batch_size": 1, "gradient_accumulation_steps": 8}
    tp = estimate({**common, "parallelism": {"num_gpus": 8, "tensor_parallel_size": 8}})
    tp_sp = estimate({**common, "parallelism": {"num_gpus": 8, "tensor_parallel_size": 8, "sequence_parallel": True}})
    assert tp_sp.peak_allocated_bytes < tp.peak_allocated_bytes


def test_pipeline_stages_differ_and_the_first_holds_more_activations():
    report = estimate(
        {
            "model": "llama-2-70b",
            "sequence_length": 4096,
            "gradient_accumulation_steps": 16,
            "precision": "bf16-master-weights",
            "parallelism": {"num_gpus": 32, "tensor_parallel_size": 4, "pipeline_parallel_size": 4},
        }
    )
    names = [rank.name for rank in report.ranks]
    assert names == ["first pipeline stage", "middle pipeline stages", "last pipeline stage"]
    assert sum(rank.num_ranks for rank in report.ranks) == 32
    first, last = report.ranks[0], report.ranks[-1]
    held = next(p.bytes for p in first.parts if p.name == "earlier micro-batches in flight")
    assert held > 0 and all(p.name != "earlier micro-batches in flight" for p in last.parts)


def test_expert_parallelism_splits_the_experts():
    common = {"model": "mixtral-8x7b", "sequence_length": 1024, "precision": "bf16-master-weights"}
    alone = estimate({**common, "parallelism": {"num_gpus": 8}})
    ep8 = estimate({**common, "parallelism": {"num_gpus": 8, "expert_parallel_size": 8}})
    assert model_state_bytes(ep8) < model_state_bytes(alone) / 3


def test_context_parallelism_divides_the_sequence():
    common = {
        "model": "llama-3-8b",
        "sequence_length": 32768,
        "activation_checkpointing": "full",
        "precision": "bf16-master-weights",
    }
    alone = estimate({**common, "parallelism": {"num_gpus": 4, "zero_stage": 3}})
    cp4 = estimate({**common, "parallelism": {"num_gpus": 4, "context_parallel_size": 4}})
    assert cp4.ranks[0].breakdown.activations < alone.ranks[0].breakdown.activations / 2
