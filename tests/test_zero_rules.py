"""DeepSpeed ZeRO rules that the measured runs of issue 7 pinned down (trainmem.parallel.deepspeed).

Each rule cites the DeepSpeed 0.19 code it follows and the corpus case that measured it
(``core/trainmem/data/corpus_distributed.jsonl``; the gate itself is tests/test_validation_distributed.py).
"""

import pytest
from small_models import LLAMA_7M

import trainmem
from trainmem.parallel import deepspeed
from trainmem.plan import Plan
from trainmem.setup import Setup

NUMEL = 6_998_272


def _setup(precision="bf16-master-weights", **parallelism):
    return {
        "model": {"hf_config": LLAMA_7M},
        "micro_batch_size": 2,
        "sequence_length": 128,
        "precision": precision,
        "optimizer": {"name": "adamw", "implementation": "for-loop"},
        "parallelism": {"num_gpus": 2, "strategy": "zero", **parallelism},
        "runtime": {"device": "cpu"},
    }


def _at(rank, label):
    timeline = rank.timeline
    index = timeline.labels.index(label)
    return {
        name: getattr(timeline, name)[index]
        for name in ("parameters", "gradients", "optimizer_states", "activations", "overhead")
    }


def test_the_client_optimizer_steps_one_flat_partition():
    """stage_1_and_2.py: param_group['params'] = [single_partition_of_fp32_groups[i]]: AdamW's for-loop
    temporaries (denom, the update) are two fp32 copies of the whole partition, and there is one step counter."""
    report = trainmem.estimate(_setup(zero_stage=2, zero_reduce_bucket_size=1_000_000), suggestions=False)
    rank = report.ranks[0]
    step = _at(rank, "optimizer step")
    partition_fp32 = NUMEL // 2 * 4
    # fp32 gradient partition + 2 temporaries of the partition
    assert step["overhead"] == 3 * partition_fp32
    # ZeRO-2 frees its bf16 gradient partition before the update
    assert step["gradients"] == 0
    # Adam's m and v over the partition, the fp32 master partition, one step counter
    assert step["optimizer_states"] == 2 * partition_fp32 + partition_fp32 + 4
    assert rank.peak.label == "optimizer step"  # small buckets: the update is the peak (measured)


def test_stage3_steps_sub_groups():
    plan = Plan(Setup.model_validate(_setup(zero_stage=3, num_gpus=2)))
    assert deepspeed.flat_partition_numel(plan, 3 * 10**9) == deepspeed.SUB_GROUP_SIZE
    assert deepspeed.flat_partition_numel(plan, NUMEL) == NUMEL // 2


def test_bf16_with_fp32_gradient_accumulation_runs_bf16_optimizer_at_stage_1():
    """engine.py _do_optimizer_sanity_check: bf16 + grad_accum_dtype fp32 + stage 1 -> BF16_Optimizer: no reduce
    bucket, a full-size fp32 gradient buffer for the run, and the bf16 .grad tensors until the step."""
    setup = _setup("bf16-master-weights-fp32-grads", zero_stage=1)
    plan = Plan(Setup.model_validate(setup))
    assert deepspeed.runs_bf16_optimizer(plan) and deepspeed.reduce_bucket_bytes(plan) == 0
    rank = trainmem.estimate(setup, suggestions=False).ranks[0]
    assert _at(rank, "step start")["gradients"] == NUMEL * 4  # not sharded
    assert _at(rank, "optimizer step")["gradients"] == NUMEL * 4 + NUMEL * 2
    assert _at(rank, "zero_grad")["gradients"] == NUMEL * 4
    assert "ZeRO reduce bucket" not in {part.name for part in rank.parts}
    # Stage 2 keeps the ZeRO optimizer (and its bucket)
    stage2 = Plan(Setup.model_validate(_setup("bf16-master-weights-fp32-grads", zero_stage=2)))
    assert not deepspeed.runs_bf16_optimizer(stage2) and deepspeed.reduce_bucket_bytes(stage2) > 0


def test_zero2_gradient_accumulation_makes_fresh_gradients_each_micro_batch():
    """ZeRO-2's hook moves each .grad into the bucket: in the second micro-batch the head's gradient is a new
    tensor on top of the accumulated partition (measured: zero2-llama-7m-bf16-ga2-w2)."""
    rank = trainmem.estimate({**_setup(zero_stage=2), "gradient_accumulation_steps": 2}, suggestions=False).ranks[0]
    first = _at(rank, "reduce bucket (micro-batch 1)")
    second = _at(rank, "reduce bucket (micro-batches 2–2)")
    head_gradient = 8000 * 256 * 2
    assert first["gradients"] >= head_gradient
    assert second["gradients"] - NUMEL // 2 * 2 == first["gradients"]


def test_zero_init_changes_the_load_not_the_step():
    """Measured: zero3-llama-7m-bf16-init-w2 equals zero3-llama-7m-bf16-w2 to the byte in the step."""
    plain = trainmem.estimate(_setup(zero_stage=3), suggestions=False)
    sharded = trainmem.estimate(_setup(zero_stage=3, model_load="sharded"), suggestions=False)
    assert plain.peak_allocated_bytes == sharded.peak_allocated_bytes
    load = {part.name: part.bytes for part in sharded.host.load_parts}["model load"]
    assert load == 2 * (NUMEL * 2 // 2)  # two ranks, each its bf16 half


def test_deepspeed_config_carries_the_setup():
    pytest.importorskip("torch")
    from trainmem.measure.frameworks import deepspeed_config

    config = deepspeed_config(
        Setup.model_validate(_setup("bf16-master-weights-fp32-grads", zero_stage=2, zero_reduce_bucket_size=10**6))
    )
    assert config["zero_optimization"]["reduce_bucket_size"] == 10**6
    assert config["data_types"] == {"grad_accum_dtype": "fp32"} and config["bf16"] == {"enabled": True}
    offload = deepspeed_config(Setup.model_validate(_setup(zero_stage=3, offload_optimizer=True, offload_parameters=True)))
    assert offload["zero_optimization"]["offload_param"] == {"device": "cpu"}
    assert "data_types" not in offload


def test_zero3_releases_the_persistent_parameters_for_the_update():
    """stage3.py step: _partition_all_parameters before the update, _post_step re-gathers the persistent ones."""
    rank = trainmem.estimate(_setup(zero_stage=3, zero_reduce_bucket_size=1_000_000), suggestions=False).ranks[0]
    step, after = _at(rank, "optimizer step"), _at(rank, "zero_grad")
    assert step["parameters"] == NUMEL * 2 // 2 + 128  # the bf16 partition and the RoPE buffers
    assert after["parameters"] > step["parameters"]  # the persistent small parameters are gathered again


def test_zero3_casts_the_gradient_to_fp32_one_sub_group_at_a_time():
    """stage3.py step: each sub-group's fp32 gradient is made and stepped in turn (sub_group_size 1e9)."""
    report = trainmem.estimate(
        {"model": {"preset": "llama-2-13b"}, "micro_batch_size": 1, "sequence_length": 1024, "precision": "bf16-mixed",
         "optimizer": {"name": "adamw", "implementation": "for-loop"}, "parallelism": {"num_gpus": 2, "zero_stage": 3}},
        suggestions=False,
    )
    rank = report.ranks[0]
    step = rank.timeline.labels.index("optimizer step")
    partition = report.num_parameters // 2
    assert partition > deepspeed.SUB_GROUP_SIZE
    # fp32 gradient piece + a for-loop AdamW's two fp32 temporaries of the same piece
    after = rank.timeline.labels.index("zero_grad")  # the bucket and the other resident overheads
    assert rank.timeline.overhead[step] - rank.timeline.overhead[after] == 3 * deepspeed.SUB_GROUP_SIZE * 4


@pytest.mark.parametrize("stage", [2, 3])
def test_one_rank_keeps_the_zero_optimizers_buffers(stage):
    """DeepSpeed picks its ZeRO optimizer from the config, not from the world size
    (``_do_optimizer_sanity_check``), and has no one-rank path: on one GPU the 5e8-element bf16 reduce bucket
    is allocated (per backward at ZeRO-2, at start-up at ZeRO-3), and with ``grad_accum_dtype`` fp32 the
    gradient partition is the whole model in fp32 (measured: ``zero{2,3}-llama-7m-bf16-fp32grads-w1``)."""
    setup = _setup("bf16-master-weights-fp32-grads", zero_stage=stage, num_gpus=1)
    plan = Plan(Setup.model_validate(setup))
    assert deepspeed.reduce_bucket_bytes(plan) == 1_000_000_000
    rank = trainmem.estimate(setup, suggestions=False).ranks[0]
    assert _at(rank, "optimizer step")["gradients"] == NUMEL * 4  # the fp32 partition, read by the update


def test_one_rank_zero_3_gathers_nothing_and_flattens_for_the_update():
    """One rank: ``_no_gather_coalesced`` points each parameter at its partition (no persistent copies), and
    ``_prepare_fp32_grad_for_sub_group`` makes a new fp32 tensor of the sub-group's gradients even when they
    are fp32: the update holds it and AdamW's two temporaries (measured: ``zero3-llama-7m-bf16-fp32grads-w1``,
    exact)."""
    report = trainmem.estimate(_setup("bf16-master-weights-fp32-grads", zero_stage=3, num_gpus=1), suggestions=False)
    rank = report.ranks[0]
    assert not any(part.name == "persistent gathered parameters" for part in rank.parts)
    step = _at(rank, "optimizer step")
    assert step["overhead"] == 1_000_000_000 + 3 * NUMEL * 4
    assert NUMEL * 2 <= step["parameters"] < NUMEL * 2 + 1024  # the bf16 weights (and the rotary buffers), once


@pytest.mark.parametrize("stage", [1, 2])
@pytest.mark.parametrize("precision", ["fp32", "bf16-master-weights"])
def test_zero_1_2_update_holds_one_fp32_gradient_partition(stage, precision):
    """stage_1_and_2.py ``step``: ``flat_grad_partition.to(fp32)`` is a new tensor for bf16 gradients and the
    flattened copy itself for fp32 ones; every ``.grad`` and ``averaged_gradients`` are freed before
    ``_optimizer_step`` (measured: ``zero{1,2}-llama-7m-{fp32,bf16}-w2``, ZeRO-1's whole-model ``.grad`` tensors
    gone at the update too)."""
    report = trainmem.estimate(_setup(precision, zero_stage=stage), suggestions=False)
    step = _at(report.ranks[0], "optimizer step")
    partition_fp32 = NUMEL // 2 * 4
    assert step["gradients"] == 0
    assert step["overhead"] == 3 * partition_fp32  # the fp32 gradient partition + AdamW's two temporaries


@pytest.mark.parametrize("precision", ["fp32", "bf16-master-weights"])
def test_without_temporaries_the_flattening_is_the_steps_high_water_mark(precision):
    """SGD has no temporaries: the moment before the 16-bit gradients are freed (the partition's gradients, their
    flattened copy and its fp32 cast) is above the update's one fp32 partition (from the source)."""
    setup = {**_setup(precision, zero_stage=2), "optimizer": {"name": "sgd", "implementation": "for-loop"}}
    step = _at(trainmem.estimate(setup, suggestions=False).ranks[0], "optimizer step")
    partition = NUMEL // 2
    gradient_bytes = 4 if precision == "fp32" else 2
    assert step["gradients"] == partition * gradient_bytes
    assert step["overhead"] == partition * gradient_bytes + (0 if precision == "fp32" else partition * 4)
